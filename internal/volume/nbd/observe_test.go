package nbd_test

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/volume/nbd"
)

// TestObserve: Config.Observe hears of every request, once its reply is
// queued, with its command, length and the error value answered (a
// request over MaxRequest included, which the reader answers itself);
// Conns counts the connections.
func TestObserve(t *testing.T) {
	type seen struct {
		cmd    uint16
		length uint32
		errno  uint32
	}
	var mu sync.Mutex
	var got []seen
	srv, err := nbd.NewServer(nbd.Config{Exports: nbd.Map{"a": newMem(8192)}, MaxRequest: 4096,
		Observe: func(cmd uint16, length uint32, took time.Duration, errno uint32) {
			if took < 0 || took > time.Minute {
				t.Errorf("command %d took %v", cmd, took)
			}
			mu.Lock()
			defer mu.Unlock()
			got = append(got, seen{cmd, length, errno})
		}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); srv.Close(); <-done })

	r := dialRaw(t, ln.Addr().String())
	r.goExport("a", false)
	if n := srv.Conns(); n != 1 {
		t.Fatalf("Conns = %d, want 1", n)
	}
	reqs := []struct {
		req  nbd.Request
		data int // payload bytes sent
	}{
		{nbd.Request{Type: nbd.CmdWrite, Length: 4096}, 4096},
		{nbd.Request{Type: nbd.CmdRead, Length: 4096}, 0},
		{nbd.Request{Type: nbd.CmdRead, Offset: 8190, Length: 16}, 0}, // beyond the end
		{nbd.Request{Type: nbd.CmdWrite, Length: 8192}, 8192},         // over MaxRequest
		{nbd.Request{Type: nbd.CmdFlush}, 0},
	}
	want := []seen{{nbd.CmdWrite, 4096, 0}, {nbd.CmdRead, 4096, 0}, {nbd.CmdRead, 16, nbd.EINVAL}, {nbd.CmdWrite, 8192, nbd.EINVAL}, {nbd.CmdFlush, 0, 0}}
	for i, q := range reqs {
		q.req.Cookie = uint64(i + 1)
		r.write(append(nbd.AppendRequest(nil, q.req), make([]byte, q.data)...))
		errno, _ := r.simpleReply()
		if errno == 0 && q.req.Type == nbd.CmdRead {
			r.read(int(q.req.Length))
		}
		if errno != want[i].errno {
			t.Fatalf("request %d: errno %d, want %d", i, errno, want[i].errno)
		}
	}
	// The reply can reach the client before Observe has run.
	for range 500 {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == len(want) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	// Workers may report in another order than the replies went out.
	order := func(a, b seen) int {
		return int(a.cmd)<<40 + int(a.length)<<8 + int(a.errno) - (int(b.cmd)<<40 + int(b.length)<<8 + int(b.errno))
	}
	slices.SortFunc(got, order)
	slices.SortFunc(want, order)
	if !slices.Equal(got, want) {
		t.Fatalf("observed %v, want %v", got, want)
	}
}
