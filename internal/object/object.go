// Package object holds the vocabulary every layer of Slipstream shares about
// buckets and objects: their metadata, the options of each operation, name
// validation, and the sentinel errors. It does no I/O. The S3 layer maps these
// errors to S3 error codes in exactly one place (internal/s3api).
package object

import (
	"errors"
	"fmt"
	"io"
	"time"
)

// Sentinel errors. Wrap them with %w; test them with errors.Is.
var (
	ErrBucketNotFound    = errors.New("object: no such bucket")
	ErrBucketExists      = errors.New("object: bucket already exists")
	ErrBucketNotEmpty    = errors.New("object: bucket not empty")
	ErrInvalidBucketName = errors.New("object: invalid bucket name")
	ErrNotFound          = errors.New("object: no such key")
	ErrInvalidKey        = errors.New("object: invalid object key")
	ErrBadDigest         = errors.New("object: content MD5 does not match")
	ErrIncompleteBody    = errors.New("object: body shorter than its declared size")
	ErrTooLarge          = errors.New("object: body longer than its declared size")
	ErrNoSpace           = errors.New("object: no space left on the mountpaths")
	ErrPrecondition      = errors.New("object: precondition failed")
	ErrNotModified       = errors.New("object: not modified")
	ErrInvalidRange      = errors.New("object: requested range not satisfiable")
	ErrUploadNotFound    = errors.New("object: no such multipart upload")
	ErrInvalidPart       = errors.New("object: invalid part")
	ErrInvalidPartOrder  = errors.New("object: parts not in ascending order")
	ErrEntityTooSmall    = errors.New("object: part smaller than the minimum")
	ErrUnavailable       = errors.New("object: no live replica could serve the request")
	ErrBackend           = errors.New("object: remote backend failed")
	ErrInvalidArgument   = errors.New("object: invalid argument")
	ErrSlowDown          = errors.New("object: too many dirty bytes, slow down")

	// ErrBackendDenied is a remote backend refusing the cluster access (its
	// credentials, a policy, a file's permissions). It is an ErrBackend
	// that retrying does not mend.
	ErrBackendDenied = fmt.Errorf("%w: access denied", ErrBackend)
)

// MaxKeyLen is the longest object key S3 allows, in bytes.
const MaxKeyLen = 1024

// Info is an object's metadata. It is stored with the object and travels with
// every copy of it.
type Info struct {
	Bucket      string            `json:"bucket"`
	Key         string            `json:"key"`
	Size        int64             `json:"size"`
	ETag        string            `json:"etag"`               // without quotes: hex MD5, or hex-N for multipart
	Checksum    string            `json:"checksum,omitempty"` // "crc32c:<hex>" of the whole body
	ContentType string            `json:"contentType,omitempty"`
	UserMeta    map[string]string `json:"userMeta,omitempty"` // x-amz-meta-* without the prefix, lower case
	Headers     map[string]string `json:"headers,omitempty"`  // the StoredHeaders the client sent, by canonical name
	Parts       []PartRun         `json:"parts,omitempty"`    // how a multipart upload cut it; none for one part
	ModTime     time.Time         `json:"modTime"`
	AccessTime  time.Time         `json:"accessTime,omitempty"`

	// Remote backend state, for cache and writeback buckets.
	BackendETag    string    `json:"backendETag,omitempty"`
	BackendVersion string    `json:"backendVersion,omitempty"`
	ValidatedAt    time.Time `json:"validatedAt,omitempty"`
	Dirty          bool      `json:"dirty,omitempty"` // not yet in the backend: never evicted
	// Pinned: an object of a local bucket, which no backend holds: the
	// cluster's copies are the only ones, so it is never evicted.
	Pinned bool `json:"pinned,omitempty"`
	// Damaged: a scrub found that this copy's bytes no longer match its
	// checksum and had no good copy to repair it from. The store keeps it
	// (for whoever can mend it) but no longer serves it.
	Damaged bool `json:"damaged,omitempty"`
}

// Evictable reports whether the store may drop the object to make room:
// only a copy of what a backend holds (clean, not pinned).
func (i Info) Evictable() bool { return !i.Dirty && !i.Pinned }

// BucketInfo describes a bucket as ListBuckets shows it.
type BucketInfo struct {
	Name    string
	Created time.Time
}

// Range is a byte range of an object. Length < 0 means "to the end".
// Suffix > 0 means "the last Suffix bytes" and ignores Offset and Length.
type Range struct {
	Offset int64
	Length int64
	Suffix int64
}

// Resolve returns the absolute offset and length of r within an object of
// the given size, or ErrInvalidRange.
func (r Range) Resolve(size int64) (offset, length int64, err error) {
	if r.Suffix > 0 {
		if r.Suffix > size {
			return 0, size, nil
		}
		return size - r.Suffix, r.Suffix, nil
	}
	if r.Offset < 0 || r.Offset >= size {
		return 0, 0, ErrInvalidRange
	}
	length = r.Length
	if length < 0 || r.Offset+length > size {
		length = size - r.Offset
	}
	return r.Offset, length, nil
}

// PutOptions go with a PUT.
type PutOptions struct {
	Size        int64  // declared body size; -1 if unknown
	ContentMD5  []byte // raw 16 bytes if the client sent Content-MD5
	ContentType string
	UserMeta    map[string]string
	Headers     map[string]string // see StoredHeaders
	// Parts, for a copy of a multipart object, says how its upload cut it
	// (ignored unless ValidParts for Size).
	Parts []PartRun `json:",omitempty"`
	// Digest, if set, gives the digest of the body as the sender upstream
	// computed it, once the body has been read to its end. A store then
	// hashes only CRC32C, checks it against the digest and takes the MD5
	// from it: every copy of a replicated write is checked end to end
	// while MD5 is computed once.
	Digest func() (Digest, error) `json:"-"`
}

// PutOptions returns the options that write a copy of the object i
// describes: its size, metadata and parts.
func (i Info) PutOptions() PutOptions {
	return PutOptions{Size: i.Size, ContentType: i.ContentType, UserMeta: i.UserMeta, Headers: i.Headers, Parts: i.Parts}
}

// GetOptions go with a GET. Conditions are evaluated by the S3 layer against
// the Info of the reader before any body byte is sent.
type GetOptions struct {
	Range *Range
}

// Reader is an open object: its metadata and a stream of its bytes (the
// requested range only, when GetOptions.Range was set).
type Reader interface {
	io.ReadCloser
	Info() Info
	// Range reports the absolute offset and length this reader delivers.
	Range() (offset, length int64)
}

// CopyOptions go with a CopyObject.
type CopyOptions struct {
	ReplaceMeta bool // x-amz-metadata-directive: REPLACE
	ContentType string
	UserMeta    map[string]string
	Headers     map[string]string // see StoredHeaders
	// CheckSource, if set, is called with the Info of the source version
	// the copy reads, before anything is written; if it returns an error
	// (ErrPrecondition for an x-amz-copy-source-if-* that does not hold),
	// the copy writes nothing and returns it. Checking the version that
	// is copied, not one looked up before, makes the conditions hold for
	// the bytes copied even if the source is replaced meanwhile.
	CheckSource func(src Info) error `json:"-"`
}

// StoredHeaders are the standard headers, besides Content-Type, that S3
// stores with an object as the client sent them on PUT (or on a copy
// that replaces the metadata) and returns on GET and HEAD.
var StoredHeaders = []string{"Cache-Control", "Content-Disposition", "Content-Encoding", "Content-Language", "Expires"}

// ListOptions select a page of a bucket listing.
type ListOptions struct {
	Prefix     string
	Delimiter  string
	StartAfter string // list keys strictly greater than this
	MaxKeys    int    // 0 means the default (1000)
}

// ListResult is one page of a listing, sorted by key.
type ListResult struct {
	Objects        []Info
	CommonPrefixes []string
	IsTruncated    bool
	NextMarker     string // last key or prefix returned; continue after it
}

// CompletePart names one part in a CompleteMultipartUpload request.
type CompletePart struct {
	PartNumber int
	ETag       string // without quotes
}

// PartInfo describes an uploaded part.
type PartInfo struct {
	PartNumber int
	ETag       string
	Size       int64
	ModTime    time.Time
}

// UploadInfo describes a multipart upload in progress.
type UploadInfo struct {
	Bucket    string
	Key       string
	UploadID  string
	Initiated time.Time
}

// MinPartSize is the smallest size S3 allows for any part but the last.
const MinPartSize = 5 << 20

// MaxPartNumber is the largest part number S3 allows.
const MaxPartNumber = 10000

// EmptyBody checks that r (nil: no body) delivers no byte: a body declared
// empty is not read by whoever sends it, so a longer one is ErrTooLarge.
func EmptyBody(r io.Reader) error {
	if r == nil {
		return nil
	}
	var one [1]byte
	n, err := io.ReadFull(r, one[:])
	switch {
	case n > 0:
		return ErrTooLarge
	case err != nil && err != io.EOF:
		return fmt.Errorf("read body: %w", err)
	}
	return nil
}
