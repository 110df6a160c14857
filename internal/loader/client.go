package loader

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/slipstream-io/slipstream/internal/netx"
)

// Router picks the S3 base URL ("http://host:port") for a request. The
// default sends everything to Config.Endpoint; a cluster-aware router can
// send each object to its owner. key is empty for bucket-level requests.
type Router interface {
	Route(bucket, key string) (string, error)
	// Name describes the router in results ("static", "owner", ...).
	Name() string
}

// StaticRouter sends every request to one endpoint.
type StaticRouter string

var _ Router = StaticRouter("")

// Route implements Router.
func (s StaticRouter) Route(string, string) (string, error) { return string(s), nil }

// Name implements Router.
func (StaticRouter) Name() string { return "static" }

// NewHTTPClient returns an HTTP client tuned for many concurrent requests to
// few hosts: enough idle connections per host for every worker, no
// compression, no proxy, HTTP/1.1 (one request per connection, like S3
// clients at scale).
func NewHTTPClient(workers int, insecureTLS bool) *http.Client {
	tr := &http.Transport{
		Proxy: nil,
		DialContext: (&net.Dialer{
			Timeout:   10 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:          0,
		MaxIdleConnsPerHost:   workers + 16,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 2 * time.Minute,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
		WriteBufferSize:       128 << 10,
		ReadBufferSize:        128 << 10,
	}
	if insecureTLS {
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // asked for by the user
	}
	return &http.Client{Transport: tr}
}

// clients holds one S3 client per base URL the router returns.
type clients struct {
	cfg    Config
	router Router
	http   *http.Client
	mu     sync.RWMutex
	byURL  map[string]*s3.Client
}

func newClients(cfg Config) *clients {
	hc := cfg.HTTPClient
	if hc == nil {
		hc = NewHTTPClient(cfg.Workers, cfg.InsecureTLS)
	}
	r := cfg.Router
	if r == nil {
		r = StaticRouter(cfg.Endpoint)
	}
	return &clients{cfg: cfg, router: r, http: hc, byURL: map[string]*s3.Client{}}
}

// For returns the client for (bucket, key).
func (c *clients) For(bucket, key string) (*s3.Client, error) {
	base, err := c.router.Route(bucket, key)
	if err != nil {
		return nil, fmt.Errorf("loader: route %s/%s: %w", bucket, key, err)
	}
	c.mu.RLock()
	cl := c.byURL[base]
	c.mu.RUnlock()
	if cl != nil {
		return cl, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl := c.byURL[base]; cl != nil {
		return cl, nil
	}
	opts := s3.Options{
		BaseEndpoint:               aws.String(base),
		Region:                     c.cfg.Region,
		UsePathStyle:               true,
		HTTPClient:                 c.http,
		Retryer:                    aws.NopRetryer{}, // a retry would hide the error being measured
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	}
	if c.cfg.AccessKey != "" {
		opts.Credentials = credentials.NewStaticCredentialsProvider(c.cfg.AccessKey, c.cfg.SecretKey, "")
	} else {
		opts.Credentials = aws.AnonymousCredentials{}
	}
	cl = s3.New(opts)
	c.byURL[base] = cl
	return cl, nil
}

// ErrorKind classifies a request error for the errors-by-kind table: the S3
// error code when the server sent one, else "http-NNN", "timeout",
// "canceled", "unreachable" (the multihomed transport found no path to
// the node that answered: one that died or hangs), "connection" or
// "other".
func ErrorKind(err error) string {
	if err == nil {
		return ""
	}
	var ke kindError
	if errors.As(err, &ke) {
		return ke.kind
	}
	var api smithy.APIError
	if errors.As(err, &api) && api.ErrorCode() != "" {
		return api.ErrorCode()
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) && re.HTTPStatusCode() != 0 {
		return fmt.Sprintf("http-%d", re.HTTPStatusCode())
	}
	switch {
	case errors.Is(err, netx.ErrUnreachable):
		return "unreachable"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	var oe *net.OpError
	if errors.As(err, &oe) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) {
		return "connection"
	}
	return "other"
}

// kindError carries an explicit kind (e.g. "short-read").
type kindError struct {
	kind string
	err  error
}

func (k kindError) Error() string { return k.kind + ": " + k.err.Error() }
func (k kindError) Unwrap() error { return k.err }
