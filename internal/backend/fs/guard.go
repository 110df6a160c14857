package fs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slipstream-io/slipstream/internal/object"
)

// ErrStalled marks a file system call that did not return in time: the
// directory is on a network file system whose server stopped answering (a
// hard NFS mount blocks such calls in the kernel for as long as the server
// is away). It is an object.ErrBackend, so callers retry later.
var ErrStalled = errors.New("file system call stalled")

// Defaults of the guard.
const (
	// defaultCallTimeout bounds one call into the file system: an open, a
	// read or write of at most maxIO bytes, an fsync, a directory walk. A
	// healthy local or network file system answers each in far less.
	defaultCallTimeout = time.Minute
	// defaultMaxStuck bounds the calls left blocked in the kernel: each
	// holds an OS thread until the file system answers. Beyond it calls
	// fail at once instead of starting another.
	defaultMaxStuck = 64
	// maxIO is the most one guarded read or write moves.
	maxIO = 1 << 20
)

// guard runs file system calls so that a caller stops waiting when its
// context ends or the call overruns the timeout, even when the call itself
// cannot be interrupted. An abandoned call goes on in its goroutine; what
// it returns once the file system answers is released by its drop
// function. Calls never share memory with an abandoned caller: reads and
// writes go through buffers of their own.
type guard struct {
	timeout  time.Duration
	maxStuck int64
	stuck    atomic.Int64
	bufs     sync.Pool // *[]byte of maxIO bytes
}

func newGuard() *guard {
	return &guard{timeout: defaultCallTimeout, maxStuck: defaultMaxStuck,
		bufs: sync.Pool{New: func() any { b := make([]byte, maxIO); return &b }}}
}

// Stuck is how many calls into the file system are blocked past their
// timeout or their caller's context.
func (b *Backend) Stuck() int64 { return b.g.stuck.Load() }

type result[T any] struct {
	v   T
	err error
}

// call runs fn for the operation op (as errors name it). If ctx ends or
// the timeout passes first, it returns at once: ctx's error, or an
// ErrStalled. drop (if not nil) then releases the value fn returns late.
func call[T any](ctx context.Context, g *guard, op string, fn func() (T, error), drop func(T)) (T, error) {
	var zero T
	if n := g.stuck.Load(); n >= g.maxStuck {
		return zero, fmt.Errorf("fs backend: %w: %s: %w (%d calls blocked in the file system)", object.ErrBackend, op, ErrStalled, n)
	}
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	done := make(chan result[T], 1)
	go func() {
		v, err := fn()
		done <- result[T]{v, err}
	}()
	timer := time.NewTimer(g.timeout)
	defer timer.Stop()
	var err error
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		err = ctx.Err()
	case <-timer.C:
		err = fmt.Errorf("fs backend: %w: %s: %w (no answer in %v)", object.ErrBackend, op, ErrStalled, g.timeout)
	}
	g.stuck.Add(1)
	go func() {
		r := <-done
		g.stuck.Add(-1)
		if r.err == nil && drop != nil {
			drop(r.v)
		}
	}()
	return zero, err
}

// do is call for fn without a result.
func (g *guard) do(ctx context.Context, op string, fn func() error) error {
	_, err := call(ctx, g, op, func() (struct{}, error) { return struct{}{}, fn() }, nil)
	return err
}

// readAt reads into p from r at off through a buffer of the guard's.
func (g *guard) readAt(ctx context.Context, op string, r io.ReaderAt, p []byte, off int64) (int, error) {
	p = p[:min(len(p), maxIO)]
	bp := g.bufs.Get().(*[]byte)
	buf := (*bp)[:len(p)]
	n, err := call(ctx, g, op, func() (int, error) { return r.ReadAt(buf, off) }, nil)
	if err != nil && abandoned(ctx, err) {
		return 0, err // buf may still be written: not returned to the pool
	}
	copy(p, buf[:n])
	g.bufs.Put(bp)
	return n, err
}

// guardedWriter writes to w through the guard, in pieces of at most maxIO bytes
// copied into a buffer of the guard's.
type guardedWriter struct {
	ctx context.Context
	g   *guard
	op  string
	w   io.Writer
}

func (gw guardedWriter) Write(p []byte) (int, error) {
	total := 0
	for len(p) > 0 {
		chunk := p[:min(len(p), maxIO)]
		bp := gw.g.bufs.Get().(*[]byte)
		buf := (*bp)[:len(chunk)]
		copy(buf, chunk)
		n, err := call(gw.ctx, gw.g, gw.op, func() (int, error) { return gw.w.Write(buf) }, nil)
		if err != nil {
			if !abandoned(gw.ctx, err) {
				gw.g.bufs.Put(bp)
			}
			return total + n, err
		}
		gw.g.bufs.Put(bp)
		total += n
		p = p[n:]
	}
	return total, nil
}

// abandoned reports whether err is call's own: the call was left running.
func abandoned(ctx context.Context, err error) bool {
	return errors.Is(err, ErrStalled) || ctx.Err() != nil && err == ctx.Err()
}
