package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/slipstream-io/slipstream/internal/object"
)

// TestFailedDriveTakesNoWrites: a mountpath whose filesystem goes
// read-only (what ext4 does after an I/O error) fails the write that finds
// out, and the writes after it go to another mountpath; what was on it
// stays readable, and Mountpaths reports it.
func TestFailedDriveTakesNoWrites(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	broken := tmpfsMountpath(t, filepath.Join(dir, "mp1"))
	s := openTest(t, Config{Mountpaths: []string{broken, filepath.Join(dir, "mp2"), filepath.Join(dir, "mp3")}})
	// Keys that HRW puts on the mountpath that will break.
	var keys []string
	for i := 0; len(keys) < 4; i++ {
		if k := fmt.Sprintf("k%d", i); s.mountpathFor("bkt", k).path == broken {
			keys = append(keys, k)
		}
	}
	for _, k := range keys[:2] {
		put(t, s, "bkt", k, []byte("before "+k))
	}
	// A work file the failure cut short stays behind.
	if err := os.WriteFile(filepath.Join(broken, "tmp", "w03", "work-1234"), []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	failDrive(t, s, broken)
	_, err := s.Put(ctx, "bkt", keys[2], bytes.NewReader([]byte("x")), PutOptions{PutOptions: object.PutOptions{Size: 1}})
	if !errors.Is(err, unix.EROFS) {
		t.Fatalf("write to the broken mountpath: %v, want EROFS", err)
	}
	// The next writes, new keys and overwrites, land elsewhere.
	for _, k := range []string{keys[2], keys[3], keys[0]} {
		put(t, s, "bkt", k, []byte("after "+k))
		if got, _ := get(t, s, "bkt", k, nil); string(got) != "after "+k {
			t.Errorf("%s reads %q", k, got)
		}
	}
	if got, _ := get(t, s, "bkt", keys[1], nil); string(got) != "before "+keys[1] {
		t.Errorf("object on the broken mountpath reads %q", got)
	}
	for _, st := range s.Mountpaths() {
		if st.Failed != (st.Path == broken) {
			t.Errorf("mountpath %s: failed=%v", st.Path, st.Failed)
		}
	}

	// A restart with the drive still read-only (the leftover work file
	// cannot be removed) serves what it holds and keeps writes away from it.
	s.Close()
	s = openTest(t, Config{Mountpaths: []string{broken, filepath.Join(dir, "mp2"), filepath.Join(dir, "mp3")}})
	if st := s.Mountpaths()[0]; !st.Failed {
		t.Errorf("read-only mountpath after a restart: %+v", st)
	}
	for k, want := range map[string]string{keys[0]: "after " + keys[0], keys[1]: "before " + keys[1], keys[3]: "after " + keys[3]} {
		if got, _ := get(t, s, "bkt", k, nil); string(got) != want {
			t.Errorf("%s after a restart reads %q, want %q", k, got, want)
		}
	}
	put(t, s, "bkt", keys[1], []byte("rewritten"))
}

// tmpfsMountpath mounts a small tmpfs at p, a mountpath whose drive the
// test can make read-only, and unmounts it when the test ends.
// failDrive makes the tmpfs mountpath broken of s read-only, as ext4 does
// itself after an I/O error. The kernel refuses to remount while a file
// is open for writing; the store's lock file is the only one (ext4
// remounting itself after an error does not ask), so it is closed first.
func failDrive(t *testing.T, s *Store, broken string) {
	t.Helper()
	for _, mp := range s.mps {
		if mp.path == broken {
			mp.lock.Close()
			mp.lock = nil
		}
	}
	if err := unix.Mount("", broken, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount read-only: %v", err)
	}
}

func tmpfsMountpath(t *testing.T, p string) string {
	t.Helper()
	return tmpfsMountpathWith(t, p, "size=16m")
}

// tmpfsMountpathWith mounts a tmpfs with the mount options data at the new
// directory p, unmounted when the test ends.
func tmpfsMountpathWith(t *testing.T, p, data string) string {
	t.Helper()
	if err := unix.Mount("tmpfs", mkdir(t, p), "tmpfs", 0, data); err != nil {
		t.Fatalf("mounting a tmpfs (the test runs as root): %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(p, 0); err != nil {
			t.Errorf("unmount %s: %v", p, err)
		}
	})
	return p
}

func mkdir(t *testing.T, p string) string {
	t.Helper()
	if err := unix.Mkdir(p, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDeleteOnFailedDriveLasts: copies a read-only drive keeps after their
// key was deleted, or rewritten elsewhere and then deleted, are recorded
// dead on the other drives: a restart does not serve them again. Once the
// drive is writable again, the next start removes them and their records.
func TestDeleteOnFailedDriveLasts(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	broken := tmpfsMountpath(t, filepath.Join(dir, "mp1"))
	cfg := Config{Mountpaths: []string{broken, filepath.Join(dir, "mp2"), filepath.Join(dir, "mp3")}}
	s := openTest(t, cfg)
	var keys []string
	for i := 0; len(keys) < 4; i++ {
		if k := fmt.Sprintf("k%d", i); s.mountpathFor("bkt", k).path == broken {
			keys = append(keys, k)
		}
	}
	rewritten, deleted, kept, probe := keys[0], keys[1], keys[2], keys[3]
	for _, k := range keys[:3] {
		put(t, s, "bkt", k, []byte("before "+k))
	}
	failDrive(t, s, broken)
	if _, err := s.Put(ctx, "bkt", probe, bytes.NewReader([]byte("x")), PutOptions{PutOptions: object.PutOptions{Size: 1}}); !errors.Is(err, unix.EROFS) {
		t.Fatalf("write to the read-only drive: %v, want EROFS", err) // the store finds out
	}
	put(t, s, "bkt", rewritten, []byte("after "+rewritten)) // lands on another drive
	for _, k := range []string{rewritten, deleted} {
		if err := s.Delete(ctx, "bkt", k); err != nil {
			t.Fatalf("delete %s with a copy on the read-only drive: %v", k, err)
		}
	}
	check := func(when string) {
		t.Helper()
		for _, k := range []string{rewritten, deleted} {
			if _, err := s.Stat(ctx, "bkt", k); !errors.Is(err, object.ErrNotFound) {
				t.Errorf("%s: deleted %s: %v, want not found", when, k, err)
			}
		}
		if got, _ := get(t, s, "bkt", kept, nil); string(got) != "before "+kept {
			t.Errorf("%s: %s reads %q", when, kept, got)
		}
	}
	check("before a restart")
	s.Close()
	s = openTest(t, cfg)
	check("after a restart with the drive read-only")
	if n := countFiles(t, filepath.Join(dir, "mp2", deadDir)); n != 2 {
		t.Errorf("dead-copy records on mp2: %d, want 2", n)
	}

	// The drive is writable again: the dead copies go, and their records.
	s.Close()
	if err := unix.Mount("", broken, "", unix.MS_REMOUNT, ""); err != nil {
		t.Fatalf("remount read-write: %v", err)
	}
	s = openTest(t, cfg)
	check("after a restart with the drive writable")
	for _, k := range []string{rewritten, deleted} {
		if _, file := s.mps[0].objectPath("bkt", k); fileExists(file) {
			t.Errorf("dead copy of %s still on the drive", k)
		}
	}
	for _, mp := range []string{"mp2", "mp3"} {
		if n := countFiles(t, filepath.Join(dir, mp, deadDir)); n != 0 {
			t.Errorf("dead-copy records on %s after the copies went: %d", mp, n)
		}
	}
}

func countFiles(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return len(ents)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// eioBody is a body whose source fails with EIO once drained: what a file
// on an NFS mount, or a peer whose disk fails, gives. Nothing is wrong
// with the drive written to.
type eioBody struct{ r io.Reader }

func (b *eioBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		return n, &os.PathError{Op: "read", Path: "/mnt/nfs/bucket/key", Err: unix.EIO}
	}
	return n, err
}

// TestSourceErrorLeavesDriveHealthy: a PUT or part upload whose body fails
// with EIO fails, but does not take its healthy mountpath out of the
// write placement.
func TestSourceErrorLeavesDriveHealthy(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, Config{Mountpaths: []string{filepath.Join(dir, "mp1"), filepath.Join(dir, "mp2")}})
	key := keysOn(s, "bkt", 0, 1)[0]
	if _, err := s.Put(ctx, "bkt", key, &eioBody{bytes.NewReader(randBytes(1, 1000))}, PutOptions{PutOptions: object.PutOptions{Size: -1}}); !errors.Is(err, unix.EIO) {
		t.Fatalf("Put with a failing body: %v, want EIO", err)
	}
	id, err := s.CreateUpload(ctx, "bkt", key, UploadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutPart(ctx, "bkt", key, id, 1, &eioBody{bytes.NewReader(randBytes(2, 1000))}, object.PutOptions{Size: -1}); !errors.Is(err, unix.EIO) {
		t.Fatalf("PutPart with a failing body: %v, want EIO", err)
	}
	for _, st := range s.Mountpaths() {
		if st.Failed {
			t.Errorf("mountpath %s marked failed by its writer's source", st.Path)
		}
	}
	put(t, s, "bkt", key, []byte("next"))
	if e := s.lookup("bkt", key); e.mp != 0 {
		t.Errorf("next write went to mountpath %d, not its HRW mountpath 0", e.mp)
	}
}

// TestUploadCompletesAfterItsDriveFailed: the parts of a multipart upload
// on a drive that fails stay readable, so completing it assembles the
// object on a healthy mountpath: the completion that finds the failure
// fails, and the client's retry succeeds.
func TestUploadCompletesAfterItsDriveFailed(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	broken := tmpfsMountpath(t, filepath.Join(dir, "mp1"))
	s := openTest(t, Config{Mountpaths: []string{broken, filepath.Join(dir, "mp2")}})
	key := keysOn(s, "bkt", 0, 1)[0]
	id, err := s.CreateUpload(ctx, "bkt", key, UploadOptions{Pinned: true})
	if err != nil {
		t.Fatal(err)
	}
	part := randBytes(7, 1000)
	pi := putPart(t, s, "bkt", key, id, 1, part)
	failDrive(t, s, broken)
	parts := []object.CompletePart{{PartNumber: 1, ETag: pi.ETag}}
	info, err := s.CompleteUpload(ctx, "bkt", key, id, parts)
	if err != nil {
		if !errors.Is(err, unix.EROFS) {
			t.Fatalf("completion that finds the drive read-only: %v, want EROFS", err)
		}
		if info, err = s.CompleteUpload(ctx, "bkt", key, id, parts); err != nil {
			t.Fatalf("retried completion: %v", err)
		}
	}
	if got, _ := get(t, s, "bkt", key, nil); !bytes.Equal(got, part) || info.Size != int64(len(part)) {
		t.Errorf("completed object reads %d bytes (%+v)", len(got), info)
	}
	if e := s.lookup("bkt", key); e == nil || s.mps[e.mp].path == broken {
		t.Errorf("completed object is not on the healthy mountpath: %+v", e)
	}
}
