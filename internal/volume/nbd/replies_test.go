package nbd_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/volume/nbd"
)

func serveCfg(t *testing.T, cfg nbd.Config) string {
	t.Helper()
	srv, err := nbd.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go srv.Serve(ctx, ln)
	t.Cleanup(func() { cancel(); srv.Close() })
	return ln.Addr().String()
}

// TestUnreadRepliesAreBounded: a client that sends READs and never reads
// the replies makes the server hold at most about MaxReplyBytes of
// replies (it stops reading requests instead), and once a reply write has
// waited ReplyTimeout the connection is dropped and its goroutines end.
func TestUnreadRepliesAreBounded(t *testing.T) {
	addr := serveCfg(t, nbd.Config{
		Exports:       nbd.Map{"a": newMem(64 << 20)},
		MaxInFlight:   2,
		MaxReplyBytes: 4 << 20,
		ReplyTimeout:  time.Second,
	})
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	goroutines := runtime.NumGoroutine()

	r := dialRaw(t, addr)
	r.goExport("a", false)
	const n, size = 256, 1 << 20
	var reqs []byte
	for i := range n {
		reqs = nbd.AppendRequest(reqs, nbd.Request{Type: nbd.CmdRead, Cookie: uint64(i), Offset: 0, Length: size})
	}
	r.write(reqs) // and never read the replies
	time.Sleep(500 * time.Millisecond)
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("heap grew by %d MiB for %d MiB of unread replies", grown>>20, n*size>>20)
	if grown > 32<<20 {
		t.Errorf("server holds %d MiB for a connection that does not read its replies", grown>>20)
	}

	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > goroutines {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before the connection:\n%s", runtime.NumGoroutine(), goroutines, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = r.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, r.c); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the connection stays open after the reply timeout")
	}
}

// TestRepliesLargerThanTheBound: reads larger than MaxReplyBytes, many at
// once, are all answered (one at a time) to a client that reads them.
func TestRepliesLargerThanTheBound(t *testing.T) {
	addr := serveCfg(t, nbd.Config{Exports: nbd.Map{"a": newMem(4 << 20)}, MaxReplyBytes: 64 << 10})
	for _, structured := range []bool{false, true} {
		r := dialRaw(t, addr)
		r.goExport("a", structured)
		const n, size = 64, 256 << 10
		var reqs []byte
		for i := range n {
			reqs = nbd.AppendRequest(reqs, nbd.Request{Type: nbd.CmdRead, Cookie: uint64(i), Offset: uint64(i) * 4096, Length: size})
		}
		go r.c.Write(reqs)
		seen := map[uint64]bool{}
		for range n {
			var cookie uint64
			if structured {
				_, _, cookie, _ = r.structuredReply()
			} else {
				var errno uint32
				errno, cookie = r.simpleReply()
				if errno != 0 {
					t.Fatalf("read %d: errno %d", cookie, errno)
				}
				r.read(size)
			}
			seen[cookie] = true
		}
		if len(seen) != n {
			t.Errorf("structured %v: %d distinct replies, want %d", structured, len(seen), n)
		}
	}
}
