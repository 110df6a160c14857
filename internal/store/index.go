package store

import (
	"context"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slipstream-io/slipstream/internal/object"
)

// entry is one object in the index. info is immutable once published;
// changes replace the entry's info pointer under the bucket lock.
type entry struct {
	info *object.Info
	mp   int
	// atime is the unix nanoseconds of the last access, in memory.
	// readers counts the open Readers of this version: eviction passes
	// over a copy being read, whose unlinking would free no space until
	// the last reader is done. An entry that only rewrites the metadata
	// of the same file (UpdateMeta, access times) shares both with its
	// predecessor (withInfo): the readers opened before still hold that
	// file, and a read that found the predecessor just before the switch
	// records its access time for the new entry too.
	atime   *atomic.Int64
	readers *atomic.Int32
}

func newEntry(info object.Info, mp int) *entry {
	e := &entry{info: &info, mp: mp, atime: new(atomic.Int64), readers: new(atomic.Int32)}
	at := info.AccessTime
	if at.IsZero() {
		at = info.ModTime
	}
	e.atime.Store(at.UnixNano())
	return e
}

// withInfo returns an entry for the same file as e with new metadata: its
// readers and access time are e's.
func (e *entry) withInfo(info object.Info) *entry {
	return &entry{info: &info, mp: e.mp, atime: e.atime, readers: e.readers}
}

// snapshot returns a copy of the entry's Info with the in-memory access time.
func (e *entry) snapshot() object.Info {
	info := cloneInfo(*e.info)
	info.AccessTime = time.Unix(0, e.atime.Load()).UTC()
	return info
}

// bucketIndex is the sorted key index of one bucket.
type bucketIndex struct {
	mu   sync.RWMutex
	keys sortedKeys
	m    map[string]*entry
}

func (s *Store) bucket(name string, create bool) *bucketIndex {
	s.mu.RLock()
	bi := s.buckets[name]
	s.mu.RUnlock()
	if bi != nil || !create {
		return bi
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bucketLocked(name)
}

// bucketLocked returns the index of bucket name, creating it; s.mu is held.
func (s *Store) bucketLocked(name string) *bucketIndex {
	bi := s.buckets[name]
	if bi == nil {
		bi = &bucketIndex{m: make(map[string]*entry)}
		s.buckets[name] = bi
	}
	return bi
}

// setEntry indexes e as bucket/key, creating the bucket's index if need
// be, and returns the entry it replaces. DeleteBucket, which drops an
// empty index under s.mu, cannot drop it between the lookup and the set:
// an object committed while its bucket is deleted stays visible.
func (s *Store) setEntry(bucket, key string, e *entry) *entry {
	s.mu.RLock()
	if bi := s.buckets[bucket]; bi != nil {
		old := bi.set(key, e)
		s.mu.RUnlock()
		return old
	}
	s.mu.RUnlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bucketLocked(bucket).set(key, e)
}

func (s *Store) lookup(bucket, key string) *entry {
	bi := s.bucket(bucket, false)
	if bi == nil {
		return nil
	}
	bi.mu.RLock()
	defer bi.mu.RUnlock()
	return bi.m[key]
}

// set publishes e for key and returns the entry it replaces, if any.
func (bi *bucketIndex) set(key string, e *entry) *entry {
	bi.mu.Lock()
	defer bi.mu.Unlock()
	old := bi.m[key]
	bi.m[key] = e
	if old == nil {
		bi.keys.Insert(key)
	}
	return old
}

// remove drops key if its entry is still e (any entry if e is nil) and
// returns the removed entry.
func (bi *bucketIndex) remove(key string, e *entry) *entry {
	bi.mu.Lock()
	defer bi.mu.Unlock()
	old := bi.m[key]
	if old == nil || (e != nil && old != e) {
		return nil
	}
	delete(bi.m, key)
	bi.keys.Delete(key)
	return old
}

func (bi *bucketIndex) len() int {
	bi.mu.RLock()
	defer bi.mu.RUnlock()
	return len(bi.m)
}

// DefaultMaxKeys is the page size of List when ListOptions.MaxKeys is 0.
const DefaultMaxKeys = 1000

// List returns one page of the local objects of bucket, sorted by key, with
// S3 semantics for prefix, delimiter, start-after and max-keys. A common
// prefix equal to StartAfter is not repeated, so NextMarker can be passed
// back as StartAfter.
func (s *Store) List(ctx context.Context, bucket string, opts object.ListOptions) (object.ListResult, error) {
	var res object.ListResult
	if err := object.ValidateBucketName(bucket); err != nil {
		return res, err
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	max := opts.MaxKeys
	if max <= 0 {
		max = DefaultMaxKeys
	}
	bi := s.bucket(bucket, false)
	if bi == nil {
		return res, nil
	}
	bi.mu.RLock()
	defer bi.mu.RUnlock()
	keys := &bi.keys
	c := keys.SeekGE(opts.Prefix)
	if opts.StartAfter >= opts.Prefix {
		c = keys.SeekGT(opts.StartAfter)
	}
	count := 0
	last := ""
	for {
		k, ok := keys.At(c)
		if !ok || !strings.HasPrefix(k, opts.Prefix) {
			break
		}
		if opts.Delimiter != "" {
			rest := k[len(opts.Prefix):]
			if j := strings.Index(rest, opts.Delimiter); j >= 0 {
				cp := opts.Prefix + rest[:j+len(opts.Delimiter)]
				if cp != opts.StartAfter {
					if count == max {
						res.IsTruncated = true
						break
					}
					res.CommonPrefixes = append(res.CommonPrefixes, cp)
					count++
					last = cp
				}
				// Skip every key under cp with one seek.
				end, ok := prefixEnd(cp)
				if !ok {
					break
				}
				c = keys.SeekGE(end)
				continue
			}
		}
		if count == max {
			res.IsTruncated = true
			break
		}
		res.Objects = append(res.Objects, bi.m[k].snapshot())
		count++
		last = k
		c = keys.Next(c)
	}
	if res.IsTruncated {
		res.NextMarker = last
	}
	return res, nil
}

// Walk calls fn for every local object of bucket ("" = all buckets), in no
// particular order, on a snapshot taken bucket by bucket. It stops at the
// first error fn returns and returns it.
func (s *Store) Walk(ctx context.Context, bucket string, fn func(object.Info) error) error {
	var names []string
	if bucket != "" {
		if err := object.ValidateBucketName(bucket); err != nil {
			return err
		}
		names = []string{bucket}
	} else {
		s.mu.RLock()
		for b := range s.buckets {
			names = append(names, b)
		}
		s.mu.RUnlock()
		sort.Strings(names)
	}
	for _, b := range names {
		bi := s.bucket(b, false)
		if bi == nil {
			continue
		}
		bi.mu.RLock()
		infos := make([]object.Info, 0, len(bi.m))
		for _, e := range bi.m {
			infos = append(infos, e.snapshot())
		}
		bi.mu.RUnlock()
		for _, info := range infos {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := fn(info); err != nil {
				return err
			}
		}
	}
	return nil
}
