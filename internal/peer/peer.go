// Package peer is the intra-cluster object protocol: how one node asks
// another to store, read, list or delete objects and multipart parts on its
// own mountpaths. It is plain HTTP on the intra-cluster addresses, bodies
// stream in both directions (reads use sendfile on the serving side), and
// errors travel as codes mapped to the object sentinels in one table here.
//
// The server side serves any Local implementation; the client side is a
// Client that sends requests through a Doer (the multihomed transport in a
// real node, a plain http.Client in tests).
package peer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/slipstream-io/slipstream/internal/object"
)

// ErrProtocol is wrapped by errors in the peer protocol itself (a response
// that cannot be decoded, an unknown error code).
var ErrProtocol = errors.New("peer: protocol error")

// PutOptions are the options of a replica write: the client's options plus
// what the gateway decided for all copies (modification time, ETag of a
// known body) and tier state.
type PutOptions struct {
	object.PutOptions
	ModTime        time.Time `json:"modTime,omitempty"`
	ETag           string    `json:"etag,omitempty"`
	BackendETag    string    `json:"backendETag,omitempty"`
	BackendVersion string    `json:"backendVersion,omitempty"`
	Dirty          bool      `json:"dirty,omitempty"`
	// Replica marks a copy written for redundancy, not by the owner: a
	// writeback replica records the object in its journal so it can take
	// over destaging if the owner dies.
	Replica bool   `json:"replica,omitempty"`
	Owner   string `json:"owner,omitempty"`
	Seq     uint64 `json:"seq,omitempty"` // the owner's journal sequence of a writeback replica
	// DigestFooter says that the body ends with the sender's digest
	// (object.DigestLen bytes after Size bytes of data); the client sets it
	// when PutOptions.Digest is given.
	DigestFooter bool `json:"digestFooter,omitempty"`
	// KeepNewer asks for a plain copy (a rebalance moving an object) that
	// is stored only if the node holds no version of the key as new as
	// ModTime and remembers no later delete of it; otherwise the answer
	// is object.ErrPrecondition.
	KeepNewer bool `json:"keepNewer,omitempty"`
	// Checksum, if set, is the CRC32C the body must have ("crc32c:<hex>",
	// as object.Info.Checksum): a copy of a stored object (a rebalance, a
	// completed upload's replica) carries the checksum its source recorded
	// when it was written, so that bytes that rotted on the source's drive
	// are refused (store.ErrCorrupt) instead of stored as a good copy.
	Checksum string `json:"checksum,omitempty"`
}

// Replica operations an owner sends to the holders of its writeback
// replicas.
const (
	ReplicaDelete   = "delete"   // the owner deleted the object
	ReplicaDestaged = "destaged" // the owner's write reached the backend
	// ReplicaAbandoned: the owner's write failed on the owner itself; it
	// will never be destaged, and its replicas go.
	ReplicaAbandoned = "abandoned"
	// ReplicaTombstone asks a node that deleted an object to remember the
	// delete (Time): a holder of a copy was down or unreachable and missed
	// it, and will ask when it comes back.
	ReplicaTombstone = "tombstone"
	// ReplicaWrittenThrough tells the holder of a plain copy of a cache
	// bucket's object that the owner wrote that version (ETag) through to
	// the backend as BackendETag and BackendVersion: the copy is then
	// validated against the backend as the owner's is, also once it is
	// the only one left.
	ReplicaWrittenThrough = "written-through"
)

// ReplicaOp is one replica operation.
type ReplicaOp struct {
	Op     string    `json:"op"`
	Owner  string    `json:"owner"`
	Seq    uint64    `json:"seq"`
	Bucket string    `json:"bucket"`
	Key    string    `json:"key"`
	Time   time.Time `json:"time,omitzero"`
	// ETag, BackendETag and BackendVersion of ReplicaWrittenThrough.
	ETag           string `json:"etag,omitempty"`
	BackendETag    string `json:"backendETag,omitempty"`
	BackendVersion string `json:"backendVersion,omitempty"`
}

// DeletedError is a "not found" answer from a node that remembers deleting
// the object, and when.
type DeletedError struct {
	At time.Time
}

func (e *DeletedError) Error() string {
	return "object deleted at " + e.At.UTC().Format(time.RFC3339Nano)
}

// Unwrap makes a DeletedError an object.ErrNotFound.
func (e *DeletedError) Unwrap() error { return object.ErrNotFound }

type asIsKey struct{}

// AsIs marks ctx so that a Stat through it answers from the node's own
// copy as it is: without the check a node that came back after a down mark
// makes of a copy it may have missed writes to (the checks themselves ask
// this way, so that two returning nodes never wait on each other), and,
// in a tiered bucket, without asking the backend. A Delete through it
// removes the node's own copy only: in a cache bucket the owner deletes
// from the backend, once.
func AsIs(ctx context.Context) context.Context { return context.WithValue(ctx, asIsKey{}, true) }

// IsAsIs reports whether ctx was marked by AsIs.
func IsAsIs(ctx context.Context) bool { v, _ := ctx.Value(asIsKey{}).(bool); return v }

type downsKey struct{}

// WithDowns marks ctx with how many times the caller's map has the node it
// asks marked down. A Get or Stat through it lets a node that came back
// after a down mark, and has not yet checked its copies for it (its own
// map may not show the mark yet, while the caller's, which routed the
// read to it, does), check the copy before serving it.
func WithDowns(ctx context.Context, n uint64) context.Context {
	return context.WithValue(ctx, downsKey{}, n)
}

// DownsOf returns what WithDowns marked ctx with, if anything.
func DownsOf(ctx context.Context) (uint64, bool) {
	n, ok := ctx.Value(downsKey{}).(uint64)
	return n, ok
}

// Local is what a node serves to its peers: the objects on its own
// mountpaths (and, for cache buckets, its fills from the backend).
type Local interface {
	Put(ctx context.Context, bucket, key string, r io.Reader, opts PutOptions) (object.Info, error)
	Get(ctx context.Context, bucket, key string, rng *object.Range) (object.Reader, error)
	Stat(ctx context.Context, bucket, key string) (object.Info, error)
	Delete(ctx context.Context, bucket, key string) error
	List(ctx context.Context, bucket string, opts object.ListOptions) (object.ListResult, error)
	DeleteBucket(ctx context.Context, bucket string) error

	CreateUpload(ctx context.Context, bucket, key string, opts object.PutOptions) (string, error)
	PutPart(ctx context.Context, bucket, key, uploadID string, part int, r io.Reader, opts object.PutOptions) (object.PartInfo, error)
	ListParts(ctx context.Context, bucket, key, uploadID string) ([]object.PartInfo, error)
	ListUploads(ctx context.Context, bucket, prefix string) ([]object.UploadInfo, error)
	AbortUpload(ctx context.Context, bucket, key, uploadID string) error
	CompleteUpload(ctx context.Context, bucket, key, uploadID string, parts []object.CompletePart) (object.Info, error)

	// Replica applies an owner's replica operation on this holder.
	Replica(ctx context.Context, op ReplicaOp) error
	// Fill makes bucket/key warm on this node (from its backend) and
	// reports whether it had to fetch it.
	Fill(ctx context.Context, bucket, key string) (object.Info, bool, error)
	// PendingDeletes returns, of keys of bucket, those this node deleted
	// (or holds a replica delete of) and has not destaged to the bucket's
	// backend yet, and, of prefixes, those with such a key under them. A
	// listing of the backend leaves them out.
	PendingDeletes(ctx context.Context, bucket string, keys, prefixes []string) (deleted, under []string, err error)
}

// PendingQuery is the body of a PendingDeletes call.
type PendingQuery struct {
	Bucket   string   `json:"bucket"`
	Keys     []string `json:"keys,omitempty"`
	Prefixes []string `json:"prefixes,omitempty"`
}

// PendingAnswer is its answer.
type PendingAnswer struct {
	Deleted []string `json:"deleted,omitempty"`
	Under   []string `json:"under,omitempty"`
}

// codes maps error codes on the wire to sentinels, both ways.
var codes = []struct {
	code string
	err  error
}{
	{"BucketNotFound", object.ErrBucketNotFound},
	{"BucketExists", object.ErrBucketExists},
	{"BucketNotEmpty", object.ErrBucketNotEmpty},
	{"InvalidBucketName", object.ErrInvalidBucketName},
	{"NotFound", object.ErrNotFound},
	{"InvalidKey", object.ErrInvalidKey},
	{"BadDigest", object.ErrBadDigest},
	{"IncompleteBody", object.ErrIncompleteBody},
	{"TooLarge", object.ErrTooLarge},
	{"NoSpace", object.ErrNoSpace},
	{"Precondition", object.ErrPrecondition},
	{"InvalidRange", object.ErrInvalidRange},
	{"UploadNotFound", object.ErrUploadNotFound},
	{"InvalidPart", object.ErrInvalidPart},
	{"InvalidPartOrder", object.ErrInvalidPartOrder},
	{"EntityTooSmall", object.ErrEntityTooSmall},
	{"Unavailable", object.ErrUnavailable},
	{"BackendDenied", object.ErrBackendDenied}, // before Backend, which it wraps
	{"Backend", object.ErrBackend},
	{"InvalidArgument", object.ErrInvalidArgument},
	{"SlowDown", object.ErrSlowDown},
}

func errorCode(err error) string {
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return "Internal"
}

func codeError(code, msg string) error {
	for _, c := range codes {
		if c.code == code {
			// The message is the error's text on the other node, which
			// starts with the sentinel's own text: keep it once.
			if rest, ok := strings.CutPrefix(msg, c.err.Error()); ok {
				msg = strings.TrimPrefix(rest, ": ")
				if msg == "" {
					return c.err
				}
			}
			return fmt.Errorf("%w: %s", c.err, msg)
		}
	}
	return fmt.Errorf("%w: peer answered %s: %s", ErrProtocol, code, msg)
}
