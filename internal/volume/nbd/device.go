package nbd

import (
	"context"
	"errors"
	"sort"
	"syscall"
)

// Device is a block device the server exports. Offsets and lengths are
// checked against Size by the server before a call. Every method may be
// called concurrently from many requests and connections.
type Device interface {
	// Size is the device size in bytes.
	Size() int64
	// ReadAt fills p from off; unwritten areas read as zeros.
	ReadAt(ctx context.Context, p []byte, off int64) error
	// WriteAt writes p at off; with fua the data is durable on return.
	WriteAt(ctx context.Context, p []byte, off int64, fua bool) error
	// Flush makes every write acknowledged so far durable.
	Flush(ctx context.Context) error
	// Trim discards [off, off+n); the range then reads as zeros.
	Trim(ctx context.Context, off, n int64) error
	// WriteZeroes zeroes [off, off+n). With noHole the range must stay
	// allocated; otherwise it may be punched out.
	WriteZeroes(ctx context.Context, off, n int64, fua, noHole bool) error
}

// MultiConnDevice is implemented by devices whose Flush makes durable every
// write acknowledged on any connection, not only on the caller's. Only such
// devices are advertised with NBD_FLAG_CAN_MULTI_CONN.
type MultiConnDevice interface {
	MultiConn() bool
}

// Extent is a run of a device's bytes in one allocation state, as
// NBD_CMD_BLOCK_STATUS reports it in the base:allocation context.
type Extent struct {
	Length int64
	Hole   bool // unallocated: takes no space
	Zero   bool // reads as zeros
}

// ExtentsDevice is implemented by devices that know where their holes
// are. Extents describes [off, off+n), or a prefix of it at least one byte
// long, as consecutive extents from off. A device without it reports
// everything as allocated data, which is always correct.
type ExtentsDevice interface {
	Extents(ctx context.Context, off, n int64) ([]Extent, error)
}

// AppendExtent appends e to es, merging it into the last extent when both
// are in the same state.
func AppendExtent(es []Extent, e Extent) []Extent {
	if e.Length <= 0 {
		return es
	}
	if k := len(es) - 1; k >= 0 && es[k].Hole == e.Hole && es[k].Zero == e.Zero {
		es[k].Length += e.Length
		return es
	}
	return append(es, e)
}

// Exports resolves export names to devices.
type Exports interface {
	// Lookup returns the device exported as name, or an error wrapping
	// ErrUnknownExport.
	Lookup(ctx context.Context, name string) (Device, error)
	// List returns the export names.
	List(ctx context.Context) ([]string, error)
}

// ErrUnknownExport is returned by Exports.Lookup for a name it does not know.
var ErrUnknownExport = errors.New("nbd: unknown export")

// Map is a fixed set of exports. The empty name resolves to the only export
// when there is exactly one (clients that give no name ask for "").
type Map map[string]Device

var _ Exports = Map(nil)

// Lookup implements Exports.
func (m Map) Lookup(_ context.Context, name string) (Device, error) {
	if d, ok := m[name]; ok {
		return d, nil
	}
	if name == "" && len(m) == 1 {
		for _, d := range m {
			return d, nil
		}
	}
	return nil, ErrUnknownExport
}

// List implements Exports.
func (m Map) List(context.Context) ([]string, error) {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// errnoOf maps a device error to the protocol's error value.
func errnoOf(err error) uint32 {
	var e syscall.Errno
	if errors.As(err, &e) {
		switch e {
		case syscall.EPERM, syscall.EROFS:
			return EPERM
		case syscall.ENOMEM:
			return ENOMEM
		case syscall.EINVAL:
			return EINVAL
		case syscall.ENOSPC, syscall.EDQUOT, syscall.EFBIG:
			return ENOSPC
		case syscall.EOVERFLOW:
			return EOVERFLOW
		case syscall.ENOTSUP:
			return ENOTSUP
		}
	}
	return EIO
}
