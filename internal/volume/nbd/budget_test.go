package nbd_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/volume/nbd"
)

// gatedFlush is a memDevice whose Flush waits for gate to close.
type gatedFlush struct {
	*memDevice
	gate chan struct{}
}

func (g gatedFlush) Flush(ctx context.Context) error {
	<-g.gate
	return g.memDevice.Flush(ctx)
}

// TestFullSizeWriteBehindBusyWorkers: a WRITE whose payload takes the
// whole reply budget, read while every worker is busy, does not stop the
// busy requests from replying: the payload waits for a worker that can
// take it, and the replies of the requests before it still find room, so
// every request is answered.
func TestFullSizeWriteBehindBusyWorkers(t *testing.T) {
	const budget = 64 << 10
	dev := gatedFlush{newMem(1 << 20), make(chan struct{})}
	srv, err := nbd.NewServer(nbd.Config{
		Exports:       nbd.Map{"a": dev},
		MaxInFlight:   1,
		MaxReplyBytes: budget,
		MaxRequest:    budget,
		CloseTimeout:  time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(context.Background(), ln)
	t.Cleanup(func() {
		// A deadlocked connection would keep Close waiting for ever.
		closed := make(chan struct{})
		go func() { srv.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			t.Error("the server did not close: a request of the connection never finished")
		}
	})
	addr := ln.Addr().String()
	r := dialRaw(t, addr)
	r.goExport("a", false)
	reqs := nbd.AppendRequest(nil, nbd.Request{Type: nbd.CmdFlush, Cookie: 1})
	reqs = nbd.AppendRequest(reqs, nbd.Request{Type: nbd.CmdWrite, Cookie: 2, Length: budget})
	reqs = append(reqs, make([]byte, budget)...)
	r.write(reqs)
	time.Sleep(200 * time.Millisecond) // the server reads the WRITE while the FLUSH runs
	close(dev.gate)
	_ = r.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	seen := map[uint64]bool{}
	for range 2 {
		errno, cookie := r.simpleReply()
		if errno != 0 {
			t.Errorf("request %d: errno %d", cookie, errno)
		}
		seen[cookie] = true
	}
	if !seen[1] || !seen[2] {
		t.Errorf("replies for %v, want 1 and 2", seen)
	}
}
