package tier

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/slipstream-io/slipstream/internal/backend"
	"github.com/slipstream-io/slipstream/internal/fanout"
	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/store"
)

// Put stores r as bucket/key by the bucket's mode:
//   - local: in the local store only;
//   - cache: write-through: acknowledged once the backend has it; the local
//     copy is written at the same time (if it cannot be, the stale local
//     copy is dropped and the PUT still succeeds);
//   - writeback: acknowledged once the local copy, Copies-1 peer replicas
//     (through Config.Replicator) and the journal record are durable; the
//     destager uploads it later. Blocks up to Config.DirtyWait for room
//     under Config.MaxDirtyBytes, then fails with object.ErrSlowDown.
func (t *Tier) Put(ctx context.Context, bucket, key string, r io.Reader, opts object.PutOptions) (object.Info, error) {
	b, err := t.bucket(bucket)
	if err != nil {
		return object.Info{}, err
	}
	switch b.Mode {
	case ModeCache:
		return t.putThrough(ctx, b, bucket, key, r, opts)
	case ModeWriteback:
		return t.putBack(ctx, b, bucket, key, r, opts)
	}
	return t.local.Put(ctx, bucket, key, r, store.PutOptions{PutOptions: opts})
}

// waitFill waits for a fill of bucket/key in progress to end, so that an
// older remote version cannot land after a newer write.
func (t *Tier) waitFill(ctx context.Context, bucket, key string) error {
	t.mu.Lock()
	f := t.fills[okey(bucket, key)]
	t.mu.Unlock()
	if f == nil {
		return nil
	}
	select {
	case <-f.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// tee copies r to two consumers running concurrently (fanout.Copy).
func tee(ctx context.Context, r io.Reader, a, b func(io.Reader) error) (errA, errB error) {
	errs := fanout.Copy(ctx, r, a, b)
	return errs[0], errs[1]
}

func (t *Tier) putThrough(ctx context.Context, b Bucket, bucket, key string, r io.Reader, opts object.PutOptions) (object.Info, error) {
	end, err := t.beginWrite(ctx, bucket, key)
	if err != nil {
		return object.Info{}, err
	}
	defer end()
	// The local copy is committed only once the backend has the body, with
	// the backend's version: until then readers see the previous version,
	// and a backend failure leaves nothing to take back.
	var a backend.Attrs
	var info object.Info
	var errPut error
	stored := make(chan struct{}) // closed when the backend's Put returned, with errPut
	lopts := store.PutOptions{PutOptions: opts, BeforeCommit: func(ctx context.Context, i *object.Info) error {
		select {
		case <-stored:
		case <-ctx.Done():
			return ctx.Err()
		}
		if errPut != nil {
			return errBackendFailed
		}
		i.BackendETag, i.BackendVersion, i.ValidatedAt = a.ETag, a.Version, time.Now()
		return nil
	}}
	errB, errL := tee(ctx, r,
		func(r io.Reader) (err error) {
			a, err = b.Backend.Put(ctx, key, r, opts.Size, backend.PutAttrs{ContentType: opts.ContentType, UserMeta: opts.UserMeta, Headers: opts.Headers})
			errPut = err
			close(stored)
			return err
		},
		func(r io.Reader) (err error) {
			info, err = t.local.Put(ctx, bucket, key, r, lopts)
			return err
		})
	if errB != nil {
		if errors.Is(errB, fanout.ErrConsumerDone) && errL != nil {
			return object.Info{}, errL
		}
		return object.Info{}, errB
	}
	if errL != nil {
		// The backend has the new version; a stale local copy must go.
		t.warnThrottled(bucket, "tier: write-through kept no local copy", "bucket", bucket, "key", key, "err", errL)
		if err := t.local.Delete(context.WithoutCancel(ctx), bucket, key); err != nil && !errors.Is(err, object.ErrNotFound) {
			return object.Info{}, fmt.Errorf("tier: stale local copy of %s/%s could not be removed: %w", bucket, key, err)
		}
		return object.Info{Bucket: bucket, Key: key, Size: a.Size, ETag: a.ETag, ContentType: opts.ContentType, UserMeta: opts.UserMeta,
			Headers: opts.Headers, ModTime: a.ModTime, BackendETag: a.ETag, BackendVersion: a.Version}, nil
	}
	return info, nil
}

// errBackendFailed aborts a write-through's local copy when the backend
// did not take the body; the PUT answers the backend's own error.
var errBackendFailed = errors.New("tier: the backend did not store the body")

// ReserveDirty waits, as a write-back PUT of size bytes does, until the
// dirty bytes of bucket leave room for size more (object.ErrSlowDown after
// Config.DirtyWait), and sets them aside until release. A multipart
// completion calls it before the parts are assembled, so that a client
// refused can retry the completion, and Adopt counts the object in the
// backlog before release. Other modes reserve nothing.
func (t *Tier) ReserveDirty(ctx context.Context, bucket string, size int64) (release func(), err error) {
	b, err := t.bucket(bucket)
	if err != nil {
		return nil, err
	}
	if b.Mode != ModeWriteback {
		return func() {}, nil
	}
	if err := t.d.reserve(ctx, size); err != nil {
		return nil, err
	}
	return func() { t.d.unreserve(size) }, nil
}

func (t *Tier) putBack(ctx context.Context, b Bucket, bucket, key string, r io.Reader, opts object.PutOptions) (object.Info, error) {
	d := t.d
	if err := d.reserve(ctx, opts.Size); err != nil {
		return object.Info{}, err
	}
	defer d.unreserve(opts.Size)
	end, err := t.beginWrite(ctx, bucket, key)
	if err != nil {
		return object.Info{}, err
	}
	defer end()
	seq := d.seq()
	now := time.Now()
	lopts := store.PutOptions{PutOptions: opts, Dirty: true, ModTime: now}
	var info object.Info
	var holders []string
	var errL, errR error
	if b.Copies > 1 && t.cfg.Replicator != nil {
		// MD5 is computed once, here; the local store and the replicas
		// check what they got against it with CRC32C.
		dr := object.NewDigestReader(r)
		r, opts.Digest = dr, dr.Digest
		lopts.PutOptions = opts
		errL, errR = tee(ctx, r,
			func(r io.Reader) (err error) {
				info, err = t.local.Put(ctx, bucket, key, r, lopts)
				return err
			},
			func(r io.Reader) (err error) {
				holders, err = t.cfg.Replicator.Replicate(ctx, ReplicaPut{Owner: t.cfg.NodeID, Seq: seq, Bucket: bucket, Key: key,
					Opts: opts, ModTime: now, Copies: b.Copies - 1, Body: r})
				return err
			})
	} else {
		info, errL = t.local.Put(ctx, bucket, key, r, lopts)
	}
	if errL != nil {
		if len(holders) > 0 {
			// Peers may hold a copy of a write that failed here: it will
			// never be destaged, so their replicas must not stay dirty
			// (nor be taken over and uploaded).
			if err := t.cfg.Replicator.Abandoned(context.WithoutCancel(ctx), t.cfg.NodeID, seq, bucket, key, holders); err != nil {
				t.log.Warn("tier: replica holders not told of a failed write", "bucket", bucket, "key", key, "holders", holders, "err", err)
			}
		}
		if errors.Is(errL, fanout.ErrConsumerDone) && errR != nil {
			// The replication failure stopped the local write too.
			return object.Info{}, fmt.Errorf("tier: %s/%s: replicas failed: %w: %w", bucket, key, object.ErrUnavailable, errR)
		}
		return object.Info{}, errL
	}
	o := &op{kind: KindPut, seq: seq, time: now, bucket: bucket, key: key, size: info.Size, etag: info.ETag, holders: holders}
	// The local copy is durable, dirty and served: journal it even if the
	// replicas failed, and destage it even if the journal fails, so that
	// what readers saw reaches the backend (the PUT still answers the
	// error, as a write that fails late may have taken effect).
	if err := d.j.appendAnyway(true, func() { d.enqueue(o) }, o.record()); err != nil {
		return object.Info{}, err
	}
	if errR != nil {
		return object.Info{}, fmt.Errorf("tier: %s/%s has fewer than %d copies: %w: %w", bucket, key, b.Copies, object.ErrUnavailable, errR)
	}
	return info, nil
}

// Delete removes bucket/key: from the local store and, for cache buckets,
// from the backend before answering; for writeback buckets the delete is
// journaled and destaged in order after earlier writes of the key.
func (t *Tier) Delete(ctx context.Context, bucket, key string) error {
	b, err := t.bucket(bucket)
	if err != nil {
		return err
	}
	if b.Mode == ModeLocal {
		return t.local.Delete(ctx, bucket, key)
	}
	end, err := t.beginWrite(ctx, bucket, key)
	if err != nil {
		return err
	}
	defer end()
	if b.Mode == ModeCache {
		if err := b.Backend.Delete(ctx, key); err != nil {
			return err
		}
		if err := t.local.Delete(ctx, bucket, key); err != nil && !errors.Is(err, object.ErrNotFound) {
			return err
		}
		return nil
	}
	d := t.d
	o := &op{kind: KindDelete, seq: d.seq(), time: time.Now(), bucket: bucket, key: key}
	if b.Copies > 1 && t.cfg.Replicator != nil {
		h, err := t.cfg.Replicator.ReplicateDelete(ctx, t.cfg.NodeID, o.seq, bucket, key, b.Copies-1)
		if err != nil {
			t.log.Warn("tier: replicas not told of a delete", "bucket", bucket, "key", key, "err", err)
		}
		o.holders = h
	}
	// The delete is journaled before the local copy goes: the other way
	// round, a crash or a journal error in between would leave an
	// acknowledged write of the key neither in the store nor in the
	// journal, and the backend's older version would be served. A copy
	// left behind (a crash or an error after the journal) is removed at
	// the next start or when the delete is destaged; until then the
	// pending delete hides it.
	if err := d.appendOwned(o, func() { d.enqueue(o) }); err != nil {
		return err
	}
	if err := t.local.Delete(context.WithoutCancel(ctx), bucket, key); err != nil && !errors.Is(err, object.ErrNotFound) {
		return err
	}
	return nil
}

// ReplicaOptions go with PutReplica.
type ReplicaOptions struct {
	object.PutOptions
	ETag    string    // the owner's ETag of the object
	ModTime time.Time // the owner's modification time
}

// PutReplica stores a peer copy of a writeback object for owner (called on
// a replica holder by the node's replication endpoint). The copy is dirty
// (never evicted) and journaled until ReplicaDestaged, or until this node
// takes over destaging with TakeOver.
func (t *Tier) PutReplica(ctx context.Context, owner string, seq uint64, bucket, key string, r io.Reader, opts ReplicaOptions) (object.Info, error) {
	if t.d == nil {
		return object.Info{}, ErrNoJournal
	}
	end, err := t.beginWrite(ctx, bucket, key)
	if err != nil {
		return object.Info{}, err
	}
	defer end()
	if t.replicaSuperseded(ctx, owner, seq, bucket, key, opts.ModTime) {
		// A late copy (the owner gave up on this request and wrote again,
		// or this node took a newer write meanwhile): what is here wins.
		n, err := io.Copy(io.Discard, r)
		if err != nil {
			return object.Info{}, err
		}
		return object.Info{Bucket: bucket, Key: key, Size: n, ETag: opts.ETag, ModTime: opts.ModTime}, nil
	}
	info, err := t.local.Put(ctx, bucket, key, r, store.PutOptions{PutOptions: opts.PutOptions, ETag: opts.ETag, ModTime: opts.ModTime, Dirty: true, NoCache: true})
	if err != nil {
		return object.Info{}, err
	}
	o := &op{kind: KindReplicaPut, seq: seq, time: time.Now(), bucket: bucket, key: key, size: info.Size, etag: info.ETag, owner: owner}
	if err := t.d.j.append(true, func() { t.d.mu.Lock(); t.d.setReplica(o); t.d.mu.Unlock() }, o.record()); err != nil {
		return object.Info{}, err
	}
	return info, nil
}

// replicaSuperseded reports whether owner's replica seq of bucket/key,
// written at mtime, comes after something newer: a later operation of the
// same owner, or a write this node holds dirty (its own, or another
// owner's replica) that is at least as recent. A clean copy (a fill, or
// destaged) never supersedes: its time is the backend's.
func (t *Tier) replicaSuperseded(ctx context.Context, owner string, seq uint64, bucket, key string, mtime time.Time) bool {
	t.d.mu.Lock()
	rec := t.d.replicas[owner][okey(bucket, key)]
	t.d.mu.Unlock()
	if rec != nil && rec.seq > seq {
		return true
	}
	info, err := t.local.Stat(ctx, bucket, key)
	return err == nil && info.Dirty && !info.ModTime.Before(mtime)
}

// DeleteReplica records on a replica holder that owner deleted bucket/key
// as operation seq, and removes the local replica.
func (t *Tier) DeleteReplica(ctx context.Context, owner string, seq uint64, bucket, key string) error {
	if t.d == nil {
		return ErrNoJournal
	}
	end, err := t.beginWrite(ctx, bucket, key)
	if err != nil {
		return err
	}
	defer end()
	t.d.mu.Lock()
	rec := t.d.replicas[owner][okey(bucket, key)]
	t.d.mu.Unlock()
	if rec != nil && rec.seq > seq {
		return nil // a late notice: the owner wrote the key again since
	}
	// Journaled first, as Delete does: if the holder died between removing
	// its copy and journaling, its journal would still hold the owner's
	// write, and after a take-over the delete would never reach the
	// backend. A copy left behind is removed at the next start.
	o := &op{kind: KindReplicaDelete, seq: seq, time: time.Now(), bucket: bucket, key: key, owner: owner}
	if err := t.d.j.append(true, func() { t.d.mu.Lock(); t.d.setReplica(o); t.d.mu.Unlock() }, o.record()); err != nil {
		return err
	}
	// The local copy goes only if it is the owner's replica. A notice that
	// arrives late (the owner was away) must not remove a newer write
	// this node took meanwhile: its own pending one, or another version.
	return t.removeCopyIf(ctx, bucket, key, func(info object.Info) bool {
		return rec == nil || rec.kind != KindReplicaPut || info.ETag == rec.etag
	})
}

// ReplicaDestaged records on a replica holder that owner destaged operation
// seq of bucket/key: the replica becomes a clean (evictable) copy.
func (t *Tier) ReplicaDestaged(ctx context.Context, owner string, seq uint64, bucket, key string) error {
	if t.d == nil {
		return ErrNoJournal
	}
	k := okey(bucket, key)
	t.d.mu.Lock()
	o := t.d.replicas[owner][k]
	done := t.d.replicaDone(owner, k, seq)
	t.d.mu.Unlock()
	if !done {
		return nil // unknown, or a newer replica operation is pending
	}
	switch {
	case o.kind != KindReplicaPut:
	case o.seq == seq:
		// This very write reached the backend: the copy becomes a clean
		// (evictable) copy of it.
		if t.d.pendingOp(bucket, key) == nil {
			_, err := t.local.UpdateMeta(ctx, bucket, key, func(i *object.Info) error {
				if i.ETag != o.etag {
					return errSkip
				}
				i.Dirty = false
				return nil
			})
			if err != nil && !errors.Is(err, errSkip) && !errors.Is(err, object.ErrNotFound) {
				return err
			}
		}
	default:
		// A later write of the owner, which this node does not hold,
		// reached the backend: the copy here is older than the backend's
		// and goes (kept as a clean copy, it would be served as current).
		if err := t.dropOlderReplica(ctx, bucket, key, o.etag); err != nil {
			return err
		}
	}
	return t.d.j.append(false, nil, Record{Kind: KindReplicaDone, Seq: seq, Time: time.Now(), Bucket: bucket, Key: key, Owner: owner})
}

// ReplicaAbandoned records on a replica holder that owner's operation seq
// of bucket/key failed on the owner: the replica of it goes (the local
// copy first, if it is still that replica: a crash in between leaves a
// record whose copy is gone, which a take-over skips).
func (t *Tier) ReplicaAbandoned(ctx context.Context, owner string, seq uint64, bucket, key string) error {
	if t.d == nil {
		return ErrNoJournal
	}
	k := okey(bucket, key)
	t.d.mu.Lock()
	o := t.d.replicas[owner][k]
	t.d.mu.Unlock()
	if o == nil || o.seq != seq || o.kind != KindReplicaPut {
		return nil // unknown, or a later operation of the owner
	}
	if err := t.dropOlderReplica(ctx, bucket, key, o.etag); err != nil {
		return err
	}
	t.d.mu.Lock()
	done := t.d.replicaDone(owner, k, seq)
	t.d.mu.Unlock()
	if !done {
		return nil
	}
	return t.d.j.append(false, nil, Record{Kind: KindReplicaDone, Seq: seq, Time: time.Now(), Bucket: bucket, Key: key, Owner: owner})
}

// dropOlderReplica removes the local copy of bucket/key if it is still the
// replica with ETag etag and this node has no write of the key pending.
func (t *Tier) dropOlderReplica(ctx context.Context, bucket, key, etag string) error {
	end, err := t.beginWrite(ctx, bucket, key)
	if err != nil {
		return err
	}
	defer end()
	return t.removeCopyIf(ctx, bucket, key, func(info object.Info) bool { return info.ETag == etag && info.Dirty })
}

// removeCopyIf removes the local copy of bucket/key if this node has no
// write of the key pending and match accepts the copy. The caller holds
// the key's write lock, so no other write of it runs meanwhile.
func (t *Tier) removeCopyIf(ctx context.Context, bucket, key string, match func(object.Info) bool) error {
	if t.d.pendingOp(bucket, key) != nil {
		return nil
	}
	info, err := t.local.Stat(ctx, bucket, key)
	switch {
	case errors.Is(err, object.ErrNotFound):
		return nil
	case err != nil:
		return err
	case !match(info):
		return nil
	}
	if err := t.local.Delete(context.WithoutCancel(ctx), bucket, key); err != nil && !errors.Is(err, object.ErrNotFound) {
		return err
	}
	return nil
}

// ReplicaOwners returns the owners this node holds replica operations for
// (writes or deletes not known to be destaged), sorted.
func (t *Tier) ReplicaOwners() []string {
	if t.d == nil {
		return nil
	}
	t.d.mu.Lock()
	defer t.d.mu.Unlock()
	return slices.Sorted(maps.Keys(t.d.replicas))
}

// TakeOver makes this node destage every replica it holds for owner, as if
// the writes had been its own. The node calls it on a replica holder once
// the cluster has declared owner dead (calling it on several holders only
// repeats idempotent uploads). It returns how many operations it adopted.
func (t *Tier) TakeOver(ctx context.Context, owner string) (int, error) {
	if t.d == nil {
		return 0, ErrNoJournal
	}
	d := t.d
	d.mu.Lock()
	var adopt []*op
	for _, o := range d.replicas[owner] {
		adopt = append(adopt, o)
	}
	d.mu.Unlock()
	n := 0
	for _, ro := range adopt {
		adopted, err := t.adopt(ctx, owner, ro)
		if err != nil {
			return n, err
		}
		if adopted {
			n++
		}
	}
	return n, nil
}

// adopt makes the replica operation ro, held for the dead owner, an owned
// operation of this node, under the key's write lock so that it is ordered
// with the writes of the key this node accepts. A write of the key this
// node accepted after ro (it owns the key now) is pending already and
// supersedes ro, which is then only marked done: adopted with a later
// sequence number, ro would replace that write's destage, and an
// acknowledged PUT would never reach the backend.
func (t *Tier) adopt(ctx context.Context, owner string, ro *op) (bool, error) {
	d := t.d
	end, err := t.beginWrite(ctx, ro.bucket, ro.key)
	if err != nil {
		return false, err
	}
	defer end()
	done := Record{Kind: KindReplicaDone, Seq: ro.seq, Time: time.Now(), Bucket: ro.bucket, Key: ro.key, Owner: owner}
	markDone := func() {
		d.mu.Lock()
		d.replicaDone(owner, okey(ro.bucket, ro.key), ro.seq)
		d.mu.Unlock()
	}
	// A replica delete's time is when this node heard of it, not when the
	// owner deleted: one that found a write of this node pending was a
	// late notice, which DeleteReplica let that write outlive (it kept
	// the copy); adopted, it would delete an acknowledged write.
	if p := d.pendingOp(ro.bucket, ro.key); p != nil && (p.time.After(ro.time) || ro.kind == KindReplicaDelete) {
		t.log.Info("tier: a newer write of the key is pending here; the taken-over operation is dropped",
			"bucket", ro.bucket, "key", ro.key, "owner", owner, "seq", ro.seq)
		return false, d.j.append(true, markDone, done)
	}
	kind := KindPut
	if ro.kind == KindReplicaDelete {
		kind = KindDelete
	}
	o := &op{kind: kind, seq: d.seq(), time: ro.time, bucket: ro.bucket, key: ro.key, size: ro.size, etag: ro.etag, verify: true}
	// Own record first: a crash in between leaves both, never neither.
	err = d.appendOwned(o, func() { markDone(); d.enqueue(o) }, done)
	return err == nil, err
}

// CompleteThrough runs a multipart completion of a cache bucket as a
// write-through: complete assembles the object and, through the hook it is
// given, has the tier upload it to the backend before committing it, with
// the backend's version. Until the backend has it, readers see the previous
// version; if the backend fails, nothing is committed and the upload stays
// for the client to complete again. Other modes: complete runs with no
// hook (write-back completions are adopted afterwards, see Adopt).
func (t *Tier) CompleteThrough(ctx context.Context, bucket, key string, complete func(store.CompleteOptions) (object.Info, error)) (object.Info, error) {
	b, err := t.bucket(bucket)
	if err != nil {
		return object.Info{}, err
	}
	if b.Mode != ModeCache {
		return complete(store.CompleteOptions{})
	}
	end, err := t.beginWrite(ctx, bucket, key)
	if err != nil {
		return object.Info{}, err
	}
	defer end()
	return complete(store.CompleteOptions{BeforeCommit: func(ctx context.Context, i *object.Info, body io.Reader) error {
		a, err := b.Backend.Put(ctx, key, body, i.Size, backend.PutAttrs{ContentType: i.ContentType, UserMeta: i.UserMeta, Headers: i.Headers})
		if err != nil {
			return err
		}
		i.BackendETag, i.BackendVersion, i.ValidatedAt = a.ETag, a.Version, time.Now()
		return nil
	}})
}

// Adopt makes an object that was committed to the local store by another
// path than Put (a completed multipart upload) follow a writeback bucket's
// mode: it is marked dirty, copied to Copies-1 peers and journaled for
// destage. Call it right after the commit, before acknowledging the client.
// Other modes: nothing to do (a cache bucket's completion is written
// through before its commit, see CompleteThrough).
func (t *Tier) Adopt(ctx context.Context, bucket, key string) (object.Info, error) {
	b, err := t.bucket(bucket)
	if err != nil {
		return object.Info{}, err
	}
	if b.Mode != ModeWriteback {
		return t.local.Stat(ctx, bucket, key)
	}
	end, err := t.beginWrite(ctx, bucket, key)
	if err != nil {
		return object.Info{}, err
	}
	defer end()
	d := t.d
	info, err := t.local.UpdateMeta(ctx, bucket, key, func(i *object.Info) error { i.Dirty = true; return nil })
	if err != nil {
		return object.Info{}, err
	}
	o := &op{kind: KindPut, seq: d.seq(), time: time.Now(), bucket: bucket, key: key, size: info.Size, etag: info.ETag}
	var errR error
	if b.Copies > 1 && t.cfg.Replicator != nil {
		r, err := t.local.Get(ctx, bucket, key, nil)
		if err != nil {
			return object.Info{}, err
		}
		o.holders, errR = t.cfg.Replicator.Replicate(ctx, ReplicaPut{Owner: t.cfg.NodeID, Seq: o.seq, Bucket: bucket, Key: key,
			Opts:    info.PutOptions(),
			ModTime: info.ModTime, Copies: b.Copies - 1, Body: r})
		r.Close()
	}
	if err := d.j.appendAnyway(true, func() { d.enqueue(o) }, o.record()); err != nil { // as in putBack
		return object.Info{}, err
	}
	if errR != nil {
		return object.Info{}, fmt.Errorf("tier: %s/%s has fewer than %d copies: %w: %w", bucket, key, b.Copies, object.ErrUnavailable, errR)
	}
	return info, nil
}
