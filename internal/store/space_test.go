package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slipstream-io/slipstream/internal/object"
)

// keysOn returns n keys of bucket that HRW places on mountpath idx.
func keysOn(s *Store, bucket string, idx, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		k := fmt.Sprintf("key-%d", i)
		if s.mountpathFor(bucket, k).idx == idx {
			out = append(out, k)
		}
	}
	return out
}

func putOpts(size int64, dirty bool) PutOptions {
	return PutOptions{PutOptions: object.PutOptions{Size: size}, Dirty: dirty}
}

// TestMaxBytesNoSpace: a full mountpath of dirty objects refuses a PUT
// with ErrNoSpace and leaves nothing; the other mountpath keeps working;
// once objects are clean, the PUT evicts them and succeeds.
func TestMaxBytesNoSpace(t *testing.T) {
	const chunk = 256 << 10
	s := openTest(t, Config{MaxBytes: 4 * chunk, Policy: "lru"})
	ctx := context.Background()
	full := keysOn(s, "bkt", 0, 6)
	other := keysOn(s, "bkt", 1, 1)[0]
	for i, k := range full[:4] {
		if _, err := s.Put(ctx, "bkt", k, bytes.NewReader(randBytes(uint64(i), chunk)), putOpts(chunk, true)); err != nil {
			t.Fatalf("fill %s: %v", k, err)
		}
	}
	if st := s.Mountpaths()[0]; st.Used != 4*chunk || st.Free != 0 || st.Capacity != 4*chunk || st.Objects != 4 {
		t.Fatalf("stats of the full mountpath: %+v", st)
	}
	for _, size := range []int64{100 << 10, -1} {
		data := randBytes(42, 100<<10)
		_, err := s.Put(ctx, "bkt", full[4], bytes.NewReader(data), putOpts(size, false))
		if !errors.Is(err, object.ErrNoSpace) {
			t.Fatalf("Put (size %d) on full mountpath = %v, want ErrNoSpace", size, err)
		}
		if _, err := s.Stat(ctx, "bkt", full[4]); !errors.Is(err, object.ErrNotFound) {
			t.Fatalf("partial object visible: %v", err)
		}
		if f := files(t, s, "tmp"); len(f) != 0 {
			t.Fatalf("work files left: %v", f)
		}
		if st := s.Mountpaths()[0]; st.Used != 4*chunk {
			t.Fatalf("reservation leaked: %+v", st)
		}
	}
	// Dirty objects were not evicted to make room.
	for _, k := range full[:4] {
		if _, err := s.Stat(ctx, "bkt", k); err != nil {
			t.Fatalf("dirty %s lost: %v", k, err)
		}
	}
	// The other mountpath is unaffected.
	put(t, s, "bkt", other, randBytes(7, chunk))
	// Multipart on the full mountpath fails the same way.
	id, err := s.CreateUpload(ctx, "bkt", full[4], UploadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutPart(ctx, "bkt", full[4], id, 1, bytes.NewReader(make([]byte, 1000)), object.PutOptions{Size: 1000}); !errors.Is(err, object.ErrNoSpace) {
		t.Fatalf("PutPart on full mountpath = %v", err)
	}
	// Destage two: now they can be evicted, least recently used first.
	for _, k := range full[:2] {
		if _, err := s.UpdateMeta(ctx, "bkt", k, func(i *object.Info) error { i.Dirty = false; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	r, err := s.Get(ctx, "bkt", full[0], nil) // full[0] is now the most recent
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	data := randBytes(43, chunk)
	if _, err := s.Put(ctx, "bkt", full[4], bytes.NewReader(data), putOpts(-1, false)); err != nil {
		t.Fatalf("Put after destage = %v", err)
	}
	if _, err := s.Stat(ctx, "bkt", full[1]); !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("LRU victim %s not evicted: %v", full[1], err)
	}
	if _, err := s.Stat(ctx, "bkt", full[0]); err != nil {
		t.Fatalf("recently used %s evicted: %v", full[0], err)
	}
	if got, _ := get(t, s, "bkt", full[4], nil); !bytes.Equal(got, data) {
		t.Fatal("content differs")
	}
	if err := s.AbortUpload(ctx, "bkt", full[4], id); err != nil {
		t.Fatal(err)
	}
}

func TestEvictWatermarks(t *testing.T) {
	const obj = 20 << 10
	for _, policy := range []string{"lru", "s3fifo"} {
		t.Run(policy, func(t *testing.T) {
			s := openTest(t, Config{Mountpaths: []string{filepath.Join(t.TempDir(), "mp")}, MaxBytes: 40 * obj, HighWatermark: 95, LowWatermark: 50, Policy: policy})
			ctx := context.Background()
			for i := 0; i < 34; i++ {
				put(t, s, "bkt", fmt.Sprintf("o%03d", i), randBytes(uint64(i), obj))
			}
			for i := 34; i < 36; i++ { // dirty ones must survive
				if _, err := s.Put(ctx, "bkt", fmt.Sprintf("o%03d", i), bytes.NewReader(randBytes(uint64(i), obj)), putOpts(obj, true)); err != nil {
					t.Fatal(err)
				}
			}
			freed, err := s.Evict(ctx)
			if err != nil {
				t.Fatal(err)
			}
			st := s.Mountpaths()[0]
			if pct := usedPct(st); pct >= 50 || pct < 45 || freed != int64(36-st.Objects)*obj {
				t.Fatalf("after Evict: %.1f%% used, freed %d, stats %+v", pct, freed, st)
			}
			for i := 34; i < 36; i++ {
				if _, err := s.Stat(ctx, "bkt", fmt.Sprintf("o%03d", i)); err != nil {
					t.Fatalf("dirty object evicted: %v", err)
				}
			}
			// Crossing the high watermark wakes the background evictor.
			for i := 100; usedPct(s.Mountpaths()[0]) < 96; i++ {
				put(t, s, "bkt", fmt.Sprintf("o%03d", i), randBytes(uint64(i), obj))
			}
			deadline := time.Now().Add(5 * time.Second)
			for usedPct(s.Mountpaths()[0]) >= 50 {
				if time.Now().After(deadline) {
					t.Fatalf("background eviction did not reach the low watermark: %+v", s.Mountpaths()[0])
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// faultFile injects ENOSPC into work files.
type faultFile struct {
	*os.File
	write func(p []byte) (int, error) // nil: pass through
	sync  error
}

func (f *faultFile) Write(p []byte) (int, error) {
	if f.write != nil {
		return f.write(p)
	}
	return f.File.Write(p)
}

func (f *faultFile) Sync() error {
	if f.sync != nil {
		return f.sync
	}
	return f.File.Sync()
}

// TestENOSPC injects the filesystem's ENOSPC into writes and fsync.
func TestENOSPC(t *testing.T) {
	ctx := context.Background()
	const size = 3 * bufSize
	cases := []struct {
		name string
		// inject builds the fault for one work file; fails counts calls
		inject  func(f *os.File, fails *atomic.Int32) *faultFile
		wantErr bool
		evicted bool // an eviction attempt removed the clean object
	}{
		{"always full", func(f *os.File, fails *atomic.Int32) *faultFile {
			return &faultFile{File: f, write: func(p []byte) (int, error) { fails.Add(1); return 0, unix.ENOSPC }}
		}, true, true},
		{"short write then full", func(f *os.File, fails *atomic.Int32) *faultFile {
			return &faultFile{File: f, write: func(p []byte) (int, error) {
				fails.Add(1)
				n, _ := f.Write(p[:len(p)/2])
				return n, &os.PathError{Op: "write", Path: f.Name(), Err: unix.ENOSPC}
			}}
		}, true, true},
		{"full until eviction frees space", func(f *os.File, fails *atomic.Int32) *faultFile {
			ff := &faultFile{File: f}
			ff.write = func(p []byte) (int, error) {
				if fails.Load() == 0 {
					fails.Add(1)
					n, _ := f.Write(p[:100])
					return n, unix.ENOSPC
				}
				return f.Write(p)
			}
			return ff
		}, false, true},
		{"fsync reports ENOSPC (delayed allocation)", func(f *os.File, fails *atomic.Int32) *faultFile {
			return &faultFile{File: f, sync: unix.ENOSPC}
		}, true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := openTest(t, Config{})
			victim := keysOn(s, "bkt", 0, 2)
			other := keysOn(s, "bkt", 1, 1)[0]
			put(t, s, "bkt", victim[0], []byte("old, clean"))
			old := []byte("old version, dirty so that eviction keeps it")
			if _, err := s.Put(ctx, "bkt", victim[1], bytes.NewReader(old), putOpts(-1, true)); err != nil {
				t.Fatal(err)
			}
			var fails atomic.Int32
			var faultOn atomic.Bool
			faultOn.Store(true)
			s.createWork = func(dir string, _ bool) (workFile, error) {
				f, err := os.CreateTemp(dir, "work-*")
				if err != nil || !faultOn.Load() || filepath.Dir(dir) != s.mps[0].tmpDir {
					return f, err
				}
				return c.inject(f, &fails), nil
			}
			data := randBytes(5, size)
			_, err := s.Put(ctx, "bkt", victim[1], bytes.NewReader(data), putOpts(size, false))
			if c.wantErr != (err != nil) || (err != nil && !errors.Is(err, object.ErrNoSpace)) {
				t.Fatalf("Put = %v, want error %v (ErrNoSpace)", err, c.wantErr)
			}
			if f := files(t, s, "tmp"); len(f) != 0 {
				t.Fatalf("work files left: %v", f)
			}
			got, _ := get(t, s, "bkt", victim[1], nil)
			if c.wantErr && !bytes.Equal(got, old) || !c.wantErr && !bytes.Equal(got, data) {
				t.Fatalf("content after Put: %d bytes", len(got))
			}
			_, statErr := s.Stat(ctx, "bkt", victim[0])
			if c.evicted != errors.Is(statErr, object.ErrNotFound) {
				t.Fatalf("eviction attempt: clean object Stat = %v, want evicted=%v", statErr, c.evicted)
			}
			// Other mountpaths keep working while this one is full.
			put(t, s, "bkt", other, data)
			faultOn.Store(false)
			put(t, s, "bkt", victim[1], data)
		})
	}
}

func TestMountpathsFilesystem(t *testing.T) {
	s := openTest(t, Config{})
	put(t, s, "bkt", "x", make([]byte, 1000))
	var objs, bytes int64
	for _, st := range s.Mountpaths() {
		var fs unix.Statfs_t
		if err := unix.Statfs(st.Path, &fs); err != nil {
			t.Fatal(err)
		}
		if st.Capacity != int64(fs.Blocks)*fs.Bsize || st.Used <= 0 || st.Free <= 0 || st.Used+st.Free > st.Capacity {
			t.Fatalf("filesystem stats %+v", st)
		}
		objs += st.Objects
		bytes += st.Bytes
	}
	if objs != 1 || bytes != 1000 {
		t.Fatalf("objects %d bytes %d", objs, bytes)
	}
}

// TestStoreScanResistance runs an epoch-style scan through a small store
// while a hot set is read, under both policies: s3fifo keeps the hot set
// resident, lru lets the scan flush it.
func TestStoreScanResistance(t *testing.T) {
	if testing.Short() {
		t.Skip("hundreds of fsynced PUTs")
	}
	const (
		obj      = 1 << 10
		capacity = 50
		hot      = 8
		scan     = 3 * capacity
		rounds   = 2
	)
	ctx := context.Background()
	ratio := map[string]float64{}
	for _, policy := range []string{"lru", "s3fifo"} {
		s := openTest(t, Config{Mountpaths: []string{filepath.Join(t.TempDir(), "mp")}, MaxBytes: capacity * obj,
			HighWatermark: 99.99, LowWatermark: 99.9, Policy: policy})
		data := make([]byte, obj)
		access := func(key string) bool {
			r, err := s.Get(ctx, "bkt", key, nil)
			if err == nil {
				r.Close()
				return true
			}
			if !errors.Is(err, object.ErrNotFound) {
				t.Fatal(err)
			}
			put(t, s, "bkt", key, data) // miss: fill from the "backend"
			return false
		}
		for i := 0; i < hot; i++ {
			for j := 0; j < 3; j++ {
				access(fmt.Sprintf("hot-%d", i))
			}
		}
		hits, reqs := 0, 0
		for round := 0; round < rounds; round++ {
			for i := 0; i < scan; i++ {
				access(fmt.Sprintf("scan-%03d", i))
				if i%10 == 0 { // each hot key every 80 scan objects: beyond LRU reach
					reqs++
					if access(fmt.Sprintf("hot-%d", (i/10)%hot)) {
						hits++
					}
				}
			}
		}
		ratio[policy] = float64(hits) / float64(reqs)
		st := s.Mountpaths()[0]
		fmt.Printf("store scan resistance: %-6s hot-set hit ratio %.2f (%d objects resident, %d bytes of %d)\n", policy, ratio[policy], st.Objects, st.Used, st.Capacity)
		if st.Used > capacity*obj {
			t.Fatalf("%s: %d bytes used over MaxBytes %d", policy, st.Used, capacity*obj)
		}
	}
	if ratio["s3fifo"] < 0.9 || ratio["lru"] > 0.5 {
		t.Fatalf("hot-set hit ratios: s3fifo %.2f (want >= 0.9), lru %.2f (want <= 0.5)", ratio["s3fifo"], ratio["lru"])
	}
}

// TestPinnedNeverEvicted: a local bucket's objects (Pinned), a completed
// multipart upload among them, survive the eviction that PUTs into a full
// mountpath and Evict cause, before and after a restart, and EvictObject
// refuses them; the clean copies beside them are evicted.
func TestPinnedNeverEvicted(t *testing.T) {
	const chunk = 64 << 10
	dir := t.TempDir()
	cfg := Config{Mountpaths: []string{filepath.Join(dir, "mp1"), filepath.Join(dir, "mp2")}, MaxBytes: 8 * chunk, Policy: "lru"}
	s := openTest(t, cfg)
	ctx := context.Background()
	keys := keysOn(s, "bkt", 0, 12)
	pinned, mpu, fill := keys[:3], keys[3], keys[4:]
	for i, k := range pinned {
		if _, err := s.Put(ctx, "bkt", k, bytes.NewReader(randBytes(uint64(i), chunk)), PutOptions{PutOptions: object.PutOptions{Size: chunk}, Pinned: true}); err != nil {
			t.Fatal(err)
		}
	}
	id, err := s.CreateUpload(ctx, "bkt", mpu, UploadOptions{Pinned: true})
	if err != nil {
		t.Fatal(err)
	}
	pi := putPart(t, s, "bkt", mpu, id, 1, randBytes(9, chunk))
	if info, err := s.CompleteUpload(ctx, "bkt", mpu, id, []object.CompletePart{{PartNumber: 1, ETag: pi.ETag}}); err != nil || !info.Pinned {
		t.Fatalf("CompleteUpload: %+v, %v", info, err)
	}
	// Clearing Dirty leaves a pinned object pinned.
	if info, err := s.UpdateMeta(ctx, "bkt", pinned[0], func(i *object.Info) error { i.Dirty = false; return nil }); err != nil || !info.Pinned {
		t.Fatalf("UpdateMeta: %+v, %v", info, err)
	}
	check := func(stage string) {
		t.Helper()
		// Twice the room left, in clean objects: each PUT must evict.
		for round := 0; round < 2; round++ {
			for i, k := range fill {
				if _, err := s.Put(ctx, "bkt", k, bytes.NewReader(randBytes(uint64(100+i), chunk)), putOpts(chunk, false)); err != nil {
					t.Fatalf("%s: clean PUT %s: %v", stage, k, err)
				}
			}
		}
		if _, err := s.Evict(ctx); err != nil {
			t.Fatalf("%s: Evict: %v", stage, err)
		}
		for _, k := range append([]string{mpu}, pinned...) {
			if _, err := s.Stat(ctx, "bkt", k); err != nil {
				t.Fatalf("%s: pinned %s was evicted: %v", stage, k, err)
			}
			if err := s.EvictObject(ctx, "bkt", k); !errors.Is(err, ErrPinned) {
				t.Fatalf("%s: EvictObject(%s) = %v, want ErrPinned", stage, k, err)
			}
		}
		evicted := 0
		for _, k := range fill {
			if _, err := s.Stat(ctx, "bkt", k); errors.Is(err, object.ErrNotFound) {
				evicted++
			}
		}
		if evicted == 0 {
			t.Fatalf("%s: no clean object was evicted", stage)
		}
	}
	check("before a restart")
	s.Close()
	s = openTest(t, cfg)
	check("after a restart")
}

// TestHopelessPutEvictsNothing: a PUT that evicting every clean copy of
// its mountpath could not make room for (a huge declared size, or room
// taken by dirty objects) fails with ErrNoSpace and evicts nothing.
func TestHopelessPutEvictsNothing(t *testing.T) {
	const chunk = 64 << 10
	s := openTest(t, Config{MaxBytes: 16 * chunk, Policy: "lru"})
	ctx := context.Background()
	keys := keysOn(s, "bkt", 0, 13)
	for i, k := range keys[:8] {
		if _, err := s.Put(ctx, "bkt", k, bytes.NewReader(randBytes(uint64(i), chunk)), putOpts(chunk, i >= 4)); err != nil {
			t.Fatal(err)
		}
	}
	// 8 chunks free, 4 chunks of clean copies: 13 chunks cannot fit.
	for _, size := range []int64{1 << 40, 13 * chunk} {
		_, err := s.Put(ctx, "bkt", keys[12], bytes.NewReader(nil), putOpts(size, false))
		if !errors.Is(err, object.ErrNoSpace) {
			t.Fatalf("Put of %d bytes = %v, want ErrNoSpace", size, err)
		}
		for _, k := range keys[:8] {
			if _, err := s.Stat(ctx, "bkt", k); err != nil {
				t.Fatalf("Put of %d bytes evicted %s: %v", size, k, err)
			}
		}
	}
	// 12 chunks fit once the 4 clean copies go.
	if _, err := s.Put(ctx, "bkt", keys[12], bytes.NewReader(randBytes(99, 12*chunk)), putOpts(12*chunk, false)); err != nil {
		t.Fatalf("Put that eviction makes room for: %v", err)
	}
}

// TestEvictionPassesOverOpenCopies: unlinking a copy that is being read
// frees no space until its reader is done, so eviction passes over it:
// the least recently used copy, held open by a slow reader, survives a
// PUT that needs room, the next one goes instead, and the reader reads it
// to the end. Once closed, it is evictable again.
func TestEvictionPassesOverOpenCopies(t *testing.T) {
	const chunk = 256 << 10
	// Full at 3 copies, never over the high watermark: only PUTs evict.
	s := openTest(t, Config{MaxBytes: 3*chunk + 1, HighWatermark: 100, LowWatermark: 99, Policy: "lru"})
	ctx := context.Background()
	keys := keysOn(s, "bkt", 0, 6)
	for i, k := range keys[:3] {
		if _, err := s.Put(ctx, "bkt", k, bytes.NewReader(randBytes(uint64(i), chunk)), putOpts(chunk, false)); err != nil {
			t.Fatal(err)
		}
	}
	rd, err := s.Get(ctx, "bkt", keys[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{keys[1], keys[2]} { // keys[0] is the least recently used again
		r, err := s.Get(ctx, "bkt", k, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Close()
	}
	put := func(i int) {
		t.Helper()
		if _, err := s.Put(ctx, "bkt", keys[i], bytes.NewReader(randBytes(uint64(i), chunk)), putOpts(chunk, false)); err != nil {
			t.Fatalf("PUT %d that needs room: %v", i, err)
		}
	}
	put(3)
	if _, err := s.Stat(ctx, "bkt", keys[0]); err != nil {
		t.Errorf("the copy being read was evicted: %v", err)
	}
	if _, err := s.Stat(ctx, "bkt", keys[1]); !errors.Is(err, object.ErrNotFound) {
		t.Errorf("the least recently used copy not being read: %v, want evicted", err)
	}
	b, err := io.ReadAll(rd)
	if err != nil || !bytes.Equal(b, randBytes(0, chunk)) {
		t.Fatalf("reader: %d bytes, %v", len(b), err)
	}
	rd.Close()
	put(4)
	put(5)
	if _, err := s.Stat(ctx, "bkt", keys[0]); !errors.Is(err, object.ErrNotFound) {
		t.Errorf("the closed copy after two more PUTs: %v, want evicted", err)
	}
}

// TestEvictionPassesOverOpenCopiesAfterMetaUpdate: a copy stays "being
// read" for eviction while a Reader has it open, also once its metadata
// was rewritten in place (UpdateMeta: a destage clearing Dirty; the lazy
// write-back of access times): it is the same file, and unlinking it would
// free no space until the reader is done.
func TestEvictionPassesOverOpenCopiesAfterMetaUpdate(t *testing.T) {
	const chunk = 256 << 10
	for _, how := range []string{"UpdateMeta", "flushAccessTimes"} {
		t.Run(how, func(t *testing.T) {
			// Full at 3 copies, never over the high watermark: only PUTs evict.
			s := openTest(t, Config{MaxBytes: 3*chunk + 1, HighWatermark: 100, LowWatermark: 99, Policy: "lru"})
			ctx := context.Background()
			keys := keysOn(s, "bkt", 0, 4)
			for i, k := range keys[:3] {
				if _, err := s.Put(ctx, "bkt", k, bytes.NewReader(randBytes(uint64(i), chunk)), putOpts(chunk, i == 0)); err != nil {
					t.Fatal(err)
				}
			}
			// keys[0] is read while dirty, then is the least recently used.
			start := time.Now()
			s.now = func() time.Time { return start.Add(time.Minute) }
			rd, err := s.Get(ctx, "bkt", keys[0], nil)
			if err != nil {
				t.Fatal(err)
			}
			defer rd.Close()
			switch how {
			case "UpdateMeta":
				// Destaged while being read: clean, evictable.
				if _, err := s.UpdateMeta(ctx, "bkt", keys[0], func(i *object.Info) error { i.Dirty = false; return nil }); err != nil {
					t.Fatal(err)
				}
			case "flushAccessTimes":
				if _, err := s.UpdateMeta(ctx, "bkt", keys[0], func(i *object.Info) error { i.Dirty = false; return nil }); err != nil {
					t.Fatal(err)
				}
				s.now = func() time.Time { return start.Add(2 * time.Minute) }
				rd2, err := s.Get(ctx, "bkt", keys[0], nil) // a second reader, counted on the updated entry
				if err != nil {
					t.Fatal(err)
				}
				defer rd2.Close()
				s.flushAccessTimes() // the access time moved by a minute: written back
				s.now = func() time.Time { return start.Add(3 * time.Minute) }
			}
			for _, k := range keys[1:3] { // keys[0] is the least recently used
				r, err := s.Get(ctx, "bkt", k, nil)
				if err != nil {
					t.Fatal(err)
				}
				r.Close()
			}
			if _, err := s.Put(ctx, "bkt", keys[3], bytes.NewReader(randBytes(3, chunk)), putOpts(chunk, false)); err != nil {
				t.Fatalf("PUT that needs room: %v", err)
			}
			if _, err := s.Stat(ctx, "bkt", keys[0]); err != nil {
				t.Errorf("the copy being read was evicted after its metadata was rewritten: %v", err)
			}
			if _, err := s.Stat(ctx, "bkt", keys[1]); !errors.Is(err, object.ErrNotFound) {
				t.Errorf("the least recently used copy not being read: %v, want evicted", err)
			}
		})
	}
}

// TestInodesExhausted: a filesystem can run out of inodes before it runs
// out of blocks (a cache of small objects). A PUT whose work file cannot be
// created for that evicts clean copies on its mountpath, as it does when a
// write finds the filesystem full, and succeeds; with nothing evictable,
// PUTs and new multipart uploads fail with ErrNoSpace and leave nothing.
func TestInodesExhausted(t *testing.T) {
	ctx := context.Background()
	p := tmpfsMountpathWith(t, filepath.Join(t.TempDir(), "mp"), "size=16m,nr_inodes=64")
	s := openTest(t, Config{Mountpaths: []string{p}, Policy: "lru"})
	// Keys of one fan-out directory: committing them needs no new directory.
	var keys []string
	fan := objectName("k0")[:2]
	for i := 0; len(keys) < 100 && i < 1_000_000; i++ {
		if k := fmt.Sprintf("k%d", i); objectName(k)[:2] == fan {
			keys = append(keys, k)
		}
	}
	// Far more clean copies than there are inodes: the oldest go.
	for i, k := range keys {
		if _, err := s.Put(ctx, "bkt", k, bytes.NewReader(randBytes(uint64(i), 1000)), putOpts(1000, false)); err != nil {
			t.Fatalf("PUT %d of %d small clean copies: %v", i, len(keys), err)
		}
	}
	last := keys[len(keys)-1]
	if got, _ := get(t, s, "bkt", last, nil); !bytes.Equal(got, randBytes(uint64(len(keys)-1), 1000)) {
		t.Errorf("%s reads %d bytes", last, len(got))
	}
	if _, err := s.Stat(ctx, "bkt", keys[0]); !errors.Is(err, object.ErrNotFound) {
		t.Errorf("the oldest copy: %v, want evicted", err)
	}
	// Nothing evictable is left once the copies are dirty and the other
	// inodes are taken by files that are not the store's.
	for i, k := range keys[len(keys)-5:] {
		if _, err := s.Put(ctx, "bkt", k, bytes.NewReader(randBytes(uint64(i), 1000)), putOpts(1000, true)); err != nil {
			t.Fatalf("rewrite %s dirty: %v", k, err)
		}
	}
	err := s.Walk(ctx, "bkt", func(info object.Info) error {
		if !info.Dirty {
			return s.EvictObject(ctx, "bkt", info.Key)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		if err := os.WriteFile(filepath.Join(p, fmt.Sprintf("other-%d", i)), nil, 0o644); err != nil {
			break
		}
	}
	if _, err := s.Put(ctx, "bkt", keys[0], bytes.NewReader([]byte("x")), putOpts(1, false)); !errors.Is(err, object.ErrNoSpace) {
		t.Errorf("PUT with no inode and nothing to evict: %v, want ErrNoSpace", err)
	}
	if _, err := s.CreateUpload(ctx, "newbkt", "k", UploadOptions{}); !errors.Is(err, object.ErrNoSpace) {
		t.Errorf("CreateUpload with no inode left: %v, want ErrNoSpace", err)
	}
	if f := files(t, s, "tmp"); len(f) != 0 {
		t.Errorf("work files left: %v", f)
	}
}

// TestWorkFileENOSPCEvicts: on ext4 a filesystem out of inodes refuses to
// create the work file itself; a PUT then evicts a clean copy of its
// mountpath and tries again, as it does when a write finds the filesystem
// full.
func TestWorkFileENOSPCEvicts(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, Config{})
	keys := keysOn(s, "bkt", 0, 2)
	put(t, s, "bkt", keys[0], []byte("clean, evictable"))
	var creates atomic.Int32
	s.createWork = func(dir string, direct bool) (workFile, error) {
		if creates.Add(1) == 1 {
			return nil, &os.PathError{Op: "open", Path: filepath.Join(dir, "work-1"), Err: unix.ENOSPC}
		}
		return createWorkFile(dir, direct)
	}
	if _, err := s.Put(ctx, "bkt", keys[1], bytes.NewReader([]byte("new")), putOpts(3, false)); err != nil {
		t.Fatalf("PUT whose work file found no inode: %v", err)
	}
	if _, err := s.Stat(ctx, "bkt", keys[0]); !errors.Is(err, object.ErrNotFound) {
		t.Errorf("the clean copy: %v, want evicted to make room", err)
	}
	// Nothing left to evict: ErrNoSpace.
	creates.Store(0)
	if _, err := s.Put(ctx, "bkt", keys[0], bytes.NewReader([]byte("x")), putOpts(1, false)); err != nil {
		t.Fatal(err) // evicts keys[1]
	}
	creates.Store(0)
	s.createWork = func(dir string, direct bool) (workFile, error) {
		return nil, &os.PathError{Op: "open", Path: filepath.Join(dir, "work-1"), Err: unix.ENOSPC}
	}
	if _, err := s.Put(ctx, "bkt", keys[1], bytes.NewReader([]byte("x")), putOpts(1, true)); !errors.Is(err, object.ErrNoSpace) {
		t.Errorf("PUT with no inode at all: %v, want ErrNoSpace", err)
	}
}

// TestAccessDuringMetadataRewriteIsKept: a read that found an object's
// index entry just before its metadata was rewritten (the lazy write-back
// of access times, UpdateMeta) records its access time after the switch;
// the new entry must show it, or eviction sees the object older than it is.
func TestAccessDuringMetadataRewriteIsKept(t *testing.T) {
	ctx := context.Background()
	for _, how := range []string{"flushAccessTimes", "UpdateMeta"} {
		t.Run(how, func(t *testing.T) {
			s := openTest(t, Config{Policy: "lru"})
			if _, err := s.Put(ctx, "bkt", "k", bytes.NewReader(randBytes(1, 4096)), putOpts(4096, false)); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			s.now = func() time.Time { return start.Add(time.Minute) }
			r, err := s.Get(ctx, "bkt", "k", nil) // moves the access time: the flush writes it back
			if err != nil {
				t.Fatal(err)
			}
			r.Close()
			old := s.lookup("bkt", "k") // what a concurrent read holds
			switch how {
			case "flushAccessTimes":
				s.flushAccessTimes()
			case "UpdateMeta":
				if _, err := s.UpdateMeta(ctx, "bkt", "k", func(i *object.Info) error { i.ContentType = "x/y"; return nil }); err != nil {
					t.Fatal(err)
				}
			}
			if s.lookup("bkt", "k") == old {
				t.Fatal("the entry was not replaced: the test does not cover the switch")
			}
			late := start.Add(2 * time.Minute)
			old.atime.Store(late.UnixNano()) // the concurrent read records its access now
			if got := s.lookup("bkt", "k").snapshot().AccessTime; !got.Equal(late.UTC()) {
				t.Errorf("access time after the switch %v, want the late read's %v", got, late.UTC())
			}
		})
	}
}
