package volume

import (
	"bytes"
	"context"
	"errors"
	"slices"
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
	fences   *fences
	readHook func(vol string, c int64) // if non-nil, called after each ReadAt
	epochs   map[string]uint64         // the fences' "persisted" epochs
}

func newMemRep(cs int64) *memRep {
	r := &memRep{cs: cs, cache: map[string][]byte{}, durable: map[string][]byte{}, epochs: map[string]uint64{}}
	r.fences = newFences(func(vol string) (uint64, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.epochs[vol], nil
	}, func(vol string, e uint64) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.epochs[vol] = e
		return nil
	})
	return r
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
	copy(p, r.chunk(r.cache, memKey(vol, c))[off:])
	r.mu.Unlock()
	if r.readHook != nil {
		r.readHook(vol, c)
	}
	return nil
}

func (r *memRep) WriteAt(_ context.Context, vol string, epoch uint64, c int64, p []byte, off int64, sync bool) error {
	if r.down.Load() {
		return errMemDown
	}
	done, err := r.fences.enter(vol, epoch)
	if err != nil {
		return err
	}
	defer done()
	r.mu.Lock()
	defer r.mu.Unlock()
	k := memKey(vol, c)
	copy(r.chunk(r.cache, k)[off:], p)
	if sync {
		copy(r.chunk(r.durable, k), r.cache[k])
	}
	return nil
}

func (r *memRep) Zero(_ context.Context, vol string, epoch uint64, c int64, off, n int64, _ bool) error {
	if r.down.Load() {
		return errMemDown
	}
	done, err := r.fences.enter(vol, epoch)
	if err != nil {
		return err
	}
	defer done()
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

func (r *memRep) Fence(_ context.Context, vol string, epoch uint64) error {
	if r.down.Load() {
		return errMemDown
	}
	return r.fences.raise(vol, epoch)
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

// memMarks is a StaleMarks that keeps the marks in memory, per mirror and
// writer. Used directly it marks as an unknown writer (""); memConfig
// gives each volume a view that marks as its own node.
type memMarks struct {
	mu    sync.Mutex
	marks map[string]map[string]bool // mirror -> writer -> stale
	alive map[string]bool            // writers ClearCovered leaves alone
	ver   uint64                     // raised by every change (Config.MapVersion)
}

// version returns the marks' version (Config.MapVersion).
func (m *memMarks) version() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ver
}

func (m *memMarks) set(mirror, writer string, stale bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ver++
	if m.marks == nil {
		m.marks = map[string]map[string]bool{}
	}
	if m.marks[mirror] == nil {
		m.marks[mirror] = map[string]bool{}
	}
	if stale {
		m.marks[mirror][writer] = true
	} else {
		delete(m.marks[mirror], writer)
	}
}

func (m *memMarks) SetStale(_ context.Context, mirror string, stale bool) error {
	m.set(mirror, "", stale)
	return nil
}

func (m *memMarks) ClearCovered(_ context.Context, mirror string, writers []string, _ uint64) error {
	for _, w := range writers {
		m.mu.Lock()
		alive := m.alive[w]
		m.mu.Unlock()
		if !alive {
			m.set(mirror, w, false)
		}
	}
	return nil
}

func (m *memMarks) setAlive(writer string, alive bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.alive == nil {
		m.alive = map[string]bool{}
	}
	m.alive[writer] = alive
}

// isStale reports whether any writer marks mirror stale.
func (m *memMarks) isStale(mirror string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.marks[mirror]) > 0
}

// list returns the marks as the cluster map hands them to a volume.
func (m *memMarks) list() map[string][]string {
	l, _ := m.listAt()
	return l
}

// listAt returns the marks with their version.
func (m *memMarks) listAt() (map[string][]string, uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string][]string{}
	for mirror, ws := range m.marks {
		for w := range ws {
			out[mirror] = append(out[mirror], w)
		}
		slices.Sort(out[mirror])
	}
	return out, m.ver
}

// memMarksAs is a volume's view of memMarks: it marks as writer.
type memMarksAs struct {
	*memMarks
	writer string
}

func (m memMarksAs) SetStale(_ context.Context, mirror string, stale bool) error {
	m.set(mirror, m.writer, stale)
	return nil
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
	if mm, ok := mk.(*memMarks); ok && mm != nil {
		mk = memMarksAs{mm, self}
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

// waitUntil polls cond every 10 ms for at least 5 s and fails the test if
// it never holds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitUntilFor(t, 5*time.Second, what, cond)
}

// waitUntilFor is waitUntil for at least d.
func waitUntilFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for range d / (10 * time.Millisecond) {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out after %v waiting for %s", d, what)
}
