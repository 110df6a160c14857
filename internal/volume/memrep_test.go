package volume

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// memRep is an in-memory replica with a volatile cache and a durable
// image: WriteAt lands in the cache, Sync (or WriteAt with sync) copies
// the chunk to the durable image, crash drops the cache back to it.
type memRep struct {
	mu       sync.Mutex
	cs       int64
	cache    map[string][]byte
	durable  map[string][]byte
	down     atomic.Bool
	syncFail atomic.Bool
	syncGate chan struct{} // if non-nil, Sync waits for it to close
	syncIn   chan struct{} // if non-nil, signalled when Sync is entered
}

func newMemRep(cs int64) *memRep {
	return &memRep{cs: cs, cache: map[string][]byte{}, durable: map[string][]byte{}}
}

var errMemDown = errors.New("memrep: down")

func memKey(vol string, c int64) string { return vol + "/" + strconv.FormatInt(c, 10) }

func (r *memRep) chunk(m map[string][]byte, k string) []byte {
	b := m[k]
	if b == nil {
		b = make([]byte, r.cs)
		m[k] = b
	}
	return b
}

func (r *memRep) ReadAt(_ context.Context, vol string, c int64, p []byte, off int64) error {
	if r.down.Load() {
		return errMemDown
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	copy(p, r.chunk(r.cache, memKey(vol, c))[off:])
	return nil
}

func (r *memRep) WriteAt(_ context.Context, vol string, c int64, p []byte, off int64, sync bool) error {
	if r.down.Load() {
		return errMemDown
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	k := memKey(vol, c)
	copy(r.chunk(r.cache, k)[off:], p)
	if sync {
		copy(r.chunk(r.durable, k), r.cache[k])
	}
	return nil
}

func (r *memRep) Zero(_ context.Context, vol string, c int64, off, n int64, _ bool) error {
	if r.down.Load() {
		return errMemDown
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.chunk(r.cache, memKey(vol, c))[off : off+n])
	return nil
}

func (r *memRep) Sync(_ context.Context, vol string, cs []int64) error {
	if r.syncIn != nil {
		select {
		case r.syncIn <- struct{}{}:
		default:
		}
	}
	if r.syncGate != nil {
		<-r.syncGate
	}
	if r.down.Load() {
		return errMemDown
	}
	if r.syncFail.Load() {
		return errors.New("memrep: sync failed")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range cs {
		k := memKey(vol, c)
		copy(r.chunk(r.durable, k), r.chunk(r.cache, k))
	}
	return nil
}

func (r *memRep) Delete(context.Context, string) error { return nil }

func (r *memRep) Ping(context.Context) error {
	if r.down.Load() {
		return errMemDown
	}
	return nil
}

// crash loses everything not synced.
func (r *memRep) crash() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cache = map[string][]byte{}
	for k, v := range r.durable {
		r.cache[k] = bytes.Clone(v)
	}
}

// durableHas reports whether the durable image of chunk c holds p at off.
func (r *memRep) durableHas(vol string, c int64, p []byte, off int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.durable[memKey(vol, c)]
	return b != nil && bytes.Equal(b[off:off+int64(len(p))], p)
}

const memCS = 4096

// memMarks is a StaleMarks that keeps the marks in memory.
type memMarks struct {
	mu    sync.Mutex
	stale map[string]bool
}

func (m *memMarks) SetStale(_ context.Context, node string, stale bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stale == nil {
		m.stale = map[string]bool{}
	}
	m.stale[node] = stale
	return nil
}

func (m *memMarks) isStale(node string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stale[node]
}

// openMem opens a volume of size bytes in 4 KiB chunks mirrored on every
// replica of reps (IDs in nodes order), running on self.
func openMem(t *testing.T, self, stateDir string, size int64, nodes []string, reps map[string]*memRep, mk StaleMarks) *Volume {
	t.Helper()
	return openMemConfig(t, memConfig(self, stateDir, size, nodes, reps, mk))
}

// memConfig is openMem's configuration.
func memConfig(self, stateDir string, size int64, nodes []string, reps map[string]*memRep, mk StaleMarks) Config {
	r := map[string]Replica{}
	for id, m := range reps {
		r[id] = m
	}
	return Config{
		Spec:  Spec{Name: "vol", Size: size, ChunkSize: memCS, Copies: len(nodes), ID: "1"},
		Nodes: nodes, Self: self, Replicas: r, StateDir: stateDir,
		OpTimeout: 50 * time.Millisecond, ProbeInterval: 10 * time.Millisecond, Marks: mk,
	}
}

// openMemConfig opens a volume of cfg, closed when the test ends.
func openMemConfig(t *testing.T, cfg Config) *Volume {
	t.Helper()
	v, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return v
}

// memReps returns a fresh replica per node.
func memReps(nodes ...string) map[string]*memRep {
	reps := map[string]*memRep{}
	for _, id := range nodes {
		reps[id] = newMemRep(memCS)
	}
	return reps
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 500 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}
