package netx

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// A GET stuck on a path that dies (listener gone, connection silent) is
// aborted and retried on the other path within about ProbeInterval+FailAfter.
func TestStuckRequestFailsOverToOtherPath(t *testing.T) {
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	defer good.Close()
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skip(err)
	}
	stall := l.Addr().String()
	conns := make(chan net.Conn, 4)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		l.Close() // the path dies: new dials (probes) are refused
		_, _ = http.ReadRequest(bufio.NewReader(c))
		conns <- c // keep it open and silent
	}()
	defer func() {
		l.Close()
		select {
		case c := <-conns:
			c.Close()
		default:
		}
	}()
	tr := fastTransport(t, "")
	defer tr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequest(http.MethodGet, "/x", nil)
	start := time.Now()
	// pick starts at index 1: the stalled address first.
	resp, err := tr.Do(ctx, Peer{ID: "p", Addrs: []string{good.Listener.Addr().String(), stall}}, req)
	if err != nil {
		t.Fatalf("after %v: %v", time.Since(start), err)
	}
	resp.Body.Close()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("failover took %v", d)
	}
	t.Logf("failover in %v", time.Since(start))
}

// A pair taken out when its address dies comes back (is preferred again)
// soon after the address is reachable again.
func TestDeadPairComesBackWhenReachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.3:0")
	if err != nil {
		t.Skip(err)
	}
	addr := l.Addr().String()
	l.Close()
	tr := fastTransport(t, "")
	defer tr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequest(http.MethodGet, "/", nil)
	if _, err := tr.Do(ctx, Peer{ID: "p", Addrs: []string{addr}}, req); err == nil {
		t.Fatal("want an error from a closed address")
	}
	l, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skip(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Listener = l
	srv.Start()
	defer srv.Close()
	deadline := time.Now().Add(2 * time.Second)
	for {
		ps := tr.Pairs()
		if len(ps) == 1 && ps[0].State == StateUp {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pair still %v 2s after its address came back", ps[0].State)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// slowBody yields n chunks of 1 KiB, one every d: a steady, healthy upload.
type slowBody struct {
	n int
	d time.Duration
}

func (b *slowBody) Read(p []byte) (int, error) {
	if b.n == 0 {
		return 0, io.EOF
	}
	if b.n <= 130 { // the first 70 KiB at once (past the 64 KiB bufio buffer), then slowly
		time.Sleep(b.d)
	}
	b.n--
	k := copy(p, make([]byte, 1024))
	return k, nil
}

// A healthy upload longer than FailAfter (a large request body written by
// the HTTP transport through countConn.ReadFrom, bytes moving steadily)
// counts as progress chunk by chunk, so one failed probe on its pair (here
// a 503 from the health path) does not take it for a stall and abort it.
func TestSteadyUploadNotAbortedByFailedProbe(t *testing.T) {
	var sick atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			if sick.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			return
		}
		if r.URL.Path == "/reset" {
			c, _, _ := w.(http.Hijacker).Hijack()
			c.Close()
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer srv.Close()
	tr := fastTransport(t, "/healthz")
	defer tr.Close()
	peer := Peer{ID: "p", Addrs: []string{srv.Listener.Addr().String()}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		// 64 KiB go through the bufio buffer, the rest through ReadFrom.
		req, _ := http.NewRequest(http.MethodPost, "/up", io.MultiReader(&slowBody{n: 200, d: 10 * time.Millisecond}))
		req.ContentLength = 200 * 1024
		resp, err := tr.Do(ctx, peer, req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	time.Sleep(400 * time.Millisecond) // upload moving bytes every 10ms
	for i := 0; i < 3; i++ {
		for _, ps := range tr.Pairs() {
			t.Logf("mid-upload pair %s: sent=%d", ps.Remote, ps.BytesSent)
		}
		time.Sleep(100 * time.Millisecond)
	}
	sick.Store(true) // one bad health answer (e.g. a brief overload)
	time.Sleep(300 * time.Millisecond)
	sick.Store(false)
	for _, ps := range tr.Pairs() {
		t.Logf("after a failed probe: pair %s: state=%v sent=%d", ps.Remote, ps.State, ps.BytesSent)
	}
	if err := <-errc; err != nil {
		t.Fatalf("healthy upload aborted: %v", err)
	}
}

// One request whose connection the server drops (e.g. a handler panic)
// takes its pair out for new requests but does not abort the other
// requests in flight on it that are waiting for a slow answer: the pair is
// probed at once, and only a failed probe on a stalled pair aborts them.
func TestSiblingErrorDoesNotAbortQuietRequest(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/boom":
			time.Sleep(300 * time.Millisecond)
			c, _, _ := w.(http.Hijacker).Hijack()
			c.Close()
		case "/slow":
			time.Sleep(900 * time.Millisecond) // server-side work, no bytes moving
		}
	}))
	defer srv.Close()
	tr := fastTransport(t, "/healthz")
	defer tr.Close()
	peer := Peer{ID: "p", Addrs: []string{srv.Listener.Addr().String()}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, "/slow", nil) // not replayable
		resp, err := tr.Do(ctx, peer, req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	time.Sleep(100 * time.Millisecond)
	req, _ := http.NewRequest(http.MethodPost, "/boom", nil)
	_, berr := tr.Do(ctx, peer, req)
	t.Logf("/boom: %v", berr)
	if err := <-errc; err != nil {
		t.Fatalf("healthy /slow aborted by an unrelated failure on its pair (server and probe healthy): %v", err)
	}
}

// fastTransport is a Transport that takes a pair for stalled after 200 ms
// without progress and probes every 100 ms (at probePath, if not "").
func fastTransport(t *testing.T, probePath string) *Transport {
	t.Helper()
	tr, err := NewTransport(Config{FailAfter: 200 * time.Millisecond, ProbeInterval: 100 * time.Millisecond, ProbePath: probePath})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}
