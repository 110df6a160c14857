package volume

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
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
	// Prev, while a re-placement is not complete, is the node set the
	// chunks were placed on before (see move.go); nil: none.
	Prev []string
	// Copied, with Prev, says the map records the re-placement's copies
	// made (see move.go).
	Copied bool
	// Placed, if set, ends a re-placement: this node, writing under the
	// claim of epoch, has copied every chunk to its owners among nodes.
	// Chunks lost (see settleOrphan) are listed in lost.
	Placed func(ctx context.Context, nodes []string, epoch uint64, lost []int64) error
	// Settle, if set, ends a re-placement whose copies the map records
	// made (Copied) for this node, writing under the claim of epoch,
	// once no node reads the owners it takes chunks off any more (it
	// fails while that is not known); this node then stops writing them.
	// Without it, the next change of the set ends the re-placement.
	Settle func(ctx context.Context, nodes []string, epoch uint64) error
	// Lost lists, sorted, the chunks lost at Open (see NoteLost).
	Lost []int64
	// CopyWorkers is how many chunks a re-placement copies at a time.
	// Default 4.
	CopyWorkers int
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
	// writes (see StaleMarks); Stale is what it holds at Open: for each
	// stale mirror, the writers whose writes it missed.
	Marks StaleMarks
	Stale map[string][]string
	// Claims, if set, grants this node the right to write the volume
	// before it does (see fence.go); Writer and Epoch are the claim the
	// cluster holds at Open (Writer "" if none).
	Claims Claims
	Writer string
	Epoch  uint64
	// Forward, if set with Claims, sends a client's writes to the node
	// that holds the claim while that node's own clients write the
	// volume (see forward.go), so that clients writing through two nodes
	// at once share one claim instead of taking it from each other.
	Forward Forwarder
	// HoldIdle is how long after its own clients' last write the claim's
	// holder still takes forwarded writes; after that a node that
	// forwards claims the volume itself. Default 1s.
	HoldIdle time.Duration
	// MapVersion, if set, returns the version of the cluster map this
	// node has applied; a mark recorded through Marks is in it once the
	// call returns. The holder of the claim answers forwarded ops with
	// the version holding its marks, and the forwarding node reads once
	// it has noted that map (NoteVersion; see marksver.go).
	MapVersion func() uint64
}

// Claims grants one node at a time the right to write a volume (the
// cluster map does: VolumeSpec.Writer and Epoch).
type Claims interface {
	// Claim makes this node the volume's writer, taking it from the
	// claim of epoch from (the latest this node knows; 0: none), and
	// returns its epoch: the one it holds if it is the writer already,
	// else one higher than any granted before. If another node holds a
	// claim newer than from, it fails with ErrFenced and changes nothing:
	// two nodes that decide to claim at once do not take the volume from
	// each other in turn.
	Claim(ctx context.Context, from uint64) (uint64, error)
}

// StaleMarks records, outside the nodes that write a volume, which of its
// mirrors missed writes made through which writer and are not
// resynchronised yet (the cluster map does: VolumeSpec.StaleBy), so that
// no other node reads those mirrors as current: only the writer knows
// which chunks they miss, and it may die.
type StaleMarks interface {
	// SetStale records whether mirror misses writes made through this
	// node.
	SetStale(ctx context.Context, mirror string, stale bool) error
	// ClearCovered clears the marks writers left on mirror, which this
	// node has resynchronised in full since it saw them, in a resync that
	// began while it held the claim of epoch (0 without Claims). A writer
	// that may still write keeps its mark: it may have missed more since,
	// and it clears its mark itself. So does every writer if the volume
	// was claimed again since epoch: the claim's new holder may have
	// missed writes on the mirror that the resync did not copy.
	ClearCovered(ctx context.Context, mirror string, writers []string, epoch uint64) error
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
	cfg      Config
	spec     Spec   // its Size is that at Open; size is the current one
	key      string // spec.Key(): what replicas store the chunks under
	size     atomic.Int64
	shift    uint
	nodes    atomic.Pointer[map[string]*mirror]          // every node of Config.Nodes and Prev, and those added since (AddMirrors); never changed, replaced
	set      atomic.Pointer[[]string]                    // the nodes chunks are placed on now
	mv       atomic.Pointer[moveState]                   // a re-placement in progress; nil: none
	lost     atomic.Pointer[[]int64]                     // chunks the map lists as lost (NoteLost)
	wrote    atomic.Bool                                 // this volume has written: it is the writer
	epoch    atomic.Uint64                               // the writer epoch this node holds; 0: none
	other    atomic.Bool                                 // another node has claimed the volume since this one did
	holder   atomic.Pointer[claimHolder]                 // the latest claim the map showed
	own      atomic.Int64                                // this node's clients' writes and flushes in flight
	ownAt    atomic.Int64                                // unix ns of the end of their last write
	fwd      forwarded                                   // writes forwarded and not flushed yet
	applyMu  sync.Mutex                                  // orders Apply's refusals with the ops it admits
	applying atomic.Int64                                // forwarded ops being applied
	handoff  atomic.Pointer[claimHolder]                 // set by a refusal: the claim the next own write waits to see replaced
	sent     atomic.Int64                                // ops forwarded to the holder
	applied  atomic.Int64                                // forwarded ops applied here
	marksVer atomic.Uint64                               // a map version holding every mark this node recorded or noted
	marksNew atomic.Bool                                 // NoteStale saw marks new to it since the last NoteVersion
	needVer  atomic.Uint64                               // the highest marksVer the holders answered this node's forwarded ops with
	noted    versionWait                                 // the version of the last map noted (NoteVersion)
	claimMu  sync.Mutex                                  // serialises claims
	owners   atomic.Pointer[[]atomic.Pointer[[]*mirror]] // per chunk, computed lazily
	locks    [256]sync.RWMutex                           // chunk stripes: I/O shares, resync excludes
	growMu   sync.Mutex                                  // serialises Grow and NotePlacement

	umu      sync.Mutex
	unsynced map[int64]uint64 // chunk -> generation of its last write not known durable
	ugen     uint64
	flushing chan struct{} // held by the running Flush (capacity 1)

	stale *staleStore

	cancel context.CancelFunc
	wg     sync.WaitGroup
	kick   chan struct{}
	// moveKick wakes moveLoop (see poke).
	moveKick chan struct{}
}

// asyncReplica is a Replica that can send a write and let the caller
// wait for it later, so that mirrors proceed in parallel without a
// goroutine per write.
type asyncReplica interface {
	writeAsync(ctx context.Context, vol string, epoch uint64, chunk int64, p []byte, off int64, sync bool) (wait func() error)
}

// mirror is the Volume's view of one node.
type mirror struct {
	id       string
	r        Replica
	local    bool
	down     atomic.Bool
	failedAt atomic.Int64 // unix ns of the last failure
	// quick: the last failure sent nothing the node could still apply
	// (it refused the connection, or a new boot ID answered the dial), so
	// the mirror is probed again at once rather than after OpTimeout.
	quick atomic.Bool
	// slow: the last failure was a call that timed out (the node may be
	// hung): a read or write does not wait on it again inline.
	slow     atomic.Bool
	reviveMu sync.Mutex // serialises revive
	inflight atomic.Int64

	markMu sync.Mutex   // serialises StaleMarks calls for the mirror
	busy   atomic.Bool  // a record holding markMu may change shared
	shared atomic.Bool  // marked stale in StaleMarks by this node
	listed atomic.Bool  // the last marks seen list this node's mark on it
	noted  atomic.Bool  // its stale bits came from other writers' marks, not from this volume's writes
	markAt atomic.Int64 // unix ns of the last StaleMarks failure
	others []string     // other writers StaleMarks lists for it, every chunk marked since (under markMu)
	covers atomic.Bool  // others is not empty
	// coverEpoch is the claim this volume held when it marked every chunk
	// for others (under markMu): the full resync covers their marks only
	// if the volume was not claimed again since.
	coverEpoch uint64

	// lost: the local mirror lost its chunks (lostReplica), every chunk
	// is stale until it is resynchronised in full. lostMarked: its own
	// mark for it was made; lostSeen: the marks seen since list it.
	// lostVer: a map version holding the mark this volume made (0:
	// unknown): a map that new without it shows it cleared, even when
	// no map listing it was noted (the map's watcher skips versions).
	lost, lostMarked, lostSeen atomic.Bool
	lostVer                    atomic.Uint64
	// selfMarked: the marks list the mirror's own node for it (it lost
	// its chunks): never a source of last resort (rescue).
	selfMarked atomic.Bool
	// gone: the node is no longer a member of the cluster (NoteGone).
	gone atomic.Bool
}

// lostReplica is a replica that notices when its chunks of a volume are
// gone (Local, see ident.go).
type lostReplica interface {
	Lost(vol string) (bool, error)
	Repaired(vol string) error
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
	if cfg.HoldIdle <= 0 {
		cfg.HoldIdle = time.Second
	}
	if cfg.CopyWorkers <= 0 {
		cfg.CopyWorkers = 4
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	v := &Volume{
		cfg:      cfg,
		spec:     cfg.Spec,
		key:      cfg.Spec.Key(),
		unsynced: map[int64]uint64{},
		flushing: make(chan struct{}, 1),
		kick:     make(chan struct{}, 1),
		moveKick: make(chan struct{}, 1),
	}
	for s := cfg.Spec.ChunkSize; s > 1; s >>= 1 {
		v.shift++
	}
	v.size.Store(cfg.Spec.Size)
	owners := make([]atomic.Pointer[[]*mirror], cfg.Spec.Chunks())
	v.owners.Store(&owners)
	mirrors := map[string]*mirror{}
	for _, id := range cfg.Nodes {
		r, ok := cfg.Replicas[id]
		if !ok {
			return nil, fmt.Errorf("volume: no replica for node %q", id)
		}
		mirrors[id] = &mirror{id: id, r: r, local: id == cfg.Self}
	}
	for _, id := range cfg.Prev {
		// A node drained out of the set is written until the
		// re-placement ends (one removed has no replica, or is gone).
		if r, ok := cfg.Replicas[id]; ok && mirrors[id] == nil {
			mirrors[id] = &mirror{id: id, r: r, local: id == cfg.Self}
		}
	}
	v.nodes.Store(&mirrors)
	nodes := slices.Clone(cfg.Nodes)
	v.set.Store(&nodes)
	v.NoteLost(cfg.Lost)
	if cfg.Prev != nil {
		v.mv.Store(v.newMove(cfg.Prev, nodes, cfg.Copied, cfg.Spec.Chunks()))
	}
	st, err := openStaleStore(cfg.StateDir, v.key, cfg.Spec.Chunks())
	if err != nil {
		return nil, err
	}
	v.stale = st
	if cfg.Claims != nil && cfg.Writer != "" {
		v.holder.Store(&claimHolder{node: cfg.Writer, epoch: cfg.Epoch})
		if cfg.Writer == cfg.Self {
			v.epoch.Store(cfg.Epoch)
		} else {
			v.other.Store(true)
		}
	}
	for _, m := range v.mirrors() {
		lr, ok := m.r.(lostReplica)
		if !m.local || !ok {
			continue
		}
		lost, err := lr.Lost(v.key)
		if err != nil {
			return nil, err
		}
		if lost {
			// Every chunk is stale, saved, and marked in StaleMarks (by
			// the resync loop) as missed through this node: the others
			// read another mirror and resynchronise this one in full.
			m.lost.Store(true)
			v.stale.markAll(m.id, false)
			if err := v.stale.save(); err != nil {
				return nil, err
			}
			cfg.Logger.Warn("this node lost its chunks of the volume (drive replaced or wiped): not read until resynchronised",
				"volume", cfg.Spec.Name, "mirror", m.id)
		}
	}
	v.noteStale(cfg.Stale, true, 0)
	if len(cfg.Stale) > 0 {
		v.noteMarked()
	}
	ctx, v.cancel = context.WithCancel(context.WithoutCancel(ctx))
	v.wg.Add(1)
	go v.resyncLoop(ctx)
	v.wg.Add(1)
	go v.moveLoop(ctx)
	return v, nil
}

// Close stops the background resync.
func (v *Volume) Close() error {
	v.cancel()
	v.wg.Wait()
	return v.stale.save()
}

// Spec returns the volume's spec.
func (v *Volume) Spec() Spec {
	s := v.spec
	s.Size = v.size.Load()
	return s
}

// Size implements nbd.Device.
func (v *Volume) Size() int64 { return v.size.Load() }

// Grow resizes the volume in place to size, which may not be smaller than
// it is. Connections opened before keep working on the size they know
// (their chunks are the same), and the stale maps and unsynced writes
// stay those of the one Volume. The new chunks of a mirror StaleMarks
// lists as stale are stale too: another writer may have written them
// after an earlier resize (as a mirror noted from StaleMarks, every chunk
// is).
func (v *Volume) Grow(size int64) error {
	v.growMu.Lock()
	defer v.growMu.Unlock()
	cur := v.size.Load()
	if size == cur {
		return nil
	}
	spec := v.Spec()
	spec.Size = size
	if err := spec.Validate(); err != nil {
		return err
	}
	if size < cur {
		return fmt.Errorf("%w: volume %s can only grow (%d < %d)", ErrInvalidSpec, v.spec.Name, size, cur)
	}
	from := (cur + v.spec.ChunkSize - 1) >> v.shift
	chunks := spec.Chunks()
	// Everything a chunk beyond the old size needs is in place before the
	// size that makes it reachable is published, the owners table before
	// any mark that wakes the resync loop on the new chunks.
	old := *v.owners.Load()
	owners := make([]atomic.Pointer[[]*mirror], chunks)
	for i := range old {
		owners[i].Store(old[i].Load())
	}
	v.owners.Store(&owners)
	v.stale.grow(chunks)
	v.growMove(chunks)
	marked := false
	for _, id := range v.mirrorIDs() {
		m := v.mirrors()[id]
		m.markMu.Lock()
		if m.shared.Load() || len(m.others) > 0 {
			for c := from; c < chunks; c++ {
				v.stale.mark(id, c)
			}
			marked = true
		}
		m.markMu.Unlock()
	}
	if marked {
		if err := v.stale.marksSaved(); err != nil {
			return fmt.Errorf("volume: persisting the stale map: %w", err)
		}
		v.poke()
	}
	v.size.Store(size)
	v.cfg.Logger.Info("volume resized", "volume", v.spec.Name, "size", size)
	return nil
}

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
	for _, id := range v.mirrorIDs() {
		if v.mirrors()[id].down.Load() {
			out = append(out, id)
		}
	}
	return out
}

func (v *Volume) ownersOf(i int64) []*mirror {
	slot := &(*v.owners.Load())[i]
	if o := slot.Load(); o != nil {
		return *o
	}
	// The node set is read after the table: a table NotePlacement has
	// replaced only ever gets owners of the set before.
	ids := placement.Owners(v.nodeIDs(), ChunkName(v.spec.Name, i), v.spec.Copies)
	o := make([]*mirror, len(ids))
	for k, id := range ids {
		o[k] = v.mirrors()[id]
	}
	slot.Store(&o)
	return o
}

// segment is the part of a request that falls in one chunk.
type segment struct {
	chunk, off, n, pos int64 // pos: offset in the request buffer
}

func (v *Volume) segments(off, n int64, f func(s segment) error) error {
	if size := v.size.Load(); off < 0 || n < 0 || off+n > size {
		return fmt.Errorf("%w: [%d, +%d) beyond %d", ErrOutOfRange, off, n, size)
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
	if err := v.awaitMarks(ctx); err != nil {
		return err
	}
	return v.segments(off, int64(len(p)), func(s segment) error {
		return v.readChunk(ctx, s.chunk, p[s.pos:s.pos+s.n], s.off)
	})
}

func (v *Volume) readChunk(ctx context.Context, chunk int64, p []byte, off int64) error {
	if v.chunkLost(chunk) {
		return v.errLost(chunk)
	}
	owners := v.readers(chunk)
	tried, revived := 0, 0
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
			// A mirror that failed only because its node restarted or
			// was not listening may answer again by now: bring it back
			// rather than fail the read (once per read).
			if back := v.reviveQuick(ctx, owners, chunk, &revived); back != 0 {
				tried &^= back
				continue
			}
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
	if err := v.awaitMarks(ctx); err != nil {
		return nil, err
	}
	var es []nbd.Extent
	err := v.segments(off, n, func(s segment) error {
		got := []nbd.Extent{{Length: s.n}}
		if v.chunkLost(s.chunk) {
			// As data, so that a client reads it and learns of the loss.
			es = nbd.AppendExtent(es, got[0])
			return nil
		}
		for _, m := range v.readers(s.chunk) {
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

// fail marks m down; the probe loop brings it back (see quickFailure).
func (v *Volume) fail(m *mirror, err error) {
	quick := quickFailure(err)
	m.failedAt.Store(time.Now().UnixNano())
	m.quick.Store(quick)
	m.slow.Store(errors.Is(err, ErrTimeout) || errors.Is(err, context.DeadlineExceeded))
	if !m.down.Swap(true) {
		v.cfg.Logger.Warn("volume mirror failed", "volume", v.spec.Name, "mirror", m.id, "err", err)
	}
	if quick {
		v.poke()
	}
}

// quickFailure reports whether err failed a call before the node could
// apply any of it, in a way that says the node may well answer the next
// call: it refused the connection (it is restarting), or it answered the
// dial with a new boot ID (it restarted; what it had not synced is marked
// stale when the mirror comes back). Such a mirror is probed again at
// once; after any other failure (a call timed out or broke off, and may
// still be applied) it is probed again only after OpTimeout.
func quickFailure(err error) bool {
	return errors.Is(err, ErrReplicaRestarted) || errors.Is(err, syscall.ECONNREFUSED)
}

// reviveQuick tries to bring back the owners of chunk that are down and
// in sync for the chunk, after a failure that was not a timeout (a quick
// one, or a connection that broke: its node died and may have restarted,
// which the revive's probe finds out), skipping those whose bit (by owner
// index) is set in *done and setting the bits of those it tries. It
// returns the bits of those that are back, counting those that are up
// already: a caller tried them and failed them, so the probe loop has
// brought them back since. Bringing one back inline is
// safe for reads and writes: a chunk it may have missed a write to is
// stale on it and skipped, and the resync of such a chunk still waits
// OpTimeout after the failure (a write sent before it may still land).
func (v *Volume) reviveQuick(ctx context.Context, owners []*mirror, chunk int64, done *int) int {
	back := 0
	for i, m := range owners {
		if *done&(1<<i) != 0 || v.stale.isStale(m.id, chunk) {
			continue
		}
		if !m.down.Load() {
			*done |= 1 << i
			back |= 1 << i
			continue
		}
		if !m.quick.Load() && m.slow.Load() {
			continue
		}
		*done |= 1 << i
		if v.revive(ctx, m) {
			back |= 1 << i
		}
	}
	return back
}

// revive brings m, a failed mirror, back if its node answers: before it
// is used again, it is fenced at this node's claim (a claim it may have
// missed) and marked stale for every chunk with writes it may have lost
// (markUnsynced). A node found restarted by the probe counts as
// answering: what it lost is what markUnsynced marks. It reports whether
// m is up.
func (v *Volume) revive(ctx context.Context, m *mirror) bool {
	m.reviveMu.Lock()
	defer m.reviveMu.Unlock()
	if !m.down.Load() {
		return true
	}
	pctx, cancel := v.opCtx(ctx)
	err := m.r.Ping(pctx)
	if errors.Is(err, ErrReplicaRestarted) {
		err = nil
	}
	if ep := v.epoch.Load(); err == nil && ep != 0 {
		// Fenced before it is used again: it may have missed the
		// announce of this node's claim.
		if err = m.r.Fence(pctx, v.key, ep); errors.Is(err, ErrFenced) {
			v.lose(ep)
		}
	}
	cancel()
	if err != nil {
		return false
	}
	if err := v.markUnsynced(ctx, m); err != nil {
		v.cfg.Logger.Warn("saving the stale map", "volume", v.spec.Name, "err", err)
		return false
	}
	v.cfg.Logger.Info("volume mirror is back", "volume", v.spec.Name, "mirror", m.id)
	m.down.Store(false)
	return true
}

// mutate runs op on every live in-sync mirror of chunk in parallel and
// marks the others stale. It succeeds when at least one mirror applied op
// and every mirror that did not is recorded stale durably. Replicas that
// can send asynchronously (aop) are started first, without a goroutine;
// the last synchronous one runs inline.
func (v *Volume) mutate(ctx context.Context, claim claimFrom, chunk int64, op func(ctx context.Context, ep uint64, m *mirror) error, aop func(ctx context.Context, ep uint64, a asyncReplica) func() error) error {
	if !v.writer() {
		if !claim.ok {
			return fmt.Errorf("%w: %s", ErrNotWriter, v.spec.Name)
		}
		if err := v.becomeWriter(ctx, claim.epoch); err != nil {
			return err
		}
	}
	ep := v.epoch.Load()
	owners := v.current(chunk)
	live := false
	for _, m := range owners {
		live = live || !m.down.Load() && !v.stale.isStale(m.id, chunk)
	}
	if !live {
		// As a read: a mirror whose node restarted may answer again.
		var done int
		v.reviveQuick(ctx, owners, chunk, &done)
	}
	lk := &v.locks[chunk&255]
	lk.RLock()
	defer lk.RUnlock()
	// A newcomer of a re-placement misses the write with the rest of the
	// chunk, which is copied to it later under the chunk's lock; taken
	// again under the lock, the owners include it once it is copied.
	owners = v.current(chunk)
	if v.chunkLost(chunk) {
		// Checked under the lock: a chunk found lost meanwhile has
		// given its newcomers empty copies.
		return v.errLost(chunk)
	}

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
			waits[i] = aop(ctx, ep, a)
			continue
		}
		if last >= 0 {
			wg.Add(1)
			go func(i int, m *mirror) { defer wg.Done(); errs[i] = op(ctx, ep, m) }(last, owners[last])
		}
		last = i
	}
	if last >= 0 {
		errs[last] = op(ctx, ep, owners[last])
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

	ok, fenced := 0, false
	for i := range owners {
		if errs[i] == nil {
			ok++
		}
		fenced = fenced || errs[i] != skipped && errors.Is(errs[i], ErrFenced)
	}
	if fenced {
		return v.fenced(ctx, ep, chunk, owners, errs[:len(owners)])
	}
	if ctx.Err() != nil {
		// Not acknowledged, but the mirrors may now differ: those that
		// did not finish it are marked (without waiting for the marks to
		// be saved), so that a resync makes them agree again. They are
		// failed too: the call may still land there (a remote node
		// applies what it was sent), and the resync waits out the
		// replica timeout before it copies over it.
		if ok == 0 {
			v.markDiverged(ctx, chunk, owners, errs[:len(owners)], skipped)
			return ctx.Err()
		}
		newly := false
		for i, m := range owners {
			if errs[i] != nil && errs[i] != skipped {
				newly = v.stale.mark(m.id, chunk) || newly
				v.fail(m, errs[i])
			}
		}
		if newly {
			v.poke()
		}
		return ctx.Err()
	}
	for i, m := range owners {
		if errs[i] != nil && errs[i] != skipped {
			v.fail(m, errs[i])
		}
	}
	if ok == 0 {
		// No mirror took it, but a call that timed out may still land:
		// those are marked (markDiverged). The mirrors' errors go with it
		// (a full drive reaches the client as ENOSPC).
		v.markDiverged(ctx, chunk, owners, errs[:len(owners)], skipped)
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
	// Every mirror that missed op is marked, and op is acknowledged only
	// once the marks are durable, also when another write set the bit and
	// is still saving or recording it.
	var missed [8]*mirror
	n, newly := 0, false
	for i, m := range owners {
		if errs[i] != nil {
			newly = v.stale.mark(m.id, chunk) || newly
			missed[n] = m
			n++
		}
	}
	if n != 0 {
		if newly {
			v.poke()
		}
		return v.marksDurable(ctx, missed[:n]...)
	}
	return nil
}

// markDiverged follows a mutation of chunk that no mirror took (errs by
// owner; skipped: not tried). A mirror that answered with an error, or
// could not be reached, applied none of it; one whose call timed out or
// broke off may have applied it, or may still (mayLand). Left alone, such
// mirrors would serve the write nobody acknowledged while the others
// serve the data before it, and readers through different nodes would
// disagree for good. So the mirrors it may land on are marked and failed,
// and the resync, which waits out the replica timeout, copies a mirror
// that did not take it over them. When the write may land on every mirror
// tried, the first of those is kept and every other owner is marked:
// all then agree on the kept one. The marks are saved and recorded in
// StaleMarks before the error returns, as for a write that some mirror
// took, so that readers through other nodes pass those mirrors over too.
func (v *Volume) markDiverged(ctx context.Context, chunk int64, owners []*mirror, errs []error, skipped error) {
	keep, landing, definite := -1, 0, 0
	for i, err := range errs {
		switch {
		case err == skipped:
		case mayLand(err):
			landing++
			if keep < 0 {
				keep = i
			}
		default:
			definite++
		}
	}
	if landing == 0 {
		return
	}
	var marked [8]*mirror
	n, newly := 0, false
	for i, m := range owners {
		landed := errs[i] != skipped && mayLand(errs[i])
		if definite > 0 && !landed || definite == 0 && i == keep {
			continue // keeps what it had
		}
		if errs[i] == skipped && v.stale.isStale(m.id, chunk) {
			continue
		}
		newly = v.stale.mark(m.id, chunk) || newly
		if errs[i] != skipped {
			v.fail(m, errs[i])
		}
		marked[n] = m
		n++
	}
	if n == 0 {
		return
	}
	if newly {
		v.poke()
	}
	if err := v.marksDurable(context.WithoutCancel(ctx), marked[:n]...); err != nil {
		v.cfg.Logger.Warn("marking the mirrors a failed write may still land on", "volume", v.spec.Name, "chunk", chunk, "err", err)
	}
}

// mayLand reports whether a call that failed with err may have been
// applied by its mirror, or be applied later: it timed out, its context
// ended, or its connection broke off before the answer. A refused
// connection or a restarted node (quickFailure), an error answer, or a
// local write that failed applied none of it.
func mayLand(err error) bool {
	if quickFailure(err) {
		return false
	}
	if errors.Is(err, ErrTimeout) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	// A connection that broke off; not one that was never made (a dial
	// sends nothing), nor a local drive's error (syscall.Errno is a
	// net.Error too).
	var oe *net.OpError
	if errors.As(err, &oe) {
		return oe.Op != "dial"
	}
	return errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// fenced ends a mutation of chunk that a mirror refused because another
// node claimed the volume (at a higher epoch than ep): this node stops
// writing the volume, and the mutation is not acknowledged. The mirrors
// that took it now differ from those that refused it, which hold the new
// writer's data: the ones that took it are marked (as this node's), so
// that the new writer, seeing the mark, copies them over from the others.
func (v *Volume) fenced(ctx context.Context, ep uint64, chunk int64, owners []*mirror, errs []error) error {
	v.lose(ep)
	var took [8]*mirror
	n, newly := 0, false
	for i, m := range owners {
		if errs[i] == nil {
			newly = v.stale.mark(m.id, chunk) || newly
			took[n] = m
			n++
		}
	}
	if newly {
		v.poke()
	}
	if n > 0 {
		if err := v.marksDurable(context.WithoutCancel(ctx), took[:n]...); err != nil {
			v.cfg.Logger.Warn("marking the mirrors a fenced write reached", "volume", v.spec.Name, "chunk", chunk, "err", err)
		}
	}
	return fmt.Errorf("%w: %s", ErrFenced, v.spec.Name)
}

// marksDurable returns once every stale bit set so far is saved and the
// mirrors ms are recorded stale in StaleMarks, waiting for the saves and
// StaleMarks calls of others in progress. A mirror whose StaleMarks call
// failed less than marksBackoff ago is not waited for (the resync loop
// retries it).
func (v *Volume) marksDurable(ctx context.Context, ms ...*mirror) error {
	if err := v.stale.marksSaved(); err != nil {
		return fmt.Errorf("volume: persisting the stale map: %w", err)
	}
	for _, m := range ms {
		v.record(ctx, m, true)
	}
	return nil
}

// noteUnsynced records that an acknowledged write to chunk is not known
// durable yet. It stays recorded until a Flush makes it durable.
func (v *Volume) noteUnsynced(chunk int64) {
	v.umu.Lock()
	v.ugen++
	v.unsynced[chunk] = v.ugen
	v.umu.Unlock()
}

// WriteAt implements nbd.Device.
func (v *Volume) WriteAt(ctx context.Context, p []byte, off int64, fua bool) error {
	return v.route(ctx, Op{Kind: OpWrite, Off: off, N: int64(len(p)), Data: p, FUA: fua})
}

func (v *Volume) writeAt(ctx context.Context, claim claimFrom, p []byte, off int64, fua bool) error {
	return v.segments(off, int64(len(p)), func(s segment) error {
		b := p[s.pos : s.pos+s.n]
		err := v.mutate(ctx, claim, s.chunk, func(ctx context.Context, ep uint64, m *mirror) error {
			return m.r.WriteAt(ctx, v.key, ep, s.chunk, b, s.off, fua)
		}, func(ctx context.Context, ep uint64, a asyncReplica) func() error {
			return a.writeAsync(ctx, v.key, ep, s.chunk, b, s.off, fua)
		})
		if err == nil && !fua {
			v.noteUnsynced(s.chunk)
		}
		return err
	})
}

// Trim implements nbd.Device.
func (v *Volume) Trim(ctx context.Context, off, n int64) error {
	return v.route(ctx, Op{Kind: OpZero, Off: off, N: n, Punch: true})
}

// WriteZeroes implements nbd.Device.
func (v *Volume) WriteZeroes(ctx context.Context, off, n int64, fua, noHole bool) error {
	return v.route(ctx, Op{Kind: OpZero, Off: off, N: n, FUA: fua, Punch: !noHole})
}

func (v *Volume) zero(ctx context.Context, claim claimFrom, off, n int64, fua, punch bool) error {
	return v.segments(off, n, func(s segment) error {
		err := v.mutate(ctx, claim, s.chunk, func(ctx context.Context, ep uint64, m *mirror) error {
			if err := m.r.Zero(ctx, v.key, ep, s.chunk, s.off, s.n, punch); err != nil {
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
// synced on every mirror that holds it. It returns nil only once every
// write acknowledged before it began is durable on every live in-sync
// mirror. Flushes run one at a time: a Flush that arrives while another
// runs waits for it and then syncs what is still not durable (writes that
// came meanwhile, and those the other one could not make durable), so
// concurrent flushes share the work and none is acknowledged early. A
// chunk stays in the unsynced set until a Flush made it durable.
//
// On failure: a mirror that held a chunk's unsynced writes but did not
// make them durable (its sync failed, or it was down) may have lost them,
// and is marked stale for the chunk (saved, and recorded in StaleMarks)
// before Flush returns, as long as another mirror made the chunk durable.
// If none did, Flush fails (ErrNoMirror, with the mirrors' errors), the
// chunk stays unsynced for the next Flush, and exactly one of its mirrors
// stays current, the others being marked stale and later copied from it:
// the mirrors never disagree, and the chunk never loses its last good
// copy. The one kept is a mirror that was up, the local one first, since
// a remote that failed may have restarted and lost its cache. A Flush
// whose context ends while syncing fails without marking anything.
// Writes this node forwarded to another (see forward.go) are flushed there.
func (v *Volume) Flush(ctx context.Context) error {
	defer v.ownOp()()
	return errors.Join(v.flush(ctx), v.flushForwarded(ctx))
}

// flush is Flush of the writes this volume applied.
func (v *Volume) flush(ctx context.Context) error {
	select {
	case v.flushing <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-v.flushing }()
	v.umu.Lock()
	pending := maps.Clone(v.unsynced)
	v.umu.Unlock()
	if len(pending) == 0 {
		return nil
	}
	// Bit i of held[c] is set when owner i is in sync for chunk c, and so
	// holds its unsynced writes; of tried[c], when Flush syncs c there
	// (the owner is up).
	held := make(map[int64]uint8, len(pending))
	tried := make(map[int64]uint8, len(pending))
	per := map[*mirror][]int64{}
	// The owners of each chunk are taken once: a re-placement's copy may
	// add one meanwhile, which would shift the bits.
	ownersAt := make(map[int64][]*mirror, len(pending))
	for c := range pending {
		ownersAt[c] = v.current(c)
		for i, m := range ownersAt[c] {
			if v.stale.isStale(m.id, c) {
				continue
			}
			held[c] |= 1 << i
			if !m.down.Load() {
				per[m] = append(per[m], c)
				tried[c] |= 1 << i
			}
		}
	}
	var mu sync.Mutex
	failed := map[*mirror]error{}
	var wg sync.WaitGroup
	for m, cs := range per {
		wg.Add(1)
		go func() {
			defer wg.Done()
			octx, cancel := v.opCtx(ctx)
			defer cancel()
			if err := m.r.Sync(octx, v.key, cs); err != nil {
				mu.Lock()
				failed[m] = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(failed) != 0 && ctx.Err() != nil {
		return ctx.Err() // the chunks stay unsynced
	}
	for m, err := range failed {
		v.fail(m, err)
	}
	// A chunk some mirror made durable is done; the other mirrors that
	// held its writes, those that failed to sync and those that were down
	// (they may have lost the writes), are stale for it. A chunk no mirror
	// made durable fails the flush and stays unsynced (the next Flush
	// tries again); of its mirrors one stays current (see source) and the
	// others are marked stale, so that they are copied from it and never
	// disagree with it, and the chunk never loses its last good copy. The
	// marks are saved and recorded before Flush returns.
	lost, first := 0, int64(-1)
	marked := map[*mirror]bool{}
	newly := false
	for c := range pending {
		owners := ownersAt[c]
		var good uint8
		for i, m := range owners {
			if tried[c]&(1<<i) != 0 && failed[m] == nil {
				good |= 1 << i
			}
		}
		keep := good
		if good == 0 {
			if i := v.source(owners, c, tried[c]); i >= 0 {
				keep = 1 << i
			}
			lost++
			if first < 0 || c < first {
				first = c
			}
			delete(pending, c)
		}
		for i, m := range owners {
			if keep&(1<<i) == 0 && held[c]&(1<<i) != 0 {
				newly = v.stale.mark(m.id, c) || newly
				marked[m] = true
			}
		}
	}
	if len(marked) != 0 {
		if newly {
			v.poke()
		}
		if err := v.marksDurable(ctx, slices.Collect(maps.Keys(marked))...); err != nil {
			return err
		}
	}
	v.synced(pending)
	if lost != 0 {
		var errs []error
		for _, err := range failed {
			errs = append(errs, err)
		}
		return fmt.Errorf("%w: no mirror made %d chunks of %s durable (chunk %d first): %w", ErrNoMirror, lost, v.spec.Name, first, errors.Join(errs...))
	}
	return nil
}

// source picks, among the owners of chunk c not marked stale for it, the
// one whose copy counts as current when no mirror could make c durable:
// one that was up (bit set in up) before one that was not, then the local
// mirror, then the first in placement order. It returns -1 if every owner
// is stale.
func (v *Volume) source(owners []*mirror, c int64, up uint8) int {
	best := -1
	score := func(i int) int {
		s := 0
		if up&(1<<i) != 0 {
			s += 2
		}
		if owners[i].local {
			s++
		}
		return s
	}
	for i, m := range owners {
		if v.stale.isStale(m.id, c) {
			continue
		}
		if best < 0 || score(i) > score(best) {
			best = i
		}
	}
	return best
}

// synced drops the chunks of done from the unsynced set, unless they were
// written again since done was taken.
func (v *Volume) synced(done map[int64]uint64) {
	v.umu.Lock()
	for c, gen := range done {
		if v.unsynced[c] == gen {
			delete(v.unsynced, c)
		}
	}
	v.umu.Unlock()
}

func (v *Volume) poke() {
	select {
	case v.kick <- struct{}{}:
	default:
	}
	select {
	case v.moveKick <- struct{}{}:
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
		for _, id := range v.mirrorIDs() {
			m := v.mirrors()[id]
			if m.down.Load() {
				// Its mark stays made while it is away (another node may
				// clear it); like a write, with the back-off of failed calls.
				v.record(ctx, m, true)
				// A mirror whose calls timed out or broke off is probed
				// again once the replica timeout has passed, not by every
				// tick meanwhile; one that refused the connection or
				// restarted (quick), at once.
				if !m.quick.Load() && time.Since(time.Unix(0, m.failedAt.Load())) < v.cfg.OpTimeout {
					continue
				}
				if !v.revive(ctx, m) {
					continue
				}
			}
			if m.lost.Load() && !m.lostMarked.Load() {
				v.recordLost(ctx, m)
			}
			if m.noted.Load() || v.fencedOff() {
				continue // the writer resynchronises it
			}
			// A write that hung on the failed mirror may still land
			// there; wait out the replica timeout before copying over it.
			if time.Since(time.Unix(0, m.failedAt.Load())) < v.cfg.OpTimeout {
				continue
			}
			if err := v.resyncNode(ctx, m); err != nil && ctx.Err() == nil {
				v.fail(m, err)
				continue
			}
			v.record(ctx, m, false)
		}
	}
}

// markUnsynced marks m, a failed mirror about to be used again, stale for
// every chunk it holds with writes no Flush made durable yet: it may have
// lost them (a crash), and a Flush would then sync its old copy and count
// it as current. A chunk is only marked where another in-sync owner is
// up, so that it keeps a copy that can be read.
func (v *Volume) markUnsynced(ctx context.Context, m *mirror) error {
	v.umu.Lock()
	chunks := slices.Collect(maps.Keys(v.unsynced))
	v.umu.Unlock()
	marked := false
	for _, c := range chunks {
		owners := v.current(c)
		if !slices.Contains(owners, m) || v.stale.isStale(m.id, c) {
			continue
		}
		for _, o := range owners {
			if o != m && !o.down.Load() && !v.stale.isStale(o.id, c) {
				v.stale.mark(m.id, c)
				marked = true
				break
			}
		}
	}
	if !marked {
		return nil
	}
	if err := v.stale.marksSaved(); err != nil {
		return err
	}
	v.record(ctx, m, false)
	return nil
}

// record brings m's mark in StaleMarks in line with its stale chunks: set
// while it misses any, cleared once it has caught up (marks noted from
// StaleMarks are the writer's to clear). It returns once StaleMarks
// agrees with the chunks m misses now, or a call failed: a mirror marked
// while a call clearing its mark is in flight is marked again before
// record returns, in the caller that cleared and in the one that marked.
// For a write, or the resync loop's check of a mirror that is down
// (write set), it gives up, without a call, while a call for m failed less
// than marksBackoff ago. It also clears the marks of other writers that a
// full resync of m covered (see NoteStale).
func (v *Volume) record(ctx context.Context, m *mirror, write bool) {
	// busy is set before the count is read under markMu, and a marker
	// counts before it reads busy: either the marker sees a call in
	// flight and waits for it, or the call sees the mark.
	if n := v.stale.count(m.id); v.cfg.Marks == nil || !m.busy.Load() && m.shared.Load() == (n != 0) && !m.covers.Load() && (n != 0 || !m.listed.Load()) {
		return
	}
	backoff := func() bool { return write && time.Since(time.Unix(0, m.markAt.Load())) <= marksBackoff }
	if backoff() {
		return // not behind the resync loop's retries either
	}
	m.markMu.Lock()
	defer m.markMu.Unlock()
	defer m.busy.Store(false)
	for {
		m.busy.Store(true)
		stale := v.stale.count(m.id) != 0
		if m.noted.Load() {
			return
		}
		// A mark of this node the map still lists while it misses
		// nothing (a clear lost to a map seen late) is cleared again.
		if m.shared.Load() == stale && (stale || !m.listed.Load()) {
			if !stale && len(m.others) > 0 {
				v.clearCovered(ctx, m)
			}
			return
		}
		if backoff() {
			return
		}
		cctx, cancel := context.WithTimeout(ctx, marksTimeout)
		err := v.cfg.Marks.SetStale(cctx, m.id, stale)
		cancel()
		if err != nil {
			m.markAt.Store(time.Now().UnixNano())
			v.cfg.Logger.Warn("could not record a mirror's state in the cluster; will try again", "volume", v.spec.Name, "mirror", m.id, "stale", stale, "err", err)
			return
		}
		m.shared.Store(stale)
		m.listed.Store(stale)
		if stale {
			ver := v.noteMarked()
			if m.lost.Load() {
				m.lostMarked.Store(true)
				m.lostVer.Store(ver)
			}
		}
		if !stale {
			v.cfg.Logger.Info("volume mirror resynchronised", "volume", v.spec.Name, "mirror", m.id)
			if m.lost.Load() {
				v.repaired(m) // every chunk was copied back since Open
			}
		}
	}
}

// recordLost marks m, the local mirror whose chunks were lost, stale in
// StaleMarks as missed through this node (the same mark as missed
// writes), so that every node that reads the volume avoids it and the
// writer resynchronises it in full. It is made once (a failed call is
// retried by the resync loop after marksBackoff); the mark goes when a
// full resync covered it.
func (v *Volume) recordLost(ctx context.Context, m *mirror) {
	if v.cfg.Marks == nil {
		m.lostMarked.Store(true)
		return
	}
	if time.Since(time.Unix(0, m.markAt.Load())) <= marksBackoff {
		return
	}
	m.markMu.Lock()
	defer m.markMu.Unlock()
	if !m.lost.Load() || m.lostMarked.Load() {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, marksTimeout)
	err := v.cfg.Marks.SetStale(cctx, m.id, true)
	cancel()
	if err != nil {
		m.markAt.Store(time.Now().UnixNano())
		v.cfg.Logger.Warn("could not record in the cluster that this node lost its chunks; will try again", "volume", v.spec.Name, "mirror", m.id, "err", err)
		return
	}
	m.shared.Store(true)
	m.listed.Store(true)
	m.lostMarked.Store(true)
	m.lostVer.Store(v.noteMarked())
}

// repaired ends m's loss: every chunk of it has been resynchronised.
func (v *Volume) repaired(m *mirror) {
	lr, ok := m.r.(lostReplica)
	if !ok || !m.lost.Load() {
		return
	}
	if err := lr.Repaired(v.key); err != nil {
		v.cfg.Logger.Warn("could not record that the volume's chunks are back", "volume", v.spec.Name, "err", err)
		return
	}
	m.lost.Store(false)
	m.lostSeen.Store(false)
	v.cfg.Logger.Info("this node's chunks of the volume are resynchronised", "volume", v.spec.Name, "mirror", m.id)
}

// NoteStale tells the volume which writers StaleMarks lists for each
// mirror (mirror -> writers). A mirror listed for another writer (which
// may have died) missed writes only that node knows of: every chunk of it
// is treated as stale, so reads avoid it, and it is resynchronised in full
// once this volume writes (it is the writer then). Each new writer listed
// so makes it so again, even when this volume has marks of its own on the
// mirror: its own mark does not hide another's. Noted marks go when no
// other writer is listed any more (they resynchronised it); if this node's
// own mark is listed too, they become its own instead and are
// resynchronised in full, since its own older misses are among them.
func (v *Volume) NoteStale(marks map[string][]string) { v.noteStale(marks, false, 0) }

// NoteStaleAt is NoteStale with the version of the map the marks are
// from (see mirror.lostVer), which it then notes (NoteVersion): the
// claim of that map is to be noted first (NoteClaim).
func (v *Volume) NoteStaleAt(marks map[string][]string, ver uint64) {
	v.noteStale(marks, false, ver)
	v.NoteVersion(ver)
}

// noteStale is NoteStale. At Open it also takes this node's own listed
// marks as its shared state; a mirror it has a mark of its own on but no
// stale chunks of (its stale map was lost) is stale in full.
// Later, a mark of its own the list drops is taken as gone (another node
// cleared it), which at worst costs a call marking it again; a listed one
// is never taken as made, since the list may be older than a clear.
func (v *Volume) noteStale(marks map[string][]string, atOpen bool, ver uint64) {
	for id, m := range v.mirrors() {
		own := slices.Contains(marks[id], v.cfg.Self)
		others := slices.DeleteFunc(slices.Clone(marks[id]), func(w string) bool { return w == v.cfg.Self })
		wasListed := m.shared.Load() || len(m.others) > 0
		m.selfMarked.Store(slices.Contains(marks[id], id))
		// A lost mirror is repaired once its mark, seen listed, is
		// gone: a writer resynchronised it in full and cleared it.
		lostDone := false
		if m.lost.Load() {
			switch {
			case own:
				m.lostSeen.Store(true)
				m.lostMarked.Store(true)
			case len(others) == 0 && (m.lostSeen.Load() || ver != 0 && m.lostVer.Load() != 0 && ver >= m.lostVer.Load()):
				lostDone = true
			}
		}
		if atOpen && own && v.stale.count(id) == 0 {
			// Its own mark, but its stale map was lost: which chunks it
			// missed is not known any more.
			v.stale.markAll(id, false)
		}
		m.markMu.Lock()
		m.listed.Store(own)
		switch {
		case atOpen:
			m.shared.Store(own)
		case !own && m.shared.Load():
			// Cleared by another node (it took this one for dead, or
			// writes the volume now): the resync loop marks it again
			// while this node misses chunks and writes the volume.
			m.shared.Store(false)
			v.poke()
		}
		switch {
		case len(others) > 0 && !subset(others, m.others):
			m.others = others
			noted := !v.writer()
			v.stale.markAll(id, noted)
			m.noted.Store(noted)
			m.coverEpoch = v.epoch.Load()
			v.marksNew.Store(true)
			v.cfg.Logger.Warn("a mirror missed writes made through another node: not read until resynchronised",
				"volume", v.spec.Name, "mirror", id, "writers", others)
			v.poke()
		case len(others) > 0:
			m.others = others
		case len(m.others) > 0:
			m.others = nil
			if m.noted.Swap(false) {
				if own || m.lost.Load() && !lostDone {
					v.stale.keep(id)
					v.poke()
				} else {
					v.stale.clearAll(id)
				}
			}
		}
		if lostDone {
			v.stale.clearAll(id)
			m.noted.Store(false)
			m.shared.Store(false)
			v.repaired(m)
		} else if !own && len(others) == 0 && wasListed && v.fencedOff() && !m.lost.Load() {
			// Another node writes the volume and no mark on the mirror is
			// left: it resynchronised the mirror in full before it
			// cleared them, so what this node knew it missed is past.
			v.stale.clearAll(id)
			m.noted.Store(false)
		}
		m.covers.Store(len(m.others) > 0)
		m.markMu.Unlock()
	}
}

// clearCovered clears the marks of the other writers of m, which this
// volume has just resynchronised in full (m.markMu held).
func (v *Volume) clearCovered(ctx context.Context, m *mirror) {
	cctx, cancel := context.WithTimeout(ctx, marksTimeout)
	defer cancel()
	if err := v.cfg.Marks.ClearCovered(cctx, m.id, m.others, m.coverEpoch); err != nil {
		m.markAt.Store(time.Now().UnixNano())
		v.cfg.Logger.Warn("could not clear other writers' marks of a resynchronised mirror; will try again",
			"volume", v.spec.Name, "mirror", m.id, "writers", m.others, "err", err)
	}
}

// subset reports whether every element of a is in b.
func subset(a, b []string) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// becomeWriter claims the volume for this node (with Claims), taking it
// from the claim of epoch from (see Claims.Claim), and fences
// every mirror it reaches at the claim's epoch, then makes the marks of
// other writers its own: it resynchronises those mirrors in full from now
// on (again after every new claim: a writer that held the claim in
// between may have missed more). A write fails if the claim cannot be
// made (no quorum).
func (v *Volume) becomeWriter(ctx context.Context, from uint64) error {
	v.claimMu.Lock()
	defer v.claimMu.Unlock()
	if v.writer() {
		return nil
	}
	var ep uint64
	if v.cfg.Claims != nil {
		cctx, cancel := context.WithTimeout(ctx, marksTimeout)
		var err error
		ep, err = v.cfg.Claims.Claim(cctx, from)
		cancel()
		if err == nil {
			err = v.fenceAll(ctx, ep)
		}
		if err != nil {
			return fmt.Errorf("volume: claiming %s for writing: %w", v.spec.Name, err)
		}
		v.cfg.Logger.Info("this node writes the volume now", "volume", v.spec.Name, "epoch", ep)
		v.noteHolder(v.cfg.Self, ep)
		v.epoch.Store(ep)
		v.other.Store(false)
	}
	v.wrote.Store(true)
	for id, m := range v.mirrors() {
		m.markMu.Lock()
		if m.noted.Swap(false) || len(m.others) > 0 {
			v.stale.markAll(id, false)
			v.stale.keep(id)
			m.coverEpoch = ep
		}
		m.markMu.Unlock()
	}
	if err := v.stale.save(); err != nil {
		v.cfg.Logger.Warn("saving the stale map", "volume", v.spec.Name, "err", err)
	}
	v.poke()
	return nil
}

// writer reports whether this volume writes: it holds the claim (with
// Claims), or it has written.
func (v *Volume) writer() bool {
	if v.cfg.Claims != nil {
		return v.epoch.Load() != 0
	}
	return v.wrote.Load()
}

// fenceAll announces epoch to every mirror that is not down, in
// parallel, so that the volume's previous writer can no longer change
// them. The claim is made already, so a write whose client goes away
// meanwhile does not cut it short. A mirror that fails is marked down
// (the resync loop fences it before it is used again); a mirror that has
// seen a higher epoch means another node claimed the volume meanwhile
// (ErrFenced).
func (v *Volume) fenceAll(ctx context.Context, epoch uint64) error {
	ctx = context.WithoutCancel(ctx)
	ids := v.nodeIDs()
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		m := v.mirrors()[id]
		if m.down.Load() {
			continue
		}
		wg.Go(func() {
			octx, cancel := v.opCtx(ctx)
			defer cancel()
			errs[i] = m.r.Fence(octx, v.key, epoch)
		})
	}
	wg.Wait()
	for i, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, ErrFenced):
			return err
		default:
			v.fail(v.mirrors()[ids[i]], err)
		}
	}
	return nil
}

// lose stops this node writing the volume after a mirror refused its
// epoch ep (another node claimed the volume): its resynchronisations stop
// (the new writer's cover them), and a later write claims it again. It
// takes no lock (it runs in the I/O path and on map updates): a claim in
// progress stores its new epoch after, and a lose of an older epoch finds
// the new one and does nothing.
func (v *Volume) lose(ep uint64) {
	if ep == 0 || !v.epoch.CompareAndSwap(ep, 0) {
		return
	}
	v.other.Store(true)
	v.cfg.Logger.Warn("another node writes the volume now; this node stops writing it until a client writes through it again",
		"volume", v.spec.Name, "epoch", ep)
}

// NoteClaim tells the volume which node the cluster lets write it, and
// at which epoch. A node that held an older epoch stops writing.
func (v *Volume) NoteClaim(writer string, epoch uint64) {
	if v.cfg.Claims == nil || writer == "" {
		return
	}
	v.noteHolder(writer, epoch)
	if writer == v.cfg.Self {
		return
	}
	v.other.Store(true)
	if held := v.epoch.Load(); held != 0 && epoch > held {
		v.lose(held)
	}
}

// fencedOff reports whether another node writes the volume and this one
// holds no claim: it neither writes nor resynchronises the mirrors.
func (v *Volume) fencedOff() bool {
	return v.cfg.Claims != nil && v.epoch.Load() == 0 && v.other.Load()
}

// resyncNode copies every chunk m misses from an in-sync mirror.
func (v *Volume) resyncNode(ctx context.Context, m *mirror) error {
	chunks := v.stale.list(m.id)
	if len(chunks) == 0 {
		return nil
	}
	buf := make([]byte, min(v.spec.ChunkSize, 1<<20))
	ep := v.epoch.Load()
	for _, c := range chunks {
		if ctx.Err() != nil || m.down.Load() {
			return ctx.Err()
		}
		if err := v.resyncChunk(ctx, ep, m, c, buf); errors.Is(err, ErrFenced) {
			v.lose(ep)
			return nil
		} else if err != nil {
			return err
		}
	}
	return v.stale.save()
}

func (v *Volume) resyncChunk(ctx context.Context, ep uint64, dst *mirror, c int64, buf []byte) error {
	lk := &v.locks[c&255]
	lk.Lock()
	defer lk.Unlock()
	var src *mirror
	for _, m := range v.current(c) {
		if m != dst && !m.down.Load() && !v.stale.isStale(m.id, c) {
			if src == nil || m.local {
				src = m
			}
		}
	}
	if src == nil && v.moving(c, dst) && v.orphaned(c, dst) {
		return v.settleOrphan(ctx, ep, dst, c)
	}
	if src == nil {
		if src = v.rescue(dst, c); src == nil {
			return nil // no good copy reachable now; try again later
		}
		if src == dst {
			return nil
		}
	}
	size := min(v.spec.ChunkSize, v.size.Load()-c*v.spec.ChunkSize)
	if size <= 0 {
		return nil // beyond the size a Grow has not published yet: later
	}
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
			err = dst.r.Zero(octx, v.key, ep, c, off, int64(len(b)), true)
		} else {
			err = dst.r.WriteAt(octx, v.key, ep, c, b, off, false)
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
	v.copied(c, dst)
	return nil
}

// rescue handles chunk c when dst, a mirror that is up, misses it and no
// other owner has it in sync. If some owner is merely down, the chunk
// waits for it (nil). If every owner is stale (Flush never leaves that,
// but an older version did after a flush failed on every mirror), no copy
// is known better than another, so rather than leave the chunk unreadable
// for good, the copy of the local owner if it is up, else dst's, is taken
// as current (its mark is cleared) and the others are copied from it.
// Marks learnt from StaleMarks are left to the writer. The caller holds
// the chunk's lock; rescue returns the new source, or nil.
func (v *Volume) rescue(dst *mirror, c int64) *mirror {
	// A mirror whose node lost its chunks is never taken: its copy is
	// zeros, not an older version.
	gone := func(m *mirror) bool { return m.lost.Load() || m.selfMarked.Load() }
	if slices.ContainsFunc(v.ownersOf(c), func(m *mirror) bool { return v.moving(c, m) }) {
		return nil // a re-placement's newcomer holds no copy to take
	}
	src := dst
	for _, m := range v.ownersOf(c) {
		if !v.stale.isStale(m.id, c) || m.noted.Load() {
			return nil
		}
		if !gone(m) && !m.down.Load() && (m.local || gone(src)) {
			src = m
		}
	}
	if gone(src) {
		return nil
	}
	v.cfg.Logger.Warn("volume chunk was stale on every mirror; taking one mirror's copy as current",
		"volume", v.spec.Name, "chunk", c, "mirror", src.id)
	v.stale.clear(src.id, c)
	return src
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
