package tier

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/slipstream-io/slipstream/internal/backend"
	"github.com/slipstream-io/slipstream/internal/object"
)

// Get opens bucket/key, or the range rng of it. A warm object is served
// from the local store (the reader is then a *store.Reader, whose File
// method allows sendfile). A cold one is fetched from the backend while the
// caller reads it; a cold range is answered with a range request to the
// backend while the whole object fills in the background.
func (t *Tier) Get(ctx context.Context, bucket, key string, rng *object.Range) (object.Reader, error) {
	for {
		r, err := t.get(ctx, bucket, key, rng)
		if !errors.Is(err, errWriting) {
			return r, err
		}
		// Then look again: the write made it local.
		if err := t.waitWrite(ctx, bucket, key); err != nil {
			return nil, err
		}
	}
}

func (t *Tier) get(ctx context.Context, bucket, key string, rng *object.Range) (object.Reader, error) {
	reqStart := time.Now()
	b, err := t.bucket(bucket)
	if err != nil {
		return nil, err
	}
	if b.Mode == ModeLocal {
		return t.local.Get(ctx, bucket, key, rng)
	}
	if err := t.deletedPending(bucket, key); err != nil {
		return nil, err
	}
	var stale *object.Info // a clean local copy to refetch
	info, err := t.local.Stat(ctx, bucket, key)
	switch {
	case err == nil:
		fresh, verr := t.fresh(ctx, b, info)
		if verr != nil {
			return nil, verr
		}
		if fresh {
			r, err := t.local.Get(ctx, bucket, key, rng)
			if err == nil || !errors.Is(err, object.ErrNotFound) {
				if err != nil {
					return nil, err
				}
				t.counters.warm.Add(1)
				return r, nil
			}
			// evicted meanwhile: cold
		} else {
			stale = &info
		}
	case !errors.Is(err, object.ErrNotFound):
		return nil, err
	}
	if rng != nil {
		return t.coldRange(ctx, b, bucket, key, rng, stale, reqStart)
	}
	f, isLocal, err := t.acquireFill(b, bucket, key, stale)
	if err != nil {
		return nil, err
	}
	if isLocal {
		return t.foundLocal(ctx, b, bucket, key, rng, stale)
	}
	if b.Validate.Policy == ValidateAlways && f.started.Before(reqStart) {
		// The fill began before this request: the remote may have
		// changed since. Let it land, then validate it like any warm
		// copy (which refetches it if it is stale).
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return t.get(ctx, bucket, key, rng)
	}
	r, err := f.reader(ctx, nil)
	if errors.Is(err, errFillOver) {
		// The fill ended as this request joined it: start over.
		return t.get(ctx, bucket, key, rng)
	}
	t.counters.cold.Add(1)
	return r, err
}

// coldRange answers a range of an object that is not local: from a fill in
// progress when the bytes are there already, else by a range request to the
// backend while a fill of the whole object starts in the background. Under
// ValidateAlways only a fill that started at or after the request (at
// reqStart) may serve it: an older one may hold an older version.
func (t *Tier) coldRange(ctx context.Context, b Bucket, bucket, key string, rng *object.Range, stale *object.Info, reqStart time.Time) (object.Reader, error) {
	f, isLocal, err := t.acquireFill(b, bucket, key, stale)
	if err != nil {
		return nil, err
	}
	if isLocal {
		return t.foundLocal(ctx, b, bucket, key, rng, stale)
	}
	t.counters.cold.Add(1)
	current := b.Validate.Policy != ValidateAlways || !f.started.Before(reqStart)
	if current && f.covers(rng) {
		if r, err := f.reader(ctx, rng); !errors.Is(err, errFillOver) {
			return r, err
		}
		// The fill ended meanwhile: ask the backend.
	}
	return t.backendRange(ctx, b, bucket, key, rng)
}

// foundLocal serves bucket/key, or the range rng of it, from the local copy
// acquireFill found: the object became local after this request looked (a
// fill ended meanwhile), or a write-back write of it is pending. Under
// ValidateAlways a copy that became local is looked at again like any warm
// copy, since the fill that made it may have started before the request. A
// copy evicted meanwhile makes the object cold again.
func (t *Tier) foundLocal(ctx context.Context, b Bucket, bucket, key string, rng *object.Range, stale *object.Info) (object.Reader, error) {
	if stale == nil && b.Validate.Policy == ValidateAlways {
		return t.get(ctx, bucket, key, rng)
	}
	r, err := t.local.Get(ctx, bucket, key, rng)
	if errors.Is(err, object.ErrNotFound) {
		return t.get(ctx, bucket, key, rng)
	}
	if err != nil {
		return nil, err
	}
	t.counters.warm.Add(1)
	return r, nil
}

// backendRange answers a range of bucket/key with a range request to the
// backend.
func (t *Tier) backendRange(ctx context.Context, b Bucket, bucket, key string, rng *object.Range) (object.Reader, error) {
	rc, a, err := b.Backend.Get(ctx, key, rng)
	if err != nil {
		return nil, err
	}
	off, n, err := rng.Resolve(a.Size)
	if err != nil {
		rc.Close()
		return nil, err
	}
	return &streamReader{ReadCloser: rc, info: remoteInfo(bucket, key, a),
		off: off, n: n}, nil
}

// streamReader is a range read straight from the backend.
type streamReader struct {
	io.ReadCloser
	info   object.Info
	off, n int64
}

func (s *streamReader) Info() object.Info             { return s.info }
func (s *streamReader) Range() (offset, length int64) { return s.off, s.n }

// fresh applies the bucket's validation policy to a local copy. A copy whose
// remote object is gone is dropped and object.ErrNotFound returned.
func (t *Tier) fresh(ctx context.Context, b Bucket, info object.Info) (bool, error) {
	if info.Dirty || b.Mode == ModeLocal {
		return true, nil // newer than the backend
	}
	if b.Mode == ModeWriteback && t.d != nil && t.d.pendingOp(info.Bucket, info.Key) != nil {
		return true, nil
	}
	if b.Mode == ModeCache && info.BackendETag == "" {
		// Not a copy of a backend version (fills, write-throughs and
		// adoptions record one): an object committed by another path,
		// a multipart completion that Adopt is about to write through.
		// Refetched or dropped, that write would be lost.
		return true, nil
	}
	switch b.Validate.Policy {
	case ValidateNever, "":
		return true, nil
	case ValidateTTL:
		if time.Since(info.ValidatedAt) < b.Validate.TTL {
			return true, nil
		}
	}
	a, err := b.Backend.Stat(ctx, info.Key)
	if errors.Is(err, backend.ErrNotFound) {
		if err := t.local.EvictObject(ctx, info.Bucket, info.Key); err != nil && !errors.Is(err, object.ErrNotFound) {
			t.log.Warn("tier: could not drop a copy deleted remotely", "bucket", info.Bucket, "key", info.Key, "err", err)
		}
		return false, fmt.Errorf("%w: %s/%s (deleted in the backend)", object.ErrNotFound, info.Bucket, info.Key)
	}
	if err != nil {
		return false, err
	}
	if a.ETag != info.BackendETag || a.Version != info.BackendVersion {
		return false, nil
	}
	if b.Validate.Policy == ValidateTTL {
		now := time.Now()
		_, _ = t.local.UpdateMeta(ctx, info.Bucket, info.Key, func(i *object.Info) error { i.ValidatedAt = now; return nil })
	}
	return true, nil
}

// deletedPending returns object.ErrNotFound when the latest write-back
// operation of bucket/key is a delete not yet destaged.
func (t *Tier) deletedPending(bucket, key string) error {
	if t.d == nil {
		return nil
	}
	if o := t.d.pendingOp(bucket, key); o != nil && o.kind == KindDelete {
		return fmt.Errorf("%w: %s/%s", object.ErrNotFound, bucket, key)
	}
	return nil
}

// Stat returns the metadata of bucket/key: the local copy when it is warm
// and fresh, else the backend's.
func (t *Tier) Stat(ctx context.Context, bucket, key string) (object.Info, error) {
	b, err := t.bucket(bucket)
	if err != nil {
		return object.Info{}, err
	}
	if b.Mode == ModeLocal {
		return t.local.Stat(ctx, bucket, key)
	}
	if err := t.deletedPending(bucket, key); err != nil {
		return object.Info{}, err
	}
	info, err := t.local.Stat(ctx, bucket, key)
	if err == nil {
		fresh, verr := t.fresh(ctx, b, info)
		if verr != nil {
			return object.Info{}, verr
		}
		if fresh {
			return info, nil
		}
	} else if !errors.Is(err, object.ErrNotFound) {
		return object.Info{}, err
	}
	a, err := b.Backend.Stat(ctx, key)
	if err != nil {
		return object.Info{}, err
	}
	return remoteInfo(bucket, key, a), nil
}

// Counters counts GETs served by the tier since start.
type Counters struct {
	WarmHits int64 // served from the local copy
	ColdHits int64 // served while fetching from the backend
}

type counters struct{ warm, cold atomic.Int64 }

// Counters returns the GET counters.
func (t *Tier) Counters() Counters {
	return Counters{WarmHits: t.counters.warm.Load(), ColdHits: t.counters.cold.Load()}
}
