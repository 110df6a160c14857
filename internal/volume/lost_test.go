package volume

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// swapRep is a node's replica as other nodes reach it: the Local behind
// it changes when the node restarts.
type swapRep struct{ p atomic.Pointer[Local] }

func (s *swapRep) l() *Local { return s.p.Load() }
func (s *swapRep) ReadAt(ctx context.Context, vol string, c int64, p []byte, off int64) error {
	return s.l().ReadAt(ctx, vol, c, p, off)
}
func (s *swapRep) WriteAt(ctx context.Context, vol string, ep uint64, c int64, p []byte, off int64, sync bool) error {
	return s.l().WriteAt(ctx, vol, ep, c, p, off, sync)
}
func (s *swapRep) Zero(ctx context.Context, vol string, ep uint64, c, off, n int64, punch bool) error {
	return s.l().Zero(ctx, vol, ep, c, off, n, punch)
}
func (s *swapRep) Fence(ctx context.Context, vol string, ep uint64) error {
	return s.l().Fence(ctx, vol, ep)
}
func (s *swapRep) Sync(ctx context.Context, vol string, cs []int64) error {
	return s.l().Sync(ctx, vol, cs)
}
func (s *swapRep) Delete(ctx context.Context, vol string) error { return s.l().Delete(ctx, vol) }
func (s *swapRep) Ping(ctx context.Context) error               { return s.l().Ping(ctx) }

// lostNode is a node's disks: a mountpath and a state directory.
type lostNode struct {
	mp, state string
	prior     func(string) bool
}

func (n lostNode) open(t *testing.T) *Local {
	t.Helper()
	l, err := NewLocal(LocalConfig{Mountpaths: []string{n.mp}, Buffered: true})
	if err != nil {
		t.Fatal(err)
	}
	l.SetState(n.state, n.prior)
	t.Cleanup(func() { l.Close() })
	return l
}

// wipe removes what dir holds, not dir itself (a new, empty drive).
func wipe(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
}

// lostSetup writes a pattern over a 2-copy volume on nodes a and b (each
// a Local) through a, then restarts b after damage(b) and opens the
// volume on b and on c (a node without chunks), every volume following
// the marks as a cluster map would; with hideOwn, b is never shown marks
// that list its own mark (its map's watcher skipped those versions). It
// returns the volumes a, b, c, b's new Local and the marks.
func lostSetup(t *testing.T, hideOwn bool, damage func(b lostNode) lostNode) (va, vb, vc *Volume, lb *Local, mk *memMarks, pattern []byte) {
	t.Helper()
	ctx := context.Background()
	na := lostNode{mp: t.TempDir(), state: t.TempDir()}
	nb := lostNode{mp: t.TempDir(), state: t.TempDir()}
	la := na.open(t)
	rb := &swapRep{}
	rb.p.Store(nb.open(t))
	nodes := []string{"a", "b"}
	mk = &memMarks{}
	claims := &memClaims{} // a writes first and holds the claim: only it resynchronises
	cfg := func(self string, reps map[string]Replica) Config {
		w, e := claims.get()
		c := Config{
			Claims: claims.as(self), Writer: w, Epoch: e,
			Spec:  Spec{Name: "vol", Size: 8 * memCS, ChunkSize: memCS, Copies: 2, ID: "1"},
			Nodes: nodes, Self: self, Replicas: reps, StateDir: filepath.Join(map[string]string{"a": na.state, "b": nb.state, "c": t.TempDir()}[self], "vol@1"),
			OpTimeout: 50 * time.Millisecond, ProbeInterval: 10 * time.Millisecond, Marks: memMarksAs{mk, self},
			Stale: mk.list(), MapVersion: mk.version,
		}
		return c
	}
	va = openMemConfig(t, cfg("a", map[string]Replica{"a": la, "b": rb}))
	pattern = bytes.Repeat([]byte{0x33}, 8*memCS)
	if err := va.WriteAt(ctx, pattern, 0, false); err != nil {
		t.Fatal(err)
	}
	if err := va.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	// b stops, loses its chunks, and starts again.
	old := rb.l()
	rb.p.Store(nil)
	old.Close()
	nb = damage(nb)
	lb = nb.open(t)
	rb.p.Store(lb)

	vb = openMemConfig(t, cfg("b", map[string]Replica{"a": la, "b": lb}))
	vc = openMemConfig(t, cfg("c", map[string]Replica{"a": la, "b": rb}))
	// The cluster map: every volume sees the marks as they change.
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			m, ver := mk.listAt()
			for _, v := range []*Volume{va, vb, vc} {
				if v == vb && hideOwn && slices.Contains(m["b"], "b") {
					continue
				}
				v.NoteStaleAt(m, ver)
			}
		}
	}()
	return va, vb, vc, lb, mk, pattern
}

// checkLostRepaired reads the volume through every node until b is
// resynchronised: no read returns anything but the pattern (an error is
// allowed), and b ends up holding it again.
func checkLostRepaired(t *testing.T, va, vb, vc *Volume, lb *Local, mk *memMarks, pattern []byte) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for name, v := range map[string]*Volume{"a": va, "b": vb, "c": vc} {
			p := make([]byte, len(pattern))
			if err := v.ReadAt(ctx, p, 0); err == nil && !bytes.Equal(p, pattern) {
				t.Fatalf("read through %s: got something else than the pattern (b's lost chunks read as current)", name)
			}
		}
		lost, err := lb.Lost("vol@1")
		if err != nil {
			t.Fatal(err)
		}
		if !lost && !mk.isStale("b") && len(vb.StaleChunks()) == 0 && len(va.StaleChunks()) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b not resynchronised: lost %v, marks %v, stale on a %v, on b %v", lost, mk.list(), va.StaleChunks(), vb.StaleChunks())
		}
		time.Sleep(10 * time.Millisecond)
	}
	p := make([]byte, memCS)
	for c := range int64(8) {
		if err := lb.ReadAt(ctx, "vol@1", c, p, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(p, pattern[:memCS]) {
			t.Fatalf("b's chunk %d not resynchronised", c)
		}
	}
}

// TestLostMountpathIsResynced: b's drive is replaced (its mountpath comes
// back empty, its state directory survives). b must not be read as
// current through any node: it is marked stale for every chunk and
// resynchronised from a.
func TestLostMountpathIsResynced(t *testing.T) {
	va, vb, vc, lb, mk, pattern := lostSetup(t, false, func(b lostNode) lostNode {
		wipe(t, b.mp)
		return b
	})
	checkLostRepaired(t, va, vb, vc, lb, mk, pattern)
}

// TestLostNodeIsResynced: b is wiped whole (mountpath and state
// directory) and starts again under its ID; its chunks of a volume
// written before must not be read as current either.
func TestLostNodeIsResynced(t *testing.T) {
	va, vb, vc, lb, mk, pattern := lostSetup(t, false, func(b lostNode) lostNode {
		wipe(t, b.mp)
		wipe(t, b.state)
		b.prior = func(string) bool { return true } // the node's volumes say so (internal/node)
		return b
	})
	checkLostRepaired(t, va, vb, vc, lb, mk, pattern)
}

// TestLostRepairedUnseen: as TestLostMountpathIsResynced, but b never
// sees a map that lists its own mark (the map's watcher hands over only
// the latest map, and a's resync cleared the mark before b's watcher
// looked): b must still find its mirror repaired once a map at least as
// new as its mark shows the mark gone, or it would refuse its chunks for
// good.
func TestLostRepairedUnseen(t *testing.T) {
	va, vb, vc, lb, mk, pattern := lostSetup(t, true, func(b lostNode) lostNode {
		wipe(t, b.mp)
		return b
	})
	checkLostRepaired(t, va, vb, vc, lb, mk, pattern)
}

// TestLostStateDirKeepsChunks: only b's state directory is lost: its
// chunks are there and current, nothing is lost.
func TestLostStateDirKeepsChunks(t *testing.T) {
	ctx := context.Background()
	n := lostNode{mp: t.TempDir(), state: t.TempDir()}
	l := n.open(t)
	if err := l.WriteAt(ctx, "vol@1", 0, 0, []byte("data"), 0, true); err != nil {
		t.Fatal(err)
	}
	l.Close()
	wipe(t, n.state)
	n.prior = func(string) bool { return true }
	l = n.open(t)
	if lost, err := l.Lost("vol@1"); err != nil || lost {
		t.Fatalf("Lost = %v, %v after only the state directory went; want false", lost, err)
	}
	p := make([]byte, 4)
	if err := l.ReadAt(ctx, "vol@1", 0, p, 0); err != nil || string(p) != "data" {
		t.Fatalf("ReadAt = %q, %v", p, err)
	}
	// And a drive replaced afterwards is noticed.
	l.Close()
	wipe(t, n.mp)
	l = n.open(t)
	if lost, err := l.Lost("vol@1"); err != nil || !lost {
		t.Fatalf("Lost = %v, %v after the drive was replaced; want true", lost, err)
	}
	if err := l.ReadAt(ctx, "vol@1", 0, p, 0); err == nil {
		t.Fatal("ReadAt of lost chunks succeeded")
	}
}
