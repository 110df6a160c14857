package volume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slipstream-io/slipstream/internal/placement"
	"github.com/slipstream-io/slipstream/internal/volume/nbd"
)

// Config configures a mirrored Volume.
type Config struct {
	// Spec is the volume (defaults applied by Open).
	Spec Spec
	// Nodes are the IDs of the nodes chunks may be placed on.
	Nodes []string
	// Self is the ID of the node running this Volume ("" if none); reads
	// prefer its mirror.
	Self string
	// Replicas maps every node ID in Nodes to its replica.
	Replicas map[string]Replica
	// StateDir holds the persisted stale-chunk maps. Required.
	StateDir string
	// OpTimeout bounds the replica calls of flush, probe and resync.
	// Default 10s. Reads and writes are bounded by the replica itself
	// (ClientConfig.Timeout), which saves a timer per I/O.
	OpTimeout time.Duration
	// ProbeInterval is how often a failed mirror is probed and stale
	// chunks are resynchronised. Default 500ms.
	ProbeInterval time.Duration
	// Logger; default discard.
	Logger *slog.Logger
	// Marks, if set, records outside this node which mirrors missed
	// writes (see StaleMarks); Stale is what it holds at Open.
	Marks StaleMarks
	Stale []string
}

// StaleMarks records, outside the node that writes a volume, which of its
// mirrors missed writes and are not resynchronised yet (the cluster map
// does: VolumeSpec.Stale), so that a node that opens the volume after the
// writer died does not read those mirrors as current.
type StaleMarks interface {
	SetStale(ctx context.Context, node string, stale bool) error
}

// marksTimeout bounds one StaleMarks call. A mark that cannot be recorded
// does not fail the write (the cluster may have lost its quorum while the
// mirrors still work); the resync loop tries again, and writes stop
// waiting for it for marksBackoff.
const (
	marksTimeout = 5 * time.Second
	marksBackoff = 30 * time.Second
)

// Volume is a mirrored block volume. It implements nbd.Device.
type Volume struct {
	cfg    Config
	spec   Spec
	key    string // spec.Key(): what replicas store the chunks under
	chunks int64
	shift  uint
	nodes  map[string]*mirror
	wrote  atomic.Bool                 // this volume has written: it is the writer
	owners []atomic.Pointer[[]*mirror] // per chunk, computed lazily
	locks  [256]sync.RWMutex           // chunk stripes: I/O shares, resync excludes

	umu      sync.Mutex
	unsynced map[int64]struct{}

	stale *staleStore

	cancel context.CancelFunc
	wg     sync.WaitGroup
	kick   chan struct{}
}

// asyncReplica is a Replica that can send a write and let the caller
// wait for it later, so that mirrors proceed in parallel without a
// goroutine per write.
type asyncReplica interface {
	writeAsync(ctx context.Context, vol string, chunk int64, p []byte, off int64, sync bool) (wait func() error)
}

// mirror is the Volume's view of one node.
type mirror struct {
	id       string
	r        Replica
	local    bool
	down     atomic.Bool
	failedAt atomic.Int64 // unix ns of the last failure
	inflight atomic.Int64

	markMu sync.Mutex   // serialises StaleMarks calls for the mirror
	shared atomic.Bool  // marked stale in StaleMarks
	noted  atomic.Bool  // its stale bits came from StaleMarks, not from this volume's writes
	markAt atomic.Int64 // unix ns of the last StaleMarks failure
}

var (
	_ nbd.Device          = (*Volume)(nil)
	_ nbd.MultiConnDevice = (*Volume)(nil)
	_ nbd.ExtentsDevice   = (*Volume)(nil)
)

// Open validates cfg, loads the persisted stale map and starts the
// background resync.
func Open(ctx context.Context, cfg Config) (*Volume, error) {
	cfg.Spec = cfg.Spec.WithDefaults()
	if err := cfg.Spec.Validate(); err != nil {
		return nil, err
	}
	if len(cfg.Nodes) < cfg.Spec.Copies {
		return nil, fmt.Errorf("%w: %d copies need as many nodes, have %d", ErrInvalidSpec, cfg.Spec.Copies, len(cfg.Nodes))
	}
	if cfg.StateDir == "" {
		return nil, errors.New("volume: Config.StateDir is required")
	}
	if cfg.OpTimeout <= 0 {
		cfg.OpTimeout = 10 * time.Second
	}
	if cfg.ProbeInterval <= 0 {
		cfg.ProbeInterval = 500 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	v := &Volume{
		cfg:      cfg,
		spec:     cfg.Spec,
		key:      cfg.Spec.Key(),
		chunks:   cfg.Spec.Chunks(),
		nodes:    map[string]*mirror{},
		unsynced: map[int64]struct{}{},
		kick:     make(chan struct{}, 1),
	}
	for s := cfg.Spec.ChunkSize; s > 1; s >>= 1 {
		v.shift++
	}
	v.owners = make([]atomic.Pointer[[]*mirror], v.chunks)
	for _, id := range cfg.Nodes {
		r, ok := cfg.Replicas[id]
		if !ok {
			return nil, fmt.Errorf("volume: no replica for node %q", id)
		}
		v.nodes[id] = &mirror{id: id, r: r, local: id == cfg.Self}
	}
	st, err := openStaleStore(cfg.StateDir, v.key, v.chunks)
	if err != nil {
		return nil, err
	}
	v.stale = st
	v.NoteStale(cfg.Stale)
	ctx, v.cancel = context.WithCancel(context.WithoutCancel(ctx))
	v.wg.Add(1)
	go v.resyncLoop(ctx)
	return v, nil
}

// Close stops the background resync.
func (v *Volume) Close() error {
	v.cancel()
	v.wg.Wait()
	return v.stale.save()
}

// Spec returns the volume's spec.
func (v *Volume) Spec() Spec { return v.spec }

// Size implements nbd.Device.
func (v *Volume) Size() int64 { return v.spec.Size }

// MultiConn implements nbd.MultiConnDevice: Flush syncs every chunk written
// through this Volume by any connection.
func (v *Volume) MultiConn() bool { return true }

// Owners returns the node IDs that hold chunk i, in HRW order.
func (v *Volume) Owners(i int64) []string {
	ms := v.ownersOf(i)
	ids := make([]string, len(ms))
	for k, m := range ms {
		ids[k] = m.id
	}
	return ids
}

// StaleChunks returns, per node, how many chunks it misses.
func (v *Volume) StaleChunks() map[string]int { return v.stale.counts() }

// Down returns the nodes currently considered failed.
func (v *Volume) Down() []string {
	var out []string
	for _, id := range v.cfg.Nodes {
		if v.nodes[id].down.Load() {
			out = append(out, id)
		}
	}
	return out
}

func (v *Volume) ownersOf(i int64) []*mirror {
	if o := v.owners[i].Load(); o != nil {
		return *o
	}
	ids := placement.Owners(v.cfg.Nodes, ChunkName(v.spec.Name, i), v.spec.Copies)
	o := make([]*mirror, len(ids))
	for k, id := range ids {
		o[k] = v.nodes[id]
	}
	v.owners[i].Store(&o)
	return o
}

// segment is the part of a request that falls in one chunk.
type segment struct {
	chunk, off, n, pos int64 // pos: offset in the request buffer
}

func (v *Volume) segments(off, n int64, f func(s segment) error) error {
	if off < 0 || n < 0 || off+n > v.spec.Size {
		return fmt.Errorf("%w: [%d, +%d) beyond %d", ErrOutOfRange, off, n, v.spec.Size)
	}
	pos := int64(0)
	for n > 0 {
		c := off >> v.shift
		co := off & (v.spec.ChunkSize - 1)
		k := min(n, v.spec.ChunkSize-co)
		if err := f(segment{c, co, k, pos}); err != nil {
			return err
		}
		off += k
		pos += k
		n -= k
	}
	return nil
}

func (v *Volume) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, v.cfg.OpTimeout)
}

// ReadAt implements nbd.Device.
func (v *Volume) ReadAt(ctx context.Context, p []byte, off int64) error {
	return v.segments(off, int64(len(p)), func(s segment) error {
		return v.readChunk(ctx, s.chunk, p[s.pos:s.pos+s.n], s.off)
	})
}

func (v *Volume) readChunk(ctx context.Context, chunk int64, p []byte, off int64) error {
	owners := v.ownersOf(chunk)
	tried := 0
	for {
		var best *mirror
		for _, m := range owners {
			if m.down.Load() || v.stale.isStale(m.id, chunk) {
				continue
			}
			if tried&(1<<indexOf(owners, m)) != 0 {
				continue
			}
			if best == nil || m.local && !best.local || m.local == best.local && m.inflight.Load() < best.inflight.Load() {
				best = m
			}
		}
		if best == nil {
			return fmt.Errorf("%w: chunk %d of %s", ErrNoMirror, chunk, v.spec.Name)
		}
		tried |= 1 << indexOf(owners, best)
		best.inflight.Add(1)
		err := best.r.ReadAt(ctx, v.key, chunk, p, off)
		best.inflight.Add(-1)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		v.fail(best, err)
	}
}

// extentsReplica is a replica that can tell holes from data (Local).
type extentsReplica interface {
	Extents(ctx context.Context, vol string, chunk, off, n int64) ([]nbd.Extent, error)
}

// Extents implements nbd.ExtentsDevice from the local mirror of each chunk
// when it is in sync (mirrors write, trim and punch the same ranges);
// chunks without one are reported as data, which is always correct.
func (v *Volume) Extents(ctx context.Context, off, n int64) ([]nbd.Extent, error) {
	var es []nbd.Extent
	err := v.segments(off, n, func(s segment) error {
		got := []nbd.Extent{{Length: s.n}}
		for _, m := range v.ownersOf(s.chunk) {
			er, ok := m.r.(extentsReplica)
			if !ok || !m.local || m.down.Load() || v.stale.isStale(m.id, s.chunk) {
				continue
			}
			var err error
			if got, err = er.Extents(ctx, v.key, s.chunk, s.off, s.n); err != nil {
				return err
			}
			break
		}
		for _, e := range got {
			es = nbd.AppendExtent(es, e)
		}
		return nil
	})
	return es, err
}

func indexOf(ms []*mirror, m *mirror) int {
	for i := range ms {
		if ms[i] == m {
			return i
		}
	}
	return 0
}

// fail marks m down; the probe loop brings it back.
func (v *Volume) fail(m *mirror, err error) {
	m.failedAt.Store(time.Now().UnixNano())
	if !m.down.Swap(true) {
		v.cfg.Logger.Warn("volume mirror failed", "volume", v.spec.Name, "node", m.id, "err", err)
	}
}

// mutate runs op on every live in-sync mirror of chunk in parallel and
// marks the others stale. It succeeds when at least one mirror applied op
// and every mirror that did not is recorded stale durably. Replicas that
// can send asynchronously (aop) are started first, without a goroutine;
// the last synchronous one runs inline.
func (v *Volume) mutate(ctx context.Context, chunk int64, op func(ctx context.Context, m *mirror) error, aop func(ctx context.Context, a asyncReplica) func() error) error {
	if !v.wrote.Load() {
		v.becomeWriter()
	}
	owners := v.ownersOf(chunk)
	lk := &v.locks[chunk&255]
	lk.RLock()
	defer lk.RUnlock()

	var errs [8]error
	var waits [8]func() error
	var wg sync.WaitGroup
	skipped := errors.New("skipped")
	last := -1
	for i, m := range owners {
		if m.down.Load() || v.stale.isStale(m.id, chunk) {
			errs[i] = skipped
			continue
		}
		m.inflight.Add(1)
		if a, ok := m.r.(asyncReplica); ok && aop != nil {
			waits[i] = aop(ctx, a)
			continue
		}
		if last >= 0 {
			wg.Add(1)
			go func(i int, m *mirror) { defer wg.Done(); errs[i] = op(ctx, m) }(last, owners[last])
		}
		last = i
	}
	if last >= 0 {
		errs[last] = op(ctx, owners[last])
	}
	for i, w := range waits {
		if w != nil {
			errs[i] = w()
		}
	}
	wg.Wait()
	for i, m := range owners {
		if errs[i] != skipped {
			m.inflight.Add(-1)
		}
	}

	ok := 0
	for i, m := range owners {
		if errs[i] == nil {
			ok++
		} else if errs[i] != skipped {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			v.fail(m, errs[i])
		}
	}
	if ok == 0 {
		// No mirror took it: none is newer than another, so none is
		// marked (that could leave the chunk without a good copy). The
		// mirrors' errors go with it (a full drive reaches the client as
		// ENOSPC).
		var failed []error
		for _, err := range errs[:len(owners)] {
			if err != skipped {
				failed = append(failed, err)
			}
		}
		if len(failed) == 0 {
			return fmt.Errorf("%w: chunk %d of %s", ErrNoMirror, chunk, v.spec.Name)
		}
		return fmt.Errorf("%w: chunk %d of %s: %w", ErrNoMirror, chunk, v.spec.Name, errors.Join(failed...))
	}
	marked := 0
	for i, m := range owners {
		if errs[i] != nil && v.stale.mark(m.id, chunk) {
			marked |= 1 << i
		}
	}
	if marked != 0 {
		if err := v.stale.save(); err != nil {
			return fmt.Errorf("volume: persisting the stale map: %w", err)
		}
		for i, m := range owners {
			if marked&(1<<i) != 0 && time.Since(time.Unix(0, m.markAt.Load())) > marksBackoff {
				v.record(ctx, m)
			}
		}
		v.poke()
	}
	return nil
}

func (v *Volume) noteUnsynced(chunk int64) {
	v.umu.Lock()
	v.unsynced[chunk] = struct{}{}
	v.umu.Unlock()
}

// WriteAt implements nbd.Device.
func (v *Volume) WriteAt(ctx context.Context, p []byte, off int64, fua bool) error {
	return v.segments(off, int64(len(p)), func(s segment) error {
		b := p[s.pos : s.pos+s.n]
		err := v.mutate(ctx, s.chunk, func(ctx context.Context, m *mirror) error {
			return m.r.WriteAt(ctx, v.key, s.chunk, b, s.off, fua)
		}, func(ctx context.Context, a asyncReplica) func() error {
			return a.writeAsync(ctx, v.key, s.chunk, b, s.off, fua)
		})
		if err == nil && !fua {
			v.noteUnsynced(s.chunk)
		}
		return err
	})
}

// Trim implements nbd.Device.
func (v *Volume) Trim(ctx context.Context, off, n int64) error {
	return v.zero(ctx, off, n, false, true)
}

// WriteZeroes implements nbd.Device.
func (v *Volume) WriteZeroes(ctx context.Context, off, n int64, fua, noHole bool) error {
	return v.zero(ctx, off, n, fua, !noHole)
}

func (v *Volume) zero(ctx context.Context, off, n int64, fua, punch bool) error {
	return v.segments(off, n, func(s segment) error {
		err := v.mutate(ctx, s.chunk, func(ctx context.Context, m *mirror) error {
			if err := m.r.Zero(ctx, v.key, s.chunk, s.off, s.n, punch); err != nil {
				return err
			}
			if fua {
				return m.r.Sync(ctx, v.key, []int64{s.chunk})
			}
			return nil
		}, nil)
		if err == nil && !fua {
			v.noteUnsynced(s.chunk)
		}
		return err
	})
}

// Flush implements nbd.Device: every chunk written since the last flush is
// synced on every mirror that holds it.
func (v *Volume) Flush(ctx context.Context) error {
	v.umu.Lock()
	pending := v.unsynced
	v.unsynced = map[int64]struct{}{}
	v.umu.Unlock()
	if len(pending) == 0 {
		return nil
	}
	per := map[*mirror][]int64{}
	for c := range pending {
		for _, m := range v.ownersOf(c) {
			if !m.down.Load() && !v.stale.isStale(m.id, c) {
				per[m] = append(per[m], c)
			}
		}
	}
	var mu sync.Mutex
	failed := map[*mirror]bool{}
	var wg sync.WaitGroup
	for m, cs := range per {
		wg.Add(1)
		go func() {
			defer wg.Done()
			octx, cancel := v.opCtx(ctx)
			defer cancel()
			if err := m.r.Sync(octx, v.key, cs); err != nil {
				v.fail(m, err)
				mu.Lock()
				failed[m] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(failed) == 0 {
		return nil
	}
	// Chunks a failed mirror could not make durable are stale there; the
	// flush fails only for chunks no mirror made durable.
	var lost error
	for c := range pending {
		good := 0
		for _, m := range v.ownersOf(c) {
			if failed[m] {
				v.stale.mark(m.id, c)
			} else if !m.down.Load() && !v.stale.isStale(m.id, c) {
				good++
			}
		}
		if good == 0 {
			lost = fmt.Errorf("%w: chunk %d of %s", ErrNoMirror, c, v.spec.Name)
		}
	}
	if err := v.stale.save(); err != nil {
		return err
	}
	v.poke()
	return lost
}

func (v *Volume) poke() {
	select {
	case v.kick <- struct{}{}:
	default:
	}
}

// resyncLoop probes failed mirrors and copies stale chunks back to the
// mirrors that are up again.
func (v *Volume) resyncLoop(ctx context.Context) {
	defer v.wg.Done()
	t := time.NewTicker(v.cfg.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-v.kick:
		}
		for _, id := range v.cfg.Nodes {
			m := v.nodes[id]
			if m.down.Load() {
				// A write that hung on the failed mirror may still land
				// there; wait out the replica timeout before copying over it.
				if time.Since(time.Unix(0, m.failedAt.Load())) < v.cfg.OpTimeout {
					continue
				}
				pctx, cancel := v.opCtx(ctx)
				err := m.r.Ping(pctx)
				cancel()
				if err != nil {
					continue
				}
				v.cfg.Logger.Info("volume mirror is back", "volume", v.spec.Name, "node", id)
				m.down.Store(false)
			}
			if m.noted.Load() {
				continue // the writer resynchronises it
			}
			if err := v.resyncNode(ctx, m); err != nil && ctx.Err() == nil {
				v.fail(m, err)
				continue
			}
			v.record(ctx, m)
		}
	}
}

// record brings m's mark in StaleMarks in line with its stale chunks: set
// while it misses any, cleared once it has caught up (marks noted from
// StaleMarks are the writer's to clear).
func (v *Volume) record(ctx context.Context, m *mirror) {
	if v.cfg.Marks == nil || m.shared.Load() == (v.stale.count(m.id) != 0) {
		return
	}
	m.markMu.Lock()
	defer m.markMu.Unlock()
	stale := v.stale.count(m.id) != 0
	if m.shared.Load() == stale || m.noted.Load() {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, marksTimeout)
	defer cancel()
	if err := v.cfg.Marks.SetStale(cctx, m.id, stale); err != nil {
		m.markAt.Store(time.Now().UnixNano())
		v.cfg.Logger.Warn("could not record a mirror's state in the cluster; will try again", "volume", v.spec.Name, "node", m.id, "stale", stale, "err", err)
		return
	}
	m.shared.Store(stale)
	if !stale {
		v.cfg.Logger.Info("volume mirror resynchronised", "volume", v.spec.Name, "node", m.id)
	}
}

// NoteStale tells the volume which mirrors StaleMarks lists. A listed
// mirror this volume has no marks for missed the writes of another node
// (a writer that died): every chunk of it is treated as stale, so reads
// avoid it, and it is resynchronised once this volume writes (it is the
// writer then). Such noted marks go when the list drops the mirror.
func (v *Volume) NoteStale(nodes []string) {
	for id, m := range v.nodes {
		listed := slices.Contains(nodes, id)
		m.markMu.Lock()
		switch {
		case listed && !m.shared.Load():
			m.shared.Store(true)
			if v.stale.count(id) == 0 {
				noted := !v.wrote.Load()
				v.stale.markAll(id, noted)
				m.noted.Store(noted)
				v.cfg.Logger.Warn("a mirror missed writes made through another node: not read until resynchronised",
					"volume", v.spec.Name, "node", id)
				v.poke()
			}
		case !listed && m.shared.Load() && m.noted.Load():
			v.stale.clearAll(id)
			m.noted.Store(false)
			m.shared.Store(false)
		}
		m.markMu.Unlock()
	}
}

// becomeWriter makes the marks this volume noted its own: it resynchronises
// those mirrors from now on.
func (v *Volume) becomeWriter() {
	if v.wrote.Swap(true) {
		return
	}
	for id, m := range v.nodes {
		m.markMu.Lock()
		if m.noted.Swap(false) {
			v.stale.keep(id)
		}
		m.markMu.Unlock()
	}
	if err := v.stale.save(); err != nil {
		v.cfg.Logger.Warn("saving the stale map", "volume", v.spec.Name, "err", err)
	}
	v.poke()
}

// resyncNode copies every chunk m misses from an in-sync mirror.
func (v *Volume) resyncNode(ctx context.Context, m *mirror) error {
	chunks := v.stale.list(m.id)
	if len(chunks) == 0 {
		return nil
	}
	buf := make([]byte, min(v.spec.ChunkSize, 1<<20))
	for _, c := range chunks {
		if ctx.Err() != nil || m.down.Load() {
			return ctx.Err()
		}
		if err := v.resyncChunk(ctx, m, c, buf); err != nil {
			return err
		}
	}
	return v.stale.save()
}

func (v *Volume) resyncChunk(ctx context.Context, dst *mirror, c int64, buf []byte) error {
	lk := &v.locks[c&255]
	lk.Lock()
	defer lk.Unlock()
	var src *mirror
	for _, m := range v.ownersOf(c) {
		if m != dst && !m.down.Load() && !v.stale.isStale(m.id, c) {
			if src == nil || m.local {
				src = m
			}
		}
	}
	if src == nil {
		return nil // no good copy reachable now; try again later
	}
	size := min(v.spec.ChunkSize, v.spec.Size-c*v.spec.ChunkSize)
	for off := int64(0); off < size; off += int64(len(buf)) {
		b := buf[:min(int64(len(buf)), size-off)]
		octx, cancel := v.opCtx(ctx)
		err := src.r.ReadAt(octx, v.key, c, b, off)
		cancel()
		if err != nil {
			v.fail(src, err)
			return nil
		}
		octx, cancel = v.opCtx(ctx)
		if allZero(b) {
			err = dst.r.Zero(octx, v.key, c, off, int64(len(b)), true)
		} else {
			err = dst.r.WriteAt(octx, v.key, c, b, off, false)
		}
		cancel()
		if err != nil {
			return err
		}
	}
	octx, cancel := v.opCtx(ctx)
	defer cancel()
	if err := dst.r.Sync(octx, v.key, []int64{c}); err != nil {
		return err
	}
	v.stale.clear(dst.id, c)
	return nil
}

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if b[0]|b[1]|b[2]|b[3]|b[4]|b[5]|b[6]|b[7] != 0 {
			return false
		}
		b = b[8:]
	}
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}
