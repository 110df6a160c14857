package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/object"
)

// TestRecoverOrphans plants every kind of debris a crash or a stranger can
// leave and checks that Open removes it and keeps the good objects.
func TestRecoverOrphans(t *testing.T) {
	s := openTest(t, Config{})
	ctx := context.Background()
	good := randBytes(1, 5000)
	put(t, s, "bkt", "good", good)
	put(t, s, "bkt", "truncated", randBytes(2, 5000))
	put(t, s, "bkt", "renamed", randBytes(3, 10))
	id, _ := s.CreateUpload(ctx, "bkt", "up", UploadOptions{})
	putPart(t, s, "bkt", "up", id, 1, []byte("part"))
	paths := s.paths
	mp0 := s.mps[0]
	truncated := s.objectFile("bkt", "truncated")
	renamed := s.objectFile("bkt", "renamed")
	upDir := filepath.Join(s.mountpathFor("bkt", "up").mpuDir, "bkt", id)
	s.Close()

	write := func(p string, b []byte) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	debris := []string{
		filepath.Join(mp0.tmpDir, "work-123"),                                   // interrupted PUT (older layout)
		filepath.Join(mp0.workDirs[3], "work-456"),                              // interrupted PUT
		filepath.Join(mp0.tmpDir, "stray", "x"),                                 // not a work directory
		filepath.Join(mp0.objDir, "bkt", "ab", strings.Repeat("ab", 32)),        // no metadata
		filepath.Join(mp0.objDir, "bkt", "zz"),                                  // stray file in place of a fan dir
		filepath.Join(mp0.objDir, "Not_A_Bucket", "ab", "x"),                    // invalid bucket dir
		filepath.Join(mp0.mpuDir, "bkt", strings.Repeat("c", 32), "part-00001"), // upload without upload.json
		filepath.Join(upDir, "part-00002"),                                      // part without metadata
		filepath.Join(mp0.root, ".tmp-4711"),                                    // the drive identity's first write
	}
	for _, d := range debris {
		write(d, []byte("junk"))
	}
	// An object file whose size disagrees with its metadata.
	f, err := os.OpenFile(truncated, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(100)
	f.Close()
	// An object file under a name that is not the hash of its key.
	moved := filepath.Join(filepath.Dir(renamed), strings.Repeat("0", 64))
	if err := os.Rename(renamed, moved); err != nil {
		t.Fatal(err)
	}
	debris = append(debris, truncated, moved)

	s = openTest(t, Config{Mountpaths: paths})
	for _, d := range append(debris, filepath.Join(mp0.tmpDir, "stray")) {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("debris %s survived Open (%v)", d, err)
		}
		// What is not an object under obj/ is moved aside, never deleted.
		if rel, err := filepath.Rel(mp0.objDir, d); err == nil && !strings.HasPrefix(rel, "..") {
			if _, err := os.Stat(filepath.Join(mp0.root, quarantineDir, rel)); err != nil {
				t.Errorf("%s not in quarantine: %v", d, err)
			}
		}
	}
	for _, d := range s.mps[0].workDirs {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			t.Errorf("work directory %s gone after Open: %v", d, err)
		}
	}
	if got, _ := get(t, s, "bkt", "good", nil); !bytes.Equal(got, good) {
		t.Fatal("good object damaged")
	}
	for _, k := range []string{"truncated", "renamed"} {
		if _, err := s.Stat(ctx, "bkt", k); !errors.Is(err, object.ErrNotFound) {
			t.Fatalf("%s: %v, want ErrNotFound", k, err)
		}
	}
	if parts, err := s.ListParts(ctx, "bkt", "up", id); err != nil || len(parts) != 1 {
		t.Fatalf("good upload after recovery: %+v, %v", parts, err)
	}
	if ups, _ := s.ListUploads(ctx, "bkt", ""); len(ups) != 1 {
		t.Fatalf("uploads after recovery: %+v", ups)
	}
	var total int64
	for _, st := range s.Mountpaths() {
		total += st.Objects
	}
	if total != 1 {
		t.Fatalf("accounting after recovery: %d objects", total)
	}
}

// TestAccessTimePersisted: access times live in memory and reach the
// metadata at Close, so the eviction order survives a restart.
func TestAccessTimePersisted(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Mountpaths: []string{filepath.Join(dir, "mp")}, Policy: "lru"}
	s := openTest(t, cfg)
	clock := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return clock }
	for _, k := range []string{"a", "b", "c"} {
		put(t, s, "bkt", k, []byte(k))
		clock = clock.Add(time.Minute)
	}
	clock = clock.Add(time.Hour)
	r, err := s.Get(context.Background(), "bkt", "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	if info, _ := s.Stat(context.Background(), "bkt", "a"); !info.AccessTime.Equal(clock) {
		t.Fatalf("in-memory access time %v, want %v", info.AccessTime, clock)
	}
	onDisk, _ := readInfo(s.objectFile("bkt", "a"))
	if onDisk.AccessTime.Equal(clock) {
		t.Fatal("a GET wrote the metadata (should be lazy)")
	}
	s.Close()
	s = openTest(t, cfg)
	if info, _ := s.Stat(context.Background(), "bkt", "a"); !info.AccessTime.Equal(clock) {
		t.Fatalf("access time after restart %v, want %v", info.AccessTime, clock)
	}
	// LRU order rebuilt from access times: b, c, then a.
	var order []string
	for {
		k, _, ok := s.mps[0].pol.Evict()
		if !ok {
			break
		}
		order = append(order, k)
	}
	if strings.Join(order, " ") != "bkt/b bkt/c bkt/a" {
		t.Fatalf("eviction order after restart: %v", order)
	}
}

// TestMountpathAdded: objects stay readable when a mountpath is added and
// HRW now points elsewhere; an overwrite moves them to their new home.
func TestMountpathAdded(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	s := openTest(t, Config{Mountpaths: []string{a}})
	var key string
	// Placement depends on the (random) temporary paths: with 64 keys the
	// chance that none moves to the new mountpath is 2^-64.
	var keys []string
	for i := 0; i < 64; i++ {
		keys = append(keys, fmt.Sprintf("k%d", i))
		put(t, s, "bkt", keys[i], []byte(keys[i]))
	}
	s.Close()
	s = openTest(t, Config{Mountpaths: []string{a, b}})
	for _, k := range keys {
		if got, _ := get(t, s, "bkt", k, nil); string(got) != k {
			t.Fatalf("%s unreadable after adding a mountpath", k)
		}
		if s.mountpathFor("bkt", k).idx == 1 {
			key = k
		}
	}
	if key == "" {
		t.Fatal("no key moves to the new mountpath")
	}
	old := s.objectFile("bkt", key)
	put(t, s, "bkt", key, []byte("new"))
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Fatalf("old copy on the previous mountpath remains: %v", err)
	}
	if !strings.HasPrefix(s.objectFile("bkt", key), b) {
		t.Fatalf("overwrite not on the HRW mountpath: %s", s.objectFile("bkt", key))
	}
	if st := s.Mountpaths(); st[0].Objects+st[1].Objects != int64(len(keys)) {
		t.Fatalf("accounting: %+v", st)
	}
}

func FuzzObjectPath(f *testing.F) {
	for _, k := range []string{"a", "a/b", "../x", "a/../../b", "/etc/passwd", "a//b", "dir/", "\x00", strings.Repeat("x", 1024), "ü/é"} {
		f.Add("bkt", k)
	}
	mp := &mountpath{objDir: "/mp/obj"}
	f.Fuzz(func(t *testing.T, bucket, key string) {
		if object.ValidateBucketName(bucket) != nil || object.ValidateKey(key) != nil {
			return
		}
		dir, file := mp.objectPath(bucket, key)
		rel, err := filepath.Rel(mp.objDir, file)
		if err != nil || strings.HasPrefix(rel, "..") || filepath.IsAbs(rel) {
			t.Fatalf("key %q escapes: %s", key, file)
		}
		parts := strings.Split(rel, string(filepath.Separator))
		if len(parts) != 3 || parts[0] != bucket || len(parts[2]) != 64 || parts[1] != parts[2][:2] || filepath.Dir(file) != dir {
			t.Fatalf("key %q: unexpected layout %s", key, rel)
		}
		if _, file2 := mp.objectPath(bucket, key+"x"); file2 == file {
			t.Fatalf("keys %q and %q share a file", key, key+"x")
		}
	})
}

// FuzzDecodeInfo: the metadata parser never panics, and what it accepts
// survives an encode/decode round trip.
func FuzzDecodeInfo(f *testing.F) {
	b, _ := encodeInfo(object.Info{Bucket: "bkt", Key: "k", Size: 3, ETag: "e", UserMeta: map[string]string{"a": "<&>"}, ModTime: time.Unix(1, 0).UTC()})
	f.Add(b)
	f.Add([]byte(`{"v":2}`))
	f.Add([]byte(`{"v":1,"size":-1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := decodeInfo(b)
		if err != nil {
			return
		}
		enc, err := encodeInfo(info)
		if err != nil {
			return // too large to store: fine, it was never stored
		}
		again, err := decodeInfo(enc)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		enc2, _ := encodeInfo(again)
		if !bytes.Equal(enc, enc2) {
			t.Fatalf("round trip differs:\n%s\n%s", enc, enc2)
		}
	})
}
