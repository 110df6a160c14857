// Package sigv4 verifies AWS Signature Version 4 on S3 requests: the
// Authorization header, presigned URLs, and the payload itself while it
// streams (a hex SHA-256, aws-chunked bodies with per-chunk signatures, and
// trailing or header x-amz-checksum-* values). Legacy Signature Version 2
// headers and presigned URLs are verified too (v2.go). It knows nothing of S3
// operations; the s3api package maps its errors to S3 error codes.
package sigv4

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Payload hash values of x-amz-content-sha256 and the algorithm names.
const (
	Algorithm                = "AWS4-HMAC-SHA256"
	UnsignedPayload          = "UNSIGNED-PAYLOAD"
	StreamingPayload         = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
	StreamingPayloadTrailer  = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
	StreamingUnsignedTrailer = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
	EmptySHA256              = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

	// TimeFormat is the layout of X-Amz-Date.
	TimeFormat = "20060102T150405Z"
	// DateFormat is the layout of the date in a credential scope.
	DateFormat = "20060102"
	// MaxPresignExpiry is the longest X-Amz-Expires S3 accepts (7 days).
	MaxPresignExpiry = 7 * 24 * time.Hour
)

// Errors. The s3api package maps each to an S3 error code.
var (
	ErrMissingAuth           = errors.New("sigv4: request is not signed")
	ErrHeadersNotSigned      = errors.New("sigv4: there were headers present in the request which were not signed")
	ErrUnsupportedAuth       = errors.New("sigv4: unsupported authorization mechanism, use AWS4-HMAC-SHA256")
	ErrMalformedAuth         = errors.New("sigv4: malformed Authorization header")
	ErrMalformedPresign      = errors.New("sigv4: malformed presigned query parameters")
	ErrInvalidAccessKeyID    = errors.New("sigv4: unknown access key id")
	ErrSignatureMismatch     = errors.New("sigv4: signature does not match")
	ErrRequestExpired        = errors.New("sigv4: request has expired")
	ErrNotYetValid           = errors.New("sigv4: request is not valid yet")
	ErrTimeSkewed            = errors.New("sigv4: request time too skewed")
	ErrMissingDate           = errors.New("sigv4: missing or malformed x-amz-date or Date header")
	ErrMissingContentSHA256  = errors.New("sigv4: missing x-amz-content-sha256 header")
	ErrInvalidContentSHA256  = errors.New("sigv4: invalid x-amz-content-sha256 value")
	ErrContentSHA256Mismatch = errors.New("sigv4: payload does not match x-amz-content-sha256")
	ErrMissingDecodedLength  = errors.New("sigv4: streaming upload without x-amz-decoded-content-length")
	ErrIncompleteBody        = errors.New("sigv4: body truncated or malformed")
	ErrChecksumMismatch      = errors.New("sigv4: payload does not match its x-amz-checksum")
	ErrInvalidChecksum       = errors.New("sigv4: invalid x-amz-checksum header or trailer")
)

// Config configures a Verifier.
type Config struct {
	// Credentials maps access key ids to secret keys. Empty: every request
	// is rejected.
	Credentials map[string]string
	// MaxSkew is how far the request time may be from now (default 15m).
	MaxSkew time.Duration
	// Now returns the current time (default time.Now); tests set it.
	Now func() time.Time
}

// Verifier checks signatures. It is safe for concurrent use.
type Verifier struct {
	creds   map[string]string
	maxSkew time.Duration
	now     func() time.Time

	kmu  sync.Mutex
	keys map[string][]byte // signing keys by access key, date, region, service
}

// maxSigningKeys bounds the signing key cache: a key changes daily, so a
// day needs one per access key and region.
const maxSigningKeys = 256

// signingKey is SigningKey, cached: deriving one takes four HMACs, which
// is a quarter of verifying a small request's signature.
func (v *Verifier) signingKey(accessKey, secret, date, region, service string) []byte {
	ck := accessKey + "\x00" + date + "\x00" + region + "\x00" + service
	v.kmu.Lock()
	k, ok := v.keys[ck]
	v.kmu.Unlock()
	if ok {
		return k
	}
	k = SigningKey(secret, date, region, service)
	v.kmu.Lock()
	if len(v.keys) >= maxSigningKeys {
		clear(v.keys)
	}
	v.keys[ck] = k
	v.kmu.Unlock()
	return k
}

// NewVerifier returns a Verifier for cfg. The credentials map is copied.
func NewVerifier(cfg Config) *Verifier {
	v := &Verifier{creds: make(map[string]string, len(cfg.Credentials)), maxSkew: cfg.MaxSkew, now: cfg.Now, keys: map[string][]byte{}}
	for k, s := range cfg.Credentials {
		v.creds[k] = s
	}
	if v.maxSkew <= 0 {
		v.maxSkew = 15 * time.Minute
	}
	if v.now == nil {
		v.now = time.Now
	}
	return v
}

// Result is a verified request.
type Result struct {
	AccessKey string
	Region    string // region of the credential scope
	Presigned bool
	// Body replaces the request body: it yields the decoded payload and
	// verifies it while it streams. On a mismatch or a malformed or short
	// body, Read returns an error instead of the last bytes, so even a
	// consumer that stops at the declared size (io.CopyN) fails.
	Body io.ReadCloser
	// Size is the payload's size (x-amz-decoded-content-length for
	// aws-chunked bodies, Content-Length otherwise), -1 when unknown.
	Size int64
	// Streaming is true for aws-chunked bodies.
	Streaming bool
}

// Verify authenticates r by its Authorization header or presigned query and
// returns the verified request. It does not read the body. q is
// r.URL.Query(), which callers parse once per request. vhostBucket is the
// bucket a virtual-hosted-style Host names ("" for path-style); only legacy
// V2 signatures need it.
func (v *Verifier) Verify(r *http.Request, q url.Values, vhostBucket string) (*Result, error) {
	if h := r.Header.Get("Authorization"); h != "" {
		if strings.HasPrefix(h, "AWS ") {
			return v.verifyV2(r, vhostBucket)
		}
		if !strings.HasPrefix(h, Algorithm+" ") {
			return nil, ErrUnsupportedAuth
		}
		return v.verifyHeader(r, h)
	}
	if q.Has("X-Amz-Algorithm") || q.Has("X-Amz-Signature") || q.Has("X-Amz-Credential") {
		return v.verifyPresigned(r, q)
	}
	if q.Has("AWSAccessKeyId") || q.Has("Signature") {
		return v.verifyV2(r, vhostBucket)
	}
	return nil, ErrMissingAuth
}

func (v *Verifier) secret(key string) (string, error) {
	s, ok := v.creds[key]
	if !ok {
		return "", fmt.Errorf("%w: %q", ErrInvalidAccessKeyID, key)
	}
	return s, nil
}

func (v *Verifier) verifyHeader(r *http.Request, h string) (*Result, error) {
	auth, err := ParseAuthorization(h)
	if err != nil {
		return nil, err
	}
	secret, err := v.secret(auth.AccessKey)
	if err != nil {
		return nil, err
	}
	t, err := requestTime(r)
	if err != nil {
		return nil, err
	}
	if t.Format(DateFormat) != auth.Date {
		return nil, fmt.Errorf("%w: credential date %s does not match request date %s", ErrMalformedAuth, auth.Date, t.Format(DateFormat))
	}
	now := v.now()
	if d := now.Sub(t); d > v.maxSkew || d < -v.maxSkew {
		return nil, fmt.Errorf("%w: request time %s, server time %s", ErrTimeSkewed, t.Format(TimeFormat), now.UTC().Format(TimeFormat))
	}
	payload := r.Header.Get("X-Amz-Content-Sha256")
	if payload == "" {
		return nil, ErrMissingContentSHA256
	}
	if err := checkPayloadHash(payload); err != nil {
		return nil, err
	}
	creq := CanonicalRequest(r, auth.SignedHeaders, payload, false)
	key := v.signingKey(auth.AccessKey, secret, auth.Date, auth.Region, auth.Service)
	sts := StringToSign(t, auth.Scope(), creq)
	if !hmac.Equal([]byte(hexHMAC(key, sts)), []byte(auth.Signature)) {
		return nil, ErrSignatureMismatch
	}
	if err := checkAmzHeadersSigned(r, auth.SignedHeaders); err != nil {
		return nil, err
	}
	res := &Result{AccessKey: auth.AccessKey, Region: auth.Region}
	sc := &streamContext{key: key, time: t.Format(TimeFormat), scope: auth.Scope(), seed: auth.Signature}
	if err := v.wrapBody(r, res, payload, sc); err != nil {
		return nil, err
	}
	return res, nil
}

func (v *Verifier) verifyPresigned(r *http.Request, q map[string][]string) (*Result, error) {
	p, err := ParsePresigned(q)
	if err != nil {
		return nil, err
	}
	secret, err := v.secret(p.AccessKey)
	if err != nil {
		return nil, err
	}
	now := v.now()
	if p.Time.Sub(now) > v.maxSkew {
		return nil, ErrNotYetValid
	}
	if now.After(p.Time.Add(p.Expires)) {
		return nil, ErrRequestExpired
	}
	payload := UnsignedPayload
	if vs := q["X-Amz-Content-Sha256"]; len(vs) > 0 {
		payload = vs[0]
		if err := checkPayloadHash(payload); err != nil {
			return nil, err
		}
		if isStreaming(payload) {
			return nil, fmt.Errorf("%w: streaming payloads cannot be presigned", ErrInvalidContentSHA256)
		}
	}
	creq := CanonicalRequest(r, p.SignedHeaders, payload, true)
	key := v.signingKey(p.AccessKey, secret, p.Date, p.Region, p.Service)
	sts := StringToSign(p.Time, p.Scope(), creq)
	if !hmac.Equal([]byte(hexHMAC(key, sts)), []byte(p.Signature)) {
		return nil, ErrSignatureMismatch
	}
	if err := checkAmzHeadersSigned(r, p.SignedHeaders); err != nil {
		return nil, err
	}
	res := &Result{AccessKey: p.AccessKey, Region: p.Region, Presigned: true}
	if err := v.wrapBody(r, res, payload, nil); err != nil {
		return nil, err
	}
	return res, nil
}

func isStreaming(payload string) bool { return strings.HasPrefix(payload, "STREAMING-") }

// checkAmzHeadersSigned refuses a request that carries an x-amz-* header
// the signature does not cover, as S3 does: such a header changes what the
// request does (a copy source, metadata, a checksum), and whoever holds a
// presigned URL, or sees a signed request go by, could add one.
// x-amz-content-sha256 is exempt, as in S3: the signature covers the
// payload hash it states anyway.
func checkAmzHeadersSigned(r *http.Request, signed []string) error {
	for name := range r.Header {
		l := strings.ToLower(name)
		if strings.HasPrefix(l, "x-amz-") && l != "x-amz-content-sha256" && !slices.Contains(signed, l) {
			return fmt.Errorf("%w: %s", ErrHeadersNotSigned, l)
		}
	}
	return nil
}

func checkPayloadHash(p string) error {
	switch p {
	case UnsignedPayload, StreamingPayload, StreamingPayloadTrailer, StreamingUnsignedTrailer:
		return nil
	}
	if len(p) == 64 && isLowerHex(p) {
		return nil
	}
	return fmt.Errorf("%w: %.80q", ErrInvalidContentSHA256, p)
}

// awsChunked reports whether Content-Encoding lists aws-chunked.
func awsChunked(h http.Header) bool {
	for _, v := range h.Values("Content-Encoding") {
		for _, tok := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "aws-chunked") {
				return true
			}
		}
	}
	return false
}

// wrapBody installs the verifying body for the payload mode.
func (v *Verifier) wrapBody(r *http.Request, res *Result, payload string, sc *streamContext) error {
	body := r.Body
	if body == nil {
		body = http.NoBody
	}
	res.Size = r.ContentLength
	var rd io.Reader = body
	switch {
	case isStreaming(payload):
		dl := r.Header.Get("X-Amz-Decoded-Content-Length")
		if dl == "" {
			return ErrMissingDecodedLength
		}
		n, err := strconv.ParseInt(dl, 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("%w: bad x-amz-decoded-content-length %.40q", ErrIncompleteBody, dl)
		}
		res.Size = n
		res.Streaming = true
		signed := payload != StreamingUnsignedTrailer
		trailer := payload != StreamingPayload
		if !signed {
			sc = nil
		}
		cr, err := newChunkReader(body, n, sc, trailer, r.Header.Get("X-Amz-Trailer"))
		if err != nil {
			return err
		}
		rd = cr
	case payload == UnsignedPayload:
		if awsChunked(r.Header) {
			// The framing would be stored as the object's bytes (S3
			// refuses this too): aws-chunked needs a STREAMING-* mode.
			return fmt.Errorf("%w: an aws-chunked body needs a STREAMING-* x-amz-content-sha256, not UNSIGNED-PAYLOAD", ErrInvalidContentSHA256)
		}
	default:
		want, _ := hex.DecodeString(payload)
		rd = newVerifyReader(rd, r.ContentLength, sha256.New(), func(sum []byte) error {
			if !hmac.Equal(sum, want) {
				return ErrContentSHA256Mismatch
			}
			return nil
		})
	}
	// A checksum sent as a header (not a trailer) covers the decoded
	// payload, except on CompleteMultipartUpload where it names the whole
	// object's checksum, not the XML body's.
	if !(r.Method == http.MethodPost && r.URL.Query().Has("uploadId")) {
		ck, err := headerChecksum(r.Header)
		if err != nil {
			return err
		}
		if ck != nil {
			rd = newVerifyReader(rd, res.Size, ck.h, ck.verify)
		}
	}
	res.Body = readCloser{rd, body}
	return nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// requestTime reads X-Amz-Date, or Date when it is absent.
func requestTime(r *http.Request) (time.Time, error) {
	if s := r.Header.Get("X-Amz-Date"); s != "" {
		t, err := time.Parse(TimeFormat, s)
		if err != nil {
			return time.Time{}, fmt.Errorf("%w: %.40q", ErrMissingDate, s)
		}
		return t, nil
	}
	if s := r.Header.Get("Date"); s != "" {
		t, err := http.ParseTime(s)
		if err != nil {
			return time.Time{}, fmt.Errorf("%w: %.40q", ErrMissingDate, s)
		}
		return t.UTC(), nil
	}
	return time.Time{}, ErrMissingDate
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
