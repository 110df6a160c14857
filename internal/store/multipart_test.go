package store

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/object"
)

// s3MultipartETag computes the S3 multipart ETag independently of the store.
func s3MultipartETag(parts ...[]byte) string {
	var cat []byte
	for _, p := range parts {
		s := md5.Sum(p)
		cat = append(cat, s[:]...)
	}
	s := md5.Sum(cat)
	return fmt.Sprintf("%s-%d", hex.EncodeToString(s[:]), len(parts))
}

func putPart(t *testing.T, s *Store, bucket, key, id string, n int, data []byte) object.PartInfo {
	t.Helper()
	pi, err := s.PutPart(context.Background(), bucket, key, id, n, bytes.NewReader(data), object.PutOptions{Size: int64(len(data))})
	if err != nil {
		t.Fatalf("PutPart %d: %v", n, err)
	}
	if pi.PartNumber != n || pi.Size != int64(len(data)) || pi.ETag != md5hex(data) {
		t.Fatalf("PutPart %d = %+v", n, pi)
	}
	return pi
}

func TestMultipartHappyPath(t *testing.T) {
	s := openTest(t, Config{})
	ctx := context.Background()
	key := "big/object.bin"
	id, err := s.CreateUpload(ctx, "bkt", key, UploadOptions{PutOptions: object.PutOptions{ContentType: "application/x-test", UserMeta: map[string]string{"m": "v"}}})
	if err != nil {
		t.Fatal(err)
	}
	p1 := randBytes(1, object.MinPartSize)
	p2 := randBytes(2, object.MinPartSize+123)
	p3 := randBytes(3, 1000)
	putPart(t, s, "bkt", key, id, 2, randBytes(99, 10)) // replaced below
	putPart(t, s, "bkt", key, id, 1, p1)
	e2 := putPart(t, s, "bkt", key, id, 2, p2)
	putPart(t, s, "bkt", key, id, 5, p3)
	// Parts live on the mountpath of the final object.
	mp := s.mountpathFor("bkt", key)
	if _, err := os.Stat(filepath.Join(mp.mpuDir, "bkt", id, partFileName(5))); err != nil {
		t.Fatalf("part not on the object's mountpath: %v", err)
	}
	parts, err := s.ListParts(ctx, "bkt", key, id)
	if err != nil || len(parts) != 3 || parts[0].PartNumber != 1 || parts[1].ETag != e2.ETag || parts[2].PartNumber != 5 {
		t.Fatalf("ListParts = %+v, %v", parts, err)
	}
	id2, _ := s.CreateUpload(ctx, "bkt", "another", UploadOptions{})
	ups, err := s.ListUploads(ctx, "bkt", "big/")
	if err != nil || len(ups) != 1 || ups[0].UploadID != id || ups[0].Key != key {
		t.Fatalf("ListUploads(prefix) = %+v, %v", ups, err)
	}
	if ups, _ := s.ListUploads(ctx, "bkt", ""); len(ups) != 2 || ups[0].Key != "another" {
		t.Fatalf("ListUploads = %+v", ups)
	}
	if mp.partBytes != int64(len(p1)+len(p2)+len(p3)) {
		t.Fatalf("part bytes %d", mp.partBytes)
	}
	info, err := s.CompleteUpload(ctx, "bkt", key, id, []object.CompletePart{
		{PartNumber: 1, ETag: `"` + md5hex(p1) + `"`}, {PartNumber: 2, ETag: strings.ToUpper(e2.ETag)}, {PartNumber: 5, ETag: md5hex(p3)}})
	if err != nil {
		t.Fatal(err)
	}
	whole := bytes.Join([][]byte{p1, p2, p3}, nil)
	wantCRC := checksumString(crc32.Checksum(whole, object.Castagnoli))
	if info.ETag != s3MultipartETag(p1, p2, p3) || info.Size != int64(len(whole)) || info.Checksum != wantCRC ||
		info.ContentType != "application/x-test" || info.UserMeta["m"] != "v" {
		t.Fatalf("CompleteUpload = %+v, want ETag %s, checksum %s", info, s3MultipartETag(p1, p2, p3), wantCRC)
	}
	got, ginfo := get(t, s, "bkt", key, nil)
	if !bytes.Equal(got, whole) || ginfo.ETag != info.ETag {
		t.Fatal("completed object content differs")
	}
	// The upload is gone, on disk and in memory.
	if _, err := os.Stat(filepath.Join(mp.mpuDir, "bkt", id)); !os.IsNotExist(err) {
		t.Fatalf("upload dir remains: %v", err)
	}
	if _, err := s.ListParts(ctx, "bkt", key, id); !errors.Is(err, object.ErrUploadNotFound) {
		t.Fatalf("ListParts after complete = %v", err)
	}
	if _, err := s.CompleteUpload(ctx, "bkt", key, id, []object.CompletePart{{PartNumber: 1, ETag: md5hex(p1)}}); !errors.Is(err, object.ErrUploadNotFound) {
		t.Fatalf("second CompleteUpload = %v", err)
	}
	if mp.partBytes != 0 || len(files(t, s, "tmp")) != 0 {
		t.Fatalf("part bytes %d, tmp %v", mp.partBytes, files(t, s, "tmp"))
	}
	// The other upload survives a restart with its parts.
	pa := putPart(t, s, "bkt", "another", id2, 1, []byte("last part may be small"))
	paths := s.paths
	s.Close()
	s = openTest(t, Config{Mountpaths: paths})
	parts, err = s.ListParts(ctx, "bkt", "another", id2)
	if err != nil || len(parts) != 1 || parts[0].ETag != pa.ETag {
		t.Fatalf("ListParts after reopen = %+v, %v", parts, err)
	}
	info, err = s.CompleteUpload(ctx, "bkt", "another", id2, []object.CompletePart{{PartNumber: 1, ETag: pa.ETag}})
	if err != nil || info.ETag != s3MultipartETag([]byte("last part may be small")) {
		t.Fatalf("complete after reopen = %+v, %v", info, err)
	}
	if got, _ := get(t, s, "bkt", key, nil); !bytes.Equal(got, whole) {
		t.Fatal("completed object differs after reopen")
	}
	// How the upload cut the object is kept, across the restart, for GET
	// by part number.
	wantParts := []object.PartRun{{Size: object.MinPartSize, Count: 1}, {Size: object.MinPartSize + 123, Count: 1}, {Size: 1000, Count: 1}}
	if st, err := s.Stat(ctx, "bkt", key); err != nil || !slices.Equal(st.Parts, wantParts) {
		t.Fatalf("parts after reopen: %v, %v; want %v", st.Parts, err, wantParts)
	}
	// A copy keeps parts given with it only if they describe its size.
	for _, tc := range []struct {
		parts []object.PartRun
		want  []object.PartRun
	}{
		{[]object.PartRun{{Size: 6, Count: 1}, {Size: 4, Count: 1}}, []object.PartRun{{Size: 6, Count: 1}, {Size: 4, Count: 1}}},
		{[]object.PartRun{{Size: 6, Count: 2}}, nil},
	} {
		info, err := s.Put(ctx, "bkt", "copy", bytes.NewReader(randBytes(4, 10)), PutOptions{PutOptions: object.PutOptions{Size: 10, Parts: tc.parts}})
		if err != nil || !slices.Equal(info.Parts, tc.want) {
			t.Errorf("Put with parts %v: kept %v, %v; want %v", tc.parts, info.Parts, err, tc.want)
		}
	}
}

func TestMultipartErrors(t *testing.T) {
	s := openTest(t, Config{})
	ctx := context.Background()
	key := "k"
	id, err := s.CreateUpload(ctx, "bkt", key, UploadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	big := randBytes(1, object.MinPartSize)
	small := []byte("small")
	e1 := putPart(t, s, "bkt", key, id, 1, big).ETag
	e2 := putPart(t, s, "bkt", key, id, 2, small).ETag
	e3 := putPart(t, s, "bkt", key, id, 3, small).ETag
	badMD5 := md5.Sum([]byte("other"))
	cp := func(nums ...int) []object.CompletePart {
		etags := map[int]string{1: e1, 2: e2, 3: e3}
		var out []object.CompletePart
		for _, n := range nums {
			out = append(out, object.CompletePart{PartNumber: n, ETag: etags[n]})
		}
		return out
	}
	cases := []struct {
		name string
		do   func() error
		err  error
	}{
		{"create: bad key", func() error { _, err := s.CreateUpload(ctx, "bkt", "../x", UploadOptions{}); return err }, object.ErrInvalidKey},
		{"create: bad bucket", func() error { _, err := s.CreateUpload(ctx, "X", "x", UploadOptions{}); return err }, object.ErrInvalidBucketName},
		{"create: metadata too large", func() error {
			_, err := s.CreateUpload(ctx, "bkt", "x", UploadOptions{PutOptions: object.PutOptions{UserMeta: map[string]string{"a": strings.Repeat("b", MaxMetaBytes)}}})
			return err
		}, ErrMetaTooLarge},
		{"part: unknown upload", func() error {
			_, err := s.PutPart(ctx, "bkt", key, strings.Repeat("0", 32), 1, bytes.NewReader(small), object.PutOptions{Size: -1})
			return err
		}, object.ErrUploadNotFound},
		{"part: upload id with path tricks", func() error {
			_, err := s.PutPart(ctx, "bkt", key, "../../obj/bkt", 1, bytes.NewReader(small), object.PutOptions{Size: -1})
			return err
		}, object.ErrUploadNotFound},
		{"part: upload of another key", func() error {
			_, err := s.PutPart(ctx, "bkt", "other", id, 1, bytes.NewReader(small), object.PutOptions{Size: -1})
			return err
		}, object.ErrUploadNotFound},
		{"part: upload of another bucket", func() error { _, err := s.ListParts(ctx, "bkt2", key, id); return err }, object.ErrUploadNotFound},
		{"part: number 0", func() error {
			_, err := s.PutPart(ctx, "bkt", key, id, 0, bytes.NewReader(small), object.PutOptions{Size: -1})
			return err
		}, object.ErrInvalidArgument},
		{"part: number 10001", func() error {
			_, err := s.PutPart(ctx, "bkt", key, id, object.MaxPartNumber+1, bytes.NewReader(small), object.PutOptions{Size: -1})
			return err
		}, object.ErrInvalidArgument},
		{"part: bad Content-MD5", func() error {
			_, err := s.PutPart(ctx, "bkt", key, id, 3, bytes.NewReader(small), object.PutOptions{Size: -1, ContentMD5: badMD5[:]})
			return err
		}, object.ErrBadDigest},
		{"part: short body", func() error {
			_, err := s.PutPart(ctx, "bkt", key, id, 3, bytes.NewReader(small), object.PutOptions{Size: 100})
			return err
		}, object.ErrIncompleteBody},
		{"complete: no parts", func() error { _, err := s.CompleteUpload(ctx, "bkt", key, id, nil); return err }, object.ErrInvalidPart},
		{"complete: descending", func() error { _, err := s.CompleteUpload(ctx, "bkt", key, id, cp(2, 1)); return err }, object.ErrInvalidPartOrder},
		{"complete: duplicate", func() error { _, err := s.CompleteUpload(ctx, "bkt", key, id, cp(1, 1)); return err }, object.ErrInvalidPartOrder},
		{"complete: missing part", func() error {
			_, err := s.CompleteUpload(ctx, "bkt", key, id, append(cp(1), object.CompletePart{PartNumber: 4, ETag: e3}))
			return err
		}, object.ErrInvalidPart},
		{"complete: wrong ETag", func() error {
			_, err := s.CompleteUpload(ctx, "bkt", key, id, []object.CompletePart{{PartNumber: 1, ETag: e2}})
			return err
		}, object.ErrInvalidPart},
		{"complete: small part not last", func() error { _, err := s.CompleteUpload(ctx, "bkt", key, id, cp(1, 2, 3)); return err }, object.ErrEntityTooSmall},
		{"complete: unknown upload", func() error {
			_, err := s.CompleteUpload(ctx, "bkt", key, strings.Repeat("a", 32), cp(1))
			return err
		}, object.ErrUploadNotFound},
		{"abort: unknown upload", func() error { return s.AbortUpload(ctx, "bkt", key, "nope") }, object.ErrUploadNotFound},
		{"list uploads: bad bucket", func() error { _, err := s.ListUploads(ctx, "B", ""); return err }, object.ErrInvalidBucketName},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := c.do(); !errors.Is(err, c.err) {
				t.Fatalf("got %v, want %v", err, c.err)
			}
			// The upload is untouched by every failure.
			parts, err := s.ListParts(ctx, "bkt", key, id)
			if err != nil || len(parts) != 3 || parts[2].ETag != e3 {
				t.Fatalf("upload damaged: %+v, %v", parts, err)
			}
			if _, err := s.Stat(ctx, "bkt", key); !errors.Is(err, object.ErrNotFound) {
				t.Fatalf("object appeared: %v", err)
			}
			if f := files(t, s, "tmp"); len(f) != 0 {
				t.Fatalf("work files left: %v", f)
			}
		})
	}
	// A subset of the parts completes.
	info, err := s.CompleteUpload(ctx, "bkt", key, id, cp(1, 3))
	if err != nil || info.ETag != s3MultipartETag(big, small) {
		t.Fatalf("CompleteUpload(1,3) = %+v, %v", info, err)
	}
	// Abort removes everything; later calls see no upload.
	id, _ = s.CreateUpload(ctx, "bkt", key, UploadOptions{})
	putPart(t, s, "bkt", key, id, 1, small)
	if err := s.AbortUpload(ctx, "bkt", key, id); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutPart(ctx, "bkt", key, id, 2, bytes.NewReader(small), object.PutOptions{Size: -1}); !errors.Is(err, object.ErrUploadNotFound) {
		t.Fatalf("PutPart after abort = %v", err)
	}
	if err := s.AbortUpload(ctx, "bkt", key, id); !errors.Is(err, object.ErrUploadNotFound) {
		t.Fatalf("second abort = %v", err)
	}
	if f := files(t, s, "mpu"); len(f) != 0 {
		t.Fatalf("upload files left: %v", f)
	}
	if got, _ := get(t, s, "bkt", key, nil); !bytes.Equal(got, append(append([]byte{}, big...), small...)) {
		t.Fatal("completed object was touched by a later abort")
	}
}

func TestCRC32Combine(t *testing.T) {
	for _, c := range []struct{ a, b int }{{0, 0}, {0, 5}, {5, 0}, {1, 1}, {1000, 7}, {3, 1 << 20}} {
		a, b := randBytes(uint64(c.a), c.a), randBytes(uint64(c.b+1), c.b)
		want := crc32.Checksum(append(append([]byte{}, a...), b...), object.Castagnoli)
		if got := crc32Combine(crc32.Checksum(a, object.Castagnoli), crc32.Checksum(b, object.Castagnoli), int64(len(b))); got != want {
			t.Fatalf("combine(%d,%d) = %08x, want %08x", c.a, c.b, got, want)
		}
	}
}

func FuzzCRC32Combine(f *testing.F) {
	f.Add([]byte("hello "), []byte("world"))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		want := crc32.Checksum(append(append([]byte{}, a...), b...), object.Castagnoli)
		if got := crc32Combine(crc32.Checksum(a, object.Castagnoli), crc32.Checksum(b, object.Castagnoli), int64(len(b))); got != want {
			t.Fatalf("combine = %08x, want %08x", got, want)
		}
	})
}

// TestPutRacingDeleteBucket: a PUT whose commit runs while DeleteBucket
// drops the bucket's (empty) index either fails or stays visible; it is
// never acknowledged and then unknown to the index. The commit check hook
// (run under the key lock, between the rename's preparation and the
// index update) waits until DeleteBucket has dropped the index.
func TestPutRacingDeleteBucket(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, Config{Mountpaths: []string{filepath.Join(dir, "mp1")}})
	for i := 0; i < 5; i++ {
		put(t, s, "bkt", "seed", []byte("s"))
		if err := s.Delete(ctx, "bkt", "seed"); err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("k%d", i)
		derr := make(chan error, 1)
		_, perr := s.Put(ctx, "bkt", key, bytes.NewReader([]byte("data")), PutOptions{
			PutOptions: object.PutOptions{Size: 4}, KeepNewer: true,
			DeletedAt: func() (time.Time, bool) {
				done := make(chan error, 1)
				go func() { done <- s.DeleteBucket(ctx, "bkt") }()
				for deadline := time.Now().Add(5 * time.Second); s.bucket("bkt", false) != nil && time.Now().Before(deadline); {
					runtime.Gosched()
				}
				go func() { derr <- <-done }()
				return time.Time{}, false
			}})
		derrv := <-derr
		if perr == nil {
			if _, err := s.Stat(ctx, "bkt", key); err != nil {
				t.Fatalf("round %d: PUT acknowledged (DeleteBucket: %v) but Stat: %v", i, derrv, err)
			}
			if err := s.Delete(ctx, "bkt", key); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestPurgeBucket: what a deleted bucket left (objects modified and uploads
// started before the cut-off) goes; what a bucket of the same name created
// since holds stays, and the directories go once empty.
func TestPurgeBucket(t *testing.T) {
	s := openTest(t, Config{})
	ctx := context.Background()
	cut := time.Now()
	for _, k := range []string{"old1", "dir/old2"} {
		if _, err := s.Put(ctx, "bkt", k, strings.NewReader("x"), PutOptions{PutOptions: object.PutOptions{Size: 1}, ModTime: cut.Add(-time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.CreateUpload(ctx, "bkt", "up", UploadOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "bkt", "new", strings.NewReader("y"), PutOptions{PutOptions: object.PutOptions{Size: 1}, ModTime: cut.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if err := s.PurgeBucket(ctx, "bkt", cut.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	res, err := s.List(ctx, "bkt", object.ListOptions{})
	if err != nil || len(res.Objects) != 1 || res.Objects[0].Key != "new" {
		t.Fatalf("after the purge: %+v, %v; want only the newer object", res.Objects, err)
	}
	if ups, _ := s.ListUploads(ctx, "bkt", ""); len(ups) != 0 {
		t.Errorf("uploads left: %+v", ups)
	}
	if err := s.PurgeBucket(ctx, "bkt", cut.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	for _, mp := range s.mps {
		if _, err := os.Stat(filepath.Join(mp.objDir, "bkt")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("bucket directory on %s left: %v", mp.path, err)
		}
	}
}
