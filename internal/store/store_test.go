package store

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/slipstream-io/slipstream/internal/object"
)

func TestPutGetStatDelete(t *testing.T) {
	s := openTest(t, Config{})
	ctx := context.Background()
	cases := []struct {
		name, key string
		size      int
	}{
		{"empty", "empty", 0},
		{"small", "a/b/c.txt", 100},
		{"one buffer", "one", bufSize},
		{"several buffers", "dir/several", 3*bufSize + 17},
		{"unicode key", "données/été 🚀.bin", 1000},
		{"folder marker", "folder/", 0},
		{"dots in names", "a/.../..b/c..", 5},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data := randBytes(uint64(i), c.size)
			info := put(t, s, "bkt", c.key, data)
			if info.Size != int64(c.size) || info.ETag != md5hex(data) || info.Bucket != "bkt" || info.Key != c.key {
				t.Fatalf("Put info = %+v", info)
			}
			got, ginfo := get(t, s, "bkt", c.key, nil)
			if !bytes.Equal(got, data) {
				t.Fatalf("Get returned %d bytes, want %d (content differs)", len(got), len(data))
			}
			if ginfo.ETag != info.ETag || ginfo.Checksum != info.Checksum {
				t.Fatalf("Get info %+v, Put info %+v", ginfo, info)
			}
			st, err := s.Stat(ctx, "bkt", c.key)
			if err != nil || st.ETag != info.ETag || st.Size != info.Size {
				t.Fatalf("Stat = %+v, %v", st, err)
			}
			if err := s.Delete(ctx, "bkt", c.key); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			if _, err := s.Stat(ctx, "bkt", c.key); !errors.Is(err, object.ErrNotFound) {
				t.Fatalf("Stat after Delete: %v, want ErrNotFound", err)
			}
			if _, err := s.Get(ctx, "bkt", c.key, nil); !errors.Is(err, object.ErrNotFound) {
				t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
			}
			if err := s.Delete(ctx, "bkt", c.key); !errors.Is(err, object.ErrNotFound) {
				t.Fatalf("second Delete: %v, want ErrNotFound", err)
			}
		})
	}
	if f := files(t, s, "obj"); len(f) != 0 {
		t.Fatalf("files left after deletes: %v", f)
	}
}

func TestConfig(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name string
		cfg  Config
	}{
		{"no mountpaths", Config{}},
		{"empty mountpath", Config{Mountpaths: []string{""}}},
		{"duplicate mountpath", Config{Mountpaths: []string{dir + "/a", dir + "/./a"}}},
		{"low above high", Config{Mountpaths: []string{dir + "/a"}, HighWatermark: 50, LowWatermark: 60}},
		{"high above 100", Config{Mountpaths: []string{dir + "/a"}, HighWatermark: 101}},
		{"bad policy", Config{Mountpaths: []string{dir + "/a"}, Policy: "mru"}},
		{"negative MaxBytes", Config{Mountpaths: []string{dir + "/a"}, MaxBytes: -1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := Open(context.Background(), c.cfg, nil)
			if !errors.Is(err, ErrConfig) {
				if s != nil {
					s.Close()
				}
				t.Fatalf("Open = %v, want ErrConfig", err)
			}
		})
	}
}

func TestMountpathLocked(t *testing.T) {
	s := openTest(t, Config{})
	_, err := Open(context.Background(), Config{Mountpaths: []string{s.paths[1]}}, nil)
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("second Open of a mountpath = %v, want ErrBusy", err)
	}
}

func TestRange(t *testing.T) {
	s := openTest(t, Config{})
	data := randBytes(9, 1000)
	put(t, s, "bkt", "r", data)
	cases := []struct {
		name     string
		rng      object.Range
		off, len int64
		err      error
	}{
		{"whole", object.Range{Offset: 0, Length: -1}, 0, 1000, nil},
		{"middle", object.Range{Offset: 10, Length: 20}, 10, 20, nil},
		{"past end clipped", object.Range{Offset: 990, Length: 100}, 990, 10, nil},
		{"suffix", object.Range{Suffix: 7}, 993, 7, nil},
		{"suffix larger than object", object.Range{Suffix: 5000}, 0, 1000, nil},
		{"offset at size", object.Range{Offset: 1000, Length: 1}, 0, 0, object.ErrInvalidRange},
		{"negative offset", object.Range{Offset: -1, Length: 1}, 0, 0, object.ErrInvalidRange},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := s.Get(context.Background(), "bkt", "r", &c.rng)
			if !errors.Is(err, c.err) {
				t.Fatalf("Get = %v, want %v", err, c.err)
			}
			if err != nil {
				return
			}
			defer r.Close()
			if off, n := r.Range(); off != c.off || n != c.len {
				t.Fatalf("Range() = %d,%d want %d,%d", off, n, c.off, c.len)
			}
			f, foff, flen := r.File()
			if f == nil || foff != c.off || flen != c.len {
				t.Fatalf("File() = %v,%d,%d", f, foff, flen)
			}
			got, err := io.ReadAll(r)
			if err != nil || !bytes.Equal(got, data[c.off:c.off+c.len]) {
				t.Fatalf("read %d bytes (%v), want data[%d:%d]", len(got), err, c.off, c.off+c.len)
			}
		})
	}
}

// TestReaderWriteTo checks the zero-copy paths: to a file (copy_file_range),
// to a TCP connection (sendfile) and to a plain writer, after a partial Read
// and a Seek.
func TestReaderWriteTo(t *testing.T) {
	s := openTest(t, Config{})
	data := randBytes(11, 3<<20+5)
	put(t, s, "bkt", "w", data)
	open := func() *Reader {
		r, err := s.Get(context.Background(), "bkt", "w", &object.Range{Offset: 100, Length: int64(len(data)) - 200})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		return r
	}
	want := data[100 : len(data)-100]

	// Plain writer after a partial read.
	r := open()
	head := make([]byte, 10)
	if _, err := io.ReadFull(r, head); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	buf.Write(head)
	if _, err := io.Copy(&buf, r); err != nil || !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("copy to buffer: %v, equal=%v", err, bytes.Equal(buf.Bytes(), want))
	}

	// File destination after a Seek.
	r = open()
	if _, err := r.Seek(-1000, io.SeekEnd); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n, err := io.Copy(f, r); err != nil || n != 1000 {
		t.Fatalf("copy to file: %d, %v", n, err)
	}
	got, _ := os.ReadFile(f.Name())
	if !bytes.Equal(got, want[len(want)-1000:]) {
		t.Fatal("copy to file: content differs")
	}

	// TCP connection on loopback.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	recv := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			recv <- nil
			return
		}
		b, _ := io.ReadAll(c)
		c.Close()
		recv <- b
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r = open()
	if _, err := io.Copy(c, r); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if b := <-recv; !bytes.Equal(b, want) {
		t.Fatalf("copy to TCP: got %d bytes, want %d, equal=%v", len(b), len(want), bytes.Equal(b, want))
	}
}

// TestBadInput: every failing Put leaves no file and keeps the old version.
func TestBadInput(t *testing.T) {
	s := openTest(t, Config{})
	ctx := context.Background()
	old := randBytes(1, 5000)
	oldInfo := put(t, s, "bkt", "k", old)
	body := randBytes(2, 3*bufSize)
	goodMD5 := md5.Sum(body)
	badMD5 := goodMD5
	badMD5[0] ^= 1
	cases := []struct {
		name   string
		bucket string
		key    string
		r      func(cancel context.CancelFunc) io.Reader
		opts   PutOptions
		err    error
	}{
		{"invalid bucket", "B!", "k", nil, PutOptions{}, object.ErrInvalidBucketName},
		{"dotdot key", "bkt", "a/../k", nil, PutOptions{}, object.ErrInvalidKey},
		{"double slash key", "bkt", "a//k", nil, PutOptions{}, object.ErrInvalidKey},
		{"NUL in key", "bkt", "a\x00k", nil, PutOptions{}, object.ErrInvalidKey},
		{"key too long", "bkt", strings.Repeat("k", object.MaxKeyLen+1), nil, PutOptions{}, object.ErrInvalidKey},
		{"body shorter than size", "bkt", "k", nil, PutOptions{PutOptions: object.PutOptions{Size: int64(len(body)) + 1}}, object.ErrIncompleteBody},
		{"body longer than size", "bkt", "k", nil, PutOptions{PutOptions: object.PutOptions{Size: int64(len(body)) - 1}}, object.ErrTooLarge},
		{"bad Content-MD5", "bkt", "k", nil, PutOptions{PutOptions: object.PutOptions{Size: -1, ContentMD5: badMD5[:]}}, object.ErrBadDigest},
		{"bad Content-MD5 with ETag given", "bkt", "k", nil, PutOptions{ETag: "x", PutOptions: object.PutOptions{Size: -1, ContentMD5: badMD5[:]}}, object.ErrBadDigest},
		{"bytes differ from the sender's digest", "bkt", "k", nil, PutOptions{PutOptions: object.PutOptions{Size: -1, Digest: digestOf(append([]byte{1}, body[1:]...))}}, object.ErrUnavailable},
		{"sender's digest unavailable", "bkt", "k", nil, PutOptions{PutOptions: object.PutOptions{Size: -1, Digest: func() (object.Digest, error) {
			return object.Digest{}, object.ErrIncompleteBody
		}}}, object.ErrIncompleteBody},
		{"bad Content-MD5 against the sender's digest", "bkt", "k", nil, PutOptions{PutOptions: object.PutOptions{Size: -1, ContentMD5: badMD5[:], Digest: digestOf(body)}}, object.ErrBadDigest},
		{"short Content-MD5", "bkt", "k", nil, PutOptions{PutOptions: object.PutOptions{Size: -1, ContentMD5: []byte{1, 2}}}, object.ErrInvalidArgument},
		{"metadata too large", "bkt", "k", nil, PutOptions{PutOptions: object.PutOptions{Size: -1, UserMeta: map[string]string{"big": strings.Repeat("m", MaxMetaBytes)}}}, ErrMetaTooLarge},
		{"reader fails", "bkt", "k", func(context.CancelFunc) io.Reader {
			return io.MultiReader(bytes.NewReader(body[:bufSize+10]), iotest.ErrReader(errors.New("connection reset")))
		}, PutOptions{PutOptions: object.PutOptions{Size: -1}}, nil},
		{"client disconnects (unexpected EOF)", "bkt", "k", func(context.CancelFunc) io.Reader {
			return io.MultiReader(bytes.NewReader(body[:bufSize+10]), iotest.ErrReader(io.ErrUnexpectedEOF))
		}, PutOptions{PutOptions: object.PutOptions{Size: int64(len(body))}}, nil},
		{"ctx canceled mid-put", "bkt", "k", func(cancel context.CancelFunc) io.Reader {
			return io.MultiReader(bytes.NewReader(body[:2*bufSize]), cancelReader{cancel}, bytes.NewReader(body[2*bufSize:]))
		}, PutOptions{PutOptions: object.PutOptions{Size: int64(len(body))}}, context.Canceled},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			var r io.Reader = bytes.NewReader(body)
			if c.r != nil {
				r = c.r(cancel)
			}
			_, err := s.Put(cctx, c.bucket, c.key, r, c.opts)
			if err == nil || (c.err != nil && !errors.Is(err, c.err)) {
				t.Fatalf("Put = %v, want %v", err, c.err)
			}
			if f := files(t, s, "tmp"); len(f) != 0 {
				t.Fatalf("work files left: %v", f)
			}
			if f := files(t, s, "obj"); len(f) != 1 {
				t.Fatalf("object files: %v, want only the old version", f)
			}
			got, info := get(t, s, "bkt", "k", nil)
			if !bytes.Equal(got, old) || info.ETag != oldInfo.ETag {
				t.Fatal("old version damaged")
			}
		})
	}
	// The good Content-MD5 works and ETag override is honoured.
	info, err := s.Put(ctx, "bkt", "k", bytes.NewReader(body), PutOptions{ETag: `"abc-2"`, PutOptions: object.PutOptions{Size: -1, ContentMD5: goodMD5[:]}})
	if err != nil || info.ETag != "abc-2" {
		t.Fatalf("Put with good MD5 and ETag = %+v, %v", info, err)
	}
	// With the sender's digest the ETag is the sender's MD5: the store
	// does not hash MD5 itself (the CRC32C matches, the MD5 is made up).
	sender, _ := digestOf(body)()
	sender.MD5 = badMD5[:]
	info, err = s.Put(ctx, "bkt", "k", bytes.NewReader(body), PutOptions{PutOptions: object.PutOptions{Size: -1,
		Digest: func() (object.Digest, error) { return sender, nil }}})
	if err != nil || info.ETag != hex.EncodeToString(badMD5[:]) {
		t.Fatalf("Put with the sender's digest = %+v, %v; want ETag %x", info, err, badMD5)
	}
}

// digestOf is a sender's digest of b.
func digestOf(b []byte) func() (object.Digest, error) {
	dr := object.NewDigestReader(bytes.NewReader(b))
	_, _ = io.Copy(io.Discard, dr)
	return dr.Digest
}

type cancelReader struct{ cancel context.CancelFunc }

func (c cancelReader) Read([]byte) (int, error) { c.cancel(); return 0, io.EOF }

func TestPutOptionsStored(t *testing.T) {
	s := openTest(t, Config{})
	ctx := context.Background()
	mt := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	opts := PutOptions{
		PutOptions:     object.PutOptions{Size: 3, ContentType: "text/plain", UserMeta: map[string]string{"a": "1"}},
		ModTime:        mt,
		BackendETag:    "be",
		BackendVersion: "v7",
		Dirty:          true,
	}
	if _, err := s.Put(ctx, "bkt", "o", strings.NewReader("abc"), opts); err != nil {
		t.Fatal(err)
	}
	check := func(s *Store) {
		t.Helper()
		info, err := s.Stat(ctx, "bkt", "o")
		if err != nil {
			t.Fatal(err)
		}
		if info.ContentType != "text/plain" || info.UserMeta["a"] != "1" || !info.ModTime.Equal(mt) ||
			info.BackendETag != "be" || info.BackendVersion != "v7" || !info.Dirty || info.Checksum != checksumString(crc32.Checksum([]byte("abc"), object.Castagnoli)) {
			t.Fatalf("Stat = %+v", info)
		}
		info.UserMeta["a"] = "changed" // must not leak into the store
	}
	check(s)
	check(s)
	s.Close()
	check(openTest(t, Config{Mountpaths: s.paths}))
}

// Metadata reads back exactly as written, across a restart too: UTF-8
// beyond ASCII is kept, and a value that is not UTF-8 (which the on-disk
// encoding would change) is refused before anything is stored.
func TestMetaExactAcrossRestart(t *testing.T) {
	s := openTest(t, Config{})
	ctx := context.Background()
	good := PutOptions{PutOptions: object.PutOptions{Size: 1, ContentType: "text/plain; name=café", UserMeta: map[string]string{"name": "日本"}}}
	if _, err := s.Put(ctx, "bkt", "o", strings.NewReader("x"), good); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []object.PutOptions{
		{Size: 1, UserMeta: map[string]string{"name": "caf\xe9"}},
		{Size: 1, UserMeta: map[string]string{"n\xe9": "v"}},
		{Size: 1, ContentType: "text/plain; charset=\xe9"},
	} {
		if _, err := s.Put(ctx, "bkt", "bad", strings.NewReader("x"), PutOptions{PutOptions: bad}); !errors.Is(err, object.ErrInvalidArgument) {
			t.Errorf("Put with %q %q: %v, want ErrInvalidArgument", bad.ContentType, bad.UserMeta, err)
		}
		if _, err := s.CreateUpload(ctx, "bkt", "bad", UploadOptions{PutOptions: bad}); !errors.Is(err, object.ErrInvalidArgument) {
			t.Errorf("CreateUpload with %q %q: %v, want ErrInvalidArgument", bad.ContentType, bad.UserMeta, err)
		}
	}
	s.Close()
	s = openTest(t, Config{Mountpaths: s.paths})
	info, err := s.Stat(ctx, "bkt", "o")
	if err != nil {
		t.Fatal(err)
	}
	if info.ContentType != good.ContentType || info.UserMeta["name"] != "日本" {
		t.Errorf("after a restart: %q %q", info.ContentType, info.UserMeta)
	}
	if _, err := s.Stat(ctx, "bkt", "bad"); !errors.Is(err, object.ErrNotFound) {
		t.Errorf("refused object: %v", err)
	}
}

func TestUpdateMeta(t *testing.T) {
	s := openTest(t, Config{Mountpaths: []string{filepath.Join(t.TempDir(), "mp")}})
	ctx := context.Background()
	if _, err := s.Put(ctx, "bkt", "d", strings.NewReader("dirty"), PutOptions{Dirty: true, PutOptions: object.PutOptions{Size: -1}}); err != nil {
		t.Fatal(err)
	}
	if err := s.EvictObject(ctx, "bkt", "d"); !errors.Is(err, ErrDirty) {
		t.Fatalf("EvictObject(dirty) = %v, want ErrDirty", err)
	}
	if s.mps[0].pol.Contains("bkt/d") {
		t.Fatal("dirty object handed to the eviction policy")
	}
	_, err := s.UpdateMeta(ctx, "bkt", "d", func(i *object.Info) error { i.Size = 1; return nil })
	if !errors.Is(err, object.ErrInvalidArgument) {
		t.Fatalf("UpdateMeta changing Size = %v", err)
	}
	boom := errors.New("boom")
	if _, err := s.UpdateMeta(ctx, "bkt", "d", func(*object.Info) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("UpdateMeta with failing fn = %v", err)
	}
	if _, err := s.UpdateMeta(ctx, "bkt", "nope", func(*object.Info) error { return nil }); !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("UpdateMeta of missing = %v", err)
	}
	info, err := s.UpdateMeta(ctx, "bkt", "d", func(i *object.Info) error {
		i.Dirty = false
		i.BackendVersion = "v2"
		return nil
	})
	if err != nil || info.Dirty || info.BackendVersion != "v2" {
		t.Fatalf("UpdateMeta = %+v, %v", info, err)
	}
	if !s.mps[0].pol.Contains("bkt/d") {
		t.Fatal("clean object not handed to the eviction policy")
	}
	// Written to the file (without fsync: see lazyMeta): visible after reopen.
	paths := s.paths
	s.Close()
	s = openTest(t, Config{Mountpaths: paths})
	if st, err := s.Stat(ctx, "bkt", "d"); err != nil || st.Dirty || st.BackendVersion != "v2" {
		t.Fatalf("after reopen Stat = %+v, %v", st, err)
	}
	if err := s.EvictObject(ctx, "bkt", "d"); err != nil {
		t.Fatalf("EvictObject(clean) = %v", err)
	}
	if _, err := s.Stat(ctx, "bkt", "d"); !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("after EvictObject Stat = %v", err)
	}
	if err := s.EvictObject(ctx, "bkt", "d"); !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("EvictObject(missing) = %v", err)
	}
}

func TestLazyMeta(t *testing.T) {
	now := time.Now()
	dirty := object.Info{Bucket: "b", Key: "k", Size: 5, ETag: "e", ModTime: now, Dirty: true, UserMeta: map[string]string{"a": "1"}}
	clean := dirty
	clean.Dirty = false
	pinned := clean
	pinned.Pinned = true
	for _, tc := range []struct {
		name string
		old  object.Info
		edit func(*object.Info)
		lazy bool
	}{
		{"nothing", clean, func(*object.Info) {}, true},
		{"clean mark after destage", dirty, func(i *object.Info) { i.Dirty, i.BackendETag, i.BackendVersion, i.ValidatedAt = false, "be", "v1", now }, true},
		{"revalidated", clean, func(i *object.Info) { i.ValidatedAt = now.Add(time.Minute) }, true},
		{"access time", clean, func(i *object.Info) { i.AccessTime = now }, true},
		{"dirty mark", clean, func(i *object.Info) { i.Dirty = true }, false},
		{"clean mark with a new content type", dirty, func(i *object.Info) { i.Dirty, i.ContentType = false, "text/plain" }, false},
		{"pin", clean, func(i *object.Info) { i.Pinned = true }, false},
		{"unpin", pinned, func(i *object.Info) { i.Pinned = false }, false},
		{"damaged", clean, func(i *object.Info) { i.Damaged = true }, false},
		{"user metadata", clean, func(i *object.Info) { i.UserMeta = map[string]string{"a": "2"} }, false},
		{"modification time", dirty, func(i *object.Info) { i.ModTime = now.Add(time.Second) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ni := cloneInfo(tc.old)
			tc.edit(&ni)
			if got := lazyMeta(tc.old, ni); got != tc.lazy {
				t.Errorf("lazyMeta = %v, want %v", got, tc.lazy)
			}
		})
	}
}

// TestOverwriteKeepsReaders: a reader of the old version keeps reading it
// after an overwrite and after a delete.
func TestOverwriteKeepsReaders(t *testing.T) {
	s := openTest(t, Config{})
	ctx := context.Background()
	v1 := randBytes(1, 2*bufSize)
	v2 := randBytes(2, bufSize/2)
	put(t, s, "bkt", "k", v1)
	r1, err := s.Get(ctx, "bkt", "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Close()
	part := make([]byte, 100)
	io.ReadFull(r1, part)
	put(t, s, "bkt", "k", v2)
	r2, err := s.Get(ctx, "bkt", "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "bkt", "k"); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(r1)
	if err != nil || !bytes.Equal(append(part, rest...), v1) || r1.Info().ETag != md5hex(v1) {
		t.Fatalf("old reader: %v, content equal=%v", err, bytes.Equal(append(part, rest...), v1))
	}
	b2, err := io.ReadAll(r2)
	r2.Close()
	if err != nil || !bytes.Equal(b2, v2) || r2.Info().ETag != md5hex(v2) {
		t.Fatalf("second reader: %v", err)
	}
	if st := s.Mountpaths(); st[0].Objects+st[1].Objects != 0 || st[0].Bytes+st[1].Bytes != 0 {
		t.Fatalf("accounting after overwrite+delete: %+v", st)
	}
}

// TestConcurrent runs parallel Puts, Gets, Stats, Lists and Deletes of the
// same keys; every Get must see a complete version whose content matches
// its ETag. Run with -race.
func TestConcurrent(t *testing.T) {
	s := openTest(t, Config{})
	ctx := context.Background()
	const workers, iters, keys = 8, 40, 4
	versions := make([][]byte, 8)
	etags := map[string]bool{}
	for i := range versions {
		versions[i] = randBytes(uint64(100+i), 1000+i*bufSize/3)
		etags[md5hex(versions[i])] = true
	}
	var wg sync.WaitGroup
	errc := make(chan error, workers*iters)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for i := 0; i < iters; i++ {
				key := fmt.Sprintf("k%d", r.IntN(keys))
				switch r.IntN(5) {
				case 0, 1:
					v := versions[r.IntN(len(versions))]
					if _, err := s.Put(ctx, "bkt", key, bytes.NewReader(v), PutOptions{PutOptions: object.PutOptions{Size: int64(len(v))}}); err != nil {
						errc <- err
					}
				case 2:
					rd, err := s.Get(ctx, "bkt", key, nil)
					if errors.Is(err, object.ErrNotFound) {
						continue
					}
					if err != nil {
						errc <- err
						continue
					}
					b, err := io.ReadAll(rd)
					rd.Close()
					if err != nil || md5hex(b) != rd.Info().ETag || !etags[rd.Info().ETag] || int64(len(b)) != rd.Info().Size {
						errc <- fmt.Errorf("torn read of %s: %d bytes, etag %s, err %v", key, len(b), rd.Info().ETag, err)
					}
				case 3:
					if err := s.Delete(ctx, "bkt", key); err != nil && !errors.Is(err, object.ErrNotFound) {
						errc <- err
					}
				case 4:
					if _, err := s.List(ctx, "bkt", object.ListOptions{}); err != nil {
						errc <- err
					}
					s.Stat(ctx, "bkt", key)
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	// The index, the accounting and the disk agree.
	res, _ := s.List(ctx, "bkt", object.ListOptions{})
	var n, bytesSum int64
	for _, st := range s.Mountpaths() {
		n += st.Objects
		bytesSum += st.Bytes
	}
	var listed int64
	for _, o := range res.Objects {
		listed += o.Size
	}
	if int64(len(res.Objects)) != n || listed != bytesSum || len(files(t, s, "obj")) != len(res.Objects) || len(files(t, s, "tmp")) != 0 {
		t.Fatalf("index %d objects/%d bytes, accounting %d/%d, files %d, tmp %v", len(res.Objects), listed, n, bytesSum, len(files(t, s, "obj")), files(t, s, "tmp"))
	}
}

// TestReaderServeContent: a Reader (here of a range) works as the content
// of http.ServeContent, including HTTP Range requests within it.
func TestReaderServeContent(t *testing.T) {
	s := openTest(t, Config{})
	data := randBytes(12, 100000)
	put(t, s, "bkt", "h", data)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r, err := s.Get(req.Context(), "bkt", "h", &object.Range{Offset: 1000, Length: 50000})
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		defer r.Close()
		http.ServeContent(w, req, "h", r.Info().ModTime, r)
	}))
	defer srv.Close()
	for _, c := range []struct {
		rng      string
		from, to int
	}{{"", 1000, 51000}, {"bytes=10-19", 1010, 1020}, {"bytes=-5", 50995, 51000}} {
		req, _ := http.NewRequest("GET", srv.URL, nil)
		if c.rng != "" {
			req.Header.Set("Range", c.rng)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !bytes.Equal(b, data[c.from:c.to]) {
			t.Fatalf("Range %q: status %d, %d bytes, want data[%d:%d]", c.rng, resp.StatusCode, len(b), c.from, c.to)
		}
	}
}

func TestDeleteVersion(t *testing.T) {
	s := openTest(t, Config{})
	ctx := context.Background()
	old := put(t, s, "bkt", "k", []byte("first"))
	cur := put(t, s, "bkt", "k", []byte("second"))
	for _, tc := range []struct {
		name string
		was  object.Info
		want error
	}{
		{"older version", old, ErrChanged},
		{"same ETag, other time", object.Info{ETag: cur.ETag, ModTime: cur.ModTime.Add(time.Second)}, ErrChanged},
		{"current version", cur, nil},
		{"gone", cur, object.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.DeleteVersion(ctx, "bkt", "k", tc.was)
			if !errors.Is(err, tc.want) && !(tc.want == nil && err == nil) {
				t.Fatalf("DeleteVersion = %v, want %v", err, tc.want)
			}
			_, serr := s.Stat(ctx, "bkt", "k")
			if removed := errors.Is(serr, object.ErrNotFound); removed != (tc.want != ErrChanged) {
				t.Fatalf("after DeleteVersion (%v) Stat = %v", err, serr)
			}
		})
	}
}

func TestKeepNewer(t *testing.T) {
	s := openTest(t, Config{})
	ctx := context.Background()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	putAt := func(body string, at time.Time) (object.Info, error) {
		return s.Put(ctx, "bkt", "k", strings.NewReader(body), PutOptions{
			PutOptions: object.PutOptions{Size: int64(len(body))}, ModTime: at, KeepNewer: true,
		})
	}
	for _, tc := range []struct {
		name      string
		at        time.Time
		put, want string // the body sent, the body the key holds afterwards
		err       error  // nil: stored
	}{
		{"absent key", t0, "v0", "v0", nil},
		{"older stored", t0.Add(time.Second), "v1", "v1", nil},
		{"same time", t0.Add(time.Second), "v2", "v1", object.ErrPrecondition},
		{"newer stored", t0, "v3", "v1", object.ErrPrecondition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := putAt(tc.put, tc.at)
			if !errors.Is(err, tc.err) && !(tc.err == nil && err == nil) {
				t.Fatalf("Put = %v, want %v", err, tc.err)
			}
			got, _ := get(t, s, "bkt", "k", nil)
			if string(got) != tc.want {
				t.Fatalf("key holds %q, want %q", got, tc.want)
			}
		})
	}
	// A delete known at commit time at or after the body's time refuses it.
	deleted := func() (time.Time, bool) { return t0.Add(time.Hour), true }
	_, err := s.Put(ctx, "bkt", "gone", strings.NewReader("old"), PutOptions{
		PutOptions: object.PutOptions{Size: 3}, ModTime: t0, KeepNewer: true, DeletedAt: deleted,
	})
	if !errors.Is(err, object.ErrPrecondition) {
		t.Fatalf("Put of a version older than a delete = %v, want a precondition failure", err)
	}
	if _, err := s.Put(ctx, "bkt", "gone", strings.NewReader("new"), PutOptions{
		PutOptions: object.PutOptions{Size: 3}, ModTime: t0.Add(2 * time.Hour), KeepNewer: true, DeletedAt: deleted,
	}); err != nil {
		t.Fatalf("Put of a version newer than the delete = %v", err)
	}
	// A refused body leaves no work file behind.
	if f := files(t, s, "tmp"); len(f) != 0 {
		t.Fatalf("work files left: %v", f)
	}
}

func TestVerify(t *testing.T) {
	s := openTest(t, Config{})
	ctx := context.Background()
	path := func(key string) string {
		e := s.lookup("bkt", key)
		_, file := s.mps[e.mp].objectPath("bkt", key)
		return file
	}
	for _, tc := range []struct {
		name   string
		size   int
		damage func(file string) error // nil: left intact
	}{
		{"empty", 0, nil},
		{"small", 100, nil},
		{"buffers and a tail", 3*bufSize + 4097, nil},
		{"bit flipped", 3*bufSize + 4097, func(file string) error {
			f, err := os.OpenFile(file, os.O_RDWR, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			b := make([]byte, 1)
			if _, err := f.ReadAt(b, bufSize+5); err != nil {
				return err
			}
			_, err = f.WriteAt([]byte{b[0] ^ 0x10}, bufSize+5)
			return err
		}},
		{"truncated", 10000, func(file string) error { return os.Truncate(file, 9999) }},
		{"grown", 10000, func(file string) error {
			f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.Write([]byte("x"))
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := strings.ReplaceAll(tc.name, " ", "-")
			want := put(t, s, "bkt", key, randBytes(uint64(tc.size), tc.size))
			if tc.damage != nil {
				if err := tc.damage(path(key)); err != nil {
					t.Fatal(err)
				}
			}
			paced := 0
			info, err := s.Verify(ctx, "bkt", key, func(context.Context, int) error { paced++; return nil })
			if corrupt := errors.Is(err, ErrCorrupt); corrupt != (tc.damage != nil) || (!corrupt && err != nil) {
				t.Fatalf("Verify = %v, damaged: %v", err, tc.damage != nil)
			}
			if info.ETag != want.ETag || !info.ModTime.Equal(want.ModTime) || paced == 0 {
				t.Fatalf("Verify checked %+v (paced %d times), want %+v", info, paced, want)
			}
		})
	}
	if _, err := s.Verify(ctx, "bkt", "absent", nil); !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("Verify of an absent key = %v", err)
	}
}

func TestPutReplacesAndChecksum(t *testing.T) {
	s := openTest(t, Config{})
	ctx := context.Background()
	v1 := put(t, s, "bkt", "k", []byte("version one"))
	repair := func(body string, replaces object.Info, sum string) error {
		_, err := s.Put(ctx, "bkt", "k", strings.NewReader(body), PutOptions{
			PutOptions: object.PutOptions{Size: int64(len(body))}, ModTime: replaces.ModTime, ETag: replaces.ETag,
			Replaces: &replaces, Checksum: sum,
		})
		return err
	}
	if err := repair("version one", v1, v1.Checksum); err != nil {
		t.Fatalf("rewriting the stored version: %v", err)
	}
	if err := repair("damaged one", v1, v1.Checksum); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a body with another checksum: %v, want ErrCorrupt", err)
	}
	v2 := put(t, s, "bkt", "k", []byte("version two"))
	if err := repair("version one", v1, v1.Checksum); !errors.Is(err, ErrChanged) {
		t.Fatalf("rewriting a version that was overwritten: %v, want ErrChanged", err)
	}
	if got, info := get(t, s, "bkt", "k", nil); string(got) != "version two" || info.ETag != v2.ETag {
		t.Fatalf("key holds %q (%s), want version two", got, info.ETag)
	}
}

// TestPutIfAbsent: IfAbsent commits only over no version at all.
func TestPutIfAbsent(t *testing.T) {
	s := openTest(t, Config{})
	ctx := context.Background()
	putIfAbsent := func(body string) error {
		_, err := s.Put(ctx, "bkt", "k", strings.NewReader(body), PutOptions{PutOptions: object.PutOptions{Size: int64(len(body))}, IfAbsent: true})
		return err
	}
	if err := putIfAbsent("first"); err != nil {
		t.Fatalf("IfAbsent over nothing: %v", err)
	}
	if err := putIfAbsent("second"); !errors.Is(err, ErrChanged) {
		t.Fatalf("IfAbsent over a stored version: %v, want ErrChanged", err)
	}
	if got, _ := get(t, s, "bkt", "k", nil); string(got) != "first" {
		t.Fatalf("key holds %q, want first", got)
	}
	if f := files(t, s, "tmp"); len(f) != 0 {
		t.Fatalf("work files left: %v", f)
	}
}

// TestMarkDamaged: a copy marked damaged (by a scrub that could not repair
// it) is not served by Get, across a restart, until a write replaces it;
// a mark for a version no longer stored changes nothing.
func TestMarkDamaged(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, Config{Mountpaths: []string{dir}})
	old := put(t, s, "bkt", "k", []byte("first"))
	cur := put(t, s, "bkt", "k", []byte("second"))
	if err := s.MarkDamaged(ctx, old); !errors.Is(err, ErrChanged) {
		t.Fatalf("marking a version no longer stored: %v, want ErrChanged", err)
	}
	if err := s.MarkDamaged(ctx, cur); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openTest(t, Config{Mountpaths: []string{dir}})
	if _, err := s.Get(ctx, "bkt", "k", nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get of a damaged copy after a restart: %v, want ErrCorrupt", err)
	}
	if info, err := s.Stat(ctx, "bkt", "k"); err != nil || !info.Damaged {
		t.Fatalf("Stat: %+v, %v; want the copy, marked damaged", info, err)
	}
	put(t, s, "bkt", "k", []byte("third"))
	r, err := s.Get(ctx, "bkt", "k", nil)
	if err != nil {
		t.Fatalf("Get after a rewrite: %v", err)
	}
	r.Close()
}
