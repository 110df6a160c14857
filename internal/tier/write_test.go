package tier_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/backend/backendtest"
	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/store"
	"github.com/slipstream-io/slipstream/internal/tier"
)

func putOpts(n int) object.PutOptions {
	return object.PutOptions{Size: int64(n), ContentType: "text/plain"}
}

func TestWriteThrough(t *testing.T) {
	kinds(t, func(t *testing.T, kind string) {
		e := newEnv(t, kind)
		tr := e.newTier(t, tier.Config{}, cacheBucket)
		ctx := context.Background()
		body := backendtest.Body(6, 6<<20+3)
		info, err := tr.Put(ctx, "data", "wt/obj", bytesReader(body), putOpts(len(body)))
		if err != nil {
			t.Fatal(err)
		}
		// The backend has it before the PUT returned: check its own files.
		onDisk, err := os.ReadFile(e.remoteFile("wt/obj"))
		if err != nil || !bytes.Equal(onDisk, body) {
			t.Fatalf("backend file after write-through: %d bytes, %v", len(onDisk), err)
		}
		a, err := e.raw.Stat(ctx, "wt/obj")
		if err != nil {
			t.Fatal(err)
		}
		local, err := e.local.Stat(ctx, "data", "wt/obj")
		if err != nil || local.Dirty || local.BackendETag != a.ETag || local.Size != int64(len(body)) {
			t.Errorf("local copy %+v (%v), backend %+v", local, err, a)
		}
		if info.Size != int64(len(body)) {
			t.Errorf("put info %+v", info)
		}
		gets := e.be.fullGets.Load()
		r, err := tr.Get(ctx, "data", "wt/obj", nil)
		if data := readAll(t, r, err); !bytes.Equal(data, body) || e.be.fullGets.Load() != gets {
			t.Error("written-through object is not warm")
		}
		// A failing backend fails the PUT and leaves no local copy.
		e.be.set(func(c *ctl) { c.failPuts = true })
		if _, err := tr.Put(ctx, "data", "wt/fail", bytesReader(body[:100]), putOpts(100)); !errors.Is(err, errInjected) {
			t.Errorf("PUT with a failing backend: %v", err)
		}
		if _, err := e.local.Stat(ctx, "data", "wt/fail"); !errors.Is(err, object.ErrNotFound) {
			t.Error("failed write-through left a local copy")
		}
		// Delete goes to both.
		e.be.set(func(c *ctl) { c.failPuts = false })
		if err := tr.Delete(ctx, "data", "wt/obj"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.raw.Stat(ctx, "wt/obj"); !errors.Is(err, object.ErrNotFound) {
			t.Error("delete did not reach the backend")
		}
		if _, err := e.local.Stat(ctx, "data", "wt/obj"); !errors.Is(err, object.ErrNotFound) {
			t.Error("delete left the local copy")
		}
	})
}

// TestWriteThroughShowsNothingBeforeTheBackend: while the backend has not
// yet taken a write-through's body, readers get the previous version, and
// when the backend then fails, the previous version is what stays (local
// and remote agree on it).
func TestWriteThroughShowsNothingBeforeTheBackend(t *testing.T) {
	kinds(t, func(t *testing.T, kind string) {
		e := newEnv(t, kind)
		tr := e.newTier(t, tier.Config{}, cacheBucket)
		ctx := context.Background()
		v1, v2 := []byte("version one"), bytes.Repeat([]byte("2"), 300<<10)
		if _, err := tr.Put(ctx, "data", "wt/k", bytesReader(v1), putOpts(len(v1))); err != nil {
			t.Fatal(err)
		}
		gate := make(chan struct{})
		e.be.set(func(c *ctl) { c.gate = gate })
		puts := e.be.puts.Load()
		done := make(chan error, 1)
		go func() {
			_, err := tr.Put(ctx, "data", "wt/k", bytesReader(v2), putOpts(len(v2)))
			done <- err
		}()
		for deadline := time.Now().Add(5 * time.Second); e.be.puts.Load() == puts; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the backend PUT never started")
			}
		}
		// The local copy of v2 is written well within this second; it
		// must not be shown.
		for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			r, err := tr.Get(ctx, "data", "wt/k", nil)
			if got := readAll(t, r, err); !bytes.Equal(got, v1) {
				t.Fatalf("GET during the write-through: %d bytes, want the previous version", len(got))
			}
		}
		e.be.set(func(c *ctl) { c.failPuts = true; c.gate = nil })
		close(gate)
		if err := <-done; !errors.Is(err, errInjected) {
			t.Fatalf("write-through with a failing backend: %v", err)
		}
		e.be.set(func(c *ctl) { c.failPuts = false })
		local, err := e.local.Stat(ctx, "data", "wt/k")
		if err != nil || local.Size != int64(len(v1)) {
			t.Fatalf("local copy after the failed write-through: %+v, %v", local, err)
		}
		gets := e.be.fullGets.Load()
		r, err := tr.Get(ctx, "data", "wt/k", nil)
		if got := readAll(t, r, err); !bytes.Equal(got, v1) || e.be.fullGets.Load() != gets {
			t.Fatalf("after the failed write-through: %d bytes (backend GETs %d), want the warm previous version", len(got), e.be.fullGets.Load()-gets)
		}
	})
}

var wbBucket = map[string]tier.Bucket{"wback": {Mode: tier.ModeWriteback}}

func TestWriteBackDestageOrder(t *testing.T) {
	kinds(t, func(t *testing.T, kind string) {
		e := newEnv(t, kind)
		gate := make(chan struct{})
		e.be.set(func(c *ctl) { c.gate = gate })
		tr := e.newTier(t, tier.Config{DestageParallel: 4}, wbBucket)
		ctx := context.Background()
		// Overwrites and deletes while the backend is held back.
		var last []byte
		for i := 0; i < 3; i++ {
			last = []byte(fmt.Sprintf("version %d of k", i))
			if _, err := tr.Put(ctx, "wback", "k", bytesReader(last), putOpts(len(last))); err != nil {
				t.Fatal(err)
			}
		}
		for _, k := range []string{"gone", "back"} {
			if _, err := tr.Put(ctx, "wback", k, bytesReader([]byte("old "+k)), putOpts(4+len(k))); err != nil {
				t.Fatal(err)
			}
		}
		if err := tr.Delete(ctx, "wback", "gone"); err != nil {
			t.Fatal(err)
		}
		if err := tr.Delete(ctx, "wback", "back"); err != nil {
			t.Fatal(err)
		}
		if _, err := tr.Put(ctx, "wback", "back", bytesReader([]byte("new back")), putOpts(8)); err != nil {
			t.Fatal(err)
		}
		// Reads see the acknowledged state before destage.
		r, err := tr.Get(ctx, "wback", "k", nil)
		if data := readAll(t, r, err); !bytes.Equal(data, last) {
			t.Errorf("dirty read: %q", data)
		}
		if _, err := tr.Get(ctx, "wback", "gone", nil); !errors.Is(err, object.ErrNotFound) {
			t.Errorf("read of a deleted, not destaged object: %v", err)
		}
		info, _ := e.local.Stat(ctx, "wback", "k")
		if !info.Dirty {
			t.Error("write-back object not dirty before destage")
		}
		bl := tr.Backlog()
		if bl.Objects < 3 || bl.Bytes == 0 {
			t.Errorf("backlog before destage %+v", bl)
		}
		if _, err := e.raw.Stat(ctx, "k"); !errors.Is(err, object.ErrNotFound) {
			t.Error("the backend got the object before the destager was released")
		}
		close(gate)
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if err := tr.WaitDestaged(wctx); err != nil {
			t.Fatal(err)
		}
		for key, want := range map[string]string{"k": string(last), "back": "new back"} {
			got, err := os.ReadFile(e.remoteFile(key))
			if err != nil || string(got) != want {
				t.Errorf("backend %s = %q (%v), want %q", key, got, err, want)
			}
			info, err := e.local.Stat(ctx, "wback", key)
			if err != nil || info.Dirty || info.BackendETag == "" {
				t.Errorf("%s not clean after destage: %+v %v", key, info, err)
			}
		}
		if _, err := e.raw.Stat(ctx, "gone"); !errors.Is(err, object.ErrNotFound) {
			t.Error("deleted object reached the backend")
		}
		// Per key, the last backend operation is the last write.
		lastOp := map[string]string{}
		for _, o := range e.be.ops() {
			f := strings.Fields(o)
			lastOp[f[1]] = f[0]
		}
		if lastOp["k"] != "put" || lastOp["back"] != "put" || (lastOp["gone"] != "delete" && lastOp["gone"] != "") {
			t.Errorf("backend operations %v", e.be.ops())
		}
		bl = tr.Backlog()
		if bl.Objects != 0 || bl.Bytes != 0 || bl.Destaged == 0 {
			t.Errorf("backlog after destage %+v", bl)
		}
	})
}

func TestJournalReplayAfterRestart(t *testing.T) {
	e := newEnv(t, "fs")
	e.be.set(func(c *ctl) { c.failPuts = true })
	cfg := tier.Config{RetryBackoff: 20 * time.Millisecond}
	tr := e.newTier(t, cfg, wbBucket)
	ctx := context.Background()
	bodies := map[string][]byte{}
	for i := 0; i < 5; i++ {
		k := fmt.Sprintf("obj-%d", i)
		bodies[k] = backendtest.Body(int64(i), 10000+i)
		if _, err := tr.Put(ctx, "wback", k, bytesReader(bodies[k]), putOpts(len(bodies[k]))); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.Delete(ctx, "wback", "obj-4"); err != nil {
		t.Fatal(err)
	}
	if err := e.raw.Delete(ctx, "never-there"); err != nil {
		t.Fatal(err)
	}
	// The remote has an old copy of obj-4 that the journaled delete must remove.
	remotePut(t, e.raw, "obj-4", []byte("stale"))
	eventually(t, "failed destage attempts", func() bool { return tr.Backlog().Failures >= 2 })
	if bl := tr.Backlog(); bl.Objects != 5 {
		t.Fatalf("backlog %+v", bl)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.local.Close(); err != nil {
		t.Fatal(err)
	}
	// Restart: new store and tier over the same directories, healthy backend.
	e.openStore(t)
	e.be.set(func(c *ctl) { c.failPuts = false })
	tr2, err := tier.New(ctx, tier.Config{SpoolDir: e.dir + "/spool", JournalDir: e.dir + "/journal"}, e.local)
	if err != nil {
		t.Fatal(err)
	}
	defer tr2.Close()
	if bl := tr2.Backlog(); bl.Objects != 5 || bl.Bytes != int64(4*10000+6) {
		t.Errorf("replayed backlog %+v", bl)
	}
	if err := tr2.AddBucket("wback", tier.Bucket{Mode: tier.ModeWriteback, Backend: e.be}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := tr2.WaitDestaged(wctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		k := fmt.Sprintf("obj-%d", i)
		got, err := os.ReadFile(e.remoteFile(k))
		if err != nil || !bytes.Equal(got, bodies[k]) {
			t.Errorf("%s did not reach the backend after restart: %v", k, err)
		}
	}
	if _, err := e.raw.Stat(ctx, "obj-4"); !errors.Is(err, object.ErrNotFound) {
		t.Error("journaled delete was not destaged after restart")
	}
	// A third start finds an empty backlog (the journal was compacted).
	tr2.Close()
	tr3, err := tier.New(ctx, tier.Config{SpoolDir: e.dir + "/spool", JournalDir: e.dir + "/journal"}, e.local)
	if err != nil {
		t.Fatal(err)
	}
	defer tr3.Close()
	if bl := tr3.Backlog(); bl.Objects != 0 || bl.JournalBytes > 200 {
		t.Errorf("backlog after a clean restart %+v", bl)
	}
}

// TestLostCleanMarkIsRecovered: the store writes a destaged copy's clean
// mark without fsync, so a crash can leave the copy dirty again with its
// journal records gone. The next start must find the backend already holds
// it and make it clean again, without uploading it twice; a copy that
// really is newer than the backend's is uploaded.
func TestLostCleanMarkIsRecovered(t *testing.T) {
	e := newEnv(t, "fs")
	tr := e.newTier(t, tier.Config{}, wbBucket)
	ctx := context.Background()
	body := []byte("destaged before the crash")
	if _, err := tr.Put(ctx, "wback", "k", bytesReader(body), putOpts(len(body))); err != nil {
		t.Fatal(err)
	}
	if got, err := e.destaged(t, tr, "k"); err != nil || got != string(body) {
		t.Fatalf("destaged %q, %v", got, err)
	}
	if i, err := e.local.Stat(ctx, "wback", "k"); err != nil || i.Dirty {
		t.Fatalf("after destage: %+v, %v", i, err)
	}
	// What the crash leaves: the copy dirty again (the clean mark never
	// reached the disk), and the journal compacted (its records gone).
	for _, key := range []string{"k", "newer"} {
		if key == "newer" {
			// A copy the journal lost although the backend lacks it.
			if _, err := e.local.Put(ctx, "wback", key, bytesReader(body), store.PutOptions{PutOptions: putOpts(len(body)), Dirty: true}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if _, err := e.local.UpdateMeta(ctx, "wback", key, func(i *object.Info) error { i.Dirty = true; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	puts := e.be.puts.Load()
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.local.Close(); err != nil {
		t.Fatal(err)
	}
	e.openStore(t)
	tr2 := e.newTier(t, tier.Config{}, wbBucket)
	if got, err := e.destaged(t, tr2, "newer"); err != nil || got != string(body) {
		t.Fatalf("a dirty copy the backend lacks was not uploaded after the restart: %q, %v", got, err)
	}
	if n := e.be.puts.Load() - puts; n != 1 {
		t.Errorf("%d uploads after the restart, want 1 (only the copy the backend lacks)", n)
	}
	if i, err := e.local.Stat(ctx, "wback", "k"); err != nil || i.Dirty {
		t.Errorf("copy whose clean mark was lost: %+v, %v; want clean", i, err)
	}
}

// TestLostReplicaCleanMarkIsRecovered: the same on a replica holder,
// whose copy became clean when the owner's notice came and whose replica
// record is gone: its start finds the owner's upload in the backend and
// makes the copy clean again without uploading it.
func TestLostReplicaCleanMarkIsRecovered(t *testing.T) {
	d := destagedPair(t)
	owner, holder, p, wb2, tb := d.owner, d.holder, d.p, d.buckets, d.tb
	ctx := context.Background()
	if _, err := holder.local.UpdateMeta(ctx, "wback", "k", func(i *object.Info) error { i.Dirty = true; return nil }); err != nil {
		t.Fatal(err)
	}
	puts := owner.be.puts.Load()
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	if err := holder.local.Close(); err != nil {
		t.Fatal(err)
	}
	holder.openStore(t)
	tb2 := holder.newTier(t, tier.Config{NodeID: "B", Replicator: p}, wb2)
	p.set("B", tb2)
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := tb2.WaitDestaged(wctx); err != nil {
		t.Fatal(err)
	}
	if i, err := holder.local.Stat(ctx, "wback", "k"); err != nil || i.Dirty {
		t.Errorf("replica whose clean mark was lost: %+v, %v; want clean", i, err)
	}
	if n := owner.be.puts.Load() - puts; n != 0 {
		t.Errorf("%d uploads after the holder's restart, want none", n)
	}
}

func TestDirtyCapBackPressure(t *testing.T) {
	e := newEnv(t, "fs")
	gate := make(chan struct{})
	e.be.set(func(c *ctl) { c.gate = gate })
	tr := e.newTier(t, tier.Config{MaxDirtyBytes: 1 << 20, DirtyWait: time.Second}, wbBucket)
	ctx := context.Background()
	body := backendtest.Body(8, 600<<10)
	if _, err := tr.Put(ctx, "wback", "a", bytesReader(body), putOpts(len(body))); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	_, err := tr.Put(ctx, "wback", "b", bytesReader(body), putOpts(len(body)))
	if !errors.Is(err, object.ErrSlowDown) {
		t.Fatalf("PUT over the dirty cap: %v, want ErrSlowDown", err)
	}
	if waited := time.Since(began); waited < 900*time.Millisecond {
		t.Errorf("back-pressure answered after %v, want about the 1s wait", waited)
	}
	if _, err := e.local.Stat(ctx, "wback", "b"); !errors.Is(err, object.ErrNotFound) {
		t.Error("refused PUT left an object")
	}
	// A PUT that waits is let through as soon as the destager frees room.
	done := make(chan error, 1)
	go func() {
		tr2ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := tr.Put(tr2ctx, "wback", "c", bytesReader(body), putOpts(len(body)))
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	close(gate)
	if err := <-done; err != nil {
		t.Fatalf("PUT waiting for room: %v", err)
	}
	if bl := tr.Backlog(); bl.Bytes > 1<<20 {
		t.Errorf("dirty bytes %d over the cap", bl.Bytes)
	}
}

// TestDirtyCapFirstComeFirstServed: a PUT that fits under the dirty cap
// does not pass one that is waiting for room, or a large PUT would wait for
// ever behind a steady stream of small ones.
func TestDirtyCapFirstComeFirstServed(t *testing.T) {
	e := newEnv(t, "fs")
	gate := make(chan struct{})
	e.be.set(func(c *ctl) { c.gate = gate })
	tr := e.newTier(t, tier.Config{MaxDirtyBytes: 1 << 20, DirtyWait: 10 * time.Second}, wbBucket)
	ctx := context.Background()
	first := backendtest.Body(1, 600<<10)
	if _, err := tr.Put(ctx, "wback", "first", bytesReader(first), putOpts(len(first))); err != nil {
		t.Fatal(err)
	}
	put := func(key string, size int) <-chan error {
		done := make(chan error, 1)
		go func() {
			body := backendtest.Body(int64(size), size)
			_, err := tr.Put(ctx, "wback", key, bytesReader(body), putOpts(len(body)))
			done <- err
		}()
		return done
	}
	big := put("big", 700<<10) // does not fit until "first" is destaged
	// Time for "big" to queue for room: a CI run with the race detector
	// on a loaded machine took more than 100 ms.
	time.Sleep(time.Second)
	small := put("small", 100<<10) // would fit, but "big" came first
	select {
	case err := <-small:
		t.Fatalf("a PUT that came later passed the one waiting for room (%v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(gate)
	for name, ch := range map[string]<-chan error{"big": big, "small": small} {
		if err := <-ch; err != nil {
			t.Errorf("%s PUT: %v", name, err)
		}
	}
}

// TestMultipartWithinDirtyCap: a multipart completion into a writeback
// bucket reserves its size like a PUT before its parts are assembled: over
// the cap it is refused with SlowDown (the upload stays, to be retried),
// and once the backlog drains it is let through and counted.
func TestMultipartWithinDirtyCap(t *testing.T) {
	e := newEnv(t, "fs")
	gate := make(chan struct{})
	e.be.set(func(c *ctl) { c.gate = gate })
	const limit = 1 << 20
	tr := e.newTier(t, tier.Config{MaxDirtyBytes: limit, DirtyWait: 300 * time.Millisecond}, wbBucket)
	ctx := context.Background()
	small := backendtest.Body(1, 600<<10)
	if _, err := tr.Put(ctx, "wback", "a", bytesReader(small), putOpts(len(small))); err != nil {
		t.Fatal(err)
	}
	big := backendtest.Body(2, 2<<20)
	if _, err := tr.ReserveDirty(ctx, "wback", int64(len(big))); !errors.Is(err, object.ErrSlowDown) {
		t.Fatalf("reserving a completion over the cap: %v, want ErrSlowDown", err)
	}
	close(gate)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := tr.WaitDestaged(wctx); err != nil {
		t.Fatal(err)
	}
	release, err := tr.ReserveDirty(ctx, "wback", int64(len(big)))
	if err != nil {
		t.Fatalf("reserving with the backlog drained: %v", err)
	}
	if _, err := e.local.Put(ctx, "wback", "mp", bytesReader(big), store.PutOptions{PutOptions: putOpts(len(big)), Dirty: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Adopt(ctx, "wback", "mp"); err != nil {
		t.Fatal(err)
	}
	release()
	if err := tr.WaitDestaged(wctx); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(e.remoteFile("mp")); err != nil || len(got) != len(big) {
		t.Errorf("backend mp: %d bytes, %v", len(got), err)
	}
	if _, err := tr.ReserveDirty(ctx, "nope", 1); !errors.Is(err, tier.ErrNoBucket) {
		t.Errorf("reserving in an unknown bucket: %v", err)
	}
}

// replicaPair is an owner (node A) and a replica holder (node B) of a
// copies=2 write-back bucket on the owner's backend.
type replicaPair struct {
	owner, holder *env
	p             *peers
	buckets       map[string]tier.Bucket
	ta, tb        *tier.Tier
}

// destagedPair starts a replicaPair, writes "k" through the owner and
// waits until the owner has destaged it and the holder's replica is clean.
func destagedPair(t *testing.T) replicaPair {
	t.Helper()
	d := replicaPair{owner: newEnv(t, "fs"), holder: newEnv(t, "fs")}
	d.p = &peers{tiers: map[string]*tier.Tier{}, order: []string{"A", "B"}}
	d.buckets = map[string]tier.Bucket{"wback": {Mode: tier.ModeWriteback, Copies: 2, Backend: d.owner.be}}
	d.ta = d.owner.newTier(t, tier.Config{NodeID: "A", Replicator: d.p}, d.buckets)
	d.tb = d.holder.newTier(t, tier.Config{NodeID: "B", Replicator: d.p}, d.buckets)
	d.p.set("A", d.ta)
	d.p.set("B", d.tb)
	ctx := context.Background()
	if _, err := d.ta.Put(ctx, "wback", "k", bytesReader([]byte("hello")), putOpts(5)); err != nil {
		t.Fatal(err)
	}
	if err := d.ta.WaitDestaged(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "replica marked clean", func() bool {
		i, err := d.holder.local.Stat(ctx, "wback", "k")
		return err == nil && !i.Dirty && d.tb.Backlog().ReplicaObjects == 0
	})
	return d
}

// peers is a Replicator that copies to other Tiers in the same process.
type peers struct {
	mu    sync.Mutex
	tiers map[string]*tier.Tier
	order []string
	down  map[string]bool // holders that miss notices
}

// tier returns node id's tier; set makes it tr (a node started again):
// the destagers of the tiers already running call the peers meanwhile.
func (p *peers) tier(id string) *tier.Tier {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tiers[id]
}

func (p *peers) set(id string, tr *tier.Tier) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tiers[id] = tr
}

func (p *peers) isDown(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.down[id]
}

func (p *peers) Replicate(ctx context.Context, req tier.ReplicaPut) ([]string, error) {
	p.mu.Lock()
	var targets []string
	for _, id := range p.order {
		if id != req.Owner && len(targets) < req.Copies {
			targets = append(targets, id)
		}
	}
	p.mu.Unlock()
	if len(targets) != 1 {
		_, _ = io.Copy(io.Discard, req.Body) // a peer that fails at the end
		return nil, fmt.Errorf("no peer to hold a copy")
	}
	_, err := p.tier(targets[0]).PutReplica(ctx, req.Owner, req.Seq, req.Bucket, req.Key, req.Body,
		tier.ReplicaOptions{PutOptions: req.Opts, ModTime: req.ModTime})
	return targets, err
}

func (p *peers) ReplicateDelete(ctx context.Context, owner string, seq uint64, bucket, key string, copies int) ([]string, error) {
	var holders []string
	for _, id := range p.order {
		if id != owner && !p.isDown(id) {
			holders = append(holders, id)
		}
	}
	return holders, p.Deleted(ctx, owner, seq, bucket, key, holders)
}

func (p *peers) Deleted(ctx context.Context, owner string, seq uint64, bucket, key string, holders []string) error {
	for _, h := range holders {
		if p.isDown(h) {
			return fmt.Errorf("%s: %w", h, errInjected)
		}
		if err := p.tier(h).DeleteReplica(ctx, owner, seq, bucket, key); err != nil {
			return err
		}
	}
	return nil
}

func (p *peers) Abandoned(ctx context.Context, owner string, seq uint64, bucket, key string, holders []string) error {
	for _, h := range holders {
		if err := p.tier(h).ReplicaAbandoned(ctx, owner, seq, bucket, key); err != nil {
			return err
		}
	}
	return nil
}

func (p *peers) Destaged(ctx context.Context, owner string, seq uint64, bucket, key string, holders []string) error {
	for _, h := range holders {
		if p.isDown(h) {
			return fmt.Errorf("%s: %w", h, errInjected)
		}
		if err := p.tier(h).ReplicaDestaged(ctx, owner, seq, bucket, key); err != nil {
			return err
		}
	}
	return nil
}

// replicatedPair is an owner A and a replica holder B of the write-back
// bucket wback (copies=2) over one remote bucket, whose uploads wait until
// gate is closed.
func replicatedPair(t *testing.T, kind string) (owner, holder *env, ta, tb *tier.Tier, p *peers, gate chan struct{}) {
	t.Helper()
	owner, holder = newEnv(t, kind), newEnv(t, "fs")
	holder.be = owner.be // same remote bucket
	gate = make(chan struct{})
	owner.be.set(func(c *ctl) { c.gate = gate })
	p = &peers{tiers: map[string]*tier.Tier{}, order: []string{"A", "B"}}
	wb2 := map[string]tier.Bucket{"wback": {Mode: tier.ModeWriteback, Copies: 2}}
	ta = owner.newTier(t, tier.Config{NodeID: "A", Replicator: p}, wb2)
	tb = holder.newTier(t, tier.Config{NodeID: "B", Replicator: p}, wb2)
	p.set("A", ta)
	p.set("B", tb)
	return owner, holder, ta, tb, p, gate
}

func TestReplicasAndTakeOver(t *testing.T) {
	kinds(t, func(t *testing.T, kind string) {
		owner, holder, ta, tb, _, gate := replicatedPair(t, kind)
		ctx := context.Background()

		body := backendtest.Body(9, 3<<20)
		if _, err := ta.Put(ctx, "wback", "replicated", bytesReader(body), putOpts(len(body))); err != nil {
			t.Fatal(err)
		}
		if _, err := ta.Put(ctx, "wback", "doomed", bytesReader([]byte("x")), putOpts(1)); err != nil {
			t.Fatal(err)
		}
		if err := ta.Delete(ctx, "wback", "doomed"); err != nil {
			t.Fatal(err)
		}
		rep, err := holder.local.Stat(ctx, "wback", "replicated")
		if err != nil || !rep.Dirty || rep.Size != int64(len(body)) {
			t.Fatalf("replica on the holder: %+v %v", rep, err)
		}
		if bl := tb.Backlog(); bl.ReplicaObjects != 2 || bl.ReplicaBytes != int64(len(body)) {
			t.Errorf("holder backlog %+v", bl)
		}
		// The owner dies before destaging: its destager never runs again.
		ta.Close()
		n, err := tb.TakeOver(ctx, "A")
		if err != nil || n != 2 {
			t.Fatalf("TakeOver: %d %v", n, err)
		}
		close(gate)
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if err := tb.WaitDestaged(wctx); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(owner.remoteFile("replicated"))
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("taken-over object did not reach the backend: %v", err)
		}
		if _, err := owner.raw.Stat(ctx, "doomed"); !errors.Is(err, object.ErrNotFound) {
			t.Error("taken-over delete not destaged")
		}
		if bl := tb.Backlog(); bl.ReplicaObjects != 0 || bl.Objects != 0 {
			t.Errorf("holder backlog after takeover %+v", bl)
		}
		if info, _ := holder.local.Stat(ctx, "wback", "replicated"); info.Dirty {
			t.Error("holder copy still dirty after destage")
		}
	})
}

// TestTakeOverKeepsNewerWrite: a holder that took ownership of a key after
// the owner died accepted a write of it before its take-over of the dead
// owner's backlog ran. The older taken-over delete must not replace that
// write's destage: the backend ends with the write.
func TestTakeOverKeepsNewerWrite(t *testing.T) {
	owner, holder, ta, tb, p, gate := replicatedPair(t, "fs")
	ctx := context.Background()
	if _, err := ta.Put(ctx, "wback", "k", bytesReader([]byte("v1")), putOpts(2)); err != nil {
		t.Fatal(err)
	}
	if err := ta.Delete(ctx, "wback", "k"); err != nil {
		t.Fatal(err)
	}
	ta.Close() // A dies; B owns k now and takes a write of it
	p.mu.Lock()
	p.order = []string{"B"}
	p.mu.Unlock()
	v2 := "v2 written through B after A died"
	if _, err := tb.Put(ctx, "wback", "k", bytesReader([]byte(v2)), putOpts(len(v2))); err != nil && !errors.Is(err, object.ErrUnavailable) {
		t.Fatal(err) // no peer for the second copy: the write is journaled all the same
	}
	if n, err := tb.TakeOver(ctx, "A"); err != nil || n != 0 {
		t.Fatalf("TakeOver: %d %v, want the older delete dropped", n, err)
	}
	close(gate)
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := tb.WaitDestaged(wctx); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(owner.remoteFile("k")); err != nil || string(got) != v2 {
		t.Fatalf("backend k = %q (%v), want %q; ops %v", got, err, v2, owner.be.ops())
	}
	if i, err := holder.local.Stat(ctx, "wback", "k"); err != nil || i.Dirty {
		t.Errorf("B's copy: %+v %v, want clean", i, err)
	}
	if bl := tb.Backlog(); bl.ReplicaObjects != 0 || bl.Objects != 0 {
		t.Errorf("B's backlog %+v", bl)
	}
}

// TestReturningOwnerDoesNotRollBack: an owner that dies with a backlog is
// taken over; the key is rewritten through another node meanwhile. When the
// owner comes back with its old journal, the backend keeps the newer write,
// the owner drops its out-of-date copy and uploads nothing twice.
func TestReturningOwnerDoesNotRollBack(t *testing.T) {
	kinds(t, func(t *testing.T, kind string) {
		owner, holder := newEnv(t, kind), newEnv(t, "fs")
		gate := make(chan struct{})
		owner.be = &ctl{Backend: owner.raw, gate: gate} // A cannot destage before it dies
		holder.be = &ctl{Backend: owner.raw}            // same remote bucket
		p := &peers{tiers: map[string]*tier.Tier{}, order: []string{"A", "B"}}
		wb2 := map[string]tier.Bucket{"wback": {Mode: tier.ModeWriteback, Copies: 2}}
		cfg := tier.Config{NodeID: "A", Replicator: p, RetryBackoff: 20 * time.Millisecond}
		ta := owner.newTier(t, cfg, wb2)
		tb := holder.newTier(t, tier.Config{NodeID: "B", Replicator: p}, wbBucket)
		p.set("A", ta)
		p.set("B", tb)
		ctx := context.Background()
		put := func(tr *tier.Tier, key, body string) {
			t.Helper()
			if _, err := tr.Put(ctx, "wback", key, bytesReader([]byte(body)), putOpts(len(body))); err != nil {
				t.Fatal(err)
			}
		}
		put(ta, "rewritten", "v1 written through A")
		put(ta, "same", "only written through A")
		put(ta, "deleted", "d1")
		if err := ta.Delete(ctx, "wback", "deleted"); err != nil {
			t.Fatal(err)
		}

		// A dies; B takes over A's backlog, then owns the keys while A is down.
		ta.Close()
		if n, err := tb.TakeOver(ctx, "A"); err != nil || n != 3 {
			t.Fatalf("TakeOver: %d %v", n, err)
		}
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if err := tb.WaitDestaged(wctx); err != nil {
			t.Fatal(err)
		}
		// A second holder of the same write (copies=3) takes over after B
		// destaged it: it finds the write in the backend and uploads nothing.
		third := newEnv(t, "fs")
		third.be = &ctl{Backend: owner.raw}
		tc := third.newTier(t, tier.Config{NodeID: "C"}, wbBucket)
		si, err := owner.local.Stat(ctx, "wback", "same")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tc.PutReplica(ctx, "A", 2, "wback", "same", bytesReader([]byte("only written through A")),
			tier.ReplicaOptions{PutOptions: putOpts(int(si.Size)), ModTime: si.ModTime}); err != nil {
			t.Fatal(err)
		}
		if n, err := tc.TakeOver(ctx, "A"); err != nil || n != 1 {
			t.Fatalf("second TakeOver: %d %v", n, err)
		}
		if err := tc.WaitDestaged(wctx); err != nil {
			t.Fatal(err)
		}
		if n := third.be.puts.Load(); n != 0 {
			t.Errorf("the second holder uploaded %d times what the first had destaged", n)
		}
		if i, err := third.local.Stat(ctx, "wback", "same"); err != nil || i.Dirty {
			t.Errorf("second holder's copy: %+v %v, want clean", i, err)
		}

		put(tb, "rewritten", "v2 written through B")
		put(tb, "deleted", "d2 written through B after the delete")
		if err := tb.WaitDestaged(wctx); err != nil {
			t.Fatal(err)
		}

		// A comes back with its journal and its old copies.
		if err := owner.local.Close(); err != nil {
			t.Fatal(err)
		}
		owner.openStore(t)
		close(gate)
		puts, deletes := owner.be.puts.Load(), owner.be.deletes.Load()
		ta2 := owner.newTier(t, cfg, wb2)
		p.set("A", ta2)
		if bl := ta2.Backlog(); bl.Objects+int(bl.Destaged) != 3 { // its workers start at once
			t.Fatalf("replayed backlog %+v, want 3 operations", bl)
		}
		if err := ta2.WaitDestaged(wctx); err != nil {
			t.Fatal(err)
		}
		for key, want := range map[string]string{
			"rewritten": "v2 written through B",
			"same":      "only written through A",
			"deleted":   "d2 written through B after the delete",
		} {
			if got, err := os.ReadFile(owner.remoteFile(key)); err != nil || string(got) != want {
				t.Errorf("backend %s = %q (%v), want %q", key, got, err, want)
			}
		}
		if n, m := owner.be.puts.Load()-puts, owner.be.deletes.Load()-deletes; n != 0 || m != 0 {
			t.Errorf("the returning owner sent %d uploads and %d deletes, want none: %v", n, m, owner.be.ops())
		}
		if i, err := owner.local.Stat(ctx, "wback", "same"); err != nil || i.Dirty {
			t.Errorf("A's copy of a version B destaged for it: %+v %v, want clean", i, err)
		}
		if _, err := owner.local.Stat(ctx, "wback", "rewritten"); !errors.Is(err, object.ErrNotFound) {
			t.Errorf("A kept its out-of-date copy: %v", err)
		}
		// A cold read through A fetches B's version; the stamp stays internal.
		r, err := ta2.Get(ctx, "wback", "rewritten", nil)
		if got := readAll(t, r, err); string(got) != "v2 written through B" {
			t.Errorf("read through A: %q", got)
		}
		i, err := ta2.Stat(ctx, "wback", "rewritten")
		if err != nil || len(i.UserMeta) != 0 {
			t.Errorf("user metadata seen by clients: %v %v", i.UserMeta, err)
		}
	})
}

// TestMissedNoticesAreSentAgain: a replica holder that is down when the
// owner destages a write, or deletes a key it held a replica of, gets the
// notice once it is back: its replica is cleared (and for the delete, its
// copy dropped), so a later takeover has nothing to upload again.
func TestMissedNoticesAreSentAgain(t *testing.T) {
	owner, holder := newEnv(t, "fs"), newEnv(t, "fs")
	holder.be = owner.be
	gate := make(chan struct{})
	owner.be.set(func(c *ctl) { c.gate = gate })
	p := &peers{tiers: map[string]*tier.Tier{}, order: []string{"A", "B"}, down: map[string]bool{}}
	wb2 := map[string]tier.Bucket{"wback": {Mode: tier.ModeWriteback, Copies: 2}}
	ta := owner.newTier(t, tier.Config{NodeID: "A", Replicator: p, RetryBackoff: 20 * time.Millisecond}, wb2)
	tb := holder.newTier(t, tier.Config{NodeID: "B", Replicator: p}, wb2)
	p.set("A", ta)
	p.set("B", tb)
	ctx := context.Background()
	for _, k := range []string{"kept", "deleted"} {
		if _, err := ta.Put(ctx, "wback", k, bytesReader([]byte(k)), putOpts(len(k))); err != nil {
			t.Fatal(err)
		}
	}
	if bl := tb.Backlog(); bl.ReplicaObjects != 2 {
		t.Fatalf("holder backlog %+v", bl)
	}
	// B goes down; A deletes one key (B misses it) and destages everything.
	p.mu.Lock()
	p.down["B"] = true
	p.mu.Unlock()
	if err := ta.Delete(ctx, "wback", "deleted"); err != nil {
		t.Fatal(err)
	}
	close(gate)
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := ta.WaitDestaged(wctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // retries while B is down change nothing
	if bl := tb.Backlog(); bl.ReplicaObjects != 2 {
		t.Fatalf("holder backlog while it is down %+v", bl)
	}
	if bl := ta.Backlog(); bl.Notices != 2 {
		t.Fatalf("owner backlog %+v, want a notice per key for B", bl)
	}
	// A restarts while B is still down: the notices are in its journal.
	cfgA := tier.Config{NodeID: "A", Replicator: p, RetryBackoff: 20 * time.Millisecond}
	ta.Close()
	ta = owner.newTier(t, cfgA, wb2)
	p.set("A", ta)
	if bl := ta.Backlog(); bl.Notices != 2 {
		t.Fatalf("owner backlog after a restart %+v, want the 2 notices back", bl)
	}
	// B is back: the notices arrive.
	p.mu.Lock()
	p.down["B"] = false
	p.mu.Unlock()
	eventually(t, "the holder's replicas to be cleared", func() bool { return tb.Backlog().ReplicaObjects == 0 })
	eventually(t, "the owner to forget the notices", func() bool { return ta.Backlog().Notices == 0 })
	ta.Close()
	ta = owner.newTier(t, cfgA, wb2)
	if bl := ta.Backlog(); bl.Notices != 0 {
		t.Fatalf("owner backlog after the notices arrived and a restart %+v", bl)
	}
	if i, err := holder.local.Stat(ctx, "wback", "kept"); err != nil || i.Dirty {
		t.Errorf("holder's copy of a destaged write: %+v %v, want clean", i, err)
	}
	if _, err := holder.local.Stat(ctx, "wback", "deleted"); !errors.Is(err, object.ErrNotFound) {
		t.Errorf("holder kept its copy of a deleted key: %v", err)
	}
	// A dies now: B has nothing left to take over.
	ta.Close()
	if n, err := tb.TakeOver(ctx, "A"); err != nil || n != 0 {
		t.Fatalf("TakeOver after the notices: %d %v", n, err)
	}
}

// TestLateDeleteNoticeKeepsNewerReplica: a delete notice that arrives
// after the holder took a replica of a later write of the key (a retried
// notice) leaves that replica alone.
func TestLateDeleteNoticeKeepsNewerReplica(t *testing.T) {
	e := newEnv(t, "fs")
	tb := e.newTier(t, tier.Config{NodeID: "B"}, map[string]tier.Bucket{"wback": {Mode: tier.ModeWriteback, Copies: 2}})
	ctx := context.Background()
	body := []byte("written after the delete")
	if _, err := tb.PutReplica(ctx, "A", 7, "wback", "k", bytesReader(body),
		tier.ReplicaOptions{PutOptions: putOpts(len(body)), ModTime: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := tb.DeleteReplica(ctx, "A", 5, "wback", "k"); err != nil {
		t.Fatal(err)
	}
	if i, err := e.local.Stat(ctx, "wback", "k"); err != nil || !i.Dirty {
		t.Fatalf("replica after a late delete notice: %+v %v, want it kept dirty", i, err)
	}
	if bl := tb.Backlog(); bl.ReplicaObjects != 1 {
		t.Fatalf("holder backlog %+v, want the replica", bl)
	}
	if err := tb.DeleteReplica(ctx, "A", 8, "wback", "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.local.Stat(ctx, "wback", "k"); !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("replica after a newer delete: %v", err)
	}
}

func TestReplicaCleanAfterOwnerDestage(t *testing.T) {
	d := destagedPair(t)
	owner, p, ta := d.owner, d.p, d.ta
	ctx := context.Background()
	// A failing replica fails the PUT, but the owner's copy is still destaged.
	p.order = []string{"A"}
	if _, err := ta.Put(ctx, "wback", "k2", bytesReader([]byte("x")), putOpts(1)); !errors.Is(err, object.ErrUnavailable) {
		t.Errorf("PUT without a peer: %v", err)
	}
	if err := ta.WaitDestaged(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := owner.raw.Stat(ctx, "k2"); err != nil {
		t.Errorf("owner copy not destaged: %v", err)
	}
}

func TestListMergesPendingWrites(t *testing.T) {
	e, tr := gatedWriteback(t, tier.Config{})
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c", "dir/x"} {
		remotePut(t, e.raw, k, []byte("remote "+k))
	}
	for _, k := range []string{"bb", "d", "dir/y", "new/z"} {
		if _, err := tr.Put(ctx, "wback", k, bytesReader([]byte("local")), putOpts(5)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.Delete(ctx, "wback", "b"); err != nil {
		t.Fatal(err)
	}
	var keys []string
	after := ""
	for i := 0; i < 10; i++ {
		res, err := tr.List(ctx, "wback", object.ListOptions{StartAfter: after, MaxKeys: 2})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range res.Objects {
			keys = append(keys, o.Key)
		}
		if !res.IsTruncated {
			break
		}
		after = res.NextMarker
	}
	if got := strings.Join(keys, ","); got != "a,bb,c,d,dir/x,dir/y,new/z" {
		t.Errorf("paged merged listing: %s", got)
	}
	res, err := tr.List(ctx, "wback", object.ListOptions{Delimiter: "/"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(res.CommonPrefixes, ","); got != "dir/,new/" || len(res.Objects) != 4 {
		t.Errorf("delimited merged listing: %v %v", res.Objects, res.CommonPrefixes)
	}
}

// A GET racing a write-back PUT of the same key must never let an older
// remote version overwrite the acknowledged write.
func TestReadDuringWriteKeepsNewest(t *testing.T) {
	e := newEnv(t, "fs")
	gate := make(chan struct{})
	defer close(gate)
	e.be.set(func(c *ctl) { c.gate = gate; c.slow = time.Millisecond })
	tr := e.newTier(t, tier.Config{}, wbBucket)
	ctx := context.Background()
	old := backendtest.Body(10, 1<<20)
	remotePut(t, e.raw, "k", old)
	newer := backendtest.Body(11, 1<<20)
	pr, pw := io.Pipe()
	putDone := make(chan error, 1)
	go func() {
		_, err := tr.Put(ctx, "wback", "k", pr, putOpts(len(newer)))
		putDone <- err
	}()
	// The PUT is in progress (half its body sent) when GETs arrive.
	if _, err := pw.Write(newer[:len(newer)/2]); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	got := make([][]byte, 4)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := tr.Get(ctx, "wback", "k", nil)
			if err == nil {
				got[i], err = io.ReadAll(r)
				r.Close()
			}
			if err != nil {
				t.Error(err)
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	if _, err := pw.Write(newer[len(newer)/2:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if err := <-putDone; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, g := range got {
		if !bytes.Equal(g, newer) {
			t.Errorf("reader %d did not get the acknowledged version (old: %v)", i, bytes.Equal(g, old))
		}
	}
	time.Sleep(100 * time.Millisecond) // let any stray fill finish
	r, err := e.local.Get(ctx, "wback", "k", nil)
	if data := readAll(t, r, err); !bytes.Equal(data, newer) {
		t.Fatal("an older remote version replaced the acknowledged write")
	}
	if info, _ := e.local.Stat(ctx, "wback", "k"); !info.Dirty {
		t.Error("the acknowledged write lost its dirty mark")
	}
}

// Compactions running while writes are journaled must not lose any record.
func TestJournalCompactionUnderLoad(t *testing.T) {
	e := newEnv(t, "fs")
	cfg := tier.Config{CompactBytes: 1, RetryBackoff: time.Hour}
	tr := e.newTier(t, cfg, wbBucket)
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 15; i++ {
				k := fmt.Sprintf("g%d/o%d", g, i)
				if g == 0 && i == 8 {
					e.be.set(func(c *ctl) { c.failPuts = true }) // from now on, everything stays pending
				}
				if _, err := tr.Put(ctx, "wback", k, bytesReader([]byte(k)), putOpts(len(k))); err != nil {
					t.Error(err)
				}
				if i%3 == 0 {
					if err := tr.Delete(ctx, "wback", k); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	eventually(t, "destagers idle", func() bool { return tr.Backlog().Running == 0 })
	before := tr.Backlog()
	if before.Objects == 0 {
		t.Fatal("nothing pending: the test did not exercise the journal")
	}
	tr.Close()
	tr2, err := tier.New(ctx, tier.Config{SpoolDir: e.dir + "/spool", JournalDir: e.dir + "/journal"}, e.local)
	if err != nil {
		t.Fatal(err)
	}
	defer tr2.Close()
	after := tr2.Backlog()
	if after.Objects != before.Objects || after.Bytes != before.Bytes {
		t.Errorf("backlog before restart %d objects %d bytes, after %d objects %d bytes",
			before.Objects, before.Bytes, after.Objects, after.Bytes)
	}
}

// TestAdoptMultipartResult: a write-back bucket's completed upload,
// committed behind the tier's back, is adopted dirty and destaged.
func TestAdoptMultipartResult(t *testing.T) {
	e := newEnv(t, "fs")
	tr := e.newTier(t, tier.Config{}, wbBucket)
	ctx := context.Background()
	body := []byte("assembled from parts")
	if _, err := e.local.Put(ctx, "wback", "mp", bytesReader(body), storePut(len(body))); err != nil {
		t.Fatal(err)
	}
	info, err := tr.Adopt(ctx, "wback", "mp")
	if err != nil || !info.Dirty {
		t.Fatalf("write-back adopt: %+v, %v", info, err)
	}
	if err := tr.WaitDestaged(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(e.remoteFile("mp")); err != nil || !bytes.Equal(got, body) {
		t.Errorf("backend has %q (%v)", got, err)
	}
}

// TestCompleteThrough: a cache bucket's multipart completion is written
// through before it is committed. While the backend receives the object,
// readers get the previous version; when the backend fails, the
// completion fails, nothing changes, and the upload stays, so the client
// completes it again once the backend is back.
func TestCompleteThrough(t *testing.T) {
	kinds(t, func(t *testing.T, kind string) {
		e := newEnv(t, kind)
		tr := e.newTier(t, tier.Config{}, cacheBucket)
		ctx := context.Background()
		v0 := []byte("version zero")
		if _, err := tr.Put(ctx, "data", "mp", bytesReader(v0), putOpts(len(v0))); err != nil {
			t.Fatal(err)
		}
		id, err := e.local.CreateUpload(ctx, "data", "mp", store.UploadOptions{PutOptions: putOpts(-1)})
		if err != nil {
			t.Fatal(err)
		}
		body := bytes.Repeat([]byte("part one "), 40000)
		p, err := e.local.PutPart(ctx, "data", "mp", id, 1, bytesReader(body), putOpts(len(body)))
		if err != nil {
			t.Fatal(err)
		}
		complete := func() (object.Info, error) {
			return tr.CompleteThrough(ctx, "data", "mp", func(o store.CompleteOptions) (object.Info, error) {
				return e.local.CompleteUploadWith(ctx, "data", "mp", id, []object.CompletePart{{PartNumber: 1, ETag: p.ETag}}, o)
			})
		}

		gate := make(chan struct{})
		e.be.set(func(c *ctl) { c.gate = gate })
		puts := e.be.puts.Load()
		done := make(chan error, 1)
		go func() { _, err := complete(); done <- err }()
		eventually(t, "the completion's upload to start", func() bool { return e.be.puts.Load() > puts })
		for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if info, err := e.local.Stat(ctx, "data", "mp"); err != nil || info.Size != int64(len(v0)) {
				t.Fatalf("local copy during the completion's write-through: %+v, %v; want the previous version", info, err)
			}
		}
		e.be.set(func(c *ctl) { c.failPuts = true; c.gate = nil })
		close(gate)
		if err := <-done; !errors.Is(err, errInjected) {
			t.Fatalf("completion with a failing backend: %v", err)
		}
		if ups, err := e.local.ListUploads(ctx, "data", ""); err != nil || len(ups) != 1 {
			t.Fatalf("uploads after the failed completion: %v, %v; want it kept", ups, err)
		}
		r, err := tr.Get(ctx, "data", "mp", nil)
		if got := readAll(t, r, err); !bytes.Equal(got, v0) {
			t.Fatalf("after the failed completion: %d bytes, want the previous version", len(got))
		}

		e.be.set(func(c *ctl) { c.failPuts = false })
		info, err := complete()
		if err != nil || info.BackendETag == "" || info.Dirty {
			t.Fatalf("completion again: %+v, %v", info, err)
		}
		a, err := e.raw.Stat(ctx, "mp")
		if err != nil || a.ETag != info.BackendETag || a.Size != int64(len(body)) {
			t.Fatalf("backend %+v (%v), local %+v", a, err, info)
		}
		gets := e.be.fullGets.Load()
		r, err = tr.Get(ctx, "data", "mp", nil)
		if got := readAll(t, r, err); !bytes.Equal(got, body) || e.be.fullGets.Load() != gets {
			t.Fatal("the completed object is not served warm")
		}
	})
}
