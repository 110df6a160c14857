// Package evict holds the eviction policies of the local store: pure,
// single-threaded data structures that remember which cached objects exist,
// how big they are and how they were accessed, and pick the next victim.
// They do no I/O and know nothing about files; the store feeds them and
// serialises calls.
//
// Two policies exist:
//
//   - "lru": least recently used. Simple, and right for workloads with
//     temporal locality, but a single sequential scan over a dataset larger
//     than the cache (an epoch of a training job) flushes everything else.
//   - "s3fifo": S3-FIFO (Yang et al., SOSP 2023): a small FIFO that admits new
//     objects (10 % of the bytes), a main FIFO with a 2-bit clock for objects
//     that were hit again while in the small queue, and a ghost queue of keys
//     recently evicted from the small queue so that their next insertion goes
//     straight to main. One-hit objects of a scan leave through the small
//     queue and never disturb the hot set in main. It was chosen over 2Q and
//     ARC because it needs no tuning, is as scan resistant as both, and its
//     hits only bump a counter (no list move), which keeps GETs cheap.
//
// Objects that must never be evicted (dirty objects) are simply not handed to
// a policy.
package evict

import (
	"errors"
	"fmt"
)

// ErrUnknownPolicy is returned by New for a name it does not know.
var ErrUnknownPolicy = errors.New("evict: unknown eviction policy")

// Policy tracks cached objects and chooses victims. Implementations are not
// safe for concurrent use.
type Policy interface {
	// Name is the policy's configuration name.
	Name() string
	// Add inserts key with its size. If key is already present its size is
	// updated and the call counts as an access.
	Add(key string, size int64)
	// Touch records a hit on key and reports whether key is present.
	Touch(key string) bool
	// Remove forgets key (deleted, or no longer evictable) and reports
	// whether it was present. It leaves no history behind.
	Remove(key string) bool
	// Evict removes and returns the next victim; ok is false when the
	// policy holds nothing.
	Evict() (key string, size int64, ok bool)
	// Contains reports whether key is present, without counting an access.
	Contains(key string) bool
	// Len is the number of objects held.
	Len() int
	// Bytes is the sum of the sizes of the objects held.
	Bytes() int64
}

// Names lists the policies New accepts.
func Names() []string { return []string{"lru", "s3fifo"} }

// New returns an empty policy by name: "lru" or "s3fifo".
func New(name string) (Policy, error) {
	switch name {
	case "lru":
		return NewLRU(), nil
	case "s3fifo":
		return NewS3FIFO(), nil
	}
	return nil, fmt.Errorf("%w: %q (want one of %v)", ErrUnknownPolicy, name, Names())
}
