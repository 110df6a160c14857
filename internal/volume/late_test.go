package volume

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// lateRep is a memRep reached like a remote replica: a call whose context
// ends returns at once, while the request, already sent, is still applied
// by the node later (after delay, while set).
type lateRep struct {
	*memRep
	delay atomic.Int64 // ns
	// timeout: while delay is set, the call fails at once with ErrTimeout,
	// as the stream fails calls its peer does not answer in time.
	timeout atomic.Bool
	// drop: while delay is set, the write never lands.
	drop atomic.Bool
	// refuse, while set, fails writes at once, applying nothing (an
	// error answer, or a local drive that refuses the write).
	refuse atomic.Bool
	wg     sync.WaitGroup
}

var errRefused = errors.New("lateRep: write refused")

func (r *lateRep) WriteAt(ctx context.Context, vol string, epoch uint64, c int64, p []byte, off int64, sync bool) error {
	if r.refuse.Load() {
		return errRefused
	}
	d := time.Duration(r.delay.Load())
	if d == 0 {
		return r.memRep.WriteAt(ctx, vol, epoch, c, p, off, sync)
	}
	p = bytes.Clone(p)
	done := make(chan error, 1)
	drop := r.drop.Load()
	r.wg.Go(func() {
		time.Sleep(d)
		if drop {
			done <- ErrTimeout
			return
		}
		done <- r.memRep.WriteAt(context.Background(), vol, epoch, c, p, off, sync)
	})
	if r.timeout.Load() {
		return fmt.Errorf("%w: %w", ErrReplicaError, ErrTimeout)
	}
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

// TestFailedEverywhereWriteLandingLate: a write that no mirror takes is not
// acknowledged, but a mirror whose call timed out, or whose context ended,
// may still apply it; the other mirror refused it and kept the data before
// it. The late mirror is marked and, once the replica timeout has passed,
// resynchronised from the other, so the mirrors agree again and read back
// the same bytes through every node. When the write may land on both
// mirrors (and lands on one only), one is kept and the other resynchronised
// from it.
func TestFailedEverywhereWriteLandingLate(t *testing.T) {
	cases := []struct {
		name     string
		timeout  bool // the late call fails with ErrTimeout (else its context ends)
		bothLate bool // a's call may land too (it lands; b's is dropped)
	}{
		{name: "replica timeout, other refused", timeout: true},
		{name: "context ended, other refused"},
		{name: "replica timeout on both", timeout: true, bothLate: true},
		{name: "context ended on both", bothLate: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nodes := []string{"a", "b"}
			reps := memReps(nodes...)
			a, b := &lateRep{memRep: reps["a"]}, &lateRep{memRep: reps["b"]}
			t.Cleanup(a.wg.Wait)
			t.Cleanup(b.wg.Wait)
			cfg := memConfig("a", t.TempDir(), 4*memCS, nodes, reps, &memMarks{})
			cfg.Replicas["a"], cfg.Replicas["b"] = a, b
			cfg.OpTimeout = 400 * time.Millisecond // the longest a call takes to land
			v := openMemConfig(t, cfg)
			if err := v.WriteAt(context.Background(), []byte("one"), 0, false); err != nil {
				t.Fatal(err)
			}
			// Flushed: a mirror that comes back is not resynchronised for
			// writes it may have lost in a crash (markUnsynced).
			if err := v.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}

			late := []*lateRep{b}
			if tc.bothLate {
				late = append(late, a)
				b.drop.Store(true)
			} else {
				a.refuse.Store(true)
			}
			for _, r := range late {
				r.timeout.Store(tc.timeout)
				r.delay.Store(int64(100 * time.Millisecond))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			err := v.WriteAt(ctx, []byte("two"), 0, false)
			cancel()
			if err == nil {
				t.Fatal("a write no mirror took was acknowledged")
			}
			for _, r := range []*lateRep{a, b} {
				r.delay.Store(0)
				r.refuse.Store(false)
			}
			a.wg.Wait()
			b.wg.Wait() // what lands has landed by now
			waitUntil(t, "the mirrors in sync", func() bool { return len(v.StaleChunks()) == 0 && len(v.Down()) == 0 })
			ra, rb := rawChunk(t, reps["a"], 0), rawChunk(t, reps["b"], 0)
			if !bytes.Equal(ra, rb) {
				t.Fatalf("the mirrors differ after a write that failed everywhere: a %q, b %q", ra[:3], rb[:3])
			}
			if !tc.bothLate && string(ra[:3]) != "one" {
				t.Errorf("the mirrors hold %q, want %q: the one that refused the write was copied", ra[:3], "one")
			}
		})
	}
}

func TestMayLand(t *testing.T) {
	cases := []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("%w: %w", ErrReplicaError, ErrTimeout), true},
		{context.DeadlineExceeded, true},
		{fmt.Errorf("%w: %w", ErrReplicaError, context.Canceled), true},
		{fmt.Errorf("%w: %w", ErrReplicaError, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}), true},
		{fmt.Errorf("%w: %w", ErrReplicaError, io.ErrUnexpectedEOF), true},
		{fmt.Errorf("%w: node2", ErrReplicaRestarted), false},
		{fmt.Errorf("%w: %w", ErrReplicaError, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), false},
		{fmt.Errorf("%w: 500 Internal Server Error: input/output error", ErrReplicaError), false},
		{ErrNoSpace, false},
		{fmt.Errorf("write chunk: %w", syscall.EIO), false},
		{fmt.Errorf("%w: %w", ErrReplicaError, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.EHOSTUNREACH}), false},
		{errRefused, false},
	}
	for _, c := range cases {
		if got := mayLand(c.err); got != c.want {
			t.Errorf("mayLand(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
