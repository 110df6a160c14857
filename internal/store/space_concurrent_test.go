package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/placement"
)

// TestBusyVictimNotReadmittedWhenGone: an eviction pass passes over
// a copy being read and hands it back to the policy when it is done. If
// the key was deleted, or rewritten dirty, while the pass ran, the policy
// must not get it back: it would count bytes no eviction can free, and a
// PUT that evicting every clean copy could not make room for would then
// evict them all before failing.
func TestBusyVictimNotReadmittedWhenGone(t *testing.T) {
	const chunk = 64 << 10
	for _, how := range []string{"deleted", "rewritten dirty"} {
		t.Run(how, func(t *testing.T) {
			// Room for one more copy: the rewrite below needs no eviction.
			s := openTest(t, Config{Mountpaths: []string{filepath.Join(t.TempDir(), "mp")}, MaxBytes: 5 * chunk,
				HighWatermark: 100, LowWatermark: 99, Policy: "lru"})
			ctx := context.Background()
			mp := s.mps[0]
			for i, k := range []string{"a", "b"} {
				if _, err := s.Put(ctx, "bkt", k, bytes.NewReader(randBytes(uint64(i), chunk)), putOpts(chunk, false)); err != nil {
					t.Fatal(err)
				}
			}
			for i, k := range []string{"d1", "d2"} {
				if _, err := s.Put(ctx, "bkt", k, bytes.NewReader(randBytes(uint64(10+i), chunk)), putOpts(chunk, true)); err != nil {
					t.Fatal(err)
				}
			}
			rd, err := s.Get(ctx, "bkt", "a", nil) // "a" is being read
			if err != nil {
				t.Fatal(err)
			}
			defer rd.Close()
			if r, err := s.Get(ctx, "bkt", "b", nil); err == nil { // "a" is the LRU victim
				r.Close()
			}
			calls := 0
			s.evictUntil(ctx, mp, func(int64, int) bool {
				calls++
				if calls == 2 { // "a" was passed over: it changes meanwhile
					switch how {
					case "deleted":
						if err := s.Delete(ctx, "bkt", "a"); err != nil {
							t.Fatal(err)
						}
					case "rewritten dirty":
						if _, err := s.Put(ctx, "bkt", "a", bytes.NewReader(randBytes(20, chunk)), putOpts(chunk, true)); err != nil {
							t.Fatal(err)
						}
					}
					return true
				}
				return false
			})
			mp.polMu.Lock()
			has, evictable := mp.pol.Contains(placement.ObjectName("bkt", "a")), mp.pol.Bytes()
			mp.polMu.Unlock()
			if has || evictable != chunk {
				t.Errorf("policy after the pass: holds %q %v, %d evictable bytes; want only %q's %d", "a", has, evictable, "b", chunk)
			}
			// Evicting "b" cannot make room for this PUT: it must fail
			// before evicting anything.
			free := s.Mountpaths()[0].Free
			size := free + 2*chunk
			if _, err := s.Put(ctx, "bkt", "big", bytes.NewReader(make([]byte, size)), putOpts(size, false)); !errors.Is(err, object.ErrNoSpace) {
				t.Fatalf("hopeless PUT = %v, want ErrNoSpace", err)
			}
			if _, err := s.Stat(ctx, "bkt", "b"); err != nil {
				t.Errorf("a hopeless PUT evicted a clean copy: %v", err)
			}
		})
	}
}

// TestConcurrentPutsIntoFullCache: PUTs into a mountpath full of
// clean copies all succeed, however they interleave: a PUT whose room was
// taken by another PUT between its eviction and its second look evicts
// more rather than failing with ErrNoSpace while clean copies remain.
func TestConcurrentPutsIntoFullCache(t *testing.T) {
	const (
		chunk   = 16 << 10
		cap     = 16
		workers = 8
		perW    = 40
	)
	s := openTest(t, Config{Mountpaths: []string{filepath.Join(t.TempDir(), "mp")}, MaxBytes: cap * chunk,
		HighWatermark: 100, LowWatermark: 99, Policy: "s3fifo"})
	ctx := context.Background()
	data := randBytes(1, chunk)
	for i := 0; i < cap; i++ {
		put(t, s, "bkt", fmt.Sprintf("fill-%d", i), data)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []error
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			for i := 0; i < perW; i++ {
				k := fmt.Sprintf("w%d-%d", w, i)
				if _, err := s.Put(ctx, "bkt", k, bytes.NewReader(data), putOpts(chunk, false)); err != nil {
					mu.Lock()
					failures = append(failures, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d of %d PUTs into a cache full of clean copies failed, first: %v", len(failures), workers*perW, failures[0])
	}
	if st := s.Mountpaths()[0]; st.Used > cap*chunk {
		t.Fatalf("over MaxBytes: %+v", st)
	}
}
