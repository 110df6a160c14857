// Package remotesim runs a local stand-in for a remote S3 bucket: a real S3
// server (versitygw over a directory) on loopback, behind a proxy that
// models a slower, farther link with a bandwidth cap shared by all
// connections and a delay before each answer. The demo, the benchmarks and
// the integration tests use it as the "remote" backend; the direct endpoint
// (without the proxy) fills datasets quickly.
package remotesim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/time/rate"
)

// ErrNoServer is returned when versitygw is not installed.
var ErrNoServer = errors.New("remotesim: versitygw not found (run scripts/setup.sh)")

// Config describes the simulated remote.
type Config struct {
	Dir       string        // versitygw's posix root and log live here
	Rate      int64         // link bandwidth in bytes/s for both directions together; 0 = unlimited
	Latency   time.Duration // added before every answer (time to first byte)
	AccessKey string        // default "remote-access"
	SecretKey string        // default "remote-secret"
}

// Remote is a running simulated remote.
type Remote struct {
	Endpoint       string // through the slow link
	DirectEndpoint string // the server itself
	AccessKey      string
	SecretKey      string
	Root           string // bucket B's object K is the file Root/B/K

	cmd      *exec.Cmd
	exited   chan struct{}
	proxy    *http.Server
	requests atomic.Int64
	gets     atomic.Int64
	deletes  atomic.Int64
	down     atomic.Bool
	readOnly atomic.Bool
}

// Binary finds versitygw: $VERSITYGW, then $(go env GOPATH)/bin, then PATH.
func Binary() (string, error) {
	if p := os.Getenv("VERSITYGW"); p != "" {
		return p, nil
	}
	var gopaths []string
	if gp := os.Getenv("GOPATH"); gp != "" {
		gopaths = filepath.SplitList(gp)
	} else if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		gopaths = filepath.SplitList(strings.TrimSpace(string(out)))
	}
	if home, err := os.UserHomeDir(); err == nil {
		gopaths = append(gopaths, filepath.Join(home, "go"))
	}
	for _, gp := range gopaths {
		p := filepath.Join(gp, "bin", "versitygw")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	return "", ErrNoServer
}

// Start runs the server and the proxy; Stop ends both.
func Start(ctx context.Context, cfg Config) (*Remote, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	if cfg.AccessKey == "" {
		cfg.AccessKey = "remote-access"
	}
	if cfg.SecretKey == "" {
		cfg.SecretKey = "remote-secret"
	}
	root := filepath.Join(cfg.Dir, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	r := &Remote{
		DirectEndpoint: fmt.Sprintf("http://127.0.0.1:%d", port),
		AccessKey:      cfg.AccessKey, SecretKey: cfg.SecretKey, Root: root,
		exited: make(chan struct{}),
	}
	logf, err := os.Create(filepath.Join(cfg.Dir, "versitygw.log"))
	if err != nil {
		return nil, err
	}
	r.cmd = exec.Command(bin, "--access", cfg.AccessKey, "--secret", cfg.SecretKey, "--quiet",
		"--port", fmt.Sprintf("127.0.0.1:%d", port), "posix", root)
	r.cmd.Stdout, r.cmd.Stderr = logf, logf
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := r.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("remotesim: start versitygw: %w", err)
	}
	go func() { _ = r.cmd.Wait(); logf.Close(); close(r.exited) }()
	if err := waitListening(ctx, fmt.Sprintf("127.0.0.1:%d", port), r.exited); err != nil {
		r.Stop()
		return nil, err
	}
	if err := r.startProxy(cfg); err != nil {
		r.Stop()
		return nil, err
	}
	return r, nil
}

func (r *Remote) startProxy(cfg Config) error {
	target, _ := url.Parse(r.DirectEndpoint)
	// Forward the Host header unchanged: clients sign it (SigV4) for the
	// proxy's address, and the server verifies the Host it receives.
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host
		},
		Transport: &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true},
	}
	var lim *rate.Limiter
	if cfg.Rate > 0 {
		burst := int(cfg.Rate / 50) // 20 ms worth
		if burst < 64<<10 {
			burst = 64 << 10
		}
		lim = rate.NewLimiter(rate.Limit(cfg.Rate), burst)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.requests.Add(1)
		isObject := req.URL.Path != "/" && strings.Count(strings.Trim(req.URL.Path, "/"), "/") >= 1
		switch {
		case req.Method == http.MethodGet && isObject:
			r.gets.Add(1)
		case req.Method == http.MethodDelete && isObject:
			r.deletes.Add(1)
		}
		if r.down.Load() {
			http.Error(w, "remote link down", http.StatusServiceUnavailable)
			return
		}
		if r.readOnly.Load() && req.Method != http.MethodGet && req.Method != http.MethodHead {
			http.Error(w, "remote refuses writes", http.StatusServiceUnavailable)
			return
		}
		if cfg.Latency > 0 {
			select {
			case <-time.After(cfg.Latency):
			case <-req.Context().Done():
				return
			}
		}
		if lim != nil {
			if req.Body != nil && req.Body != http.NoBody {
				req.Body = &limitedReadCloser{rc: req.Body, lim: lim, ctx: req.Context()}
			}
			w = &limitedWriter{ResponseWriter: w, lim: lim, ctx: req.Context()}
		}
		rp.ServeHTTP(w, req)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	r.Endpoint = "http://" + ln.Addr().String()
	r.proxy = &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = r.proxy.Serve(ln) }()
	return nil
}

// Requests is the number of requests that went through the slow link.
func (r *Remote) Requests() int64 { return r.requests.Load() }

// ObjectGets is the number of object GETs (whole or ranged) that went
// through the slow link.
func (r *Remote) ObjectGets() int64 { return r.gets.Load() }

// ObjectDeletes is the number of object DELETEs that went through the
// slow link.
func (r *Remote) ObjectDeletes() int64 { return r.deletes.Load() }

// SetDown cuts (true) or restores (false) the slow link: while it is down
// every request through it fails with 503.
func (r *Remote) SetDown(down bool) { r.down.Store(down) }

// SetReadOnly makes (true) every write through the slow link (PUT, POST,
// DELETE) fail with 503 while reads and listings pass, or lifts that
// (false): write-back operations stay pending while clients list.
func (r *Remote) SetReadOnly(ro bool) { r.readOnly.Store(ro) }

// Stop ends the proxy and the server.
func (r *Remote) Stop() {
	if r.proxy != nil {
		_ = r.proxy.Close()
	}
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.exited:
		case <-time.After(5 * time.Second):
			_ = r.cmd.Process.Kill()
			<-r.exited
		}
	}
}

// CreateBucket creates a bucket on the server (a directory of its root).
func (r *Remote) CreateBucket(name string) error {
	return os.MkdirAll(filepath.Join(r.Root, name), 0o755)
}

func waitListening(ctx context.Context, addr string, exited <-chan struct{}) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("remotesim: versitygw exited at start")
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("remotesim: versitygw did not listen on %s within 20s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// limitedWriter paces response bytes through the shared limiter.
type limitedWriter struct {
	http.ResponseWriter
	lim *rate.Limiter
	ctx context.Context
}

func (w *limitedWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		n := len(p)
		if n > w.lim.Burst() {
			n = w.lim.Burst()
		}
		if err := w.lim.WaitN(w.ctx, n); err != nil {
			return written, err
		}
		k, err := w.ResponseWriter.Write(p[:n])
		written += k
		if err != nil {
			return written, err
		}
		p = p[n:]
	}
	return written, nil
}

func (w *limitedWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// limitedReadCloser paces request bytes through the shared limiter.
type limitedReadCloser struct {
	rc  io.ReadCloser
	lim *rate.Limiter
	ctx context.Context
}

func (r *limitedReadCloser) Read(p []byte) (int, error) {
	if len(p) > r.lim.Burst() {
		p = p[:r.lim.Burst()]
	}
	n, err := r.rc.Read(p)
	if n > 0 {
		if werr := r.lim.WaitN(r.ctx, n); werr != nil {
			return n, werr
		}
	}
	return n, err
}

func (r *limitedReadCloser) Close() error { return r.rc.Close() }
