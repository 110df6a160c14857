package store

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/slipstream-io/slipstream/internal/object"
)

// ErrCorrupt reports a stored object whose bytes no longer match the size
// and CRC32C recorded when it was written (bit rot, a torn write below the
// file system, a file changed behind the store's back).
var ErrCorrupt = errors.New("store: object does not match its checksum")

// Verify reads bucket/key and checks it against its metadata: size and
// CRC32C. It reads around the page cache where the file system allows
// (a scrub must neither evict hot data nor read a cached copy instead of
// the drive's), without counting as an access. pace, if set, is called
// before each read with its size (a rate limit). It returns the version
// it checked, and an error wrapping ErrCorrupt if it does not match.
func (s *Store) Verify(ctx context.Context, bucket, key string, pace func(ctx context.Context, n int) error) (object.Info, error) {
	f, _, info, err := s.open(ctx, bucket, key)
	if err != nil {
		return cloneInfo(info), err
	}
	info = cloneInfo(info)
	defer f.Close()
	r := io.ReaderAt(f)
	if d, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), os.O_RDONLY|unix.O_DIRECT, 0); err == nil {
		defer d.Close()
		r = &directReader{direct: d, buffered: f}
	}
	bp := s.bufs.Get().(*[]byte)
	defer s.bufs.Put(bp)
	buf := *bp
	crc := crc32.New(object.Castagnoli)
	var size int64
	for {
		if err := ctx.Err(); err != nil {
			return info, err
		}
		if pace != nil {
			if err := pace(ctx, len(buf)); err != nil {
				return info, err
			}
		}
		n, err := r.ReadAt(buf, size)
		crc.Write(buf[:n])
		size += int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			return info, fmt.Errorf("store: read %s/%s: %w", bucket, key, err)
		}
	}
	if size != info.Size {
		return info, fmt.Errorf("%w: %s/%s holds %d bytes, its metadata says %d", ErrCorrupt, bucket, key, size, info.Size)
	}
	if got := checksumString(crc.Sum32()); info.Checksum != "" && got != info.Checksum {
		return info, fmt.Errorf("%w: %s/%s reads as %s, was written as %s", ErrCorrupt, bucket, key, got, info.Checksum)
	}
	return info, nil
}

// MarkDamaged records that the copy of was's version is damaged beyond
// repair (see object.Info.Damaged): Get refuses it from then on, until a
// write replaces it. ErrChanged if the stored version is no longer was.
func (s *Store) MarkDamaged(ctx context.Context, was object.Info) error {
	_, err := s.UpdateMeta(ctx, was.Bucket, was.Key, func(i *object.Info) error {
		if i.ETag != was.ETag || !i.ModTime.Equal(was.ModTime) {
			return ErrChanged
		}
		i.Damaged = true
		return nil
	})
	return err
}

// directReader reads whole aligned blocks through an O_DIRECT descriptor
// and falls back to the buffered one where the device or the buffer will
// not do (an unaligned buffer, EINVAL).
type directReader struct {
	direct, buffered *os.File
}

func (d *directReader) ReadAt(p []byte, off int64) (int, error) {
	if d.direct != nil && off%directAlign == 0 && len(p) >= directAlign && uintptr(unsafe.Pointer(&p[0]))%directAlign == 0 {
		n, err := d.direct.ReadAt(p[:len(p)&^(directAlign-1)], off)
		if !errors.Is(err, unix.EINVAL) {
			return n, err
		}
		d.direct.Close()
		d.direct = nil
	}
	return d.buffered.ReadAt(p, off)
}
