package volume

import (
	"context"
	"errors"
	"sync"
	"testing"
)

// TestGrowInPlace: a volume grown in place keeps its stale marks and
// unsynced writes (one Volume, one stale map), serves the new chunks while
// writes to the old ones go on, treats the new chunks of a mirror
// StaleMarks lists as stale, and brings that mirror fully in sync once it
// is back; the grown stale map survives a restart.
func TestGrowInPlace(t *testing.T) {
	ctx := context.Background()
	nodes := []string{"a", "b"}
	reps := memReps(nodes...)
	b := reps["b"]
	dir := t.TempDir()
	mk := &memMarks{}
	v := openMem(t, "b", dir, 4*memCS, nodes, reps, mk)
	if err := v.WriteAt(ctx, []byte("old!!"), 0, false); err != nil {
		t.Fatal(err)
	}
	b.down.Store(true)
	if err := v.WriteAt(ctx, []byte("new!!"), 0, false); err != nil { // b misses it
		t.Fatal(err)
	}
	var wg, first sync.WaitGroup
	stop := make(chan struct{})
	first.Add(4)
	for c := range int64(4) {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := v.WriteAt(ctx, []byte("w"), c*memCS+100, false); err != nil {
					t.Error(err)
					if i == 0 {
						first.Done()
					}
					return
				}
				if i == 0 {
					first.Done()
				}
			}
		})
	}
	first.Wait() // every old chunk written while b is down, then Grow while writes go on
	if err := v.Grow(2 * memCS); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("shrinking: %v, want ErrInvalidSpec", err)
	}
	if err := v.Grow(8*memCS + 100); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	if v.Size() != 8*memCS+100 || v.Spec().Size != 8*memCS+100 {
		t.Fatalf("size %d, spec size %d after Grow", v.Size(), v.Spec().Size)
	}
	if got := v.StaleChunks()["b"]; got != 4+5 {
		t.Errorf("b stale for %d chunks after Grow, want 9 (the 4 written while it was down and the 5 new ones)", got)
	}
	if err := v.WriteAt(ctx, []byte("far!!"), 8*memCS, false); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 5)
	for off, want := range map[int64]string{0: "new!!", 8 * memCS: "far!!"} {
		if err := v.ReadAt(ctx, p, off); err != nil || string(p) != want {
			t.Errorf("at %d read %q, %v; want %q", off, p, err, want)
		}
	}
	if err := v.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	b.down.Store(false)
	waitUntil(t, "b to be resynchronised", func() bool {
		return len(v.Down()) == 0 && len(v.StaleChunks()) == 0 && !mk.isStale("b")
	})
	reps["a"].down.Store(true)
	for off, want := range map[int64]string{0: "new!!", 8 * memCS: "far!!"} {
		if err := v.ReadAt(ctx, p, off); err != nil || string(p) != want {
			t.Errorf("from b at %d read %q, %v; want %q", off, p, err, want)
		}
	}
	reps["a"].down.Store(false)
	b.down.Store(true)
	if err := v.WriteAt(ctx, []byte("x"), 7*memCS, false); err != nil {
		t.Fatal(err)
	}
	v.Close()
	st, err := openStaleStore(dir, "vol@1", 9)
	if err != nil {
		t.Fatal(err)
	}
	if l := st.list("b"); len(l) != 1 || l[0] != 7 {
		t.Errorf("saved stale chunks of b: %v, want [7]", l)
	}
}
