package volume

import (
	"context"
	"errors"
	"testing"
	"time"
)

// noClearMarks records marks but cannot clear them (the cluster map
// lost its quorum after the mark was made): the mirror stays shared.
type noClearMarks struct{ memMarks }

func (m *noClearMarks) SetStale(ctx context.Context, mirror string, stale bool) error {
	if !stale {
		return errors.New("no quorum")
	}
	return m.memMarks.SetStale(ctx, mirror, stale)
}

// TestGrowWhileMirrorMarked: growing a volume while a mirror carries this
// node's stale mark (here b: resynchronised, but its mark could not be
// cleared, the map having lost its quorum) marks b's new chunks and wakes
// the resync loop. The owners table covers the new chunks before that
// (it used to be published after: the loop indexed the old table and the
// panic took the node down), and the new chunks are resynchronised once
// the size is published: b ends in sync, the old data and the new zeros
// read back.
func TestGrowWhileMirrorMarked(t *testing.T) {
	ctx := context.Background()
	nodes := []string{"a", "b"}
	reps := memReps(nodes...)
	cfg := memConfig("a", t.TempDir(), 4*memCS, nodes, reps, &noClearMarks{})
	v := openMemConfig(t, cfg)
	reps["b"].down.Store(true)
	if err := v.WriteAt(ctx, []byte("x"), 0, false); err != nil {
		t.Fatal(err)
	}
	reps["b"].down.Store(false)
	waitUntil(t, "b to be back and in sync", func() bool { return len(v.Down()) == 0 && len(v.StaleChunks()) == 0 })
	const size = 1 << 26 // 16 Ki chunks: the loop wakes while Grow is still at work
	if err := v.Grow(size); err != nil {
		t.Fatal(err)
	}
	// 16 Ki chunks to copy: under the race detector that takes seconds.
	waitUntilFor(t, time.Minute, "b's new chunks in sync", func() bool { return len(v.StaleChunks()) == 0 })
	reps["a"].down.Store(true) // read b's copy
	b := make([]byte, 1)
	for _, off := range []int64{0, size - 1} {
		if err := v.ReadAt(ctx, b, off); err != nil {
			t.Fatalf("read at %d from b: %v", off, err)
		}
		if want := map[int64]byte{0: 'x', size - 1: 0}[off]; b[0] != want {
			t.Errorf("byte %d on b is %q, want %q", off, b[0], want)
		}
	}
}
