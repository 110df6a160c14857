// Package backend defines the remote storage a cache or writeback bucket sits
// in front of: a small, transport-neutral interface (context first, streaming
// readers, a not-found sentinel, no HTTP types) with two implementations, an
// S3 client (backend/s3) and a directory on a filesystem such as an NFS mount
// (backend/fs). backend/open builds either from a Spec; backend/backendtest is
// the conformance suite both pass.
package backend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/slipstream-io/slipstream/internal/object"
)

// Sentinel errors. ErrNotFound also matches object.ErrNotFound, and
// ErrInvalidRange matches object.ErrInvalidRange, so the S3 layer maps them
// without knowing about backends.
var (
	ErrNotFound     = fmt.Errorf("backend: object not found: %w", object.ErrNotFound)
	ErrInvalidRange = fmt.Errorf("backend: %w", object.ErrInvalidRange)
	ErrInvalidSpec  = errors.New("backend: invalid backend spec")
)

// Attrs describe a remote object.
type Attrs struct {
	Key         string
	Size        int64  // size of the whole object, also for ranged reads
	ETag        string // without quotes
	Version     string // version id if the backend has versions, else ""
	ModTime     time.Time
	ContentType string
	UserMeta    map[string]string // lower-case names without the x-amz-meta- prefix
	Headers     map[string]string // object.StoredHeaders, by canonical name
	// ETagNotMD5 is set when the backend says the ETag is not the body's
	// MD5 even if it looks like one (S3 objects encrypted with SSE-KMS or
	// SSE-C).
	ETagNotMD5 bool
}

// HasBodyMD5 reports whether a.ETag is the MD5 of the object's body, which
// a reader can verify.
func (a Attrs) HasBodyMD5() bool { return !a.ETagNotMD5 && IsMD5ETag(a.ETag) }

// PutAttrs go with a Put.
type PutAttrs struct {
	ContentType string
	UserMeta    map[string]string
	Headers     map[string]string // object.StoredHeaders, by canonical name
}

// ListOptions select a page of a listing.
type ListOptions struct {
	Prefix     string
	Delimiter  string // "" or "/" (other delimiters are not supported by every backend)
	StartAfter string // keys (and common prefixes) strictly greater than this
	Limit      int    // at most this many entries (objects + common prefixes); 0 = 1000
}

// ListPage is one page of a listing, sorted by key.
type ListPage struct {
	Objects        []Attrs // ContentType, UserMeta and Headers are not filled in
	CommonPrefixes []string
	Truncated      bool
	Next           string // pass as StartAfter to get the next page
}

// Backend is a remote object store holding one bucket (or a prefix of one).
// Keys are object keys as the cluster sees them; an implementation applies
// its own prefix. Implementations are safe for concurrent use.
type Backend interface {
	// Stat returns the attributes of key, or ErrNotFound.
	Stat(ctx context.Context, key string) (Attrs, error)
	// Get opens key, or the range rng of it (ErrInvalidRange when it cannot
	// be satisfied). The returned Attrs.Size is the size of the whole object;
	// the reader delivers only the range. The caller closes the reader.
	Get(ctx context.Context, key string, rng *object.Range) (io.ReadCloser, Attrs, error)
	// Put stores r as key, streaming it. size is the exact length of r, or -1
	// if unknown. It returns the attributes of the stored object.
	Put(ctx context.Context, key string, r io.Reader, size int64, attrs PutAttrs) (Attrs, error)
	// Delete removes key. Deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// List returns one page of keys in order.
	List(ctx context.Context, opts ListOptions) (ListPage, error)
	// String names the backend for logs ("s3://bucket/prefix", "fs:///path").
	String() string
}

// Spec says how to reach a backend. It is what bucket properties store.
type Spec struct {
	Kind      string `json:"kind" yaml:"kind"`                             // "s3" or "fs"
	Endpoint  string `json:"endpoint,omitempty" yaml:"endpoint,omitempty"` // s3: http(s)://host:port; empty = AWS
	Region    string `json:"region,omitempty" yaml:"region,omitempty"`
	Bucket    string `json:"bucket,omitempty" yaml:"bucket,omitempty"`
	Prefix    string `json:"prefix,omitempty" yaml:"prefix,omitempty"` // prepended to every key
	PathStyle bool   `json:"pathStyle,omitempty" yaml:"pathStyle,omitempty"`
	AccessKey string `json:"accessKey,omitempty" yaml:"accessKey,omitempty"` // empty = default credential chain
	SecretKey string `json:"secretKey,omitempty" yaml:"secretKey,omitempty"`
	Path      string `json:"path,omitempty" yaml:"path,omitempty"` // fs: the directory

	// Tuning (s3). Zero values take defaults.
	PartSize        int64 `json:"partSize,omitempty" yaml:"partSize,omitempty"`               // multipart part size (default 8 MiB, min 5 MiB)
	UploadParallel  int   `json:"uploadParallel,omitempty" yaml:"uploadParallel,omitempty"`   // parts in flight per upload (default 4)
	MaxConnsPerHost int   `json:"maxConnsPerHost,omitempty" yaml:"maxConnsPerHost,omitempty"` // idle connections kept per host (default 64)
}

// Validate checks that the spec names a usable backend.
func (s Spec) Validate() error {
	switch s.Kind {
	case "s3":
		if s.Bucket == "" {
			return fmt.Errorf("%w: s3 backend needs a bucket", ErrInvalidSpec)
		}
		if (s.AccessKey == "") != (s.SecretKey == "") {
			return fmt.Errorf("%w: give both access key and secret key, or neither", ErrInvalidSpec)
		}
		if s.PartSize != 0 && s.PartSize < object.MinPartSize {
			return fmt.Errorf("%w: part size %d is below the S3 minimum %d", ErrInvalidSpec, s.PartSize, object.MinPartSize)
		}
	case "fs":
		if s.Path == "" {
			return fmt.Errorf("%w: fs backend needs a path", ErrInvalidSpec)
		}
	default:
		return fmt.Errorf("%w: unknown kind %q (want s3 or fs)", ErrInvalidSpec, s.Kind)
	}
	return nil
}

// IsMD5ETag reports whether etag is a plain hex MD5 of the body (a single-part
// upload), which a reader can verify.
func IsMD5ETag(etag string) bool {
	if len(etag) != 32 {
		return false
	}
	for i := 0; i < len(etag); i++ {
		c := etag[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
