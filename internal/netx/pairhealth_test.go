package netx

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// connStates records, on the server side, the state of every connection
// and which connections carried data requests (not probes).
type connStates struct {
	mu    sync.Mutex
	state map[string]http.ConnState
	data  map[string]bool
}

func newConnStates() *connStates {
	return &connStates{state: map[string]http.ConnState{}, data: map[string]bool{}}
}

func (c *connStates) hook(conn net.Conn, s http.ConnState) {
	c.mu.Lock()
	c.state[conn.RemoteAddr().String()] = s
	c.mu.Unlock()
}

func (c *connStates) markData(r *http.Request) {
	c.mu.Lock()
	c.data[r.RemoteAddr] = true
	c.mu.Unlock()
}

// dataConns returns the data connections seen so far and their states.
func (c *connStates) dataConns() map[string]http.ConnState {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := map[string]http.ConnState{}
	for a := range c.data {
		m[a] = c.state[a]
	}
	return m
}

// waitUntil polls cond every 10ms for at most limit.
func waitUntil(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// When a pair goes down (here: a request on it is reset by the server),
// its idle pooled connections are closed, not kept for later: the next
// request on the pair dials a fresh connection instead of reusing one
// from before the failure.
func TestPairDownClosesIdleConnections(t *testing.T) {
	cs := newConnStates()
	entered := make(chan struct{}, 2)
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			return
		}
		cs.markData(r)
		switch r.URL.Path {
		case "/hold":
			entered <- struct{}{}
			select {
			case <-release:
			case <-time.After(5 * time.Second):
			}
		case "/boom":
			c, _, _ := w.(http.Hijacker).Hijack()
			c.Close()
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	srv.Config.ConnState = cs.hook
	srv.Start()
	defer srv.Close()
	tr := fastTransport(t, "/healthz")
	defer tr.Close()
	peer := Peer{ID: "p", Addrs: []string{srv.Listener.Addr().String()}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Two requests at once leave two idle connections in the pool.
	errc := make(chan error, 2)
	for i := 0; i < 2; i++ {
		go func() {
			_, err := get(ctx, tr, peer, "/hold")
			errc <- err
		}()
	}
	for i := 0; i < 2; i++ {
		select {
		case <-entered:
		case <-time.After(3 * time.Second):
			t.Fatal("the two /hold requests did not both reach the server")
		}
	}
	close(release)
	for i := 0; i < 2; i++ {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	before := cs.dataConns()
	if len(before) != 2 {
		t.Fatalf("server saw data connections %v, want 2", before)
	}
	if !waitUntil(2*time.Second, func() bool {
		for a := range before {
			if cs.dataConns()[a] != http.StateIdle {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("connections not idle after their requests: %v", cs.dataConns())
	}

	// A non-replayable request reuses one of them and is reset: the pair
	// goes down.
	req, _ := http.NewRequest(http.MethodPost, "/boom", nil)
	if resp, err := tr.Do(ctx, peer, req); err == nil {
		resp.Body.Close()
		t.Fatal("/boom succeeded")
	}
	if st := tr.Pairs()[0].State; st != StateDown {
		t.Fatalf("pair %v after a reset, want down", st)
	}
	// The other, idle one is closed by the client.
	if !waitUntil(2*time.Second, func() bool {
		for a := range before {
			if s := cs.dataConns()[a]; s != http.StateClosed && s != http.StateHijacked {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("idle connections of the downed pair still open 2s later: %v", cs.dataConns())
	}
	// The next request on the pair (down, but the peer's only one) dials anew.
	if _, err := get(ctx, tr, peer, "/x"); err != nil {
		t.Fatal(err)
	}
	after := cs.dataConns()
	if len(after) != len(before)+1 {
		t.Errorf("data connections %v after one more request, want a new one besides %v", after, before)
	}
}

// A pair that went down comes back only after Config.RecoverAfter
// consecutive successful probes (default 2): while its health check
// alternates between success and failure (a flapping path) it stays out,
// and once it is steadily healthy it comes back. With RecoverAfter 1 a
// single good probe readmits it, so it flaps with the path.
func TestFlappingPairStaysDownUntilConsecutiveProbesPass(t *testing.T) {
	const (
		healthy = iota
		failing
		flapping
	)
	tests := []struct {
		name          string
		recoverAfter  int
		upWhileFlappy bool
	}{
		{"default two probes", 0, false},
		{"two probes", 2, false},
		{"one probe", 1, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var mode atomic.Int32
			var probes atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/healthz":
					n := probes.Add(1)
					switch mode.Load() {
					case failing:
						w.WriteHeader(http.StatusServiceUnavailable)
					case flapping:
						if n%2 == 0 {
							w.WriteHeader(http.StatusServiceUnavailable)
						}
					}
				case "/boom":
					c, _, _ := w.(http.Hijacker).Hijack()
					c.Close()
				}
			}))
			defer srv.Close()
			tr, err := NewTransport(Config{FailAfter: 200 * time.Millisecond, ProbeInterval: 100 * time.Millisecond,
				ProbePath: "/healthz", RecoverAfter: tc.recoverAfter})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			peer := Peer{ID: "p", Addrs: []string{srv.Listener.Addr().String()}}
			mode.Store(failing)
			req, _ := http.NewRequest(http.MethodPost, "/boom", nil)
			if resp, err := tr.Do(context.Background(), peer, req); err == nil {
				resp.Body.Close()
				t.Fatal("/boom succeeded")
			}
			if st := tr.Pairs()[0].State; st != StateDown {
				t.Fatalf("pair %v after a reset, want down", st)
			}

			mode.Store(flapping)
			from := probes.Load()
			sawUp := false
			for end := time.Now().Add(1200 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
				if tr.Pairs()[0].State == StateUp {
					sawUp = true
				}
			}
			n := probes.Load() - from
			t.Logf("%d probes while flapping; pair seen up: %v", n, sawUp)
			if n < 4 {
				t.Fatalf("only %d probes in 1.2s of flapping at a 100ms interval", n)
			}
			if sawUp != tc.upWhileFlappy {
				t.Errorf("pair seen up while its probes alternate: %v, want %v (RecoverAfter %d)", sawUp, tc.upWhileFlappy, tc.recoverAfter)
			}

			mode.Store(healthy)
			start := time.Now()
			if !waitUntil(2*time.Second, func() bool { return tr.Pairs()[0].State == StateUp }) {
				t.Fatalf("pair still down 2s after its probes became steadily healthy: %+v", tr.Pairs()[0])
			}
			t.Logf("back up %v after the path became healthy", time.Since(start))
		})
	}
}

// Stall detection is per request: one response that stops moving forever
// while a sibling request on the same pair keeps streaming is aborted with
// ErrPairDown once a probe of the pair fails, within about FailAfter plus a
// probe interval, although bytes keep moving on the pair; the streaming
// sibling (a healthy, slow, trickling response) is not aborted and
// completes. When the pair's probes succeed the stalled response cannot be
// told from a quiet request waiting for a slow server and is left to the
// caller's deadline (the safety property of
// TestSiblingErrorDoesNotAbortQuietRequest).
func TestStalledConnectionAbortedWhileSiblingStreams(t *testing.T) {
	const (
		chunks = 100 // 1 KiB every 20ms: the stream lasts ~2s
		tick   = 20 * time.Millisecond
	)
	tests := []struct {
		name        string
		probeFails  bool
		wantAborted bool
	}{
		{"probe fails", true, true},
		{"probe healthy", false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/healthz":
					if tc.probeFails {
						w.WriteHeader(http.StatusServiceUnavailable)
					}
				case "/stall": // headers and 1 KiB, then nothing, forever
					w.Header().Set("Content-Length", "1048576")
					_, _ = w.Write(make([]byte, 1024))
					w.(http.Flusher).Flush()
					select {
					case <-r.Context().Done():
					case <-done:
					}
				case "/stream":
					w.Header().Set("Content-Length", strconv.Itoa(chunks*1024))
					for i := 0; i < chunks; i++ {
						if _, err := w.Write(make([]byte, 1024)); err != nil {
							return
						}
						w.(http.Flusher).Flush()
						time.Sleep(tick)
					}
				}
			}))
			defer srv.Close()
			defer close(done)
			tr := fastTransport(t, "/healthz")
			defer tr.Close()
			peer := Peer{ID: "p", Addrs: []string{srv.Listener.Addr().String()}}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()

			type out struct {
				n   int64
				err error
				at  time.Duration
			}
			start := time.Now()
			fetch := func(ctx context.Context, path string) out {
				req, _ := http.NewRequest(http.MethodGet, path, nil)
				resp, err := tr.Do(ctx, peer, req)
				if err != nil {
					return out{err: err, at: time.Since(start)}
				}
				defer resp.Body.Close()
				n, err := io.Copy(io.Discard, resp.Body)
				return out{n: n, err: err, at: time.Since(start)}
			}
			streamc := make(chan out, 1)
			go func() { streamc <- fetch(ctx, "/stream") }()
			// Without an abort the caller gives up on the stalled one at 1.5s.
			sctx, scancel := context.WithTimeout(ctx, 1500*time.Millisecond)
			defer scancel()
			stalled := fetch(sctx, "/stall")
			stream := <-streamc
			t.Logf("stalled: %d bytes, %v after %v; stream: %d bytes, %v after %v",
				stalled.n, stalled.err, stalled.at, stream.n, stream.err, stream.at)

			if stream.err != nil || stream.n != chunks*1024 {
				t.Errorf("streaming sibling: %d bytes, err %v; want all %d bytes", stream.n, stream.err, chunks*1024)
			}
			if tc.wantAborted {
				if !errors.Is(stalled.err, ErrPairDown) {
					t.Fatalf("stalled response: err %v after %v, want ErrPairDown", stalled.err, stalled.at)
				}
				if stalled.at > 1200*time.Millisecond || stalled.at >= stream.at {
					t.Errorf("stalled response aborted after %v (the sibling streamed until %v), want within 1.2s",
						stalled.at, stream.at)
				}
				return
			}
			if errors.Is(stalled.err, ErrPairDown) || !errors.Is(stalled.err, context.DeadlineExceeded) {
				t.Errorf("stalled response on a pair whose probes succeed: err %v after %v, want the caller's deadline",
					stalled.err, stalled.at)
			}
		})
	}
}
