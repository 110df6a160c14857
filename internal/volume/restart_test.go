package volume

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"
)

// serveReplica serves rep over HTTP on addr ("127.0.0.1:0" for any port);
// it returns the address and a function that stops it like a crash
// (listener and every stream connection closed).
func serveReplica(t *testing.T, rep Replica, addr string) (string, func()) {
	t.Helper()
	var ln net.Listener
	var err error
	for range 50 {
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	h := NewHandler(rep)
	srv := &http.Server{Handler: h}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		srv.Close()
		h.Close()
		<-done
	}
	t.Cleanup(stop)
	return ln.Addr().String(), stop
}

// TestMirrorRestartBetweenCalls: a write lands on both mirrors (a local,
// b remote over the chunk stream), unsynced. b's node loses power and
// reboots (its volatile cache is gone) while no I/O goes to it, so no call
// fails: the stream connection breaks and the next call dials again. That
// call finds another boot ID and fails the mirror, so the Flush marks b
// stale instead of syncing its old copy, and the resync gives it the
// flushed write: after a is lost, b serves it.
func TestMirrorRestartBetweenCalls(t *testing.T) {
	ctx := context.Background()
	nodes := []string{"a", "b"}
	reps := memReps(nodes...)
	a, b := reps["a"], reps["b"]
	addr, stop := serveReplica(t, b, "127.0.0.1:0")
	cl, err := NewClientConfig(ClientConfig{BaseURL: "http://" + addr, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	cfg := memConfig("a", t.TempDir(), 4*memCS, nodes, reps, &memMarks{})
	cfg.Replicas["b"] = cl
	v := openMemConfig(t, cfg)

	if err := v.WriteAt(ctx, []byte("hello"), 0, false); err != nil {
		t.Fatal(err)
	}
	// b's node power-cycles: connections drop, unsynced data is gone.
	stop()
	b.crash()
	serveReplica(t, b, addr)
	time.Sleep(100 * time.Millisecond)

	if err := v.Flush(ctx); err != nil {
		t.Fatalf("Flush with a in sync: %v", err)
	}
	if len(v.Down()) == 0 && len(v.StaleChunks()) == 0 && !b.durableHas("vol@1", 0, []byte("hello"), 0) {
		t.Fatalf("Flush succeeded, b is neither down nor stale, but b does not hold the flushed write durably")
	}
	waitUntil(t, "b back and resynchronised", func() bool { return len(v.Down()) == 0 && len(v.StaleChunks()) == 0 })
	if !b.durableHas("vol@1", 0, []byte("hello"), 0) {
		t.Fatal("b resynchronised but does not hold the write durably")
	}
	a.down.Store(true) // a's drive dies
	p := make([]byte, 5)
	if err := v.ReadAt(ctx, p, 0); err == nil && string(p) != "hello" {
		t.Errorf("after a successful Flush and the loss of a, chunk 0 reads %q; want %q (or an error)", p, "hello")
	}
}
