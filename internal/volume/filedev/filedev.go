// Package filedev is a block device backed by one local file: reads and
// writes are pread/pwrite in place, trim punches holes, FUA and flush are
// fdatasync. It is the simplest device an NBD export can serve and the
// reference the mirrored volumes are measured against.
package filedev

import (
	"context"
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/slipstream-io/slipstream/internal/volume/nbd"
)

// Device is a file used as a block device. Writes whose buffer, offset and
// length are 4 KiB aligned go through an O_DIRECT descriptor, submitted in
// batches with Linux AIO (overwrites then never wait on pages under
// writeback, and concurrent writes reach the device together); reads are
// served from the page cache when cached, else by the same AIO path.
type Device struct {
	f      *os.File
	direct *os.File // nil when O_DIRECT is unavailable
	ring   *Ring    // AIO for the direct writes; nil: pwrite
	size   int64
}

var (
	_ nbd.Device          = (*Device)(nil)
	_ nbd.MultiConnDevice = (*Device)(nil)
	_ nbd.ExtentsDevice   = (*Device)(nil)
)

// Open opens (creating if needed) path as a device of size bytes; the file
// is extended sparsely to size.
func Open(path string, size int64) (*Device, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if st.Size() < size {
		if err := f.Truncate(size); err != nil {
			f.Close()
			return nil, err
		}
	}
	d := &Device{f: f, size: size}
	if df, err := os.OpenFile(path, os.O_RDWR|unix.O_DIRECT, 0); err == nil {
		d.direct = df
		if r, err := NewRing(512); err == nil {
			d.ring = r
		}
	}
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_RANDOM)
	return d, nil
}

// Close closes the file.
func (d *Device) Close() error {
	if d.ring != nil {
		d.ring.Close()
	}
	if d.direct != nil {
		d.direct.Close()
	}
	return d.f.Close()
}

// Aligned reports whether a write of p at off may use O_DIRECT.
func Aligned(p []byte, off int64) bool {
	return len(p) > 0 && off%4096 == 0 && len(p)%4096 == 0 && uintptr(unsafe.Pointer(&p[0]))%4096 == 0
}

// Size implements nbd.Device.
func (d *Device) Size() int64 { return d.size }

// MultiConn implements nbd.MultiConnDevice: fdatasync covers every writer.
func (d *Device) MultiConn() bool { return true }

// ReadAt implements nbd.Device.
func (d *Device) ReadAt(_ context.Context, p []byte, off int64) error {
	return ReadAt(d.f, d.direct, d.ring, p, off)
}

// WriteAt implements nbd.Device.
func (d *Device) WriteAt(_ context.Context, p []byte, off int64, fua bool) error {
	switch {
	case d.direct != nil && d.ring != nil && Aligned(p, off):
		if err := d.ring.WriteAt(int(d.direct.Fd()), p, off); err != nil {
			return err
		}
	case d.direct != nil && Aligned(p, off):
		if _, err := d.direct.WriteAt(p, off); err != nil {
			return err
		}
	default:
		if _, err := d.f.WriteAt(p, off); err != nil {
			return err
		}
	}
	if fua {
		return unix.Fdatasync(int(d.f.Fd()))
	}
	return nil
}

// Flush implements nbd.Device.
func (d *Device) Flush(context.Context) error { return unix.Fdatasync(int(d.f.Fd())) }

// Trim implements nbd.Device.
func (d *Device) Trim(_ context.Context, off, n int64) error {
	return PunchHole(d.f, off, n)
}

// WriteZeroes implements nbd.Device.
func (d *Device) WriteZeroes(ctx context.Context, off, n int64, fua, noHole bool) error {
	var err error
	if noHole {
		err = ZeroRange(d.f, off, n)
	} else {
		err = PunchHole(d.f, off, n)
	}
	if err == nil && fua {
		err = d.Flush(ctx)
	}
	return err
}

// PunchHole deallocates [off, off+n) of f, which then reads as zeros.
func PunchHole(f *os.File, off, n int64) error {
	if n == 0 {
		return nil
	}
	err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	if err == unix.EOPNOTSUPP {
		return writeZeroes(f, off, n)
	}
	if err != nil {
		return fmt.Errorf("filedev: punch hole: %w", err)
	}
	return nil
}

// ZeroRange zeroes [off, off+n) of f keeping it allocated.
func ZeroRange(f *os.File, off, n int64) error {
	if n == 0 {
		return nil
	}
	err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_ZERO_RANGE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	if err == unix.EOPNOTSUPP {
		return writeZeroes(f, off, n)
	}
	if err != nil {
		return fmt.Errorf("filedev: zero range: %w", err)
	}
	return nil
}

func writeZeroes(f *os.File, off, n int64) error {
	z := make([]byte, min(n, 1<<20))
	for n > 0 {
		k := min(n, int64(len(z)))
		if _, err := f.WriteAt(z[:k], off); err != nil {
			return err
		}
		off += k
		n -= k
	}
	return nil
}

// Extents implements nbd.ExtentsDevice.
func (d *Device) Extents(_ context.Context, off, n int64) ([]nbd.Extent, error) {
	return Extents(d.f, off, n)
}

// Extents describes [off, off+n) of f as holes and data, found with
// SEEK_DATA and SEEK_HOLE; what lies past the end of the file is a hole.
// It only seeks (the file offset changes; preads and pwrites do not use
// it).
func Extents(f *os.File, off, n int64) ([]nbd.Extent, error) {
	var es []nbd.Extent
	fd := int(f.Fd())
	for end := off + n; off < end; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) { // no data from off to the end of the file
			return nbd.AppendExtent(es, nbd.Extent{Length: end - off, Hole: true, Zero: true}), nil
		}
		if err != nil {
			return nil, fmt.Errorf("filedev: SEEK_DATA: %w", err)
		}
		if data > off {
			k := min(data, end) - off
			es = nbd.AppendExtent(es, nbd.Extent{Length: k, Hole: true, Zero: true})
			off += k
			continue
		}
		hole, err := unix.Seek(fd, off, unix.SEEK_HOLE)
		if err != nil {
			return nil, fmt.Errorf("filedev: SEEK_HOLE: %w", err)
		}
		k := min(hole, end) - off
		if k <= 0 { // the file changed under us: call the rest data
			k = end - off
		}
		es = nbd.AppendExtent(es, nbd.Extent{Length: k})
		off += k
	}
	return es, nil
}
