// Package s3test starts a real S3 server (versitygw over a temporary
// directory) on a free loopback port for tests, and offers a counting reverse
// proxy to observe the requests a client makes.
package s3test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/slipstream-io/slipstream/internal/backend"
	s3backend "github.com/slipstream-io/slipstream/internal/backend/s3"
)

// Server is a running versitygw.
type Server struct {
	Endpoint  string // http://127.0.0.1:PORT
	AccessKey string
	SecretKey string
	Dir       string // the posix root: bucket B's object K is the file Dir/B/K
	cmd       *exec.Cmd
}

// Binary finds versitygw: $VERSITYGW, then $(go env GOPATH)/bin, then PATH.
func Binary() (string, error) {
	if p := os.Getenv("VERSITYGW"); p != "" {
		return p, nil
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
			gopath = strings.TrimSpace(string(out))
		}
	}
	for _, gp := range filepath.SplitList(gopath) {
		p := filepath.Join(gp, "bin", "versitygw")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("versitygw not found: run scripts/setup.sh (go install github.com/versity/versitygw/cmd/versitygw@v1.8.0)")
}

// Start runs versitygw for the duration of the test. It fails the test when
// the binary is missing.
func Start(t testing.TB) *Server {
	t.Helper()
	os.Unsetenv("AWS_CA_BUNDLE")
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{
		Endpoint:  fmt.Sprintf("http://127.0.0.1:%d", port),
		AccessKey: "slipstreamtest",
		SecretKey: "slipstreamtestsecret",
		Dir:       root,
	}
	logf, err := os.Create(filepath.Join(dir, "versitygw.log"))
	if err != nil {
		t.Fatal(err)
	}
	s.cmd = exec.Command(bin, "--access", s.AccessKey, "--secret", s.SecretKey, "--quiet",
		"--port", fmt.Sprintf("127.0.0.1:%d", port), "posix", root)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start versitygw: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = s.cmd.Process.Kill()
			<-exited
		}
		logf.Close()
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 200*time.Millisecond)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(logf.Name())
			t.Fatalf("versitygw exited at start: %s", log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("versitygw did not listen on port %d within 20s", port)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return s
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Spec returns a backend spec for bucket on this server (path style).
func (s *Server) Spec(bucket, prefix string) backend.Spec {
	return backend.Spec{Kind: "s3", Endpoint: s.Endpoint, Region: "us-east-1", Bucket: bucket, Prefix: prefix,
		PathStyle: true, AccessKey: s.AccessKey, SecretKey: s.SecretKey}
}

// CreateBucket creates bucket on the server.
func (s *Server) CreateBucket(t testing.TB, bucket string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := s3backend.New(ctx, s.Spec(bucket, ""))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatalf("create bucket %s: %v", bucket, err)
	}
}

// Request is one request seen by a Proxy.
type Request struct {
	Method string
	Path   string
	Query  string
	Range  string
}

// Proxy is a reverse proxy in front of a server that records every request.
// SigV4 signatures stay valid because the Host header is passed through.
type Proxy struct {
	Endpoint string
	mu       sync.Mutex
	reqs     []Request
	srv      *http.Server
}

// NewProxy starts a counting proxy to target on a loopback port; it stops
// with the test.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Endpoint: "http://" + l.Addr().String()}
	rp := httputil.NewSingleHostReverseProxy(u)
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.reqs = append(p.reqs, Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Range: r.Header.Get("Range")})
		p.mu.Unlock()
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = p.srv.Serve(l) }()
	t.Cleanup(func() { _ = p.srv.Close() })
	return p
}

// Requests returns the requests seen so far.
func (p *Proxy) Requests() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Request(nil), p.reqs...)
}

// Count returns how many requests had the method and a path ending in
// suffix (e.g. "/bucket/key").
func (p *Proxy) Count(method, suffix string) int {
	n := 0
	for _, r := range p.Requests() {
		if r.Method == method && strings.HasSuffix(r.Path, suffix) {
			n++
		}
	}
	return n
}

// Reset forgets the recorded requests.
func (p *Proxy) Reset() {
	p.mu.Lock()
	p.reqs = nil
	p.mu.Unlock()
}
