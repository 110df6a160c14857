// Package s3test starts a real S3 server (versitygw over a temporary
// directory) on a free loopback port for tests, and offers a counting reverse
// proxy to observe the requests a client makes.
package s3test

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/slipstream-io/slipstream/internal/backend"
	s3backend "github.com/slipstream-io/slipstream/internal/backend/s3"
	"github.com/slipstream-io/slipstream/internal/remotesim"
)

// Server is a running versitygw.
type Server struct {
	Endpoint  string // http://127.0.0.1:PORT
	AccessKey string
	SecretKey string
	Dir       string // the posix root: bucket B's object K is the file Dir/B/K
}

// Binary finds versitygw (see remotesim.Binary).
func Binary() (string, error) { return remotesim.Binary() }

// Start runs versitygw for the duration of the test. It fails the test when
// the binary is missing.
func Start(t testing.TB) *Server {
	t.Helper()
	os.Unsetenv("AWS_CA_BUNDLE")
	r, err := remotesim.Start(context.Background(), remotesim.Config{
		Dir: t.TempDir(), AccessKey: "slipstreamtest", SecretKey: "slipstreamtestsecret",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return &Server{Endpoint: r.DirectEndpoint, AccessKey: r.AccessKey, SecretKey: r.SecretKey, Dir: r.Root}
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
