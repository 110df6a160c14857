// Package volume implements Slipstream's block volumes: a volume is a
// sequence of fixed-size chunks, each placed by HRW on Copies distinct nodes
// and written in place on every mirror. A Volume is an nbd.Device: writes go
// to all live mirrors in parallel and are acknowledged when all of them have
// the data; FUA and flush fsync the mirrors; reads prefer the local mirror,
// else the least busy one. A mirror that fails is marked stale for the
// chunks it missed (persisted), and a background resync copies exactly those
// chunks back when it returns, while I/O continues.
//
// A Replica is one node's store of chunk files; Local keeps them as sparse
// files under the node's mountpaths, and Client/NewHandler carry the same
// calls over HTTP between nodes.
package volume

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
)

// DefaultChunkSize is the chunk size of a volume that does not set one.
const DefaultChunkSize = 4 << 20

// Sentinel errors.
var (
	ErrInvalidName = errors.New("volume: invalid volume name")
	ErrInvalidSpec = errors.New("volume: invalid volume spec")
	ErrNoMirror    = errors.New("volume: no live in-sync mirror for the chunk")
	// ErrChunkLost is I/O to a chunk whose every copy was on nodes
	// removed from the cluster, until an operator accepts the loss.
	ErrChunkLost    = errors.New("volume: chunk lost with the nodes removed from the cluster")
	ErrOutOfRange   = errors.New("volume: range beyond the end of the chunk")
	ErrReplicaError = errors.New("volume: replica failed")
	// ErrFenced is a mutation refused because another node has claimed
	// the volume since its writer did (see Claims).
	ErrFenced = errors.New("volume: another node writes the volume now")
	// ErrNotWriter is a forwarded op refused by a node that does not
	// write the volume (see Forwarder): the sender claims it instead.
	ErrNotWriter = errors.New("volume: this node does not write the volume")
	// ErrNoSpace is a mirror out of space; it wraps ENOSPC, which the NBD
	// server passes on to the client.
	ErrNoSpace = fmt.Errorf("volume: a mirror is out of space: %w", syscall.ENOSPC)
)

// noSpace reports whether err is a full drive (or quota) on a mirror.
func noSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// Spec describes a volume. It is what the cluster metadata stores.
type Spec struct {
	Name      string `json:"name"`
	Size      int64  `json:"size"`
	ChunkSize int64  `json:"chunkSize"`
	Copies    int    `json:"copies"`
	// ID tells apart volumes of the same name, one created after the other
	// was deleted: chunks are stored under Key, so that a node that missed
	// the delete never serves the old volume's data as the new one's.
	ID string `json:"id,omitempty"`
}

// Key is the name the volume's chunks and state are stored under: Name,
// or Name@ID.
func (s Spec) Key() string {
	if s.ID == "" {
		return s.Name
	}
	return s.Name + "@" + s.ID
}

// WithDefaults returns s with zero fields set to their defaults.
func (s Spec) WithDefaults() Spec {
	if s.ChunkSize == 0 {
		s.ChunkSize = DefaultChunkSize
	}
	if s.Copies == 0 {
		s.Copies = 1
	}
	return s
}

// Validate checks the spec.
func (s Spec) Validate() error {
	if err := ValidName(s.Name); err != nil {
		return err
	}
	if err := ValidKey(s.Key()); err != nil {
		return err
	}
	if s.Size <= 0 || s.ChunkSize < 4096 || s.ChunkSize&(s.ChunkSize-1) != 0 || s.Copies < 1 || s.Copies > 8 {
		return fmt.Errorf("%w: size %d, chunk %d (a power of two >= 4096), copies %d (1..8)", ErrInvalidSpec, s.Size, s.ChunkSize, s.Copies)
	}
	return nil
}

// Chunks is the number of chunks of the volume.
func (s Spec) Chunks() int64 { return (s.Size + s.ChunkSize - 1) / s.ChunkSize }

// ChunkName is the name HRW hashes to place chunk i of volume vol.
func ChunkName(vol string, i int64) string { return fmt.Sprintf("%s/%d", vol, i) }

// ValidName checks a volume name: 1–128 characters of letters, digits,
// '-', '_' and '.', not starting with '_' or '.'.
func ValidName(name string) error {
	if name == "" || len(name) > 128 || name[0] == '_' || name[0] == '.' {
		return fmt.Errorf("%w: %q", ErrInvalidName, name)
	}
	if strings.IndexFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
	}) >= 0 {
		return fmt.Errorf("%w: %q", ErrInvalidName, name)
	}
	return nil
}

// maxKeyLen is the length of the longest valid storage key: a name of 128
// characters, '@' and an ID of 64.
const maxKeyLen = 128 + 1 + 64

// ValidKey checks a storage key (see Spec.Key): a valid name, optionally
// followed by '@' and an ID of 1–64 letters and digits.
func ValidKey(key string) error {
	name, id, ok := strings.Cut(key, "@")
	if err := ValidName(name); err != nil {
		return err
	}
	if ok && (id == "" || len(id) > 64 || strings.IndexFunc(id, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}) >= 0) {
		return fmt.Errorf("%w: %q", ErrInvalidName, key)
	}
	return nil
}

// Replica is one node's store of volume chunks, by storage key (Spec.Key).
// Offsets are within the chunk. Unwritten areas read as zeros. Mutations
// carry the writer's epoch (see fence.go) and fail with ErrFenced if the
// replica has seen a higher one for the volume.
type Replica interface {
	// ReadAt fills p from chunk at off.
	ReadAt(ctx context.Context, vol string, chunk int64, p []byte, off int64) error
	// WriteAt writes p in place into chunk at off; with sync the chunk is
	// durable on return.
	WriteAt(ctx context.Context, vol string, epoch uint64, chunk int64, p []byte, off int64, sync bool) error
	// Zero zeroes [off, off+n) of chunk: punch deallocates the range,
	// otherwise it stays allocated.
	Zero(ctx context.Context, vol string, epoch uint64, chunk int64, off, n int64, punch bool) error
	// Fence makes epoch the lowest the replica accepts for vol from now
	// on, durably, once the mutations in flight are done. It fails with
	// ErrFenced if it has seen a higher one.
	Fence(ctx context.Context, vol string, epoch uint64) error
	// Sync makes the listed chunks durable.
	Sync(ctx context.Context, vol string, chunks []int64) error
	// Delete removes every chunk of vol.
	Delete(ctx context.Context, vol string) error
	// Ping reports whether the replica is reachable.
	Ping(ctx context.Context) error
}
