package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/peer"
	"github.com/slipstream-io/slipstream/internal/store"
	"github.com/slipstream-io/slipstream/internal/tier"
)

// localService is this node's own objects: the store, checked against the
// cluster map (a bucket must exist), with the fast tier for cache and
// writeback buckets. Both the gateway (for objects this node owns) and the
// peer protocol (for requests from other gateways) use it.
type localService struct {
	meta  mapView
	store *store.Store
	tier  *tier.Tier
	// syncTier registers the buckets of the map with the tier now (it
	// normally follows the map in the background).
	syncTier func(ctx context.Context, m *cluster.Map)
	// rejoin checks copies that may be out of date after this node was
	// away; nil checks nothing.
	rejoin *rejoin
	// tombs remembers deletes of local-bucket objects that a holder missed.
	tombs *tombstones
}

// withTier runs f, and once more after registering the map's buckets with the
// tier if f found the bucket unknown to it (a bucket created a moment ago).
func withTier[T any](ctx context.Context, l *localService, f func() (T, error)) (T, error) {
	v, err := f()
	if errors.Is(err, tier.ErrNoBucket) && l.syncTier != nil {
		l.syncTier(ctx, l.meta.Map())
		v, err = f()
	}
	return v, err
}

var _ peer.Local = (*localService)(nil)

// bucket returns the bucket's properties; a gateway that routed a request
// here has seen the bucket, so a miss waits briefly for this node's map.
func (l *localService) bucket(ctx context.Context, bucket string) (cluster.BucketProps, error) {
	b, ok := waitMap(ctx, l.meta, hasBucket(bucket)).Bucket(bucket)
	if !ok {
		return b, fmt.Errorf("%w: %s", object.ErrBucketNotFound, bucket)
	}
	return b, nil
}

// registered waits until this node knows the bucket and has registered it
// with the tier (jobs such as prefetch arrive right after a bucket is
// created through another node).
func (l *localService) registered(ctx context.Context, bucket string) error {
	if _, err := l.bucket(ctx, bucket); err != nil {
		return err
	}
	if l.syncTier != nil {
		l.syncTier(ctx, l.meta.Map())
	}
	return nil
}

// tiered reports whether the bucket goes through the tier (it has a
// backend).
func tiered(b cluster.BucketProps) bool { return b.Mode != cluster.ModeLocal }

func (l *localService) Put(ctx context.Context, bucket, key string, r io.Reader, opts peer.PutOptions) (object.Info, error) {
	b, err := l.bucket(ctx, bucket)
	if err != nil {
		return object.Info{}, err
	}
	if tiered(b) {
		return l.put(ctx, b, bucket, key, r, opts)
	}
	info, err := l.put(ctx, b, bucket, key, r, opts)
	if err != nil {
		return info, err
	}
	if _, ok := l.meta.Map().Bucket(bucket); !ok {
		// The bucket was deleted while the body arrived: the copy must not
		// outlive it (DeleteBucket purged the bucket here already, or
		// will once this node's map drops it).
		if err := l.store.DeleteVersion(context.WithoutCancel(ctx), bucket, key, info); err != nil && !errors.Is(err, object.ErrNotFound) && !errors.Is(err, store.ErrChanged) {
			return object.Info{}, err
		}
		return object.Info{}, fmt.Errorf("%w: %s was deleted", object.ErrBucketNotFound, bucket)
	}
	return info, nil
}

func (l *localService) put(ctx context.Context, b cluster.BucketProps, bucket, key string, r io.Reader, opts peer.PutOptions) (object.Info, error) {
	switch {
	case opts.KeepNewer:
		// A rebalance copy: refused (under the key lock, at commit) if a
		// newer version or a later delete got here first, however long
		// its body takes to arrive.
		defer l.tombs.holdRecent()()
		so := storePutOptions(opts, b)
		so.DeletedAt = func() (time.Time, bool) { return l.tombs.get(bucket, key) }
		return l.store.Put(ctx, bucket, key, r, so)
	case opts.Replica && b.Mode == cluster.ModeWriteback:
		// PutReplica needs no bucket registration: it journals for the owner.
		return l.tier.PutReplica(ctx, opts.Owner, opts.Seq, bucket, key, r, tier.ReplicaOptions{
			PutOptions: opts.PutOptions, ETag: opts.ETag, ModTime: opts.ModTime,
		})
	case opts.Replica || !tiered(b):
		// Plain copies: local buckets, and replicas of cache buckets (the
		// owner wrote through to the backend).
		return l.store.Put(ctx, bucket, key, r, storePutOptions(opts, b))
	default:
		return withTier(ctx, l, func() (object.Info, error) { return l.tier.Put(ctx, bucket, key, r, opts.PutOptions) })
	}
}

// storePutOptions are the store's options for a copy of an object of b:
// a local bucket's copies are the only ones there are, so they are pinned.
func storePutOptions(o peer.PutOptions, b cluster.BucketProps) store.PutOptions {
	return store.PutOptions{
		PutOptions: o.PutOptions, ModTime: o.ModTime, ETag: o.ETag,
		BackendETag: o.BackendETag, BackendVersion: o.BackendVersion, Dirty: o.Dirty, Pinned: !tiered(b),
		NoCache:   o.Replica, // reads go to the owner first
		KeepNewer: o.KeepNewer,
		Checksum:  o.Checksum,
	}
}

func (l *localService) Get(ctx context.Context, bucket, key string, rng *object.Range) (object.Reader, error) {
	b, err := l.bucket(ctx, bucket)
	if err != nil {
		return nil, err
	}
	if tiered(b) {
		return withTier(ctx, l, func() (object.Reader, error) { return l.tier.Get(ctx, bucket, key, rng) })
	}
	rd, err := l.store.Get(ctx, bucket, key, rng)
	if err != nil {
		return nil, l.deleted(bucket, key, err)
	}
	if info := rd.Info(); l.rejoin.suspect(ctx, info) && l.rejoin.check(ctx, info) {
		rd.Close()
		return nil, fmt.Errorf("%w: %s/%s: this node's copy was out of date", object.ErrNotFound, bucket, key)
	}
	return rd, nil
}

func (l *localService) Stat(ctx context.Context, bucket, key string) (object.Info, error) {
	b, err := l.bucket(ctx, bucket)
	if err != nil {
		return object.Info{}, err
	}
	if tiered(b) && !peer.IsAsIs(ctx) {
		info, err := withTier(ctx, l, func() (object.Info, error) { return l.tier.Stat(ctx, bucket, key) })
		return info, notDamaged(info, err)
	}
	info, err := l.store.Stat(ctx, bucket, key)
	if !peer.IsAsIs(ctx) {
		err = notDamaged(info, err)
	}
	err = l.deleted(bucket, key, err)
	if err == nil && !peer.IsAsIs(ctx) && l.rejoin.suspect(ctx, info) && l.rejoin.check(ctx, info) {
		return object.Info{}, fmt.Errorf("%w: %s/%s: this node's copy was out of date", object.ErrNotFound, bucket, key)
	}
	return info, err
}

// notDamaged fails a Stat of a copy a scrub found damaged beyond repair,
// as a Get of it fails: the gateway then asks the next holder.
func notDamaged(info object.Info, err error) error {
	if err == nil && info.Damaged {
		return fmt.Errorf("%w: %s/%s was found damaged and could not be repaired; it is not served", store.ErrCorrupt, info.Bucket, info.Key)
	}
	return err
}

// deleted turns a "not found" from the store into a peer.DeletedError if
// this node remembers deleting the key: the gateway then does not serve
// an older copy that a node which missed the delete still has.
func (l *localService) deleted(bucket, key string, err error) error {
	if errors.Is(err, object.ErrNotFound) {
		if at, ok := l.tombs.get(bucket, key); ok {
			return &peer.DeletedError{At: at}
		}
	}
	return err
}

func (l *localService) Delete(ctx context.Context, bucket, key string) error {
	b, err := l.bucket(ctx, bucket)
	if err != nil {
		return err
	}
	if tiered(b) && peer.IsAsIs(ctx) && b.Mode == cluster.ModeCache {
		// A copy the owner wrote through: the owner deletes the backend's.
		return l.store.Delete(ctx, bucket, key)
	}
	if tiered(b) {
		_, err := withTier(ctx, l, func() (struct{}, error) { return struct{}{}, l.tier.Delete(ctx, bucket, key) })
		return err
	}
	// A rebalance copy of an older version may be on its way here.
	l.tombs.noteDelete(bucket, key, time.Now())
	return l.store.Delete(ctx, bucket, key)
}

// List lists this node's own objects (for a tiered bucket, the gateway adds
// the backend's listing with ListBackend).
func (l *localService) List(ctx context.Context, bucket string, opts object.ListOptions) (object.ListResult, error) {
	if _, err := l.bucket(ctx, bucket); err != nil {
		return object.ListResult{}, err
	}
	return l.store.List(ctx, bucket, opts)
}

// ListBackend lists a tiered bucket's backend merged with this node's
// objects not yet destaged.
func (l *localService) ListBackend(ctx context.Context, bucket string, opts object.ListOptions) (object.ListResult, error) {
	return withTier(ctx, l, func() (object.ListResult, error) { return l.tier.List(ctx, bucket, opts) })
}

// DeleteBucket removes what this node holds of a bucket the cluster map
// no longer has: its directories, and any object or upload a request that
// raced the delete left (it waits, bounded, for this node's map to drop
// the bucket, and refuses if it does not).
func (l *localService) DeleteBucket(ctx context.Context, bucket string) error {
	m := waitMap(ctx, l.meta, func(m *cluster.Map) bool { return !hasBucket(bucket)(m) })
	if hasBucket(bucket)(m) {
		return fmt.Errorf("%w: bucket %s is still in this node's map", object.ErrUnavailable, bucket)
	}
	return l.store.PurgeBucket(ctx, bucket, time.Now())
}

func (l *localService) CreateUpload(ctx context.Context, bucket, key string, opts object.PutOptions) (string, error) {
	b, err := l.bucket(ctx, bucket)
	if err != nil {
		return "", err
	}
	return l.store.CreateUpload(ctx, bucket, key, store.UploadOptions{PutOptions: opts, Pinned: !tiered(b), Dirty: b.Mode == cluster.ModeWriteback})
}

func (l *localService) PutPart(ctx context.Context, bucket, key, uploadID string, part int, r io.Reader, opts object.PutOptions) (object.PartInfo, error) {
	if _, err := l.bucket(ctx, bucket); err != nil {
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

// CompleteUpload assembles the object. A cache bucket's completion is
// written through to the backend before it is committed; a writeback
// bucket's is then adopted by the tier like a PUT (journaled and
// replicated) before the client is answered.
//
// A completion retried after its upload is gone (the first attempt
// committed the object, then failed to replicate it, or its answer was
// lost) finds the object these parts made and answers with it, as S3 does;
// a writeback bucket's is adopted again, so that the retry succeeds only
// once the object has its replicas.
func (l *localService) CompleteUpload(ctx context.Context, bucket, key, uploadID string, parts []object.CompletePart) (object.Info, error) {
	b, err := l.bucket(ctx, bucket)
	if err != nil {
		return object.Info{}, err
	}
	info, err := l.completeUpload(ctx, b, bucket, key, uploadID, parts)
	if !errors.Is(err, object.ErrUploadNotFound) || !tiered(b) {
		return info, err
	}
	done, ok := completedAs(ctx, l.store, bucket, key, parts)
	if !ok {
		return info, err
	}
	if b.Mode == cluster.ModeWriteback {
		return withTier(ctx, l, func() (object.Info, error) { return l.tier.Adopt(ctx, bucket, key) })
	}
	return done, nil // a cache bucket's copy is committed once the backend has it
}

func (l *localService) completeUpload(ctx context.Context, b cluster.BucketProps, bucket, key, uploadID string, parts []object.CompletePart) (object.Info, error) {
	if b.Mode == cluster.ModeWriteback {
		// The dirty-bytes cap holds for large objects too: a completion
		// over it answers SlowDown with the upload intact, to be retried.
		size, err := l.uploadSize(ctx, bucket, key, uploadID, parts)
		if err != nil {
			return object.Info{}, err
		}
		release, err := withTier(ctx, l, func() (func(), error) { return l.tier.ReserveDirty(ctx, bucket, size) })
		if err != nil {
			return object.Info{}, err
		}
		defer release()
	}
	if b.Mode == cluster.ModeCache {
		return withTier(ctx, l, func() (object.Info, error) {
			return l.tier.CompleteThrough(ctx, bucket, key, func(o store.CompleteOptions) (object.Info, error) {
				return l.store.CompleteUploadWith(ctx, bucket, key, uploadID, parts, o)
			})
		})
	}
	info, err := l.store.CompleteUpload(ctx, bucket, key, uploadID, parts)
	if err != nil || b.Mode != cluster.ModeWriteback {
		return info, err
	}
	return withTier(ctx, l, func() (object.Info, error) { return l.tier.Adopt(ctx, bucket, key) })
}

// uploadSize is the size of the object completing an upload with parts
// would make (parts not uploaded count nothing: the completion refuses
// them).
func (l *localService) uploadSize(ctx context.Context, bucket, key, uploadID string, parts []object.CompletePart) (int64, error) {
	have, err := l.store.ListParts(ctx, bucket, key, uploadID)
	if err != nil {
		return 0, err
	}
	sizes := make(map[int]int64, len(have))
	for _, p := range have {
		sizes[p.PartNumber] = p.Size
	}
	var n int64
	for _, p := range parts {
		n += sizes[p.PartNumber]
	}
	return n, nil
}

func (l *localService) Replica(ctx context.Context, op peer.ReplicaOp) error {
	switch op.Op {
	case peer.ReplicaDelete:
		return l.tier.DeleteReplica(ctx, op.Owner, op.Seq, op.Bucket, op.Key)
	case peer.ReplicaDestaged:
		return l.tier.ReplicaDestaged(ctx, op.Owner, op.Seq, op.Bucket, op.Key)
	case peer.ReplicaAbandoned:
		return l.tier.ReplicaAbandoned(ctx, op.Owner, op.Seq, op.Bucket, op.Key)
	case peer.ReplicaTombstone:
		if l.tombs == nil {
			return fmt.Errorf("%w: this node keeps no tombstones", object.ErrInvalidArgument)
		}
		if err := object.ValidateKey(op.Key); err != nil {
			return err
		}
		return l.tombs.add(op.Bucket, op.Key, op.Time)
	case peer.ReplicaWrittenThrough:
		return l.writtenThrough(ctx, op)
	}
	return fmt.Errorf("%w: replica operation %q", object.ErrInvalidArgument, op.Op)
}

// writtenThrough records on this node's plain copy of a cache bucket's
// object the backend version its owner wrote it through as, if the copy
// is still that version (op.ETag) and records none yet.
func (l *localService) writtenThrough(ctx context.Context, op peer.ReplicaOp) error {
	if op.BackendETag == "" {
		return fmt.Errorf("%w: %s without a backend ETag", object.ErrInvalidArgument, op.Op)
	}
	_, err := l.store.UpdateMeta(ctx, op.Bucket, op.Key, func(i *object.Info) error {
		if i.ETag != op.ETag || i.BackendETag != "" || i.Dirty {
			return errNotThatCopy
		}
		i.BackendETag, i.BackendVersion, i.ValidatedAt = op.BackendETag, op.BackendVersion, op.Time
		return nil
	})
	if errors.Is(err, errNotThatCopy) || errors.Is(err, object.ErrNotFound) {
		return nil // overwritten or deleted since: nothing to record
	}
	return err
}

// errNotThatCopy stops an UpdateMeta of a copy that is not the one meant.
var errNotThatCopy = errors.New("not that copy")

func (l *localService) Fill(ctx context.Context, bucket, key string) (object.Info, bool, error) {
	b, err := l.bucket(ctx, bucket)
	if err != nil {
		return object.Info{}, false, err
	}
	if !tiered(b) {
		return object.Info{}, false, fmt.Errorf("%w: bucket %s has no backend to fill from", object.ErrInvalidArgument, bucket)
	}
	var fetched bool
	info, err := withTier(ctx, l, func() (object.Info, error) {
		info, f, err := l.tier.Fill(ctx, bucket, key)
		fetched = f
		return info, err
	})
	return info, fetched, err
}

// PendingDeletes implements peer.Local: it asks this node's tier only.
func (l *localService) PendingDeletes(ctx context.Context, bucket string, keys, prefixes []string) (deleted, under []string, err error) {
	deleted, under = l.tier.PendingDeletes(bucket, keys, prefixes)
	return deleted, under, nil
}
