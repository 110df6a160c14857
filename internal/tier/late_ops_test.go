package tier_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/backend"
	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/store"
	"github.com/slipstream-io/slipstream/internal/tier"
)

// TestLateReplicaPutDoesNotReplaceNewer: a replica holder gets the
// owner's replica of write seq 6 (v2, acknowledged) and then, late, the
// replica of the older write seq 5 (v1: the owner gave up on that request,
// the holder's handler went on). The late copy is drained and dropped, as
// a late delete notice is: when the owner dies, the take-over uploads v2,
// not the older v1.
func TestLateReplicaPutDoesNotReplaceNewer(t *testing.T) {
	e := newEnv(t, "fs")
	tb := e.newTier(t, tier.Config{NodeID: "B"}, map[string]tier.Bucket{"wback": {Mode: tier.ModeWriteback, Copies: 2}})
	ctx := context.Background()
	t1 := time.Now()
	t2 := t1.Add(time.Second)
	v1, v2 := []byte("version one"), []byte("version two, acknowledged")
	if _, err := tb.PutReplica(ctx, "A", 6, "wback", "k", bytesReader(v2),
		tier.ReplicaOptions{PutOptions: putOpts(len(v2)), ModTime: t2}); err != nil {
		t.Fatal(err)
	}
	// The late, older replica.
	_, _ = tb.PutReplica(ctx, "A", 5, "wback", "k", bytesReader(v1),
		tier.ReplicaOptions{PutOptions: putOpts(len(v1)), ModTime: t1})
	if n, err := tb.TakeOver(ctx, "A"); err != nil || n != 1 {
		t.Fatalf("TakeOver: %d %v", n, err)
	}
	if got, err := e.destaged(t, tb, "k"); err != nil || got != string(v2) {
		t.Fatalf("backend k = %q (%v), want the newest write %q", got, err, v2)
	}
}

// TestNoticeOfSupersededNewerWrite: the holders of writes superseded
// before they were destaged are told by the operation that superseded
// them, not by whichever operation of the key finishes next: an older one
// that was already running would send them a sequence number below their
// replica's, which they ignore, and they would never hear again. Their
// replica of a write the owner later deleted would stay dirty, and a
// take-over would upload it again, undoing the delete in the backend.
//
// A owns k (copies=2). v0 -> replica on B, being destaged (backend slow);
// v1 -> replica on C (B was not first in line then); DELETE while C is
// unreachable -> told to B only.
func TestNoticeOfSupersededNewerWrite(t *testing.T) {
	a, b, c := newEnv(t, "fs"), newEnv(t, "fs"), newEnv(t, "fs")
	b.be, c.be = a.be, a.be // one remote bucket
	gate := make(chan struct{})
	a.be.set(func(x *ctl) { x.gate = gate })
	p := &peers{tiers: map[string]*tier.Tier{}, order: []string{"A", "B", "C"}, down: map[string]bool{}}
	wb2 := map[string]tier.Bucket{"wback": {Mode: tier.ModeWriteback, Copies: 2}}
	ta := a.newTier(t, tier.Config{NodeID: "A", Replicator: p}, wb2)
	tb := b.newTier(t, tier.Config{NodeID: "B", Replicator: p}, wb2)
	tc := c.newTier(t, tier.Config{NodeID: "C", Replicator: p}, wb2)
	p.set("A", ta)
	p.set("B", tb)
	p.set("C", tc)
	ctx := context.Background()

	if _, err := ta.Put(ctx, "wback", "k", bytesReader([]byte("v0")), putOpts(2)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "v0's destage to start", func() bool { return ta.Backlog().Running == 1 })
	p.mu.Lock()
	p.order = []string{"A", "C", "B"}
	p.mu.Unlock()
	if _, err := ta.Put(ctx, "wback", "k", bytesReader([]byte("v1")), putOpts(2)); err != nil {
		t.Fatal(err)
	}
	if tc.Backlog().ReplicaObjects != 1 {
		t.Fatal("C holds no replica of v1")
	}
	p.mu.Lock()
	p.down["C"] = true
	p.mu.Unlock()
	if err := ta.Delete(ctx, "wback", "k"); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.down["C"] = false // reachable again: any notice for it now arrives
	p.mu.Unlock()
	close(gate)
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := ta.WaitDestaged(wctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.raw.Stat(ctx, "k"); !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("delete not destaged: %v", err)
	}
	// The owner has nothing left to tell anyone.
	time.Sleep(100 * time.Millisecond)
	if bl := ta.Backlog(); bl.Notices != 0 {
		t.Logf("owner backlog %+v", bl)
	}
	blC := tc.Backlog()
	// A dies for good; C takes over what it still holds for A.
	ta.Close()
	if _, err := tc.TakeOver(ctx, "A"); err != nil {
		t.Fatal(err)
	}
	if err := tc.WaitDestaged(wctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.raw.Stat(ctx, "k"); !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("the acknowledged DELETE of k was undone in the backend by C's take-over (C's backlog before: %+v)", blC)
	}
	if blC.ReplicaObjects != 0 {
		t.Errorf("C still holds a dirty replica of a write the owner deleted and destaged: %+v", blC)
	}
}

// TestLateDeleteNoticeKeepsOwnedWrite: B held A's replica of k (seq 1)
// and missed A's delete of k (seq 2); A journals the notice and sends it
// again later. Meanwhile A was down and B, the next in line, took a client
// write of k (v2, acknowledged, dirty). When A's notice finally arrives it
// is journaled, but B's own newer write stays and reaches the backend.
func TestLateDeleteNoticeKeepsOwnedWrite(t *testing.T) {
	e := newEnv(t, "fs")
	e.be.set(func(c *ctl) { c.failPuts = true }) // the backend is unreachable for a while
	tb := e.newTier(t, tier.Config{NodeID: "B", RetryBackoff: 20 * time.Millisecond}, wbBucket)
	ctx := context.Background()
	v1 := []byte("A's v1")
	if _, err := tb.PutReplica(ctx, "A", 1, "wback", "k", bytesReader(v1),
		tier.ReplicaOptions{PutOptions: putOpts(len(v1)), ModTime: time.Now().Add(-time.Minute)}); err != nil {
		t.Fatal(err)
	}
	v2 := []byte("v2 written through B while A was down")
	if _, err := tb.Put(ctx, "wback", "k", bytesReader(v2), putOpts(len(v2))); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a failed destage attempt", func() bool { return tb.Backlog().Failures >= 1 })
	// A is back and redelivers the notice B missed.
	if err := tb.DeleteReplica(ctx, "A", 2, "wback", "k"); err != nil {
		t.Fatal(err)
	}
	e.be.set(func(c *ctl) { c.failPuts = false })
	if got, err := e.destaged(t, tb, "k"); err != nil || got != string(v2) {
		t.Fatalf("backend k = %q (%v), want B's acknowledged write %q", got, err, v2)
	}
}

// TestNoticeOfNewerWriteDropsOlderReplica: a holder keeps A's replica of
// v1 (seq 5) and missed v2 (seq 6). When A tells it that seq 6 reached the
// backend, the copy here is older than the backend's: it goes, instead of
// staying as a clean copy that would be served as current. A notice of
// the very write held makes the copy clean.
func TestNoticeOfNewerWriteDropsOlderReplica(t *testing.T) {
	e := newEnv(t, "fs")
	tb := e.newTier(t, tier.Config{NodeID: "B"}, map[string]tier.Bucket{"wback": {Mode: tier.ModeWriteback, Copies: 2}})
	ctx := context.Background()
	for _, k := range []string{"older", "same"} {
		v := []byte("A's write of " + k)
		if _, err := tb.PutReplica(ctx, "A", 5, "wback", k, bytesReader(v), tier.ReplicaOptions{PutOptions: putOpts(len(v)), ModTime: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tb.ReplicaDestaged(ctx, "A", 6, "wback", "older"); err != nil {
		t.Fatal(err)
	}
	if err := tb.ReplicaDestaged(ctx, "A", 5, "wback", "same"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.local.Stat(ctx, "wback", "older"); !errors.Is(err, object.ErrNotFound) {
		t.Errorf("replica older than the destaged write: %v, want it gone", err)
	}
	if info, err := e.local.Stat(ctx, "wback", "same"); err != nil || info.Dirty {
		t.Errorf("replica of the destaged write: %+v, %v; want a clean copy", info, err)
	}
	if bl := tb.Backlog(); bl.ReplicaObjects != 0 {
		t.Errorf("replicas still held: %+v", bl)
	}
}

// TestPendingDeleteOfRemovedBucket: a write-back DELETE still pending when
// its bucket is removed waits for a bucket of the name to come back. If
// one does, over the same backend, a write made there meanwhile (through
// another node: the backend's stamp is newer) is not deleted by it.
func TestPendingDeleteOfRemovedBucket(t *testing.T) {
	e := newEnv(t, "fs")
	e.be.set(func(c *ctl) { c.failPuts = true })
	tr := e.newTier(t, tier.Config{RetryBackoff: 20 * time.Millisecond}, wbBucket)
	ctx := context.Background()
	old := []byte("old")
	if _, err := e.raw.Put(ctx, "k", bytesReader(old), int64(len(old)), backend.PutAttrs{}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Delete(ctx, "wback", "k"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a failed destage attempt", func() bool { return tr.Backlog().Failures >= 1 })
	tr.RemoveBucket("wback")
	// The bucket is created again; another node writes k and destages it.
	newer := []byte("written in the new bucket")
	stamp := map[string]string{"slipstream-written": time.Now().Add(time.Second).UTC().Format(time.RFC3339Nano)}
	if _, err := e.raw.Put(ctx, "k", bytesReader(newer), int64(len(newer)), backend.PutAttrs{UserMeta: stamp}); err != nil {
		t.Fatal(err)
	}
	e.be.set(func(c *ctl) { c.failPuts = false })
	if err := tr.AddBucket("wback", tier.Bucket{Mode: tier.ModeWriteback, Backend: e.be}); err != nil {
		t.Fatal(err)
	}
	if got, err := e.destaged(t, tr, "k"); err != nil || got != string(newer) {
		t.Fatalf("backend k = %q (%v), want the newer write %q", got, err, newer)
	}
}

// failingLocal is a store whose Puts fail (its drive broke) after reading
// the body.
type failingLocal struct{ *store.Store }

func (f failingLocal) Put(ctx context.Context, bucket, key string, r io.Reader, opts store.PutOptions) (object.Info, error) {
	_, _ = io.Copy(io.Discard, r)
	return object.Info{}, fmt.Errorf("store: %w", syscall.EIO)
}

// TestFailedWriteAbandonsReplicas: a write-back PUT whose replica was
// stored but whose own copy failed on the owner is answered with an error
// and will never be destaged: the holder is told, and its replica goes
// instead of staying dirty for ever (or being uploaded by a take-over).
func TestFailedWriteAbandonsReplicas(t *testing.T) {
	owner, holder := newEnv(t, "fs"), newEnv(t, "fs")
	holder.be = owner.be
	p := &peers{tiers: map[string]*tier.Tier{}, order: []string{"A", "B"}}
	wb2 := map[string]tier.Bucket{"wback": {Mode: tier.ModeWriteback, Copies: 2}}
	ctx := context.Background()
	ta, err := tier.New(ctx, tier.Config{NodeID: "A", Replicator: p, SpoolDir: owner.dir + "/spool", JournalDir: owner.dir + "/journal"}, failingLocal{owner.local})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ta.Close() })
	if err := ta.AddBucket("wback", tier.Bucket{Mode: tier.ModeWriteback, Copies: 2, Backend: owner.be}); err != nil {
		t.Fatal(err)
	}
	tb := holder.newTier(t, tier.Config{NodeID: "B", Replicator: p}, wb2)
	p.set("A", ta)
	p.set("B", tb)
	body := []byte("written on the peer, failed on the owner")
	if _, err := ta.Put(ctx, "wback", "k", bytesReader(body), putOpts(len(body))); !errors.Is(err, syscall.EIO) {
		t.Fatalf("PUT whose own copy failed: %v, want EIO", err)
	}
	if bl := tb.Backlog(); bl.ReplicaObjects != 0 {
		t.Errorf("holder still holds a replica of the failed write: %+v", bl)
	}
	if _, err := holder.local.Stat(ctx, "wback", "k"); !errors.Is(err, object.ErrNotFound) {
		t.Errorf("holder's copy of the failed write: %v, want it gone", err)
	}
	if n, err := tb.TakeOver(ctx, "A"); err != nil || n != 0 {
		t.Errorf("take-over of the owner adopted %d operations (%v), want none", n, err)
	}
}
