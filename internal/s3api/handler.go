package s3api

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/s3api/sigv4"
)

// copyBufSize is the size of the pooled buffers GET bodies are copied with
// when the kernel cannot copy them.
const copyBufSize = 256 << 10

type handler struct {
	cfg      Config
	objs     Objects
	verifier *sigv4.Verifier
	log      *slog.Logger
	bufs     sync.Pool
	idPrefix string
	idSeq    atomic.Uint64
}

// NewHandler returns the S3 API handler over objs.
func NewHandler(cfg Config, objs Objects) (http.Handler, error) {
	if objs == nil {
		return nil, errors.New("s3api: nil Objects")
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.MaxSkew <= 0 {
		cfg.MaxSkew = 15 * time.Minute
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	doms := make([]string, 0, len(cfg.Domains))
	for _, d := range cfg.Domains {
		d = strings.ToLower(strings.Trim(strings.TrimSpace(d), "."))
		if d == "" {
			return nil, fmt.Errorf("s3api: empty virtual-host domain in %q", cfg.Domains)
		}
		doms = append(doms, d)
	}
	cfg.Domains = doms
	for k, s := range cfg.Credentials {
		if k == "" || s == "" {
			return nil, errors.New("s3api: credentials with an empty access key or secret")
		}
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	h := &handler{
		cfg:      cfg,
		objs:     objs,
		verifier: sigv4.NewVerifier(sigv4.Config{Credentials: cfg.Credentials, MaxSkew: cfg.MaxSkew}),
		log:      cfg.Log,
		idPrefix: strings.ToUpper(hex.EncodeToString(rnd[:])),
	}
	h.bufs.New = func() any { b := make([]byte, copyBufSize); return &b }
	return h, nil
}

// request is one S3 request after routing and authentication.
type request struct {
	*http.Request
	bucket, key string
	q           url.Values // the query, parsed once
	auth        *sigv4.Result
	body        *errRecorder // the verified body
}

// errRecorder remembers the first error a body read returned, so that the
// handler reports the body's problem (bad signature, short body) rather than
// whatever the storage layer made of it.
type errRecorder struct {
	r    io.Reader
	err  error
	read bool // Read was called: an Expect: 100-continue was answered
}

func (e *errRecorder) Read(p []byte) (int, error) {
	e.read = true
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF && e.err == nil {
		e.err = err
	}
	return n, err
}

// readEmptyBody reads a body declared empty (size 0) to its end before
// the store is called, which then never stores a bad one: a store need
// not read a body of size 0 (io.CopyN(w, body, 0) does not), and only a
// read checks the body's checksum, SHA-256 or signature.
func (rq *request) readEmptyBody(size int64) error {
	if size != 0 {
		return nil
	}
	return rq.bodyErr(object.EmptyBody(rq.body))
}

// bodyErr prefers the body's own error over err.
func (rq *request) bodyErr(err error) error {
	if rq.body != nil && rq.body.err != nil {
		return rq.body.err
	}
	return err
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	id := fmt.Sprintf("%s%08X", h.idPrefix, h.idSeq.Add(1))
	hdr.Set("X-Amz-Request-Id", id)
	hdr.Set("X-Amz-Id-2", id)
	hdr.Set("Server", "Slipstream")

	bucket, key, vhost := h.route(r)
	rq := &request{Request: r, bucket: bucket, key: key, q: r.URL.Query()}
	vb := ""
	if vhost {
		vb = bucket
	}
	res, err := h.verifier.Verify(r, rq.q, vb)
	if err != nil {
		h.writeError(w, r, err, false)
		return
	}
	rq.auth = res
	rq.body = &errRecorder{r: res.Body}
	if err := h.dispatch(w, rq); err != nil {
		h.writeError(w, r, rq.bodyErr(err), rq.body.read)
	}
}

// route extracts the bucket and key from the Host (virtual-hosted-style)
// or the path (path-style).
func (h *handler) route(r *http.Request) (bucket, key string, vhost bool) {
	path := r.URL.Path
	if host := hostname(r.Host); host != "" {
		for _, d := range h.cfg.Domains {
			if b, ok := strings.CutSuffix(host, "."+d); ok && b != "" {
				return b, strings.TrimPrefix(path, "/"), true
			}
		}
	}
	path = strings.TrimPrefix(path, "/")
	bucket, key, _ = strings.Cut(path, "/")
	return bucket, key, false
}

func hostname(hostport string) string {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	return strings.ToLower(h)
}

// dispatch picks the operation from the method, bucket, key and query.
func (h *handler) dispatch(w http.ResponseWriter, rq *request) error {
	q := rq.q
	if rq.bucket == "" {
		if rq.Method == http.MethodGet {
			return h.listBuckets(w, rq)
		}
		return errMethodNotAllowed
	}
	if err := object.ValidateBucketName(rq.bucket); err != nil {
		return err
	}
	if rq.Method != http.MethodGet && rq.Method != http.MethodHead && hasUnknownParam(q) {
		// An API this layer does not know must not be taken for the
		// CreateBucket, DeleteBucket or DeleteObject its method and path
		// look like.
		return errNotImplemented
	}
	if rq.key == "" {
		switch rq.Method {
		case http.MethodGet:
			switch {
			case q.Has("location"):
				return h.getBucketLocation(w, rq)
			case q.Has("versioning"):
				return h.getBucketVersioning(w, rq)
			case q.Has("uploads"):
				return h.listMultipartUploads(w, rq)
			case hasAny(q, bucketSubresources...) || q.Has("versions"):
				return errNotImplemented
			case q.Get("list-type") == "2":
				return h.listObjectsV2(w, rq)
			default:
				return h.listObjectsV1(w, rq)
			}
		case http.MethodPut:
			return h.createBucket(w, rq)
		case http.MethodDelete:
			return h.deleteBucket(w, rq)
		case http.MethodHead:
			return h.headBucket(w, rq)
		case http.MethodPost:
			if q.Has("delete") {
				return h.deleteObjects(w, rq)
			}
			return errNotImplemented
		}
		return errMethodNotAllowed
	}
	if err := validKey(rq.key); err != nil {
		return err
	}
	if hasAny(q, "acl", "tagging", "retention", "legal-hold", "torrent", "restore", "select", "attributes") {
		return errNotImplemented
	}
	if err := checkVersionID(q.Get("versionId")); err != nil {
		return err
	}
	if err := refuseUnimplemented(rq); err != nil {
		return err
	}
	switch rq.Method {
	case http.MethodGet:
		if q.Has("uploadId") {
			return h.listParts(w, rq)
		}
		return h.getObject(w, rq)
	case http.MethodHead:
		return h.headObject(w, rq)
	case http.MethodPut:
		if q.Has("uploadId") || q.Has("partNumber") {
			if rq.Header.Get("X-Amz-Copy-Source") != "" {
				return h.uploadPartCopy(w, rq)
			}
			return h.uploadPart(w, rq)
		}
		if rq.Header.Get("X-Amz-Copy-Source") != "" {
			return h.copyObject(w, rq)
		}
		return h.putObject(w, rq)
	case http.MethodPost:
		if q.Has("uploads") {
			return h.createMultipartUpload(w, rq)
		}
		if q.Has("uploadId") {
			return h.completeMultipartUpload(w, rq)
		}
		return errNotImplemented
	case http.MethodDelete:
		if q.Has("uploadId") {
			return h.abortMultipartUpload(w, rq)
		}
		return h.deleteObject(w, rq)
	}
	return errMethodNotAllowed
}

// refuseUnimplemented answers NotImplemented to an object request that
// asks for a feature this layer does not have, which a client would
// otherwise believe took effect:
//   - a conditional write or delete (If-Match, If-None-Match on PUT and
//     POST; If-Match and its size and time forms on DELETE), whose check
//     must be atomic with the change on every copy: ignoring it could
//     delete or replace an object another client wrote meanwhile;
//   - an append (S3 Express's x-amz-write-offset-bytes), which would
//     otherwise replace the object with the appended piece;
//   - SSE-C (the object would be stored, and served, in the clear), Object
//     Lock (a delete would still succeed), tags and website redirects
//     (silently dropped).
func refuseUnimplemented(rq *request) error {
	hdr := rq.Header
	var conditional []string
	switch rq.Method {
	case http.MethodPut, http.MethodPost:
		conditional = []string{"If-Match", "If-None-Match"}
	case http.MethodDelete:
		conditional = []string{"If-Match", "X-Amz-If-Match-Size", "X-Amz-If-Match-Last-Modified-Time", "X-Amz-If-Match-Initiated-Time"}
	}
	for _, k := range conditional {
		if hdr.Get(k) != "" {
			return fmt.Errorf("%w: conditional %s (%s)", errNotImplemented, rq.Method, k)
		}
	}
	for k := range hdr {
		lk := strings.ToLower(k)
		switch {
		case strings.HasPrefix(lk, "x-amz-server-side-encryption-customer-"),
			strings.HasPrefix(lk, "x-amz-copy-source-server-side-encryption-customer-"):
			return fmt.Errorf("%w: server-side encryption with customer keys (%s)", errNotImplemented, k)
		case rq.Method != http.MethodPut && rq.Method != http.MethodPost:
		case strings.HasPrefix(lk, "x-amz-object-lock-"), lk == "x-amz-write-offset-bytes",
			lk == "x-amz-tagging", lk == "x-amz-website-redirect-location":
			return fmt.Errorf("%w: %s", errNotImplemented, k)
		}
	}
	return nil
}

// bucketSubresources are the bucket configuration APIs this layer does not
// implement; a GET of one gets NotImplemented rather than being taken for a
// listing (PUT, POST and DELETE refuse every parameter outside
// writeParams).
var bucketSubresources = []string{"acl", "policy", "lifecycle", "cors", "tagging", "website", "replication",
	"encryption", "object-lock", "notification", "logging", "accelerate", "requestPayment", "ownershipControls",
	"publicAccessBlock", "analytics", "metrics", "inventory", "intelligent-tiering", "policyStatus"}

// writeParams are the query parameters a PUT, POST or DELETE may carry:
// those of the operations dispatch knows, and the SDKs' x-id. Signature
// parameters (X-Amz-*, and SigV2's) are allowed too.
var writeParams = map[string]bool{"uploads": true, "uploadId": true, "partNumber": true, "delete": true, "versionId": true,
	"x-id": true, "AWSAccessKeyId": true, "Signature": true, "Expires": true}

// hasUnknownParam reports whether q names a parameter outside writeParams.
func hasUnknownParam(q map[string][]string) bool {
	for name := range q {
		if !writeParams[name] && !strings.HasPrefix(strings.ToLower(name), "x-amz-") {
			return true
		}
	}
	return false
}

func hasAny(q map[string][]string, names ...string) bool {
	for _, n := range names {
		if _, ok := q[n]; ok {
			return true
		}
	}
	return false
}

// writeXML sends v as a 200 XML response.
func writeXML(w http.ResponseWriter, v any) error {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(http.StatusOK)
	writeXMLBody(w, v)
	return nil
}
