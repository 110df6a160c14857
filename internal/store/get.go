package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/placement"
)

// Reader is an open object, or a range of it. It reads with pread, so the
// version it opened stays readable even if the object is overwritten,
// deleted or evicted meanwhile. io.Copy to a socket uses sendfile (WriteTo).
type Reader struct {
	f      *os.File
	e      *entry // its index entry, whose readers it counts until Close
	info   object.Info
	off, n int64 // absolute offset and length delivered
	pos    int64 // bytes delivered so far
}

var (
	_ object.Reader = (*Reader)(nil)
	_ io.WriterTo   = (*Reader)(nil)
	_ io.Seeker     = (*Reader)(nil)
)

// Info returns the metadata of the version being read.
func (r *Reader) Info() object.Info { return cloneInfo(r.info) }

// Range reports the absolute offset and length this reader delivers.
func (r *Reader) Range() (offset, length int64) { return r.off, r.n }

// File exposes the open file and the absolute range to send from it, for
// callers that do their own zero-copy I/O. The file belongs to the Reader.
func (r *Reader) File() (f *os.File, offset, length int64) { return r.f, r.off, r.n }

// Read implements io.Reader.
func (r *Reader) Read(p []byte) (int, error) {
	if r.pos >= r.n {
		return 0, io.EOF
	}
	if rem := r.n - r.pos; int64(len(p)) > rem {
		p = p[:rem]
	}
	m, err := r.f.ReadAt(p, r.off+r.pos)
	r.pos += int64(m)
	if err == io.EOF {
		if r.pos < r.n {
			return m, fmt.Errorf("store: %s/%s is shorter than its metadata: %w", r.info.Bucket, r.info.Key, io.ErrUnexpectedEOF)
		}
		err = nil
	}
	return m, err
}

// Seek implements io.Seeker within the delivered range (offset 0 is the
// first byte of the range), which lets http.ServeContent use a Reader.
func (r *Reader) Seek(offset int64, whence int) (int64, error) {
	var abs int64
	switch whence {
	case io.SeekStart:
		abs = offset
	case io.SeekCurrent:
		abs = r.pos + offset
	case io.SeekEnd:
		abs = r.n + offset
	default:
		return 0, fmt.Errorf("%w: seek whence %d", object.ErrInvalidArgument, whence)
	}
	if abs < 0 {
		return 0, fmt.Errorf("%w: negative seek position", object.ErrInvalidArgument)
	}
	r.pos = abs
	return abs, nil
}

// WriteTo implements io.WriterTo: the rest of the range goes to w through
// w's ReadFrom when it has one, so a TCP connection gets it by sendfile and a
// file by copy_file_range.
func (r *Reader) WriteTo(w io.Writer) (int64, error) {
	if r.pos >= r.n {
		return 0, nil
	}
	if _, err := r.f.Seek(r.off+r.pos, io.SeekStart); err != nil {
		return 0, err
	}
	lr := &io.LimitedReader{R: r.f, N: r.n - r.pos}
	var n int64
	var err error
	if rf, ok := w.(io.ReaderFrom); ok {
		n, err = rf.ReadFrom(lr)
	} else {
		n, err = io.Copy(w, lr)
	}
	r.pos += n
	if err == nil && r.pos < r.n {
		err = fmt.Errorf("store: %s/%s is shorter than its metadata: %w", r.info.Bucket, r.info.Key, io.ErrUnexpectedEOF)
	}
	return n, err
}

// Close closes the file.
func (r *Reader) Close() error {
	if r.e != nil {
		r.e.readers.Add(-1)
		r.e = nil
	}
	return r.f.Close()
}

// open opens bucket/key's file and returns it with its index entry and
// metadata, taken under the key lock so that they are the same version.
// The metadata comes back also when the file cannot be opened (other than
// object.ErrNotFound).
func (s *Store) open(ctx context.Context, bucket, key string) (*os.File, *entry, object.Info, error) {
	if err := validate(bucket, key); err != nil {
		return nil, nil, object.Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, object.Info{}, err
	}
	l := s.keyLock(bucket, key)
	l.RLock()
	e := s.lookup(bucket, key)
	if e == nil {
		l.RUnlock()
		return nil, nil, object.Info{}, fmt.Errorf("%w: %s/%s", object.ErrNotFound, bucket, key)
	}
	_, file := s.mps[e.mp].objectPath(bucket, key)
	f, err := openFile(file, os.O_RDONLY, 0)
	info := *e.info
	l.RUnlock()
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil, object.Info{}, fmt.Errorf("%w: %s/%s", object.ErrNotFound, bucket, key)
		}
		return nil, e, info, fmt.Errorf("store: open %s/%s: %w", bucket, key, err)
	}
	return f, e, info, nil
}

// Get opens bucket/key, or the range rng of it (object.ErrInvalidRange if
// unsatisfiable), and records the access in memory.
func (s *Store) Get(ctx context.Context, bucket, key string, rng *object.Range) (*Reader, error) {
	f, e, info, err := s.open(ctx, bucket, key)
	if err != nil {
		return nil, err
	}
	if info.Damaged {
		f.Close()
		return nil, fmt.Errorf("%w: %s/%s was found damaged and could not be repaired; it is not served", ErrCorrupt, bucket, key)
	}
	mp := s.mps[e.mp]
	off, n := int64(0), info.Size
	if rng != nil {
		off, n, err = rng.Resolve(info.Size)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%w: object is %d bytes", err, info.Size)
		}
	}
	now := s.now()
	e.atime.Store(now.UnixNano())
	info.AccessTime = now.UTC()
	if info.Evictable() {
		mp.polTouch(placement.ObjectName(bucket, key))
	}
	e.readers.Add(1)
	return &Reader{f: f, e: e, info: cloneInfo(info), off: off, n: n}, nil
}
