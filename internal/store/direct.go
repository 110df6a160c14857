package store

import (
	"errors"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// directAlign is the alignment O_DIRECT needs of buffers, offsets and
// lengths here.
const directAlign = 4096

// directFile is a work file whose whole aligned blocks are written through
// an O_DIRECT descriptor: no page cache pages are allocated and copied
// into, and no dirty pages are left for the flusher; fsync then only
// flushes the device cache and the metadata. The unaligned tail of a body
// goes through the buffered descriptor, which also carries everything else
// (metadata, fsync, close).
type directFile struct {
	*os.File
	direct *os.File
	off    int64
}

// createWorkFile creates a work file in dir; with direct, it writes
// around the page cache when the file system allows O_DIRECT.
func createWorkFile(dir string, direct bool) (workFile, error) {
	f, err := createTemp(dir, "work-")
	if err != nil || !direct {
		return f, err
	}
	d, err := openFile(f.Name(), os.O_WRONLY|unix.O_DIRECT, 0)
	if err != nil {
		if errors.Is(err, unix.EINVAL) {
			return f, nil
		}
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return &directFile{File: f, direct: d}, nil
}

func (d *directFile) Write(p []byte) (int, error) {
	n := 0
	if d.direct != nil && d.off%directAlign == 0 && len(p) >= directAlign && uintptr(unsafe.Pointer(&p[0]))%directAlign == 0 {
		k, err := d.direct.WriteAt(p[:len(p)&^(directAlign-1)], d.off)
		n, d.off = k, d.off+int64(k)
		if errors.Is(err, unix.EINVAL) && k == 0 {
			// The device wants another alignment: write buffered.
			d.direct.Close()
			d.direct = nil
		} else if err != nil {
			return n, err
		}
	}
	if n < len(p) {
		k, err := d.File.WriteAt(p[n:], d.off)
		n, d.off = n+k, d.off+int64(k)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func (d *directFile) Close() error {
	var err error
	if d.direct != nil {
		err = d.direct.Close()
	}
	return errors.Join(d.File.Close(), err)
}
