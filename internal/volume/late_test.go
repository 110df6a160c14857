package volume

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// lateRep is a memRep reached like a remote replica: a call whose context
// ends returns at once, while the request, already sent, is still applied
// by the node later (after delay, while set).
type lateRep struct {
	*memRep
	delay atomic.Int64 // ns
	wg    sync.WaitGroup
}

func (r *lateRep) WriteAt(ctx context.Context, vol string, epoch uint64, c int64, p []byte, off int64, sync bool) error {
	d := time.Duration(r.delay.Load())
	if d == 0 {
		return r.memRep.WriteAt(ctx, vol, epoch, c, p, off, sync)
	}
	p = bytes.Clone(p)
	done := make(chan error, 1)
	r.wg.Go(func() {
		time.Sleep(d)
		done <- r.memRep.WriteAt(context.Background(), vol, epoch, c, p, off, sync)
	})
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestCancelledWriteLandingLate: a write whose context ends while a remote
// mirror is slow is not acknowledged; the slow mirror is marked stale, but
// the write it was sent may still land there. The mirror is resynchronised
// only once such a write has had the replica timeout to land, so that the
// copy is not overwritten by it after a later, acknowledged write: the
// mirrors end equal and the acknowledged write reads back from either.
func TestCancelledWriteLandingLate(t *testing.T) {
	nodes := []string{"a", "b"}
	reps := memReps(nodes...)
	b := &lateRep{memRep: reps["b"]}
	t.Cleanup(b.wg.Wait)
	cfg := memConfig("a", t.TempDir(), 4*memCS, nodes, reps, &memMarks{})
	cfg.Replicas["b"] = b
	cfg.OpTimeout = 400 * time.Millisecond // the longest a call to b takes
	v := openMemConfig(t, cfg)

	b.delay.Store(int64(150 * time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	err := v.WriteAt(ctx, []byte("one"), 0, false)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("write whose context ended: %v", err)
	}
	b.delay.Store(0)
	waitUntil(t, "b in sync", func() bool { return len(v.StaleChunks()) == 0 && len(v.Down()) == 0 })
	if err := v.WriteAt(context.Background(), []byte("two"), 0, false); err != nil {
		t.Fatal(err)
	}
	b.wg.Wait() // the cancelled write has landed on b by now
	if a, bb := rawChunk(t, reps["a"], 0), rawChunk(t, reps["b"], 0); !bytes.Equal(a, bb) {
		t.Errorf("mirrors differ after the late write: a %q, b %q", a[:3], bb[:3])
	}
	reps["a"].down.Store(true)
	p := make([]byte, 3)
	if err := v.ReadAt(context.Background(), p, 0); err != nil || string(p) != "two" {
		t.Errorf("from b: %q, %v; want the acknowledged %q", p, err, "two")
	}
}
