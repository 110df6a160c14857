package store

import (
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// openFile is os.OpenFile for regular files without the runtime poller.
// os.OpenFile offers every descriptor to epoll, which refuses regular files
// after the descriptor was switched to non-blocking and before it is switched
// back: two fcntl pairs and a failed epoll_ctl, four of the fifteen system
// calls of a small warm GET. os.NewFile does not try.
func openFile(path string, flag int, perm uint32) (*os.File, error) {
	for {
		fd, err := unix.Open(path, flag|unix.O_CLOEXEC, perm)
		if err == nil {
			return os.NewFile(uintptr(fd), path), nil
		}
		if err != unix.EINTR {
			return nil, &fs.PathError{Op: "open", Path: path, Err: err}
		}
	}
}

// createTemp is os.CreateTemp(dir, prefix+"*") through openFile.
func createTemp(dir, prefix string) (*os.File, error) {
	for try := 0; ; try++ {
		name := filepath.Join(dir, prefix+strconv.FormatUint(uint64(rand.Uint32()), 10))
		f, err := openFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil && errors.Is(err, fs.ErrExist) && try < 100 {
			continue
		}
		return f, err
	}
}
