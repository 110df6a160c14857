package volume

import (
	"context"
	"slices"
	"testing"
	"time"
)

// gateMarks is a StaleMarks whose calls setting a mirror to the value in
// block wait for gate to close; entered is signalled when such a call
// starts. It keeps the last value set per mirror.
type gateMarks struct {
	memMarks
	block   bool
	entered chan struct{}
	gate    chan struct{}
}

func (m *gateMarks) SetStale(ctx context.Context, node string, stale bool) error {
	if stale == m.block {
		select {
		case m.entered <- struct{}{}:
		default:
		}
		select {
		case <-m.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return m.memMarks.SetStale(ctx, node, stale)
}

// TestWriteWaitsForMarkInProgress: a write that skips a mirror whose stale
// bit another write already set, but whose mark that write is still
// recording in StaleMarks, is not acknowledged before the mark is
// recorded.
func TestWriteWaitsForMarkInProgress(t *testing.T) {
	ctx := context.Background()
	nodes := []string{"a", "b"}
	reps := memReps(nodes...)
	mk := &gateMarks{block: true, entered: make(chan struct{}, 1), gate: make(chan struct{})}
	v := openMem(t, "a", t.TempDir(), 4*memCS, nodes, reps, mk)
	reps["b"].down.Store(true)
	w1 := make(chan error, 1)
	go func() { w1 <- v.WriteAt(ctx, []byte("one"), 0, false) }()
	<-mk.entered // w1 marked b stale for chunk 0 and is recording it
	w2 := make(chan error, 1)
	go func() { w2 <- v.WriteAt(ctx, []byte("two"), 10, false) }()
	select {
	case err := <-w2:
		t.Fatalf("second write to chunk 0 acknowledged (%v) before b's stale mark was recorded", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(mk.gate)
	for _, w := range []chan error{w1, w2} {
		select {
		case err := <-w:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("write did not return once the mark was recorded")
		}
	}
	if !mk.isStale("b") {
		t.Error("b is not marked stale in StaleMarks")
	}
}

// TestMarkDuringClearIsRecorded: a write that marks a mirror stale while
// the resync's call clearing the mirror's mark in StaleMarks is in flight
// is not acknowledged before StaleMarks says the mirror is stale again,
// and StaleMarks does not end up saying it is in sync.
func TestMarkDuringClearIsRecorded(t *testing.T) {
	ctx := context.Background()
	nodes := []string{"a", "b"}
	reps := memReps(nodes...)
	b := reps["b"]
	mk := &gateMarks{block: false, entered: make(chan struct{}, 1), gate: make(chan struct{})}
	v := openMem(t, "a", t.TempDir(), 4*memCS, nodes, reps, mk)
	b.down.Store(true)
	if err := v.WriteAt(ctx, []byte("one"), 0, false); err != nil {
		t.Fatal(err)
	}
	if !mk.isStale("b") {
		t.Fatal("b not marked stale in StaleMarks")
	}
	b.down.Store(false)
	<-mk.entered // b resynchronised; its mark is being cleared
	b.down.Store(true)
	w := make(chan error, 1)
	go func() { w <- v.WriteAt(ctx, []byte("two"), memCS, false) }() // chunk 1, b fails
	select {
	case err := <-w:
		t.Fatalf("write that made b stale acknowledged (%v) while StaleMarks was being told b is in sync", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(mk.gate)
	select {
	case err := <-w:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("write did not return")
	}
	if !mk.isStale("b") {
		t.Errorf("StaleMarks says b is in sync although it missed a write to chunk 1 (stale chunks %v)", v.StaleChunks())
	}
}

// TestWriteWaitsForMarkSaved: a write that skips a mirror whose stale bit
// another write set but has not saved yet is acknowledged only once the
// bit is in the saved stale map.
func TestWriteWaitsForMarkSaved(t *testing.T) {
	ctx := context.Background()
	nodes := []string{"a", "b"}
	reps := memReps(nodes...)
	dir := t.TempDir()
	v := openMem(t, "a", dir, 4*memCS, nodes, reps, &memMarks{})
	if err := v.WriteAt(ctx, []byte("one"), 0, false); err != nil { // v is the writer
		t.Fatal(err)
	}
	reps["b"].down.Store(true)
	v.stale.mark("b", 0) // another write's mark, its save still to come
	if err := v.WriteAt(ctx, []byte("two"), 10, false); err != nil {
		t.Fatal(err)
	}
	st, err := openStaleStore(dir, "vol@1", 4)
	if err != nil {
		t.Fatal(err)
	}
	if !st.isStale("b", 0) {
		t.Error("write acknowledged before b's stale mark for chunk 0 was saved")
	}
}

// openMemStale is openMem for two nodes a and b with StaleMarks mk and
// the mirrors it lists at Open.
func openMemStale(t *testing.T, self, dir string, reps map[string]*memRep, mk *memMarks) *Volume {
	t.Helper()
	cfg := memConfig(self, dir, 4*memCS, []string{"a", "b"}, reps, mk)
	cfg.Stale = mk.list()
	return openMemConfig(t, cfg)
}

// TestOwnOldMarksDoNotHideOtherWritersMarks: a node whose stale map holds
// old marks of its own for a mirror that StaleMarks lists cannot tell
// which chunks another writer left stale there since: it treats every
// chunk of the mirror as stale (does not read it, does not clear its mark
// after copying only the chunks it knows of), as it does without marks.
func TestOwnOldMarksDoNotHideOtherWritersMarks(t *testing.T) {
	ctx := context.Background()
	reps := memReps("a", "b")
	b := reps["b"]
	mk := &memMarks{}
	dirX, dirY := t.TempDir(), t.TempDir()

	// Node X writes chunk 0 while b is down, then the client moves.
	vx := openMemStale(t, "b", dirX, reps, mk)
	b.down.Store(true)
	if err := vx.WriteAt(ctx, []byte("x0"), 0, false); err != nil {
		t.Fatal(err)
	}
	vx.Close() // X's stale map: b:{0}; StaleMarks: b
	if !mk.isStale("b") {
		t.Fatal("b not marked in StaleMarks")
	}

	// Node Y writes chunk 1 (b still down) and dies before resynchronising b.
	vy := openMemStale(t, "a", dirY, reps, mk)
	if err := vy.WriteAt(ctx, []byte("y1"), memCS, false); err != nil {
		t.Fatal(err)
	}
	vy.Close()

	// The client returns to X; b is back.
	b.down.Store(false)
	vx2 := openMemStale(t, "b", dirX, reps, mk)
	time.Sleep(200 * time.Millisecond) // resync rounds
	p := make([]byte, 2)
	if err := vx2.ReadAt(ctx, p, memCS); err != nil || string(p) != "y1" {
		t.Errorf("X reads chunk 1 as %q, %v; want Y's write (b missed it)", p, err)
	}
	if !mk.isStale("b") {
		t.Error("X cleared b's mark in StaleMarks although b misses Y's write to chunk 1")
	}
	// Once X writes, it resynchronises b in full and clears the mark.
	if err := vx2.WriteAt(ctx, []byte("x2"), 2*memCS, false); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "b to be resynchronised", func() bool { return len(vx2.StaleChunks()) == 0 && !mk.isStale("b") })
	if err := b.ReadAt(ctx, "vol@1", 1, p, 0); err != nil || string(p) != "y1" {
		t.Errorf("b holds %q, %v for chunk 1 after the resync; want Y's write", p, err)
	}
}

// TestOtherWritersMarkSeenWhileOpen: node X keeps the volume open and has
// marks of its own on mirror b. Node Y writes a chunk b misses, and dies.
// X learns of Y's mark while open: it must not count b in sync once it has
// copied only its own chunks. It resynchronises b in full and then clears
// Y's mark too, but only once Y is not alive any more (a live writer may
// have missed more since, and clears its own mark).
func TestOtherWritersMarkSeenWhileOpen(t *testing.T) {
	ctx := context.Background()
	vx, reps, mk := writeMissedByB(t, "x0", 0)
	b := reps["b"]
	if got := mk.list()["b"]; !slices.Equal(got, []string{"a"}) {
		t.Fatalf("writers marking b: %v, want X (a)", got)
	}

	// Y (node c, holding no mirror) writes chunk 1 and dies.
	vy := openMemStale(t, "c", t.TempDir(), reps, mk)
	if err := vy.WriteAt(ctx, []byte("y1"), memCS, false); err != nil {
		t.Fatal(err)
	}
	vy.Close()
	if got := mk.list()["b"]; !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("writers marking b: %v, want X and Y (a, c)", got)
	}
	mk.setAlive("c", true) // c's node is still up for a while
	vx.NoteStale(mk.list())
	if got := vx.StaleChunks()["b"]; got != 4 {
		t.Fatalf("X's stale chunks of b once it saw Y's mark: %d, want all 4", got)
	}
	p := make([]byte, 2)
	if err := vx.ReadAt(ctx, p, memCS); err != nil || string(p) != "y1" {
		t.Fatalf("X reads chunk 1 as %q, %v; want Y's write", p, err)
	}

	b.down.Store(false)
	waitUntil(t, "b to be resynchronised in full", func() bool {
		return len(vx.StaleChunks()) == 0 && slices.Equal(mk.list()["b"], []string{"c"})
	})
	if err := b.ReadAt(ctx, "vol@1", 1, p, 0); err != nil || string(p) != "y1" {
		t.Errorf("b holds %q, %v for chunk 1 after the resync; want Y's write", p, err)
	}
	time.Sleep(100 * time.Millisecond) // resync rounds
	if !mk.isStale("b") {
		t.Fatal("X cleared the mark of Y, which is alive")
	}
	mk.setAlive("c", false) // c's node is declared down
	waitUntil(t, "Y's mark to be cleared", func() bool { return !mk.isStale("b") })
}

// TestOwnMarkFollowsTheMap: a mark of this node that another node cleared
// (it took this one for dead) is made again while this node still misses
// chunks; a mark of its own the map lists while it misses nothing (a
// clear lost to a map seen late) is cleared again.
func TestOwnMarkFollowsTheMap(t *testing.T) {
	v, reps, mk := writeMissedByB(t, "x0", 0)
	b := reps["b"]
	mk.set("b", "a", false) // another node clears a's mark
	v.NoteStale(mk.list())
	waitUntil(t, "a to mark b again", func() bool { return slices.Equal(mk.list()["b"], []string{"a"}) })

	b.down.Store(false)
	waitUntil(t, "b to be resynchronised", func() bool { return len(v.StaleChunks()) == 0 && !mk.isStale("b") })
	mk.set("b", "a", true) // a map from before the clear
	v.NoteStale(mk.list())
	waitUntil(t, "a's mark to be cleared again", func() bool { return !mk.isStale("b") })
}

// TestOwnMarkWithLostStaleMap: a node whose stale map was lost (a new
// state directory) but whose mark the map lists does not know which
// chunks the mirror missed: it reads none of them from it, resynchronises
// it in full and then clears its mark.
func TestOwnMarkWithLostStaleMap(t *testing.T) {
	ctx := context.Background()
	v, reps, mk := writeMissedByB(t, "x2", 2*memCS)
	b := reps["b"]
	v.Close()
	v2 := openMemStale(t, "a", t.TempDir(), reps, mk) // the stale map is gone
	if got := v2.StaleChunks()["b"]; got != 4 {
		t.Fatalf("stale chunks of b: %d, want all 4", got)
	}
	b.down.Store(false)
	waitUntil(t, "b to be resynchronised in full", func() bool { return len(v2.StaleChunks()) == 0 && !mk.isStale("b") })
	p := make([]byte, 2)
	if err := b.ReadAt(ctx, "vol@1", 2, p, 0); err != nil || string(p) != "x2" {
		t.Errorf("b holds %q, %v for chunk 2; want the write it missed", p, err)
	}
}

// writeMissedByB opens the volume on node a over mirrors a and b, takes b
// down and writes data at off through a: b misses it, and a marks b.
func writeMissedByB(t *testing.T, data string, off int64) (*Volume, map[string]*memRep, *memMarks) {
	t.Helper()
	reps := memReps("a", "b")
	mk := &memMarks{}
	v := openMemStale(t, "a", t.TempDir(), reps, mk)
	reps["b"].down.Store(true)
	if err := v.WriteAt(context.Background(), []byte(data), off, false); err != nil {
		t.Fatal(err)
	}
	return v, reps, mk
}
