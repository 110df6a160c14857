package store

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/slipstream-io/slipstream/internal/object"
)

// TestDeadRecordsOutliveUnmountedDrive: a failed (read-only) drive keeps
// a copy of a deleted key, recorded dead on the other drive. The node
// restarts while the failed drive is unmounted (pulled for repair): its
// mountpath is then an empty directory of the root file system, which is
// not the drive, so the record stays. When the repaired drive is mounted
// again, the deleted object stays deleted. Needs root (bind mounts).
func TestDeadRecordsOutliveUnmountedDrive(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	disk := mkdir(t, filepath.Join(dir, "disk1")) // the drive's file system
	mp1 := mkdir(t, filepath.Join(dir, "mp1"))    // its mount point
	mount := func(flags uintptr) {
		t.Helper()
		if err := unix.Mount(disk, mp1, "", unix.MS_BIND, ""); err != nil {
			t.Fatalf("bind mount: %v", err)
		}
		if flags != 0 {
			if err := unix.Mount("", mp1, "", unix.MS_REMOUNT|unix.MS_BIND|flags, ""); err != nil {
				t.Fatalf("remount: %v", err)
			}
		}
	}
	mounted := true
	mount(0)
	t.Cleanup(func() {
		if mounted {
			unix.Unmount(mp1, 0)
		}
	})
	cfg := Config{Mountpaths: []string{mp1, filepath.Join(dir, "mp2")}}
	s, err := Open(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	key := keysOn(s, "bkt", 0, 1)[0]
	put(t, s, "bkt", key, []byte("deleted later"))

	// The drive fails: ext4 remounts it read-only.
	s.mps[0].lock.Close()
	s.mps[0].lock = nil
	if err := unix.Mount("", mp1, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount read-only: %v", err)
	}
	if err := s.Delete(ctx, "bkt", key); err != nil {
		t.Fatalf("delete with the copy on the read-only drive: %v", err)
	}
	s.Close()
	if n := countFiles(t, filepath.Join(dir, "mp2", deadDir)); n != 1 {
		t.Fatalf("dead records: %d", n)
	}

	// The drive is pulled for repair; the node restarts meanwhile.
	if err := unix.Unmount(mp1, 0); err != nil {
		t.Fatal(err)
	}
	mounted = false
	s, err = Open(ctx, cfg, nil)
	if err != nil {
		t.Fatalf("open without the drive: %v", err)
	}
	s.Close()

	// The repaired drive is back (writable).
	mount(0)
	mounted = true
	s, err = Open(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Stat(ctx, "bkt", key); !errors.Is(err, object.ErrNotFound) {
		t.Errorf("deleted %s is back after the drive was remounted: Stat = %v (dead records left: %d)", key, err, countFiles(t, filepath.Join(dir, "mp2", deadDir)))
	}
}
