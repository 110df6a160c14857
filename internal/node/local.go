package node

import (
	"context"
	"fmt"
	"io"

	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/peer"
	"github.com/slipstream-io/slipstream/internal/store"
)

// localService is this node's own objects: the store, checked against the
// cluster map (a bucket must exist), with the fast tier for cache and
// writeback buckets. Both the gateway (for objects this node owns) and the
// peer protocol (for requests from other gateways) use it.
type localService struct {
	meta  mapView
	store *store.Store
}

var _ peer.Local = (*localService)(nil)

// checkBucket fails unless the bucket exists; a gateway that routed a
// request here has seen it, so a miss waits briefly for this node's map.
func (l *localService) checkBucket(ctx context.Context, bucket string) error {
	if _, ok := waitMap(ctx, l.meta, hasBucket(bucket)).Bucket(bucket); !ok {
		return fmt.Errorf("%w: %s", object.ErrBucketNotFound, bucket)
	}
	return nil
}

func (l *localService) Put(ctx context.Context, bucket, key string, r io.Reader, opts peer.PutOptions) (object.Info, error) {
	if err := l.checkBucket(ctx, bucket); err != nil {
		return object.Info{}, err
	}
	return l.store.Put(ctx, bucket, key, r, storePutOptions(opts))
}

func storePutOptions(o peer.PutOptions) store.PutOptions {
	return store.PutOptions{
		PutOptions: o.PutOptions, ModTime: o.ModTime, ETag: o.ETag,
		BackendETag: o.BackendETag, BackendVersion: o.BackendVersion, Dirty: o.Dirty,
	}
}

func (l *localService) Get(ctx context.Context, bucket, key string, rng *object.Range) (object.Reader, error) {
	if err := l.checkBucket(ctx, bucket); err != nil {
		return nil, err
	}
	return l.store.Get(ctx, bucket, key, rng)
}

func (l *localService) Stat(ctx context.Context, bucket, key string) (object.Info, error) {
	if err := l.checkBucket(ctx, bucket); err != nil {
		return object.Info{}, err
	}
	return l.store.Stat(ctx, bucket, key)
}

func (l *localService) Delete(ctx context.Context, bucket, key string) error {
	if err := l.checkBucket(ctx, bucket); err != nil {
		return err
	}
	return l.store.Delete(ctx, bucket, key)
}

func (l *localService) List(ctx context.Context, bucket string, opts object.ListOptions) (object.ListResult, error) {
	if err := l.checkBucket(ctx, bucket); err != nil {
		return object.ListResult{}, err
	}
	return l.store.List(ctx, bucket, opts)
}

// DeleteBucket removes the bucket's local directories; the bucket is
// already gone from the cluster map when peers are asked.
func (l *localService) DeleteBucket(ctx context.Context, bucket string) error {
	return l.store.DeleteBucket(ctx, bucket)
}

func (l *localService) CreateUpload(ctx context.Context, bucket, key string, opts object.PutOptions) (string, error) {
	if err := l.checkBucket(ctx, bucket); err != nil {
		return "", err
	}
	return l.store.CreateUpload(ctx, bucket, key, opts)
}

func (l *localService) PutPart(ctx context.Context, bucket, key, uploadID string, part int, r io.Reader, opts object.PutOptions) (object.PartInfo, error) {
	if err := l.checkBucket(ctx, bucket); err != nil {
		return object.PartInfo{}, err
	}
	return l.store.PutPart(ctx, bucket, key, uploadID, part, r, opts)
}

func (l *localService) ListParts(ctx context.Context, bucket, key, uploadID string) ([]object.PartInfo, error) {
	return l.store.ListParts(ctx, bucket, key, uploadID)
}

func (l *localService) ListUploads(ctx context.Context, bucket, prefix string) ([]object.UploadInfo, error) {
	return l.store.ListUploads(ctx, bucket, prefix)
}

func (l *localService) AbortUpload(ctx context.Context, bucket, key, uploadID string) error {
	return l.store.AbortUpload(ctx, bucket, key, uploadID)
}

func (l *localService) CompleteUpload(ctx context.Context, bucket, key, uploadID string, parts []object.CompletePart) (object.Info, error) {
	if err := l.checkBucket(ctx, bucket); err != nil {
		return object.Info{}, err
	}
	return l.store.CompleteUpload(ctx, bucket, key, uploadID, parts)
}
