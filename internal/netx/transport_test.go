package netx

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/testnet"
)

// testServer is one HTTP server on one loopback address, recording the
// source addresses it sees.
type testServer struct {
	t     *testing.T
	addr  string
	srv   *http.Server
	ln    *CountingListener
	hits  atomic.Int64
	mu    sync.Mutex
	from  map[string]int
	hosts map[string]int
	delay time.Duration
	sick  atomic.Bool // health answers 503 and data requests stall
}

func startServer(t *testing.T, addr string, delay time.Duration) *testServer {
	t.Helper()
	s := &testServer{t: t, from: map[string]int{}, hosts: map[string]int{}, delay: delay}
	s.start(addr)
	t.Cleanup(func() { s.srv.Close() })
	return s
}

func (s *testServer) start(addr string) {
	s.t.Helper()
	lns, err := Listen(context.Background(), []string{addr})
	if err != nil {
		s.t.Fatal(err)
	}
	s.ln = CountListener(lns[0])
	s.addr = s.ln.Addr().String()
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve)}
	go s.srv.Serve(s.ln)
}

func (s *testServer) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/healthz" {
		if s.sick.Load() {
			time.Sleep(3 * time.Second)
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		return
	}
	s.hits.Add(1)
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	s.mu.Lock()
	s.from[host]++
	s.hosts[r.Host]++
	s.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	if s.delay > 0 {
		time.Sleep(s.delay)
	}
	if r.URL.Path == "/hang" { // a process that took the request and stopped
		select {
		case <-r.Context().Done():
		case <-time.After(20 * time.Second):
		}
		return
	}
	if r.URL.Path == "/stall" {
		w.Header().Set("Content-Length", "2000000")
		w.Write(make([]byte, 1000))
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-time.After(20 * time.Second):
		}
		return
	}
	fmt.Fprintf(w, "%s %s %d", s.addr, r.Method, len(body))
}

func (s *testServer) sources() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := map[string]int{}
	for k, v := range s.from {
		m[k] = v
	}
	return m
}

func newTestTransport(t *testing.T, cfg Config) *Transport {
	t.Helper()
	if testing.Verbose() {
		cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	tr, err := NewTransport(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

func get(ctx context.Context, tr *Transport, peer Peer, path string) (string, error) {
	req, err := http.NewRequest(http.MethodGet, path, nil)
	if err != nil {
		return "", err
	}
	resp, err := tr.Do(ctx, peer, req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("status %d", resp.StatusCode)
	}
	return string(b), nil
}

func TestNewTransportConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"zero", Config{}, true},
		{"ips", Config{LocalAddrs: []string{"127.0.0.5", "127.0.0.6:9000"}}, true},
		{"hostname", Config{LocalAddrs: []string{"localhost"}}, false},
		{"twice", Config{LocalAddrs: []string{"127.0.0.5", "127.0.0.5:1"}}, false},
		{"scheme", Config{Scheme: "ftp"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := NewTransport(tc.cfg)
			if tc.ok != (err == nil) {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			if err == nil {
				tr.Close()
			} else if !errors.Is(err, ErrBadAddr) {
				t.Fatalf("err = %v, want ErrBadAddr", err)
			}
		})
	}
}

func TestReplayable(t *testing.T) {
	body := func() io.ReadCloser { return io.NopCloser(strings.NewReader("x")) }
	tests := []struct {
		method  string
		body    bool
		getBody bool
		key     bool
		want    bool
	}{
		{"GET", false, false, false, true},
		{"HEAD", false, false, false, true},
		{"DELETE", false, false, false, true},
		{"PUT", true, false, false, false},
		{"PUT", true, true, false, true},
		{"POST", false, false, false, false},
		{"POST", true, true, false, false},
		{"POST", true, true, true, true},
		{"POST", true, false, true, false},
	}
	for _, tc := range tests {
		req, _ := http.NewRequest(tc.method, "/x", nil)
		if tc.body {
			req.Body = body()
		}
		if tc.getBody {
			req.GetBody = func() (io.ReadCloser, error) { return body(), nil }
		}
		if tc.key {
			req.Header.Set("Idempotency-Key", "k1")
		}
		if got := Replayable(req); got != tc.want {
			t.Errorf("%s body=%v getBody=%v key=%v: %v, want %v", tc.method, tc.body, tc.getBody, tc.key, got, tc.want)
		}
	}
}

// TestSpreadOverPairs: two local addresses, a peer with three addresses;
// concurrent requests use every local and every remote address, about
// evenly, and the counters add up.
func TestSpreadOverPairs(t *testing.T) {
	var servers []*testServer
	var peer Peer
	for _, a := range []string{"127.0.0.2:0", "127.0.0.3:0", "127.0.0.4:0"} {
		s := startServer(t, a, 5*time.Millisecond)
		servers = append(servers, s)
		peer.Addrs = append(peer.Addrs, s.addr)
	}
	peer.ID = "n1"
	tr := newTestTransport(t, Config{LocalAddrs: []string{"127.0.0.5", "127.0.0.6"}, ProbePath: "/healthz"})
	const workers, each = 6, 40
	var wg sync.WaitGroup
	errc := make(chan error, workers*each)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if _, err := get(context.Background(), tr, peer, "/obj?i=1"); err != nil {
					errc <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	total := 0
	for _, s := range servers {
		n := int(s.hits.Load())
		total += n
		if n < workers*each/3/2 {
			t.Errorf("server %s got %d of %d requests", s.addr, n, workers*each)
		}
		src := s.sources()
		if src["127.0.0.5"] == 0 || src["127.0.0.6"] == 0 || len(src) != 2 {
			t.Errorf("server %s saw sources %v, want both 127.0.0.5 and 127.0.0.6 only", s.addr, src)
		}
		if s.ln.Stats().BytesSent == 0 {
			t.Errorf("server %s listener counted no bytes", s.addr)
		}
	}
	if total != workers*each {
		t.Errorf("servers got %d requests, want %d", total, workers*each)
	}
	st := tr.Stats()
	if len(st) != 2 {
		t.Fatalf("stats %+v", st)
	}
	var reqs uint64
	for _, s := range st {
		reqs += s.Requests
		if s.State != StateUp || s.PairsUp != 3 || s.BytesRecv == 0 || s.BytesSent == 0 || s.InFlight != 0 {
			t.Errorf("iface stats %+v", s)
		}
		if s.Requests < workers*each/2/2 {
			t.Errorf("interface %s carried %d of %d requests", s.Local, s.Requests, workers*each)
		}
	}
	if reqs != workers*each {
		t.Errorf("interfaces counted %d requests, want %d", reqs, workers*each)
	}
}

// TestSubnetAffinity: a remote address inside a local interface's subnet
// is reached only from that interface.
func TestSubnetAffinity(t *testing.T) {
	tr := newTestTransport(t, Config{LocalAddrs: []string{"127.0.0.5", "127.0.0.6"}})
	_, ten, _ := net.ParseCIDR("10.0.0.0/8")
	tr.locals[1].subnet = ten
	ps, err := tr.pairsFor([]string{"127.0.0.2:1", "10.1.2.3:1", "[2001:db8::1]:1"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range ps {
		got = append(got, p.key)
	}
	want := "127.0.0.5|127.0.0.2:1 127.0.0.6|10.1.2.3:1 127.0.0.5|[2001:db8::1]:1 127.0.0.6|[2001:db8::1]:1"
	if strings.Join(got, " ") != want {
		t.Errorf("pairs %q\nwant   %q", strings.Join(got, " "), want)
	}
}

// TestFailoverAndReadmit: one of a peer's two addresses dies under load
// (its server closes listener and connections): every request still
// succeeds, the pairs to that address go down within about a second, and
// come back once the address serves again.
func TestFailoverAndReadmit(t *testing.T) {
	s1 := startServer(t, "127.0.0.2:0", time.Millisecond)
	s2 := startServer(t, "127.0.0.3:0", time.Millisecond)
	peer := Peer{ID: "n1", Addrs: []string{s1.addr, s2.addr}}
	tr := newTestTransport(t, Config{
		LocalAddrs: []string{"127.0.0.5", "127.0.0.6"}, ProbePath: "/healthz",
		ProbeInterval: 100 * time.Millisecond, FailAfter: 500 * time.Millisecond,
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5000 && ctx.Err() == nil; i++ {
				if _, err := get(ctx, tr, peer, "/obj"); err != nil {
					if ctx.Err() == nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err)
					}
				} else {
					ok.Add(1)
				}
			}
		}()
	}
	defer wg.Wait()
	defer cancel()
	waitFor := func(what string, limit time.Duration, cond func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		for !cond() {
			if time.Since(start) > limit {
				t.Fatalf("%s: not within %v; pairs %+v", what, limit, tr.Pairs())
			}
			time.Sleep(10 * time.Millisecond)
		}
		return time.Since(start)
	}
	pairState := func(remote string, want State) bool {
		n := 0
		for _, p := range tr.Pairs() {
			if p.Remote == remote && p.State == want {
				n++
			}
		}
		return n == 2
	}
	waitFor("load on both addresses", 5*time.Second, func() bool { return s1.hits.Load() > 20 && s2.hits.Load() > 20 })
	s2.srv.Close()
	d := waitFor("pairs to the dead address down", 3*time.Second, func() bool { return pairState(s2.addr, StateDown) })
	t.Logf("pairs down after %v", d)
	before := ok.Load()
	waitFor("progress while one address is dead", 5*time.Second, func() bool { return ok.Load() > before+200 })
	for _, p := range tr.Pairs() {
		if p.Remote == s1.addr && p.State != StateUp {
			t.Errorf("healthy pair down: %+v", p)
		}
	}
	hits2 := s2.hits.Load()
	s2.start(s2.addr) // the same address serves again
	t.Cleanup(func() { s2.srv.Close() })
	d = waitFor("pairs readmitted", 3*time.Second, func() bool { return pairState(s2.addr, StateUp) })
	t.Logf("pairs up again after %v", d)
	waitFor("traffic back on the readmitted address", 5*time.Second, func() bool { return s2.hits.Load() > hits2+20 })
	cancel()
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Errorf("%d client-visible errors (first: %v)", n, firstErr.Load())
	}
	var retries, errs uint64
	for _, s := range tr.Stats() {
		retries += s.Retries
		errs += s.Errors
	}
	t.Logf("ok %d, transport errors %d, retries %d", ok.Load(), errs, retries)
	if errs == 0 || retries == 0 {
		t.Errorf("no errors or retries recorded (errors %d retries %d)", errs, retries)
	}
}

// TestStallAborts: a response body stops moving and the address fails its
// probes: the pair is taken out and the read fails with ErrPairDown within
// about FailAfter plus a probe, not after a TCP timeout; also when the pair
// was already taken out by another request's failure.
func TestStallAborts(t *testing.T) {
	for _, alreadyDown := range []bool{false, true} {
		t.Run(fmt.Sprint("alreadyDown=", alreadyDown), func(t *testing.T) {
			s := startServer(t, "127.0.0.2:0", 0)
			peer := Peer{ID: "n1", Addrs: []string{s.addr}}
			tr := newTestTransport(t, Config{
				LocalAddrs: []string{"127.0.0.5"}, ProbePath: "/healthz",
				ProbeInterval: 100 * time.Millisecond, FailAfter: 300 * time.Millisecond,
			})
			req, _ := http.NewRequest(http.MethodGet, "/stall", nil)
			resp, err := tr.Do(context.Background(), peer, req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			s.sick.Store(true)
			if alreadyDown {
				tr.mu.Lock()
				var p *pair
				for _, p = range tr.pairs {
				}
				tr.mu.Unlock()
				tr.markDown(p, errors.New("another request failed"), false)
			}
			start := time.Now()
			_, err = io.Copy(io.Discard, resp.Body)
			el := time.Since(start)
			if !errors.Is(err, ErrPairDown) {
				t.Fatalf("read err = %v after %v, want ErrPairDown", err, el)
			}
			if el > 3*time.Second {
				t.Errorf("stall detected after %v", el)
			}
			t.Logf("stall detected after %v", el)
			if p := tr.Pairs()[0]; p.State != StateDown || p.InFlight != 0 {
				t.Errorf("pair %+v", p)
			}
		})
	}
}

// TestHungPeerNotRetriedOnDownPairs: a peer that hangs (its probes time
// out on every address) gets a request once: when that stalls, it fails,
// and is not sent again over each of the peer's other pairs, which are
// down too (the caller may have another node to ask).
func TestHungPeerNotRetriedOnDownPairs(t *testing.T) {
	s1, s2 := startServer(t, "127.0.0.2:0", 0), startServer(t, "127.0.0.3:0", 0)
	peer := Peer{ID: "n1", Addrs: []string{s1.addr, s2.addr}}
	tr := newTestTransport(t, Config{
		LocalAddrs: []string{"127.0.0.5"}, ProbePath: "/healthz",
		ProbeInterval: 100 * time.Millisecond, FailAfter: 300 * time.Millisecond,
	})
	if _, err := get(context.Background(), tr, peer, "/obj"); err != nil {
		t.Fatal(err)
	}
	if tr.Down(peer.Addrs) {
		t.Fatal("a peer that answers is down")
	}
	s1.sick.Store(true)
	s2.sick.Store(true)
	deadline := time.Now().Add(5 * time.Second)
	for {
		down := 0
		for _, p := range tr.Pairs() {
			if p.State == StateDown {
				down++
			}
		}
		if down == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pairs of the hung peer not down: %+v", tr.Pairs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !tr.Down(peer.Addrs) {
		t.Error("a peer whose every pair is down is not down")
	}
	hits := s1.hits.Load() + s2.hits.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := get(ctx, tr, peer, "/hang"); !errors.Is(err, ErrUnreachable) || ctx.Err() != nil {
		t.Fatalf("GET from a hung peer: %v (context: %v), want ErrUnreachable", err, ctx.Err())
	}
	if n := s1.hits.Load() + s2.hits.Load() - hits; n != 1 {
		t.Errorf("the hung peer got the request %d times, want once", n)
	}
}

// TestNoReplayOfOneShotBody: a PUT whose body cannot be re-created is not
// retried when its pair fails; with GetBody it is, and arrives once.
func TestNoReplayOfOneShotBody(t *testing.T) {
	deadAddr := testnet.RefusingAddr(t, "127.0.0.3")
	s := startServer(t, "127.0.0.2:0", 0)
	for _, replay := range []bool{false, true} {
		t.Run(fmt.Sprint("replayable=", replay), func(t *testing.T) {
			tr := newTestTransport(t, Config{LocalAddrs: []string{"127.0.0.5"}})
			// The first pick with equal loads is the second address.
			peer := Peer{ID: "n1", Addrs: []string{s.addr, deadAddr}}
			hits := s.hits.Load()
			data := []byte("payload")
			req, _ := http.NewRequest(http.MethodPut, "/obj", io.NopCloser(bytes.NewReader(data)))
			req.ContentLength = int64(len(data))
			if replay {
				req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
			}
			resp, err := tr.Do(context.Background(), peer, req)
			if !replay {
				if err == nil {
					resp.Body.Close()
					t.Fatal("one-shot PUT to a dead address succeeded: was it replayed?")
				}
				if s.hits.Load() != hits {
					t.Fatal("one-shot PUT reached the other address")
				}
				if !errors.Is(err, ErrUnreachable) {
					t.Errorf("err = %v, want ErrUnreachable", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if want := fmt.Sprintf("%s PUT %d", s.addr, len(data)); string(b) != want {
				t.Errorf("got %q, want %q", b, want)
			}
			if s.hits.Load() != hits+1 {
				t.Errorf("server got %d requests, want 1", s.hits.Load()-hits)
			}
			if st := tr.Stats()[0]; st.Retries != 1 || st.Errors != 1 {
				t.Errorf("stats %+v, want 1 retry and 1 error", st)
			}
		})
	}
}

// TestRoundTripper: an http.Client on the transport reaches a peer by ID or
// by any of its addresses, spreads over all addresses and keeps the Host
// header it was given.
func TestRoundTripper(t *testing.T) {
	s1 := startServer(t, "127.0.0.2:0", 2*time.Millisecond)
	s2 := startServer(t, "127.0.0.3:0", 2*time.Millisecond)
	tr := newTestTransport(t, Config{LocalAddrs: []string{"127.0.0.5", "127.0.0.6"}})
	tr.SetPeers([]Peer{{ID: "node-a", Addrs: []string{s1.addr, s2.addr}}})
	c := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			host := []string{"node-a", s1.addr}[w%2]
			for i := 0; i < 25; i++ {
				resp, err := c.Get("http://" + host + "/obj")
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}(w)
	}
	wg.Wait()
	hosts := map[string]int{}
	for _, s := range []*testServer{s1, s2} {
		if s.hits.Load() < 20 {
			t.Errorf("%s got %d of 100 requests", s.addr, s.hits.Load())
		}
		s.mu.Lock()
		for h, n := range s.hosts {
			hosts[h] += n
		}
		s.mu.Unlock()
	}
	if len(hosts) != 2 || hosts["node-a"] != 50 || hosts[s1.addr] != 50 {
		t.Errorf("servers saw Host headers %v, want node-a and %s 50 times each", hosts, s1.addr)
	}
	// An unknown host is a peer of one address.
	s3 := startServer(t, "127.0.0.4:0", 0)
	resp, err := c.Get("http://" + s3.addr + "/x")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.HasPrefix(string(b), s3.addr) {
		t.Errorf("unknown host answered by %q", b)
	}
}

func TestParseAddr(t *testing.T) {
	tests := []struct {
		in, hp, scheme string
		ok             bool
	}{
		{"10.77.1.2:9000", "10.77.1.2:9000", "", true},
		{"[::1]:80", "[::1]:80", "", true},
		{"http://10.77.1.2:9000", "10.77.1.2:9000", "http", true},
		{"https://10.77.1.2:9201/", "10.77.1.2:9201", "https", true},
		{"https://h:1/x", "", "", false},
		{"ftp://h:1", "", "", false},
		{"http://h", "", "", false},
		{"http://u@h:1", "", "", false},
		{"10.77.1.2", "", "", false},
		{"", "", "", false},
	}
	for _, tc := range tests {
		hp, scheme, err := ParseAddr(tc.in)
		if tc.ok != (err == nil) || hp != tc.hp || scheme != tc.scheme {
			t.Errorf("ParseAddr(%q) = %q, %q, %v", tc.in, hp, scheme, err)
		}
		if err != nil && !errors.Is(err, ErrBadAddr) {
			t.Errorf("ParseAddr(%q): error %v is not ErrBadAddr", tc.in, err)
		}
	}
}

func FuzzParseAddr(f *testing.F) {
	for _, s := range []string{"10.77.1.2:9000", "https://h:1", "http://[::1]:2/", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		hp, scheme, err := ParseAddr(s)
		if err != nil {
			return
		}
		if _, _, err := net.SplitHostPort(hp); err != nil {
			t.Fatalf("%q gave host:port %q: %v", s, hp, err)
		}
		if scheme != "" && scheme != "http" && scheme != "https" {
			t.Fatalf("%q gave scheme %q", s, scheme)
		}
	})
}

// TestURLAddrs: peers may list base URLs (the cluster map's intra form).
func TestURLAddrs(t *testing.T) {
	s1 := startServer(t, "127.0.0.2:0", 0)
	s2 := startServer(t, "127.0.0.3:0", 0)
	tr := newTestTransport(t, Config{Scheme: "https"}) // the URL's scheme wins
	peer := Peer{ID: "n1", Addrs: []string{"http://" + s1.addr, "http://" + s2.addr + "/"}}
	for i := 0; i < 10; i++ {
		if _, err := get(context.Background(), tr, peer, "/obj"); err != nil {
			t.Fatal(err)
		}
	}
	if s1.hits.Load() == 0 || s2.hits.Load() == 0 {
		t.Errorf("hits %d and %d, want both", s1.hits.Load(), s2.hits.Load())
	}
	if _, err := get(context.Background(), tr, Peer{Addrs: []string{"ftp://x:1"}}, "/"); !errors.Is(err, ErrBadAddr) {
		t.Errorf("bad address: err = %v", err)
	}
}
