package s3api_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/slipstream-io/slipstream/internal/s3api"
	"github.com/slipstream-io/slipstream/internal/s3api/s3mem"
)

const (
	testKey    = "SLIPSTREAMTESTKEY"
	testSecret = "slipstream/test/secret+key"
	testRegion = "us-east-1"
	testDomain = "s3.test"
)

// env is an S3 handler over s3mem behind an httptest server, with an SDK
// client for it.
type env struct {
	t      testing.TB
	srv    *httptest.Server
	store  *s3mem.Store
	client *s3.Client

	mu       sync.Mutex
	payloads []string // x-amz-content-sha256 of every request seen
}

type envOpts struct {
	tls     bool
	objects func(*s3mem.Store) s3api.Objects // wraps the store
}

func newEnv(tb testing.TB, o envOpts) *env {
	tb.Helper()
	e := &env{t: tb, store: s3mem.New(s3mem.Options{MinPartSize: 1024})}
	var objs s3api.Objects = e.store
	if o.objects != nil {
		objs = o.objects(e.store)
	}
	h, err := s3api.NewHandler(s3api.Config{
		Region:      testRegion,
		Credentials: map[string]string{testKey: testSecret},
		Domains:     []string{testDomain},
	}, objs)
	if err != nil {
		tb.Fatal(err)
	}
	rec := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		e.payloads = append(e.payloads, r.Header.Get("X-Amz-Content-Sha256"))
		e.mu.Unlock()
		h.ServeHTTP(w, r)
	})
	if o.tls {
		e.srv = httptest.NewTLSServer(rec)
	} else {
		e.srv = httptest.NewServer(rec)
	}
	tb.Cleanup(e.srv.Close)
	e.client = e.newClient(testKey, testSecret)
	return e
}

func (e *env) newClient(key, secret string) *s3.Client {
	return s3.New(s3.Options{
		Region:           testRegion,
		Credentials:      credentials.NewStaticCredentialsProvider(key, secret, ""),
		HTTPClient:       e.srv.Client(),
		BaseEndpoint:     aws.String(e.srv.URL),
		UsePathStyle:     true,
		RetryMaxAttempts: 1,
		// What config.LoadDefaultConfig resolves to: checksums on every
		// upload, as newer SDKs, boto3 and the AWS CLI send by default.
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenSupported,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenSupported,
	})
}

func (e *env) seenPayloads() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.payloads...)
}

// apiCode returns the S3 error code and HTTP status of an SDK error.
func apiCode(err error) (string, int) {
	code, status := "", 0
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	return code, status
}

func wantCode(t *testing.T, err error, code string, status int) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %s (%d)", code, status)
	}
	gc, gs := apiCode(err)
	if (code != "" && gc != code) || gs != status {
		t.Fatalf("error %v: code %q status %d, want %q %d", err, gc, gs, code, status)
	}
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func ctx() context.Context { return context.Background() }

// rawRequest builds a request to the test server, signed by the SDK's own
// SigV4 signer (not the verifier's code) with the given payload hash.
// rawPath must already be escaped the way S3 clients escape paths.
func (e *env) rawRequest(method, rawPath, query string, body []byte, payloadHash string, hdr map[string]string) *http.Request {
	e.t.Helper()
	u := e.srv.URL + rawPath
	if query != "" {
		u += "?" + query
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	r, err := http.NewRequest(method, u, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range hdr {
		if strings.EqualFold(k, "Host") {
			r.Host = v
			continue
		}
		r.Header.Set(k, v)
	}
	if payloadHash == "" {
		sum := sha256.Sum256(body)
		payloadHash = hex.EncodeToString(sum[:])
	}
	e.sign(r, payloadHash, testSecret, time.Now())
	return r
}

func (e *env) sign(r *http.Request, payloadHash, secret string, at time.Time) {
	e.t.Helper()
	r.Header.Set("X-Amz-Content-Sha256", payloadHash)
	creds := aws.Credentials{AccessKeyID: testKey, SecretAccessKey: secret}
	err := v4.NewSigner().SignHTTP(ctx(), creds, r, payloadHash, "s3", testRegion, at, func(o *v4.SignerOptions) {
		o.DisableURIPathEscaping = true
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) do(r *http.Request) (*http.Response, []byte) {
	e.t.Helper()
	resp, err := e.srv.Client().Do(r)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp, b
}

// errorCode extracts <Code> from an S3 error body.
func errorCode(body []byte) string {
	s := string(body)
	i := strings.Index(s, "<Code>")
	j := strings.Index(s, "</Code>")
	if i < 0 || j < i {
		return ""
	}
	return s[i+6 : j]
}

type v4PresignedRequest = v4.PresignedHTTPRequest

func presignGet(ps *s3.PresignClient, bucket, key string, d time.Duration) (*v4.PresignedHTTPRequest, error) {
	return ps.PresignGetObject(ctx(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}, s3.WithPresignExpires(d))
}

func presignPut(ps *s3.PresignClient, bucket, key string, d time.Duration) (*v4.PresignedHTTPRequest, error) {
	return ps.PresignPutObject(ctx(), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}, s3.WithPresignExpires(d))
}

// presignAt presigns r (whose query holds X-Amz-Expires) as of time at.
func presignAt(r *http.Request, at time.Time) (string, error) {
	creds := aws.Credentials{AccessKeyID: testKey, SecretAccessKey: testSecret}
	u, _, err := v4.NewSigner().PresignHTTP(ctx(), creds, r, "UNSIGNED-PAYLOAD", "s3", testRegion, at, func(o *v4.SignerOptions) {
		o.DisableURIPathEscaping = true
	})
	return u, err
}

func newHandlerNoCreds() (http.Handler, error) {
	return s3api.NewHandler(s3api.Config{}, s3mem.New(s3mem.Options{}))
}

func newServer(t *testing.T, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

type ctxT = context.Context
