package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Work files are created in several directories under tmp/, in turn. On
// ext4 without a journal, creating a file skips every inode of its block
// group freed in the last dirty_expire seconds (30 by default), reading
// each one's inode to check (find_inode_bit, recently_deleted): with
// objects overwritten, deleted and evicted at a steady rate, every create
// in one directory's group pays for all of them. A new file's inode goes
// to its directory's group, and tmp/ is marked a top directory (chattr
// +T) so that the Orlov allocator puts its subdirectories in different
// groups: each group then sees a sixteenth of the frees. Measured on this
// project's test machine (no-journal ext4), a create after 4000 deletes
// cost 510 µs of CPU in one directory and 31 µs over 16 (TestWorkDirSpread
// in the benchmarks measures it through the store). Elsewhere the spread
// costs nothing.
const defaultWorkDirs = 16

// fsTopdirFl is FS_TOPDIR_FL of linux/fs.h ("chattr +T").
const fsTopdirFl = 0x00020000

// workDirNames returns the work directories of a mountpath's tmp/.
func workDirNames(tmp string, n int) []string {
	dirs := make([]string, max(n, 1))
	for i := range dirs {
		dirs[i] = filepath.Join(tmp, fmt.Sprintf("w%02d", i))
	}
	return dirs
}

// makeWorkDirs marks tmp a top directory where the file system has the flag
// (best effort: it only steers allocation) and creates dirs.
func makeWorkDirs(tmp string, dirs []string) error {
	markTopDir(tmp)
	for _, d := range dirs {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	return nil
}

// markTopDir sets FS_TOPDIR_FL on dir if the file system supports it.
func markTopDir(dir string) {
	f, err := os.Open(dir)
	if err != nil {
		return
	}
	defer f.Close()
	fd := int(f.Fd())
	flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if err != nil || flags&fsTopdirFl != 0 {
		return
	}
	_ = unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(flags|fsTopdirFl))
}

// workDir returns the directory of mp's next work file.
func (mp *mountpath) workDir() string {
	return mp.workDirs[int(mp.nextWork.Add(1))%len(mp.workDirs)]
}
