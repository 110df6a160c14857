// Package s3api serves the S3 REST API over HTTP: routing (path-style and
// virtual-hosted-style), request parsing, XML bodies, AWS Signature V4
// verification (subpackage sigv4) and the one mapping from errors to S3 error
// codes and HTTP statuses. It stores nothing itself: every operation goes to
// an Objects implementation (the cluster node, or s3mem in tests).
package s3api

import (
	"context"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/slipstream-io/slipstream/internal/object"
)

// Objects is what the S3 layer needs from the cluster. The node package
// implements it (routing to owners, replicas, tiering); s3api/s3mem has an
// in-memory implementation for tests. Errors are object.Err* sentinels
// (wrapped with %w); s3api maps them to S3 codes in one place (errors.go).
//
// What the handler guarantees to an implementation:
//   - bucket names and keys have passed object.ValidateBucketName and
//     object.ValidateKey before any call;
//   - a PUT or UploadPart body yields exactly opts.Size bytes (the decoded
//     size for aws-chunked uploads) when it is sound; when it is not (bad
//     signature, checksum or SHA-256, truncated or malformed), a Read
//     returns an error instead of the last bytes, so an implementation that
//     stores only bodies read in full without error (even with io.CopyN)
//     never stores a bad one (a body of size 0, which io.CopyN does not
//     read, is read and verified before the call). The handler reports
//     the body's own error;
//   - the metadata a client sets on PUT, CreateMultipartUpload or a copy
//     that replaces it (key, ContentType, UserMeta, Headers) takes at most
//     3000 bytes as JSON text (checkMetaSize), which leaves room for an
//     implementation's own fields in the store's 3900-byte xattr;
//   - ListOptions.StartAfter is compared bytewise and may be a common
//     prefix followed by the byte 0xFF, meaning "after every key under that
//     prefix" (continuing a listing past a rolled-up prefix); no valid key
//     contains 0xFF.
type Objects interface {
	ListBuckets(ctx context.Context) ([]object.BucketInfo, error)
	CreateBucket(ctx context.Context, bucket string) error
	DeleteBucket(ctx context.Context, bucket string) error
	HeadBucket(ctx context.Context, bucket string) error
	ListObjects(ctx context.Context, bucket string, opts object.ListOptions) (object.ListResult, error)

	PutObject(ctx context.Context, bucket, key string, body io.Reader, opts object.PutOptions) (object.Info, error)
	GetObject(ctx context.Context, bucket, key string, opts object.GetOptions) (object.Reader, error)
	HeadObject(ctx context.Context, bucket, key string) (object.Info, error)
	DeleteObject(ctx context.Context, bucket, key string) error
	CopyObject(ctx context.Context, srcBucket, srcKey, dstBucket, dstKey string, opts object.CopyOptions) (object.Info, error)

	CreateMultipartUpload(ctx context.Context, bucket, key string, opts object.PutOptions) (uploadID string, err error)
	UploadPart(ctx context.Context, bucket, key, uploadID string, part int, body io.Reader, opts object.PutOptions) (object.PartInfo, error)
	CompleteMultipartUpload(ctx context.Context, bucket, key, uploadID string, parts []object.CompletePart) (object.Info, error)
	AbortMultipartUpload(ctx context.Context, bucket, key, uploadID string) error
	ListParts(ctx context.Context, bucket, key, uploadID string) ([]object.PartInfo, error)
	ListMultipartUploads(ctx context.Context, bucket, prefix string) ([]object.UploadInfo, error)
}

// FileReader is an optional ability of an object.Reader: the bytes are in a
// local file, so the handler can let the kernel copy them (sendfile): it
// seeks f to offset and copies length bytes with io.CopyN(w, f, length).
type FileReader interface {
	File() (f *os.File, offset, length int64)
}

// Config configures the S3 handler.
type Config struct {
	Region      string            // default "us-east-1"
	Credentials map[string]string // access key -> secret key; empty map = reject every request
	Domains     []string          // virtual-hosted-style base domains, e.g. "s3.local" -> bucket.s3.local
	MaxSkew     time.Duration     // default 15m
	Log         *slog.Logger
}
