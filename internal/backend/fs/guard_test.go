package fs

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slipstream-io/slipstream/internal/backend"
	"github.com/slipstream-io/slipstream/internal/object"
)

// newStallable is a backend whose calls give up after 200 ms, and a
// function that makes key a FIFO: opening it for reading blocks in the
// kernel until a writer opens it, as an open on a hard NFS mount blocks
// while the server is away. The returned release opens the writer.
func newStallable(t *testing.T) (*Backend, func(key string) (release func())) {
	t.Helper()
	dir := t.TempDir()
	b, err := New(backend.Spec{Kind: "fs", Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	b.g.timeout = 200 * time.Millisecond
	return b, func(key string) func() {
		p := filepath.Join(dir, key)
		if err := unix.Mkfifo(p, 0o644); err != nil {
			t.Fatal(err)
		}
		released := false
		release := func() {
			if released {
				return
			}
			released = true
			// The blocked open is the reader this writer waits for.
			w, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				t.Errorf("open the FIFO's writer: %v", err)
				return
			}
			w.Close()
		}
		t.Cleanup(release)
		return release
	}
}

// within runs fn and fails the test if it has not returned in d: a call
// blocked in the kernel must not block its caller.
func within(t *testing.T, d time.Duration, what string, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("%s still blocked after %v", what, d)
		return nil
	}
}

// settle runs a call the test does not mean to stall again while it fails
// with ErrStalled: on a loaded machine a real fsync can take longer than the
// short timeout of newStallable. Ten tries at most.
func settle[T any](fn func() (T, error)) (T, error) {
	for i := 1; ; i++ {
		v, err := fn()
		if !errors.Is(err, ErrStalled) || i == 10 {
			return v, err
		}
	}
}

func waitStuck(t *testing.T, b *Backend, want int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for b.Stuck() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls stuck, want %d", b.Stuck(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStalledCallReturns: a GET whose open blocks in the kernel returns a
// backend failure marked ErrStalled once the call timeout passes, or its
// context's error when the context ends first, instead of waiting for the
// file system. The abandoned call is counted until the file system
// answers, and what it opened then is closed.
func TestStalledCallReturns(t *testing.T) {
	b, fifo := newStallable(t)
	release := fifo("stalled")
	err := within(t, 5*time.Second, "GET of a stalled file", func() error {
		_, _, err := b.Get(context.Background(), "stalled", nil)
		return err
	})
	if !errors.Is(err, ErrStalled) || !errors.Is(err, object.ErrBackend) {
		t.Fatalf("GET of a stalled file: %v, want ErrStalled, an ErrBackend", err)
	}
	if b.Stuck() != 1 {
		t.Errorf("%d calls counted stuck, want 1", b.Stuck())
	}

	b.g.timeout = time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err = within(t, 5*time.Second, "GET of a stalled file with a context", func() error {
		_, _, err := b.Get(ctx, "stalled", nil)
		return err
	})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, object.ErrBackend) {
		t.Fatalf("GET whose context ended: %v, want the context's error alone", err)
	}
	release() // both blocked opens complete and are closed
	waitStuck(t, b, 0)

	// Other keys were served meanwhile, and are after.
	if _, err := settle(func() (backend.Attrs, error) {
		return b.Put(context.Background(), "ok", bytes.NewReader([]byte("fine")), 4, backend.PutAttrs{})
	}); err != nil {
		t.Fatal(err)
	}
	if a, err := settle(func() (backend.Attrs, error) { return b.Stat(context.Background(), "ok") }); err != nil || a.Size != 4 {
		t.Fatalf("Stat after the stall: %+v, %v", a, err)
	}
}

// TestStuckCallsAreBounded: once maxStuck calls are blocked in the kernel
// (each holds an OS thread), further calls fail at once with ErrStalled
// instead of starting another; they work again when the file system
// answers.
func TestStuckCallsAreBounded(t *testing.T) {
	b, fifo := newStallable(t)
	b.g.maxStuck = 2
	var releases []func()
	for _, k := range []string{"s1", "s2"} {
		releases = append(releases, fifo(k))
		if _, _, err := b.Get(context.Background(), k, nil); !errors.Is(err, ErrStalled) {
			t.Fatalf("GET %s: %v, want ErrStalled", k, err)
		}
	}
	start := time.Now()
	_, err := b.Stat(context.Background(), "anything")
	if !errors.Is(err, ErrStalled) || time.Since(start) > 100*time.Millisecond {
		t.Fatalf("Stat with %d calls stuck: %v after %v, want ErrStalled at once", b.Stuck(), err, time.Since(start))
	}
	for _, r := range releases {
		r()
	}
	waitStuck(t, b, 0)
	if _, err := settle(func() (backend.Attrs, error) { return b.Stat(context.Background(), "anything") }); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("Stat once the file system answers: %v, want not found", err)
	}
}

// blockingFile blocks its reads and writes until release is closed, then
// fills what it was given to read with 0xee.
type blockingFile struct{ release chan struct{} }

func (f blockingFile) ReadAt(p []byte, _ int64) (int, error) {
	<-f.release
	for i := range p {
		p[i] = 0xee
	}
	return len(p), nil
}

func (f blockingFile) Write(p []byte) (int, error) { <-f.release; return len(p), nil }

// TestAbandonedReadsAndWritesShareNoMemory: a read or write left blocked
// works on a buffer of the guard's, so a caller that gave up and reuses its
// buffer never sees it changed by the late call.
func TestAbandonedReadsAndWritesShareNoMemory(t *testing.T) {
	g := newGuard()
	g.timeout = 100 * time.Millisecond
	f := blockingFile{release: make(chan struct{})}
	p := bytes.Repeat([]byte{1}, 4096)
	n, err := g.readAt(context.Background(), "read k", f, p, 0)
	if n != 0 || !errors.Is(err, ErrStalled) {
		t.Fatalf("stalled read: %d, %v", n, err)
	}
	w := guardedWriter{context.Background(), g, "write k", f}
	if n, err := w.Write(p); n != 0 || !errors.Is(err, ErrStalled) {
		t.Fatalf("stalled write: %d, %v", n, err)
	}
	if g.stuck.Load() != 2 {
		t.Errorf("%d calls counted stuck, want 2", g.stuck.Load())
	}
	close(f.release)
	deadline := time.Now().Add(5 * time.Second)
	for g.stuck.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if g.stuck.Load() != 0 {
		t.Fatalf("%d calls still counted stuck after they returned", g.stuck.Load())
	}
	if !bytes.Equal(p, bytes.Repeat([]byte{1}, 4096)) {
		t.Fatal("the late read wrote into the caller's buffer")
	}
	// Reads larger than one guarded call are served in pieces.
	big := make([]byte, maxIO+10)
	if n, err := g.readAt(context.Background(), "read k", f, big, 0); err != nil || n != maxIO || big[0] != 0xee || big[maxIO] != 0 {
		t.Fatalf("read of %d bytes: %d, %v", len(big), n, err)
	}
}

// TestAbandonedCommitDoesNotLand: a Put whose commit stalls (its fsync
// blocks in the file system) returns ErrStalled; its caller then writes the
// key again (a destager moving on to the next write), which lands. When
// the stalled commit finally goes on, it must not put its older data over
// the newer write, and it leaves no temp file behind.
func TestAbandonedCommitDoesNotLand(t *testing.T) {
	b, _ := newStallable(t)
	gate := make(chan struct{})
	var first atomic.Bool
	b.beforeCommit = func(string) {
		if first.CompareAndSwap(false, true) {
			<-gate
		}
	}
	ctx := context.Background()
	_, err := within2(t, func() (backend.Attrs, error) {
		return b.Put(ctx, "k", bytes.NewReader([]byte("v1")), 2, backend.PutAttrs{})
	})
	if !errors.Is(err, ErrStalled) {
		t.Fatalf("Put whose commit stalls: %v, want ErrStalled", err)
	}
	if _, err := settle(func() (backend.Attrs, error) {
		return b.Put(ctx, "k", bytes.NewReader([]byte("v2")), 2, backend.PutAttrs{})
	}); err != nil {
		t.Fatal(err)
	}
	close(gate)
	waitStuck(t, b, 0)
	rc, _, err := b.Get(ctx, "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != "v2" {
		t.Fatalf("key holds %q after the stalled commit went on, want the later write %q", got, "v2")
	}
	tmps, err := os.ReadDir(filepath.Join(b.dir, reserved, "tmp"))
	if err != nil {
		t.Fatal(err)
	}
	if len(tmps) != 0 {
		t.Errorf("temp files left: %d", len(tmps))
	}
}

func within2[T any](t *testing.T, fn func() (T, error)) (T, error) {
	t.Helper()
	var v T
	err := within(t, 5*time.Second, "a stalled call", func() error {
		var err error
		v, err = fn()
		return err
	})
	return v, err
}

// TestAbandonedDeleteDoesNotLand: a Delete that waits too long for its key
// (another call on it is stuck in the file system) returns ErrStalled, and
// its caller may write the key again; once the key is free, the given-up
// Delete must not remove what is there.
func TestAbandonedDeleteDoesNotLand(t *testing.T) {
	b, _ := newStallable(t)
	ctx := context.Background()
	if _, err := settle(func() (backend.Attrs, error) {
		return b.Put(ctx, "k", bytes.NewReader([]byte("v1")), 2, backend.PutAttrs{})
	}); err != nil {
		t.Fatal(err)
	}
	rel, err := b.name("k")
	if err != nil {
		t.Fatal(err)
	}
	unlock := b.keys.Lock(rel) // a call stuck on the key
	err = within(t, 5*time.Second, "a Delete behind a stuck call", func() error { return b.Delete(ctx, "k") })
	if !errors.Is(err, ErrStalled) {
		unlock()
		t.Fatalf("Delete behind a stuck call: %v, want ErrStalled", err)
	}
	unlock()
	waitStuck(t, b, 0)
	if _, err := settle(func() (backend.Attrs, error) { return b.Stat(ctx, "k") }); err != nil {
		t.Fatalf("the given-up Delete landed: Stat %v", err)
	}
}
