package volume

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// viewRep is one volume's view of a shared memRep: down makes the replica
// unreachable from that volume only (a partition), and Fence honours its
// context as the network Client does.
type viewRep struct {
	*memRep
	down atomic.Bool
}

func (r *viewRep) ReadAt(ctx context.Context, vol string, c int64, p []byte, off int64) error {
	if r.down.Load() {
		return errMemDown
	}
	return r.memRep.ReadAt(ctx, vol, c, p, off)
}

func (r *viewRep) WriteAt(ctx context.Context, vol string, e uint64, c int64, p []byte, off int64, sync bool) error {
	if r.down.Load() {
		return errMemDown
	}
	return r.memRep.WriteAt(ctx, vol, e, c, p, off, sync)
}

func (r *viewRep) Zero(ctx context.Context, vol string, e uint64, c int64, off, n int64, punch bool) error {
	if r.down.Load() {
		return errMemDown
	}
	return r.memRep.Zero(ctx, vol, e, c, off, n, punch)
}

func (r *viewRep) Sync(ctx context.Context, vol string, cs []int64) error {
	if r.down.Load() {
		return errMemDown
	}
	return r.memRep.Sync(ctx, vol, cs)
}

func (r *viewRep) Fence(ctx context.Context, vol string, e uint64) error {
	if r.down.Load() {
		return errMemDown
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return r.memRep.Fence(ctx, vol, e)
}

func (r *viewRep) Ping(ctx context.Context) error {
	if r.down.Load() {
		return errMemDown
	}
	return r.memRep.Ping(ctx)
}

// views returns a fresh view of every shared replica.
func views(reps map[string]*memRep) map[string]*viewRep {
	out := map[string]*viewRep{}
	for id, r := range reps {
		out[id] = &viewRep{memRep: r}
	}
	return out
}

// fsmMarks is the node's StaleMarks over the cluster map's rules: marks per
// mirror and writer, and a covered clear that skips this node and the
// volume's current writer (staleMarks.ClearCovered and the FSM's check).
type fsmMarks struct {
	*memMarks
	claims *memClaims
	self   string
}

func (m fsmMarks) SetStale(_ context.Context, mirror string, stale bool) error {
	m.set(mirror, m.self, stale)
	return nil
}

func (m fsmMarks) ClearCovered(_ context.Context, mirror string, writers []string, epoch uint64) error {
	cur, curEpoch := m.claims.get()
	for _, w := range writers {
		if w == m.self || w == cur || epoch != curEpoch {
			continue
		}
		m.set(mirror, w, false)
	}
	return nil
}

// openView opens a volume on self over views of the shared replicas.
func openView(t *testing.T, self string, size int64, nodes []string, vs map[string]*viewRep, mk StaleMarks, claims *memClaims, stale map[string][]string) *Volume {
	t.Helper()
	r := map[string]Replica{}
	for id, v := range vs {
		r[id] = v
	}
	cfg := Config{
		Spec:  Spec{Name: "vol", Size: size, ChunkSize: memCS, Copies: len(nodes), ID: "1"},
		Nodes: nodes, Self: self, Replicas: r, StateDir: t.TempDir(),
		OpTimeout: 50 * time.Millisecond, ProbeInterval: 10 * time.Millisecond, Marks: mk,
		Claims: claims.as(self), Stale: stale,
	}
	cfg.Writer, cfg.Epoch = claims.get()
	return openMemConfig(t, cfg)
}

func rawChunk(t *testing.T, r *memRep, c int64) []byte {
	t.Helper()
	b := make([]byte, memCS)
	if err := r.ReadAt(context.Background(), "vol@1", c, b, 0); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFencedWriteMarksMirrorsThatTookIt: b claims the volume while
// mirror x is unreachable from b (so x is not fenced) and writes chunk 0
// to y only (acknowledged). a, which does not know yet, writes chunk 0: x
// takes it, y refuses it. a marks x, the mirror its refused write reached,
// not y, which holds b's acknowledged data. b dies and the client moves to
// node x: x sees its own copy marked, copies chunk 0 from y, and reads b's
// write.
func TestFencedWriteMarksMirrorsThatTookIt(t *testing.T) {
	ctx := context.Background()
	nodes := []string{"x", "y"}
	reps := memReps(nodes...)
	claims := &memClaims{}
	marks := &memMarks{}
	const size = 2 * memCS

	a := openView(t, "a", size, nodes, views(reps), memMarksAs{marks, "a"}, claims, nil)
	if err := a.WriteAt(ctx, bytes.Repeat([]byte{1}, memCS), 0, false); err != nil {
		t.Fatal(err)
	}

	vb := views(reps)
	vb["x"].down.Store(true) // b cannot reach x
	b := openView(t, "b", size, nodes, vb, memMarksAs{marks, "b"}, claims, marks.list())
	acked := bytes.Repeat([]byte{2}, memCS)
	if err := b.WriteAt(ctx, acked, 0, false); err != nil {
		t.Fatalf("b's write: %v", err)
	}

	late := bytes.Repeat([]byte{3}, memCS)
	if err := a.WriteAt(ctx, late, 0, false); !errors.Is(err, ErrFenced) {
		t.Fatalf("a's late write: %v, want ErrFenced", err)
	}
	t.Logf("after a's refused write: x=%d y=%d marks=%v", rawChunk(t, reps["x"], 0)[0], rawChunk(t, reps["y"], 0)[0], marks.list())
	b.Close() // b dies

	// The client moves to node x, which is a mirror itself.
	c := openView(t, "x", size, nodes, views(reps), memMarksAs{marks, "x"}, claims, marks.list())
	_ = c.WriteAt(ctx, bytes.Repeat([]byte{4}, memCS), memCS, false) // claims it; the chunk may have no mirror yet
	waitUntil(t, "x's resync", func() bool { s := c.StaleChunks(); return s["x"] == 0 && s["y"] == 0 })
	got := make([]byte, memCS)
	if err := c.ReadAt(ctx, got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, acked) {
		t.Errorf("chunk 0 reads %d... after the move, want b's acknowledged write (%d...); mirrors x=%d y=%d",
			got[0], acked[0], rawChunk(t, reps["x"], 0)[0], rawChunk(t, reps["y"], 0)[0])
	}
}

// TestCoveredClearNeedsTheSameClaim: b resynchronises y in full to cover
// a's mark; before b clears the mark, a claims the volume back and writes
// chunk 1 while y is unreachable from a (a's mark on y, already listed,
// stays as it is). b's clear, for a resync begun under an older claim, is
// not applied; b claims the volume again, resynchronises y in full anew
// and only then clears a's mark, so y gets a's acknowledged write of
// chunk 1.
func TestCoveredClearNeedsTheSameClaim(t *testing.T) {
	ctx := context.Background()
	nodes := []string{"x", "y"}
	reps := memReps(nodes...)
	claims := &memClaims{}
	marks := &memMarks{}
	const size = 4 * memCS

	va := views(reps)
	va["y"].down.Store(true) // a cannot reach y
	a := openView(t, "a", size, nodes, va, fsmMarks{marks, claims, "a"}, claims, nil)
	if err := a.WriteAt(ctx, bytes.Repeat([]byte{1}, memCS), 0, false); err != nil {
		t.Fatal(err)
	}
	if !marks.isStale("y") {
		t.Fatal("y not marked by a")
	}

	// b's resync of y pauses after it read chunk 2 from x (chunks 0 and 1
	// copied already).
	reached, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var armed atomic.Bool
	armed.Store(true)
	reps["x"].readHook = func(_ string, c int64) {
		if c == 2 && armed.Load() {
			once.Do(func() { close(reached); <-release })
		}
	}
	b := openView(t, "b", size, nodes, views(reps), fsmMarks{marks, claims, "b"}, claims, marks.list())
	if err := b.WriteAt(ctx, bytes.Repeat([]byte{2}, memCS), 3*memCS, false); err != nil {
		t.Fatalf("b's write: %v", err)
	}
	<-reached

	// a claims it back and writes chunk 1; y is unreachable from a.
	if err := a.WriteAt(ctx, bytes.Repeat([]byte{9}, memCS), memCS, false); !errors.Is(err, ErrFenced) {
		t.Fatalf("a's first write after b's claim: %v, want ErrFenced", err)
	}
	acked := bytes.Repeat([]byte{3}, memCS)
	if err := a.WriteAt(ctx, acked, memCS, false); err != nil {
		t.Fatalf("a's write after claiming back: %v", err)
	}
	armed.Store(false)
	close(release)
	waitUntil(t, "b's resync of y", func() bool { return b.StaleChunks()["y"] == 0 })
	b.NoteClaim(claims.get())

	// b claims it again (a is fenced off), resynchronises y in full anew,
	// and clears a's mark as covered.
	if err := b.WriteAt(ctx, bytes.Repeat([]byte{4}, memCS), 3*memCS, false); err != nil {
		t.Fatalf("b's write after claiming back: %v", err)
	}
	a.NoteClaim(claims.get())
	waitUntil(t, "b's covered clear", func() bool { return !marks.isStale("y") })
	a.NoteStale(marks.list())

	t.Logf("y chunk 1 = %d, x chunk 1 = %d; marks %v; stale on a %v, on b %v",
		rawChunk(t, reps["y"], 1)[0], rawChunk(t, reps["x"], 1)[0], marks.list(), a.StaleChunks(), b.StaleChunks())
	if !bytes.Equal(rawChunk(t, reps["y"], 1), acked) {
		t.Errorf("a's mark on y is cleared, but y misses a's acknowledged write of chunk 1")
	}
}

// TestClientGoneDuringClaim: the client of the first write goes away
// while the volume is being claimed. The claim is made, and announcing it
// to the mirrors is not cut short: no mirror is taken for failed, and the
// next write, from a live client, succeeds.
func TestClientGoneDuringClaim(t *testing.T) {
	nodes := []string{"x", "y"}
	reps := memReps(nodes...)
	claims := &memClaims{}
	vs := views(reps)
	r := map[string]Replica{}
	for id, v := range vs {
		r[id] = v
	}
	wctx, cancel := context.WithCancel(context.Background())
	cfg := Config{
		Spec:  Spec{Name: "vol", Size: 2 * memCS, ChunkSize: memCS, Copies: 2, ID: "1"},
		Nodes: nodes, Self: "a", Replicas: r, StateDir: t.TempDir(),
		OpTimeout: 2 * time.Second, ProbeInterval: 10 * time.Millisecond,
		Claims: cancelAfterClaim{claims.as("a"), cancel},
	}
	v := openMemConfig(t, cfg)
	if err := v.WriteAt(wctx, bytes.Repeat([]byte{1}, memCS), 0, false); err == nil {
		t.Fatal("cancelled write acknowledged")
	}
	if err := v.WriteAt(context.Background(), bytes.Repeat([]byte{2}, memCS), 0, false); err != nil {
		t.Errorf("write by a live client after a cancelled one: %v (down: %v)", err, v.Down())
	}
}

type cancelAfterClaim struct {
	Claims
	cancel func()
}

func (c cancelAfterClaim) Claim(ctx context.Context, from uint64) (uint64, error) {
	ep, err := c.Claims.Claim(ctx, from)
	c.cancel() // the NBD client disconnects now
	return ep, err
}

// TestEpochFailsClosed: a replica never admits a writer on an epoch
// older than one it took. A raise that one mountpath cannot save fails
// (that mountpath's older epoch could be the only one readable after a
// restart), and an epoch file that is there but cannot be read fails
// every mutation of the volume rather than fall back to the others.
func TestEpochFailsClosed(t *testing.T) {
	ctx := context.Background()
	mps := []string{filepath.Join(t.TempDir(), "mp0"), filepath.Join(t.TempDir(), "mp1")}
	l, err := NewLocal(LocalConfig{Mountpaths: mps, Buffered: true})
	if err != nil {
		t.Fatal(err)
	}
	const vol = "vol@1"
	if err := l.Fence(ctx, vol, 3); err != nil {
		t.Fatal(err)
	}
	// mp1 cannot take the next save.
	tmp1 := filepath.Join(l.dir(mps[1], vol), epochFile+".tmp")
	if err := os.Mkdir(tmp1, 0o755); err != nil {
		t.Fatal(err)
	}
	c := int64(0) // a chunk on mp1
	for !strings.HasPrefix(l.path(vol, c), mps[1]) {
		c++
	}
	p := bytes.Repeat([]byte{5}, 4096)
	for _, ep := range []uint64{5} {
		if err := l.Fence(ctx, vol, ep); err == nil {
			t.Errorf("fence %d saved on one mountpath of two: accepted", ep)
		}
		if err := l.WriteAt(ctx, vol, ep, c, p, 0, true); err == nil {
			t.Errorf("write at epoch %d, saved on one mountpath of two: accepted", ep)
		}
	}
	if err := l.WriteAt(ctx, vol, 3, c, p, 0, true); err != nil {
		t.Errorf("write at the saved epoch 3: %v", err)
	}
	if err := os.Remove(tmp1); err != nil {
		t.Fatal(err)
	}
	if err := l.Fence(ctx, vol, 5); err != nil {
		t.Fatalf("fence 5 once both mountpaths take it: %v", err)
	}
	l.Close()

	// After a restart mp0's epoch file cannot be read.
	p0 := filepath.Join(l.dir(mps[0], vol), epochFile)
	if err := os.Remove(p0); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(p0, 0o755); err != nil {
		t.Fatal(err)
	}
	l, err = NewLocal(LocalConfig{Mountpaths: mps, Buffered: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, ep := range []uint64{4, 5, 6} {
		if err := l.WriteAt(ctx, vol, ep, c, bytes.Repeat([]byte{byte(ep)}, 4096), 0, true); !errors.Is(err, ErrReplicaError) {
			t.Errorf("write at epoch %d with an unreadable epoch file: %v, want ErrReplicaError", ep, err)
		}
	}
	got := make([]byte, 4096)
	if err := l.ReadAt(ctx, vol, c, got, 0); err != nil || !bytes.Equal(got, p) {
		t.Errorf("chunk holds %d... (%v), want the epoch-3 write's %d...", got[0], err, p[0])
	}
}
