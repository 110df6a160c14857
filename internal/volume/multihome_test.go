package volume_test

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/slipstream-io/slipstream/internal/volume"
)

// countingListener counts the bytes its connections receive.
type countingListener struct {
	net.Listener
	rx    atomic.Int64
	mu    sync.Mutex
	conns []net.Conn
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.conns = append(l.conns, c)
	l.mu.Unlock()
	return &countingConn{Conn: c, rx: &l.rx}, nil
}

// cut closes the listener and every connection it accepted (the
// interface went down).
func (l *countingListener) cut() {
	l.Listener.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		c.Close()
	}
}

type countingConn struct {
	net.Conn
	rx *atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.rx.Add(int64(n))
	return n, err
}

// TestStreamSpreadsOverAddresses: a node with two addresses (one handler
// on two listeners). The chunk client keeps a stream connection to each:
// small calls all go over the first, large ones are spread over both; when
// one address stops answering, calls go on through the other.
func TestStreamSpreadsOverAddresses(t *testing.T) {
	ctx := context.Background()
	l, _ := newLocal(t, 1)
	h := volume.NewHandler(l)
	t.Cleanup(func() { h.Close() })
	var lns []*countingListener
	var addrs []string
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		cl := &countingListener{Listener: ln}
		srv := &http.Server{Handler: h}
		go func() { _ = srv.Serve(cl) }()
		t.Cleanup(func() { srv.Close() })
		lns = append(lns, cl)
		addrs = append(addrs, ln.Addr().String())
	}
	c, err := volume.NewClientConfig(volume.ClientConfig{BaseURL: "http://" + addrs[0], Addrs: func() []string { return addrs }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })

	rx := func() [2]int64 { return [2]int64{lns[0].rx.Load(), lns[1].rx.Load()} }
	before := rx()
	small := bytes.Repeat([]byte{1}, 4096)
	for i := range 64 {
		if err := c.WriteAt(ctx, "mh", 0, 0, small, int64(i)*4096, false); err != nil {
			t.Fatal(err)
		}
	}
	after := rx()
	if d := after[1] - before[1]; d != 0 {
		t.Errorf("the second address received %d bytes of 4 KiB writes, want them all on the first", d)
	}
	big := bytes.Repeat([]byte{2}, 1<<20)
	before = after
	for i := range 16 {
		if err := c.WriteAt(ctx, "mh", 0, 1+int64(i%4), big, 0, false); err != nil {
			t.Fatal(err)
		}
	}
	after = rx()
	d0, d1 := after[0]-before[0], after[1]-before[1]
	t.Logf("1 MiB writes: %d bytes to the first address, %d to the second", d0, d1)
	if min(d0, d1) < 4<<20 {
		t.Errorf("1 MiB writes are not spread over both addresses: %d and %d bytes", d0, d1)
	}

	lns[0].cut()
	for i := range 8 { // the broken connections are found by the first calls
		err = c.WriteAt(ctx, "mh", 0, 1, big, 0, false)
		if err == nil {
			err = c.WriteAt(ctx, "mh", 0, 0, small, int64(i)*4096, false)
		}
		if err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("writes with the first address down: %v", err)
	}
	for i := range 8 {
		if err := c.WriteAt(ctx, "mh", 0, 1, big, 0, false); err != nil {
			t.Fatalf("1 MiB write %d with the first address down: %v", i, err)
		}
		if err := c.WriteAt(ctx, "mh", 0, 0, small, int64(i)*4096, false); err != nil {
			t.Fatalf("4 KiB write %d with the first address down: %v", i, err)
		}
	}
	got := make([]byte, 4096)
	if err := c.ReadAt(ctx, "mh", 0, got, 0); err != nil || !bytes.Equal(got, small) {
		t.Fatalf("read with the first address down: %v", err)
	}
}
