package sysstat

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// device names the whole disk behind a directory, and the partition when
// the file system lives on one.
type device struct {
	Disk, Part string
}

// devNumber returns the device number (st_dev) of the file system holding dir.
func devNumber(dir string) (maj, min uint32, err error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return 0, 0, fmt.Errorf("sysstat: stat %s: %w", dir, err)
	}
	return unix.Major(st.Dev), unix.Minor(st.Dev), nil
}

// resolveDevice maps a device number to its kernel block device through
// sysfs (sysRoot/dev/block/MAJ:MIN is a symlink into the device tree; a
// partition's parent directory is its disk). File systems whose st_dev is
// not a block device (btrfs, some overlay set-ups) are looked up in
// mountinfo: the mount's source, if it is a /dev node, gives the device.
func resolveDevice(sysRoot string, mounts []Mount, maj, min uint32) (device, error) {
	if d, err := sysBlock(sysRoot, maj, min); err == nil {
		return d, nil
	}
	for _, m := range mounts {
		if m.Major != maj || m.Minor != min {
			continue
		}
		if !strings.HasPrefix(m.Source, "/dev/") {
			return device{}, fmt.Errorf("%w: %s file system on %q", ErrNoDevice, m.FSType, m.Source)
		}
		var st unix.Stat_t
		if err := unix.Stat(m.Source, &st); err != nil {
			return device{}, fmt.Errorf("%w: %s: %w", ErrNoDevice, m.Source, err)
		}
		if d, err := sysBlock(sysRoot, unix.Major(st.Rdev), unix.Minor(st.Rdev)); err == nil {
			return d, nil
		}
		return device{}, fmt.Errorf("%w: %s is not in %s/dev/block", ErrNoDevice, m.Source, sysRoot)
	}
	return device{}, fmt.Errorf("%w: device %d:%d is neither in sysfs nor in mountinfo", ErrNoDevice, maj, min)
}

func sysBlock(sysRoot string, maj, min uint32) (device, error) {
	link := filepath.Join(sysRoot, "dev", "block", fmt.Sprintf("%d:%d", maj, min))
	target, err := filepath.EvalSymlinks(link)
	if err != nil {
		return device{}, err
	}
	name := filepath.Base(target)
	if _, err := os.Stat(filepath.Join(target, "partition")); err == nil {
		return device{Disk: filepath.Base(filepath.Dir(target)), Part: name}, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return device{}, err
	}
	return device{Disk: name}, nil
}
