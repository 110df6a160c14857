package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slipstream-io/slipstream/internal/object"
)

// MountpathStats describes the space of one mountpath.
type MountpathStats struct {
	Path                 string
	Capacity, Used, Free int64 // filesystem (or MaxBytes model)
	Objects              int64 // what the store holds there
	Bytes                int64
	Failed               bool `json:",omitempty"` // its drive failed: it takes no new writes
}

// checkEvery is how often the background loop looks at the watermarks when
// nothing kicks it; flushEvery how often it writes access times back.
const (
	checkEvery = 10 * time.Second
	flushEvery = 5 * time.Minute
)

func (mp *mountpath) polAdd(k string, size int64) {
	mp.polMu.Lock()
	mp.pol.Add(k, size)
	mp.polMu.Unlock()
}

func (mp *mountpath) polRemove(k string) {
	mp.polMu.Lock()
	mp.pol.Remove(k)
	mp.polMu.Unlock()
}

func (mp *mountpath) polTouch(k string) {
	mp.polMu.Lock()
	mp.pol.Touch(k)
	mp.polMu.Unlock()
}

func (mp *mountpath) release(n int64) {
	if n == 0 {
		return
	}
	mp.spaceMu.Lock()
	mp.reserved -= n
	mp.spaceMu.Unlock()
}

// commitSpace turns a reservation into a stored object of size bytes.
func (mp *mountpath) commitSpace(reserved, size int64) {
	mp.spaceMu.Lock()
	mp.reserved -= reserved
	mp.objBytes += size
	mp.objCount++
	mp.spaceMu.Unlock()
}

func (mp *mountpath) dropSpace(size int64) {
	mp.spaceMu.Lock()
	mp.objBytes -= size
	mp.objCount--
	mp.spaceMu.Unlock()
}

func (mp *mountpath) addParts(delta int64) {
	mp.spaceMu.Lock()
	mp.partBytes += delta
	mp.spaceMu.Unlock()
}

// stats measures mp: the MaxBytes model if set, else the filesystem.
func (s *Store) stats(mp *mountpath) MountpathStats {
	mp.spaceMu.Lock()
	st := MountpathStats{Path: mp.path, Objects: mp.objCount, Bytes: mp.objBytes, Failed: mp.failed.Load()}
	held := mp.objBytes + mp.partBytes + mp.reserved
	mp.spaceMu.Unlock()
	var fs unix.Statfs_t
	fsErr := unix.Statfs(mp.root, &fs)
	fsCap := int64(fs.Blocks) * fs.Bsize
	fsFree := int64(fs.Bavail) * fs.Bsize
	if s.cfg.MaxBytes > 0 {
		st.Capacity = s.cfg.MaxBytes
		st.Used = held
		st.Free = max(0, st.Capacity-held)
		if fsErr == nil && fsFree < st.Free {
			st.Free = fsFree
		}
		return st
	}
	if fsErr != nil {
		return st
	}
	st.Capacity = fsCap
	st.Used = int64(fs.Blocks-fs.Bfree) * fs.Bsize
	st.Free = fsFree
	return st
}

// usedPct is the share of mp in use, like df: used / (used + available).
func usedPct(st MountpathStats) float64 {
	if st.Used+st.Free <= 0 {
		return 0
	}
	return 100 * float64(st.Used) / float64(st.Used+st.Free)
}

// Mountpaths reports the space of every mountpath, in configuration order.
func (s *Store) Mountpaths() []MountpathStats {
	out := make([]MountpathStats, len(s.mps))
	for i, mp := range s.mps {
		out[i] = s.stats(mp)
	}
	return out
}

// reserve sets n bytes aside on mp for a write in progress, evicting on mp
// if they do not fit; object.ErrNoSpace if eviction cannot make room. A
// write that all of mp's evictable copies could not make room for fails
// before any is evicted. Concurrent writes may take the room an eviction
// made before this one looks again: it then evicts more, as long as
// evicting frees anything, up to reserveAttempts times (a filesystem that
// is slow to show freed blocks must not cost the whole cache).
func (s *Store) reserve(ctx context.Context, mp *mountpath, n int64) error {
	for attempt := 0; ; attempt++ {
		var short int64
		mp.spaceMu.Lock()
		if s.cfg.MaxBytes > 0 {
			short = mp.objBytes + mp.partBytes + mp.reserved + n - s.cfg.MaxBytes
		} else {
			var fs unix.Statfs_t
			if err := unix.Statfs(mp.root, &fs); err == nil {
				short = n - int64(fs.Bavail)*fs.Bsize
			}
		}
		if short <= 0 {
			mp.reserved += n
			mp.spaceMu.Unlock()
			return nil
		}
		mp.spaceMu.Unlock()
		mp.polMu.Lock()
		evictable := mp.pol.Bytes()
		mp.polMu.Unlock()
		if short > evictable {
			return fmt.Errorf("%w: mountpath %s: %d more bytes needed, evicting every copy would free %d", object.ErrNoSpace, mp.path, short, evictable)
		}
		if attempt == reserveAttempts || s.evictMountpath(ctx, mp, short) == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
			return fmt.Errorf("%w: mountpath %s: %d more bytes needed after eviction (%d attempts)", object.ErrNoSpace, mp.path, short, attempt+1)
		}
	}
}

// reserveAttempts bounds the evictions one reservation makes.
const reserveAttempts = 16

// maybeKick wakes the background evictor if mp is over the high watermark.
func (s *Store) maybeKick(mp *mountpath) {
	if usedPct(s.stats(mp)) < s.cfg.HighWatermark {
		return
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *Store) background() {
	defer close(s.bgDone)
	t := time.NewTicker(checkEvery)
	defer t.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-s.stop; cancel() }()
	lastFlush := time.Now()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		case <-s.kick:
		}
		for _, mp := range s.mps {
			if usedPct(s.stats(mp)) >= s.cfg.HighWatermark {
				freed := s.evictToLow(ctx, mp)
				s.log.Info("store: evicted over high watermark", "mountpath", mp.path, "freed", freed)
			}
		}
		if time.Since(lastFlush) >= flushEvery {
			s.flushAccessTimes()
			lastFlush = time.Now()
		}
	}
}

// Evict removes clean objects by the policy until every mountpath is under
// the low watermark, and returns the bytes freed.
func (s *Store) Evict(ctx context.Context) (int64, error) {
	var freed int64
	for _, mp := range s.mps {
		if err := ctx.Err(); err != nil {
			return freed, err
		}
		freed += s.evictToLow(ctx, mp)
	}
	return freed, ctx.Err()
}

// evictMountpath evicts victims of mp's policy until need bytes are freed
// or no evictable object is left; it returns the bytes freed. Evicted
// objects are clean copies, so their directory is not fsynced.
func (s *Store) evictMountpath(ctx context.Context, mp *mountpath, need int64) int64 {
	if need <= 0 {
		return 0
	}
	return s.evictUntil(ctx, mp, func(freed int64, _ int) bool { return freed >= need })
}

// evictCopies evicts n victims of mp's policy, or as many as it has, and
// returns the bytes freed: room for n new files where the filesystem ran
// out of inodes rather than bytes.
func (s *Store) evictCopies(ctx context.Context, mp *mountpath, n int) int64 {
	return s.evictUntil(ctx, mp, func(_ int64, evicted int) bool { return evicted >= n })
}

// evictingOnce runs fn, which creates something on mp (a file, an
// xattr); if the filesystem has no room for it (out of bytes or inodes),
// it evicts one copy on mp and, if that freed anything, runs fn again.
func (s *Store) evictingOnce(ctx context.Context, mp *mountpath, fn func() error) error {
	err := fn()
	if err != nil && isNoSpace(err) && s.evictCopies(ctx, mp, 1) > 0 {
		err = fn()
	}
	return err
}

// evictToLow evicts on mp until it is under the low watermark, measured
// afresh after every victim so that writes racing with eviction count.
func (s *Store) evictToLow(ctx context.Context, mp *mountpath) int64 {
	return s.evictUntil(ctx, mp, func(int64, int) bool { return usedPct(s.stats(mp)) < s.cfg.LowWatermark })
}

// evictUntil evicts victims of mp's policy until done, given the bytes
// freed and the copies evicted so far, says so or none is left.
func (s *Store) evictUntil(ctx context.Context, mp *mountpath, done func(freed int64, evicted int) bool) int64 {
	mp.evictMu.Lock()
	defer mp.evictMu.Unlock()
	var freed int64
	evicted := 0
	// Victims passed over while being read go back once the pass is done
	// (back at once, they could come up again before the others).
	var busy []string
	dirs := map[string]bool{}
	defer func() {
		for _, k := range busy {
			s.readmit(mp, k)
		}
	}()
	for !done(freed, evicted) && ctx.Err() == nil {
		mp.polMu.Lock()
		k, size, ok := mp.pol.Evict()
		mp.polMu.Unlock()
		if !ok {
			break
		}
		bucket, key, _ := strings.Cut(k, "/")
		err := s.remove(bucket, key, func(e *entry) error {
			switch {
			case e.mp != mp.idx || !e.info.Evictable():
				return ErrDirty
			case e.readers.Load() > 0:
				return errBeingRead
			}
			size = e.info.Size
			return nil
		}, false)
		switch {
		case err == nil:
			freed += size
			evicted++
			dir, _ := mp.objectPath(bucket, key)
			dirs[dir] = true
			s.log.Debug("store: evicted", "bucket", bucket, "key", key, "size", size)
		case errors.Is(err, errBeingRead):
			busy = append(busy, k)
		}
	}
	// The removals are made durable once per directory and pass: an
	// evicted copy that came back after a crash could be served although
	// its key was deleted or rewritten through another node since.
	for dir := range dirs {
		if err := syncDir(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("store: fsync after eviction", "dir", dir, "err", err)
		}
	}
	return freed
}

// readmit hands pk, which an eviction pass on mp passed over because it
// was being read, back to mp's policy: unless it was deleted, rewritten
// dirty or pinned, or moved to another mountpath meanwhile (the policy would
// count bytes no eviction can free), or is back in the policy already
// (rewritten clean).
func (s *Store) readmit(mp *mountpath, pk string) {
	bucket, key, _ := strings.Cut(pk, "/")
	l := s.keyLock(bucket, key)
	l.Lock()
	defer l.Unlock()
	e := s.lookup(bucket, key)
	if e == nil || e.mp != mp.idx || !e.info.Evictable() {
		return
	}
	mp.polMu.Lock()
	if !mp.pol.Contains(pk) {
		mp.pol.Add(pk, e.info.Size)
	}
	mp.polMu.Unlock()
}

// errBeingRead: a victim has open readers; unlinking it would free no space.
var errBeingRead = errors.New("store: object is being read")

// EvictObject evicts one clean object: ErrDirty if it is not yet destaged,
// ErrPinned if it is a local bucket's, object.ErrNotFound if absent. The
// removal is durable, as an eviction pass's: the tier evicts so a copy the
// backend deleted or holds a newer version of, which must not come back
// after a crash to be served.
func (s *Store) EvictObject(ctx context.Context, bucket, key string) error {
	if err := validate(bucket, key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.remove(bucket, key, func(e *entry) error {
		if e.info.Dirty {
			return fmt.Errorf("%w: %s/%s", ErrDirty, bucket, key)
		}
		if e.info.Pinned {
			return fmt.Errorf("%w: %s/%s", ErrPinned, bucket, key)
		}
		return nil
	}, true)
}
