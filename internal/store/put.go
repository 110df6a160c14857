package store

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/placement"
)

// PutOptions go with a Put.
type PutOptions struct {
	object.PutOptions           // Size (-1 unknown), ContentMD5, ContentType, UserMeta
	ModTime           time.Time // zero = now
	ETag              string    // if set, stored as the ETag instead of the computed MD5; Content-MD5 is still checked if given
	BackendETag       string
	BackendVersion    string
	Dirty             bool // not yet destaged: never evicted
	Pinned            bool // a local bucket's object, held nowhere else: never evicted
	// NoCache writes the body around the page cache (O_DIRECT where the
	// file system has it), for copies unlikely to be read soon such as
	// replicas: they cost no page allocation and copy, and do not evict
	// data that is read.
	NoCache bool
	// KeepNewer commits the body only if the store holds no version of the
	// key, or an older one (an earlier modification time): a copy moved by
	// a rebalance never replaces a newer write. Otherwise Put fails with
	// object.ErrPrecondition and stores nothing.
	KeepNewer bool
	// DeletedAt, with KeepNewer, tells when the key was last deleted, if
	// that is known (the node's tombstones); it is asked under the key
	// lock at commit time, and a delete at or after ModTime refuses the
	// body the same way.
	DeletedAt func() (time.Time, bool)
	// Replaces commits the body only if the stored version is still this
	// one (same ETag and modification time); otherwise Put fails with
	// ErrChanged and stores nothing. A repair rewrites a damaged copy so.
	Replaces *object.Info
	// IfAbsent commits the body only if the store holds no version of the
	// key; otherwise Put fails with ErrChanged and stores nothing. A cache
	// fill commits so: a write that landed meanwhile is newer.
	IfAbsent bool
	// Checksum, if set, is the CRC32C the body must have ("crc32c:<hex>",
	// as object.Info.Checksum): a body that differs is refused with
	// ErrCorrupt before it is committed.
	Checksum string
	// BeforeCommit, if set, is called once the body is stored and checked
	// and before it is committed (made visible). An error aborts the Put,
	// which stores nothing. It may set the copy's BackendETag,
	// BackendVersion and ValidatedAt; other changes are ignored. A
	// write-through waits in it for the backend, so that no reader sees a
	// version the backend may yet refuse.
	BeforeCommit func(ctx context.Context, info *object.Info) error
}

// work is a file being written under a mountpath's tmp/ directory. Until
// it is committed, abort removes it and returns its space reservation.
type work struct {
	s        *Store
	mp       *mountpath
	f        workFile
	path     string
	reserved int64
	closed   bool
	done     bool
}

// newWork creates a work file on mp. A filesystem out of space (out of
// inodes, with room left in bytes, when it holds many small copies) first
// has copies evicted on mp, as a write that finds it full does.
func (s *Store) newWork(ctx context.Context, mp *mountpath, direct bool) (*work, error) {
	var f workFile
	err := s.evictingOnce(ctx, mp, func() (err error) {
		f, err = s.createWork(mp.workDir(), direct)
		return err
	})
	if err != nil {
		if isNoSpace(err) {
			return nil, noSpace(mp, err)
		}
		return nil, fmt.Errorf("store: create work file on %s: %w", mp.path, err)
	}
	return &work{s: s, mp: mp, f: f, path: f.Name()}, nil
}

// abort discards the work file unless it was committed.
func (w *work) abort() {
	if w.done {
		return
	}
	w.done = true
	if !w.closed {
		w.f.Close()
	}
	os.Remove(w.path)
	w.mp.release(w.reserved)
	w.reserved = 0
}

// reserve grows the work's space reservation to total bytes.
func (w *work) reserve(ctx context.Context, total int64) error {
	if total <= w.reserved {
		return nil
	}
	if err := w.s.reserve(ctx, w.mp, total-w.reserved); err != nil {
		return err
	}
	w.reserved = total
	return nil
}

// write writes p fully; on ENOSPC it evicts on the mountpath and retries once.
func (w *work) write(ctx context.Context, p []byte) error {
	retried := false
	for len(p) > 0 {
		n, err := w.f.Write(p)
		p = p[n:]
		if err == nil {
			continue
		}
		if !isNoSpace(err) {
			return fmt.Errorf("store: write %s: %w", w.path, err)
		}
		if retried {
			return noSpace(w.mp, err)
		}
		retried = true
		w.s.evictMountpath(ctx, w.mp, int64(len(p))+bufSize)
	}
	return nil
}

// digests are what a body's bytes are checked against.
type digests struct {
	size   int64
	md5    []byte // nil if not computed
	crc32c uint32
}

// ingest streams r into the work file: at most limit bytes if limit >= 0
// (object.ErrTooLarge beyond it), hashing inline with one pooled buffer.
func (w *work) ingest(ctx context.Context, r io.Reader, limit int64, wantMD5 bool) (digests, error) {
	var d digests
	var md hash.Hash
	if wantMD5 {
		md = md5.New()
	}
	crc := crc32.New(object.Castagnoli)
	if limit >= 0 {
		if err := w.reserve(ctx, limit); err != nil {
			return d, err
		}
	}
	bp := w.s.bufs.Get().(*[]byte)
	defer w.s.bufs.Put(bp)
	buf := *bp
	for {
		if err := ctx.Err(); err != nil {
			return d, err
		}
		// Fill the buffer to keep write calls large whatever the reader's
		// chunking (HTTP bodies arrive in small pieces).
		nr, rerr := io.ReadFull(r, buf)
		if rerr == io.ErrUnexpectedEOF {
			rerr = io.EOF
		}
		if nr > 0 {
			if limit >= 0 && d.size+int64(nr) > limit {
				return d, fmt.Errorf("%w: more than the declared %d bytes", object.ErrTooLarge, limit)
			}
			if err := w.reserve(ctx, d.size+int64(nr)); err != nil {
				return d, err
			}
			// Hashed before the write, while the bytes just read are
			// still in the CPU's cache (an O_DIRECT write never reads
			// them through it).
			chunk := buf[:nr]
			if md != nil {
				md.Write(chunk)
			}
			crc.Write(chunk)
			if err := w.write(ctx, chunk); err != nil {
				return d, err
			}
			d.size += int64(nr)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			if err := ctx.Err(); err != nil {
				return d, err
			}
			return d, &sourceError{err: rerr}
		}
	}
	if err := ctx.Err(); err != nil {
		return d, err
	}
	if limit >= 0 && d.size < limit {
		return d, fmt.Errorf("%w: got %d of %d bytes", object.ErrIncompleteBody, d.size, limit)
	}
	if md != nil {
		d.md5 = md.Sum(nil)
	}
	d.crc32c = crc.Sum32()
	return d, nil
}

// seal stores the metadata xattr on the work file, fsyncs and closes it.
// If the filesystem has no room for the xattr (a block of its own, or, on
// tmpfs, inode space) it evicts on the mountpath and tries once more.
func (w *work) seal(ctx context.Context, name string, meta []byte) error {
	err := w.s.evictingOnce(ctx, w.mp, func() error { return unix.Fsetxattr(int(w.f.Fd()), name, meta, 0) })
	if err != nil {
		if isNoSpace(err) {
			return noSpace(w.mp, err)
		}
		return fmt.Errorf("store: set metadata on %s: %w", w.path, err)
	}
	if err := w.f.Sync(); err != nil {
		if isNoSpace(err) {
			return noSpace(w.mp, err)
		}
		return fmt.Errorf("store: fsync %s: %w", w.path, err)
	}
	w.closed = true
	if err := w.f.Close(); err != nil {
		return fmt.Errorf("store: close %s: %w", w.path, err)
	}
	return nil
}

// sendersMD5 returns the MD5 of the sender's digest after checking that
// the sender hashed the very bytes received (their CRC32C is crc).
func sendersMD5(digest func() (object.Digest, error), crc uint32) ([]byte, error) {
	dg, err := digest()
	if err != nil {
		return nil, fmt.Errorf("store: sender's digest: %w", err)
	}
	if dg.CRC32C != crc {
		// Damaged between nodes, not by the client: worth a retry.
		return nil, fmt.Errorf("%w: received body has CRC32C %08x, the sender's has %08x", object.ErrUnavailable, crc, dg.CRC32C)
	}
	if len(dg.MD5) != md5.Size {
		return nil, fmt.Errorf("%w: sender's MD5 of %d bytes", object.ErrInvalidArgument, len(dg.MD5))
	}
	return dg.MD5, nil
}

func checksumString(c uint32) string { return fmt.Sprintf("crc32c:%08x", c) }

// Put streams r into bucket/key on its HRW mountpath. See the package doc
// for the commit protocol. On any error nothing is left behind and an
// older version stays intact.
func (s *Store) Put(ctx context.Context, bucket, key string, r io.Reader, opts PutOptions) (object.Info, error) {
	if err := validate(bucket, key); err != nil {
		return object.Info{}, err
	}
	if s.isClosed() {
		return object.Info{}, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return object.Info{}, err
	}
	if opts.ContentMD5 != nil && len(opts.ContentMD5) != md5.Size {
		return object.Info{}, fmt.Errorf("%w: Content-MD5 is %d bytes, want %d", object.ErrInvalidArgument, len(opts.ContentMD5), md5.Size)
	}
	info := object.Info{
		Bucket:         bucket,
		Key:            key,
		ContentType:    opts.ContentType,
		UserMeta:       maps.Clone(opts.UserMeta),
		Headers:        maps.Clone(opts.Headers),
		Parts:          slices.Clone(opts.Parts),
		ModTime:        opts.ModTime.UTC(),
		BackendETag:    opts.BackendETag,
		BackendVersion: opts.BackendVersion,
		Dirty:          opts.Dirty,
		Pinned:         opts.Pinned,
	}
	if info.ModTime.IsZero() {
		info.ModTime = s.now().UTC()
	}
	// Fail early, before reading the body, if the metadata cannot fit.
	probe := info
	probe.ETag, probe.Checksum, probe.Size = strings.Repeat("0", 40), checksumString(0), 1<<62
	if _, err := encodeInfo(probe); err != nil {
		return object.Info{}, err
	}

	mp := s.mountpathFor(bucket, key)
	w, err := s.newWork(ctx, mp, opts.NoCache)
	if err != nil {
		return object.Info{}, s.checkDrive(mp, err)
	}
	defer w.abort()
	limit := opts.Size
	if limit < 0 {
		limit = -1
	}
	d, err := w.ingest(ctx, r, limit, opts.Digest == nil && (opts.ETag == "" || opts.ContentMD5 != nil))
	if err != nil {
		return object.Info{}, s.checkDrive(mp, err)
	}
	if opts.Digest != nil {
		if d.md5, err = sendersMD5(opts.Digest, d.crc32c); err != nil {
			return object.Info{}, err
		}
	}
	if opts.ContentMD5 != nil && string(opts.ContentMD5) != string(d.md5) {
		return object.Info{}, fmt.Errorf("%w: got %x, Content-MD5 says %x", object.ErrBadDigest, d.md5, opts.ContentMD5)
	}
	info.Size = d.size
	if info.Parts != nil && !object.ValidParts(info.Parts, info.Size) {
		info.Parts = nil
	}
	info.ETag = opts.ETag
	if info.ETag == "" {
		info.ETag = hex.EncodeToString(d.md5)
	}
	info.ETag = strings.Trim(info.ETag, `"`)
	info.Checksum = checksumString(d.crc32c)
	if opts.Checksum != "" && opts.Checksum != info.Checksum {
		return object.Info{}, fmt.Errorf("%w: %s/%s: the body has %s, want %s", ErrCorrupt, bucket, key, info.Checksum, opts.Checksum)
	}
	info.AccessTime = info.ModTime
	if opts.BeforeCommit != nil {
		got := cloneInfo(info)
		if err := opts.BeforeCommit(ctx, &got); err != nil {
			return object.Info{}, err
		}
		takeBackendFields(&info, got)
	}
	if err := s.commit(ctx, w, info, commitCheck(opts)); err != nil {
		if errors.Is(err, object.ErrPrecondition) || errors.Is(err, ErrChanged) {
			return object.Info{}, err
		}
		return object.Info{}, s.checkDrive(mp, err)
	}
	return cloneInfo(info), nil
}

// takeBackendFields copies into info what a BeforeCommit hook may set.
func takeBackendFields(info *object.Info, from object.Info) {
	info.BackendETag, info.BackendVersion, info.ValidatedAt = from.BackendETag, from.BackendVersion, from.ValidatedAt
}

// commitCheck returns what Put's options require of the stored version
// at commit time, or nil.
func commitCheck(opts PutOptions) func(info object.Info, cur *entry) error {
	switch {
	case opts.IfAbsent:
		return func(info object.Info, cur *entry) error {
			if cur != nil {
				return fmt.Errorf("%w: %s/%s was written meanwhile", ErrChanged, info.Bucket, info.Key)
			}
			return nil
		}
	case opts.Replaces != nil:
		was := *opts.Replaces
		return func(info object.Info, cur *entry) error {
			if cur == nil || cur.info.ETag != was.ETag || !cur.info.ModTime.Equal(was.ModTime) {
				return fmt.Errorf("%w: %s/%s", ErrChanged, info.Bucket, info.Key)
			}
			return nil
		}
	case opts.KeepNewer:
		deletedAt := opts.DeletedAt
		return func(info object.Info, cur *entry) error {
			if cur != nil && !cur.info.ModTime.Before(info.ModTime) {
				return fmt.Errorf("store: %s/%s already holds a version as new (%s): %w",
					info.Bucket, info.Key, cur.info.ModTime.Format(time.RFC3339Nano), object.ErrPrecondition)
			}
			if deletedAt == nil {
				return nil
			}
			if at, ok := deletedAt(); ok && !at.Before(info.ModTime) {
				return fmt.Errorf("store: %s/%s was deleted at %s: %w",
					info.Bucket, info.Key, at.Format(time.RFC3339Nano), object.ErrPrecondition)
			}
			return nil
		}
	}
	return nil
}

// commit seals w with info and renames it over bucket/key on w's mountpath;
// check, if set, may veto under the key lock, given the stored version (nil
// if none).
func (s *Store) commit(ctx context.Context, w *work, info object.Info, check func(object.Info, *entry) error) error {
	meta, err := encodeInfo(info)
	if err != nil {
		return err
	}
	if err := w.seal(ctx, xattrInfo, meta); err != nil {
		return err
	}
	mp := w.mp
	dir, file := mp.objectPath(info.Bucket, info.Key)
	if err := mp.dirs.mkdir(dir, mp.objDir); err != nil {
		if isNoSpace(err) {
			return noSpace(mp, err)
		}
		return fmt.Errorf("store: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	l := s.keyLock(info.Bucket, info.Key)
	l.Lock()
	if check != nil {
		if err := check(info, s.lookup(info.Bucket, info.Key)); err != nil {
			l.Unlock()
			return err
		}
	}
	if err := os.Rename(w.path, file); err != nil {
		l.Unlock()
		if errors.Is(err, os.ErrNotExist) {
			mp.dirs.forget(dir) // removed with its bucket meanwhile
		}
		if isNoSpace(err) {
			return noSpace(mp, err)
		}
		return fmt.Errorf("store: commit %s/%s: %w", info.Bucket, info.Key, err)
	}
	w.done = true
	e := newEntry(info, mp.idx)
	old := s.setEntry(info.Bucket, info.Key, e)
	mp.commitSpace(w.reserved, info.Size)
	w.reserved = 0
	pk := placement.ObjectName(info.Bucket, info.Key)
	crossDrive := old != nil && old.mp != mp.idx
	var synced error
	if old != nil {
		omp := s.mps[old.mp]
		omp.dropSpace(old.info.Size)
		if crossDrive {
			omp.polRemove(pk)
			// The drives are separate file systems: the new copy's rename
			// must be durable before the old copy is removed, or a crash
			// in between leaves neither. If it cannot be made durable,
			// the old copy stays (a restart keeps the newer of the two).
			synced = syncDir(dir)
			if synced == nil {
				if err := s.removeCopy(omp, info.Bucket, info.Key, old.info.ModTime, true); err != nil {
					// The older copy may be served again after a restart.
					s.log.Error("store: older copy on another mountpath not removed", "bucket", info.Bucket, "key", info.Key, "mountpath", omp.path, "err", err)
				}
			}
		}
	}
	if info.Evictable() {
		mp.polAdd(pk, info.Size)
	} else {
		mp.polRemove(pk)
	}
	l.Unlock()
	if !crossDrive {
		synced = syncDir(dir)
	}
	if synced != nil {
		return fmt.Errorf("store: fsync %s: %w", dir, synced)
	}
	s.maybeKick(mp)
	return nil
}

// Delete removes bucket/key durably. object.ErrNotFound if absent.
func (s *Store) Delete(ctx context.Context, bucket, key string) error {
	return s.deleteIf(ctx, bucket, key, nil)
}

// DeleteVersion removes bucket/key if it is still the version was
// describes (same ETag and modification time), and fails with ErrChanged if
// it was rewritten since.
func (s *Store) DeleteVersion(ctx context.Context, bucket, key string, was object.Info) error {
	return s.deleteIf(ctx, bucket, key, func(e *entry) error {
		if e.info.ETag != was.ETag || !e.info.ModTime.Equal(was.ModTime) {
			return fmt.Errorf("%w: %s/%s", ErrChanged, bucket, key)
		}
		return nil
	})
}

// deleteIf removes bucket/key durably unless check vetoes it.
func (s *Store) deleteIf(ctx context.Context, bucket, key string, check func(*entry) error) error {
	if err := validate(bucket, key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.remove(bucket, key, check, true)
}

// remove unlinks bucket/key and drops it from the index and its policy. If
// check is set it is called under the key lock and may veto. With durable,
// the removal is fsynced. A copy on a read-only (failed) drive is recorded
// as dead instead (removeCopy).
func (s *Store) remove(bucket, key string, check func(*entry) error, durable bool) error {
	bi := s.bucket(bucket, false)
	l := s.keyLock(bucket, key)
	l.Lock()
	defer l.Unlock()
	var e *entry
	if bi != nil {
		bi.mu.RLock()
		e = bi.m[key]
		bi.mu.RUnlock()
	}
	if e == nil {
		return fmt.Errorf("%w: %s/%s", object.ErrNotFound, bucket, key)
	}
	if check != nil {
		if err := check(e); err != nil {
			return err
		}
	}
	mp := s.mps[e.mp]
	if err := s.removeCopy(mp, bucket, key, e.info.ModTime, durable); err != nil {
		return fmt.Errorf("store: delete %s/%s: %w", bucket, key, err)
	}
	bi.remove(key, e)
	mp.dropSpace(e.info.Size)
	mp.polRemove(placement.ObjectName(bucket, key))
	return nil
}

// Stat returns the metadata of bucket/key. object.ErrNotFound if absent.
func (s *Store) Stat(ctx context.Context, bucket, key string) (object.Info, error) {
	if err := validate(bucket, key); err != nil {
		return object.Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return object.Info{}, err
	}
	bi := s.bucket(bucket, false)
	if bi != nil {
		bi.mu.RLock()
		defer bi.mu.RUnlock()
		if e := bi.m[key]; e != nil {
			return e.snapshot(), nil
		}
	}
	return object.Info{}, fmt.Errorf("%w: %s/%s", object.ErrNotFound, bucket, key)
}

// UpdateMeta rewrites the metadata of bucket/key atomically: fn edits a
// copy, which replaces the stored metadata unless fn fails. Bucket, Key,
// Size and Checksum cannot change (object.ErrInvalidArgument). Clearing
// Dirty makes the object evictable unless it is Pinned; setting Dirty or
// Pinned protects it. The change is fsynced unless it only records what a
// restart finds out again (see lazyMeta).
func (s *Store) UpdateMeta(ctx context.Context, bucket, key string, fn func(*object.Info) error) (object.Info, error) {
	if err := validate(bucket, key); err != nil {
		return object.Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return object.Info{}, err
	}
	l := s.keyLock(bucket, key)
	l.Lock()
	defer l.Unlock()
	bi := s.bucket(bucket, false)
	var e *entry
	if bi != nil {
		bi.mu.RLock()
		e = bi.m[key]
		bi.mu.RUnlock()
	}
	if e == nil {
		return object.Info{}, fmt.Errorf("%w: %s/%s", object.ErrNotFound, bucket, key)
	}
	old := e.snapshot()
	ni := cloneInfo(old)
	if err := fn(&ni); err != nil {
		return object.Info{}, err
	}
	if ni.Bucket != old.Bucket || ni.Key != old.Key || ni.Size != old.Size || ni.Checksum != old.Checksum {
		return object.Info{}, fmt.Errorf("%w: UpdateMeta cannot change bucket, key, size or checksum", object.ErrInvalidArgument)
	}
	ni.ETag = strings.Trim(ni.ETag, `"`)
	mp := s.mps[e.mp]
	_, file := mp.objectPath(bucket, key)
	if err := writeInfoInPlace(file, ni, !lazyMeta(old, ni)); err != nil {
		if errors.Is(err, ErrMetaTooLarge) {
			return object.Info{}, err
		}
		return object.Info{}, fmt.Errorf("store: update metadata of %s/%s: %w", bucket, key, err)
	}
	ne := e.withInfo(ni)
	bi.set(key, ne)
	pk := placement.ObjectName(bucket, key)
	switch {
	case !ni.Evictable() && old.Evictable():
		mp.polRemove(pk)
	case ni.Evictable() && !old.Evictable():
		mp.polAdd(pk, ni.Size)
	}
	return cloneInfo(ni), nil
}

// flushAccessTimes writes in-memory access times that moved by more than a
// second back to the objects' metadata, without fsync.
func (s *Store) flushAccessTimes() {
	s.mu.RLock()
	names := make([]string, 0, len(s.buckets))
	for b := range s.buckets {
		names = append(names, b)
	}
	s.mu.RUnlock()
	for _, b := range names {
		bi := s.bucket(b, false)
		if bi == nil {
			continue // deleted meanwhile
		}
		bi.mu.RLock()
		var stale []string
		for k, e := range bi.m {
			if e.atime.Load()-e.info.AccessTime.UnixNano() > 1e9 {
				stale = append(stale, k)
			}
		}
		bi.mu.RUnlock()
		for _, k := range stale {
			l := s.keyLock(b, k)
			l.Lock()
			bi.mu.RLock()
			e := bi.m[k]
			bi.mu.RUnlock()
			if e != nil {
				info := e.snapshot()
				_, file := s.mps[e.mp].objectPath(b, k)
				if err := writeInfoInPlace(file, info, false); err != nil {
					s.log.Warn("store: persist access time", "bucket", b, "key", k, "err", err)
				} else {
					bi.set(k, e.withInfo(info))
				}
			}
			l.Unlock()
		}
	}
}
