package volume

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slipstream-io/slipstream/internal/placement"
)

// A re-placement moves a volume's chunks when its node set changes
// (Config.Prev: the set the chunks are on; Config.Nodes: the set they go
// to). HRW over a smaller set keeps every surviving owner of a chunk and
// adds one in place of each removed one; over a larger set (a rebalance)
// it only moves chunks to the added nodes. Either way the only change
// per chunk is a newcomer per owner replaced, which holds no copy of the
// chunk yet. Until the writer has copied the chunk there (under the
// chunk's lock, as a resync does), the newcomer is neither read, written
// nor taken as a source: writes go to the other owners, and the copy
// brings them along. Once every chunk is copied, the writer records it
// (Config.Placed); every other node goes on avoiding the newcomers until
// its map shows that.
//
// An owner replaced that is still a member (a node drained out of the
// set, or one a rebalance took chunks off) keeps the chunks it held: it
// is written with the owners, and is a source, until the re-placement
// ends. When the copies are made, the map records it (Copied): every
// node then reads the set's owners only, while writes still reach the
// old owners, until the writer ends the re-placement (Config.Settle)
// once every node has seen Copied, or the next change of the set ends
// it. No node thus reads an old owner that stopped being written.

// moveState is one re-placement as this Volume knows it.
type moveState struct {
	prev, nodes []string
	// pending lists, per chunk, the owners the chunk has not been copied
	// to yet (nil: none).
	pending []atomic.Pointer[[]*mirror]
	// dropped lists, per chunk, its owners under prev that are not
	// owners under nodes: drained nodes go on receiving its writes
	// (removed ones are skipped: mirror.gone).
	dropped [][]*mirror
	// copied: the map records that every copy is made (Copied).
	copied atomic.Bool
	// orphans marks, per chunk, the chunks found lost (orphaned): their
	// newcomers hold zeros, and reads and writes fail until the map's
	// Lost, which Placed adds them to, no longer lists them.
	orphans []atomic.Bool
	placed  atomic.Bool // Placed succeeded for this state
	// settled: Settle succeeded for this state; settleAt: unix ns of its
	// last attempt.
	settled  atomic.Bool
	settleAt atomic.Int64
}

// settleEvery spaces the writer's attempts to end a re-placement whose
// copies are made (Config.Settle asks every member of the cluster).
const settleEvery = time.Second

// orphaned reports whether the re-placement found chunk c lost.
func (ms *moveState) orphaned(c int64) bool {
	return ms != nil && c < int64(len(ms.orphans)) && ms.orphans[c].Load()
}

// orphanList returns the chunks found lost.
func (ms *moveState) orphanList() []int64 {
	var out []int64
	for c := range ms.orphans {
		if ms.orphans[c].Load() {
			out = append(out, int64(c))
		}
	}
	return out
}

// at returns the owners chunk c has not been copied to yet (nil: none, or
// no re-placement).
func (ms *moveState) at(c int64) []*mirror {
	if ms == nil || c >= int64(len(ms.pending)) {
		return nil
	}
	if p := ms.pending[c].Load(); p != nil {
		return *p
	}
	return nil
}

// newMove computes the newcomers of every chunk below chunks (the caller
// holds growMu, or is Open).
func (v *Volume) newMove(prev, nodes []string, copied bool, chunks int64) *moveState {
	ms := &moveState{prev: prev, nodes: nodes, pending: make([]atomic.Pointer[[]*mirror], chunks), orphans: make([]atomic.Bool, chunks)}
	ms.copied.Store(copied)
	v.fillMove(ms, 0)
	return ms
}

// fillMove computes ms's pending owners of chunks from on.
func (v *Volume) fillMove(ms *moveState, from int64) {
	for c := from; c < int64(len(ms.pending)); c++ {
		name := ChunkName(v.spec.Name, c)
		before := placement.Owners(ms.prev, name, v.spec.Copies)
		after := placement.Owners(ms.nodes, name, v.spec.Copies)
		var add, drop []*mirror
		for _, id := range after {
			if !slices.Contains(before, id) {
				add = append(add, v.mirrors()[id])
			}
		}
		for _, id := range before {
			if m := v.mirrors()[id]; m != nil && !slices.Contains(after, id) {
				drop = append(drop, m)
			}
		}
		if add != nil && !ms.copied.Load() {
			ms.pending[c].Store(&add)
		}
		ms.dropped = append(ms.dropped, drop)
	}
}

// growMove extends a re-placement in progress to chunks (growMu held).
func (v *Volume) growMove(chunks int64) {
	old := v.mv.Load()
	if old == nil {
		return
	}
	ms := &moveState{prev: old.prev, nodes: old.nodes, pending: make([]atomic.Pointer[[]*mirror], chunks), orphans: make([]atomic.Bool, chunks), dropped: slices.Clip(old.dropped)}
	ms.copied.Store(old.copied.Load())
	for c := range old.pending {
		ms.pending[c].Store(old.pending[c].Load())
		ms.orphans[c].Store(old.orphans[c].Load())
	}
	v.fillMove(ms, int64(len(old.pending)))
	v.mv.Store(ms)
}

// moving reports whether chunk c has not been copied to m yet, its owner
// since a re-placement.
func (v *Volume) moving(c int64, m *mirror) bool {
	return slices.Contains(v.mv.Load().at(c), m)
}

// NoteGone tells the volume which nodes of its set, or of the set before
// a re-placement in progress, are no longer members of the cluster: a
// node removed while a re-placement is in progress stays in the set until
// that ends, and its own re-placement follows. The copies the one in
// progress would make on it are not waited for: the next one copies its
// chunks to the nodes left. A removed node is never written as a node
// drained out of the set is.
func (v *Volume) NoteGone(ids []string) {
	for id, m := range v.mirrors() {
		m.gone.Store(slices.Contains(ids, id))
	}
	if len(ids) > 0 {
		v.poke()
	}
}

// copied records that chunk c now has its copy on m (the chunk's lock
// held exclusively).
func (v *Volume) copied(c int64, m *mirror) {
	ms := v.mv.Load()
	p := ms.at(c)
	if !slices.Contains(p, m) {
		return
	}
	rest := slices.DeleteFunc(slices.Clone(p), func(o *mirror) bool { return o == m })
	if len(rest) == 0 {
		ms.pending[c].Store(nil)
		return
	}
	ms.pending[c].Store(&rest)
}

// NoteLost tells the volume the chunks the map lists as lost
// (VolumeSpec.Lost, sorted): their reads and writes fail with
// ErrChunkLost.
func (v *Volume) NoteLost(chunks []int64) {
	if len(chunks) == 0 {
		v.lost.Store(nil)
		return
	}
	chunks = slices.Clone(chunks)
	v.lost.Store(&chunks)
}

// chunkLost reports whether chunk c is lost: listed by the map, or found
// so by the re-placement in progress.
func (v *Volume) chunkLost(c int64) bool {
	if l := v.lost.Load(); l != nil {
		if _, ok := slices.BinarySearch(*l, c); ok {
			return true
		}
	}
	return v.mv.Load().orphaned(c)
}

// errLost is the error of I/O to lost chunk c.
func (v *Volume) errLost(c int64) error {
	return fmt.Errorf("%w: chunk %d of %s (see volume info; accept the loss to use it again)", ErrChunkLost, c, v.spec.Name)
}

// orphaned reports whether chunk c, which the re-placement has not
// copied to its newcomer dst yet, has no copy left to copy from: each of
// its other owners holding a copy is gone from the cluster, or missed
// writes this node made (stale bits of its own; marks noted from other
// writers do not say which chunks, so they never make a chunk lost). The
// caller holds the chunk's lock.
func (v *Volume) orphaned(c int64, dst *mirror) bool {
	for _, m := range v.current(c) {
		if m != dst && !m.gone.Load() && (!v.stale.isStale(m.id, c) || m.noted.Load()) {
			return false
		}
	}
	return true
}

// settleOrphan gives the newcomer dst of lost chunk c an empty copy
// (zeros, synced: a copy begun earlier may have left part of the chunk
// there) and counts the chunk as copied to it, recording it lost first:
// from then on the chunk's reads and writes fail, until an operator
// accepts the loss and it reads as zeros on every owner (the owners that
// missed writes are copied from dst). The caller holds the chunk's lock
// exclusively.
func (v *Volume) settleOrphan(ctx context.Context, ep uint64, dst *mirror, c int64) error {
	ms := v.mv.Load()
	size := min(v.spec.ChunkSize, v.size.Load()-c*v.spec.ChunkSize)
	if ms == nil || size <= 0 {
		return nil
	}
	octx, cancel := v.opCtx(ctx)
	defer cancel()
	if err := dst.r.Zero(octx, v.key, ep, c, 0, size, true); err != nil {
		return err
	}
	if err := dst.r.Sync(octx, v.key, []int64{c}); err != nil {
		return err
	}
	if !ms.orphans[c].Swap(true) {
		v.cfg.Logger.Error("volume chunk lost: no node left in the cluster holds a current copy; its reads and writes fail until the loss is accepted", "volume", v.spec.Name, "chunk", c)
	}
	v.stale.clear(dst.id, c)
	v.copied(c, dst)
	return nil
}

// current returns the mirrors of chunk c that hold a current copy of it,
// which writes go to: its owners but the newcomers of a re-placement it
// has not been copied to, and the drained nodes that held it before.
func (v *Volume) current(c int64) []*mirror {
	owners := v.ownersOf(c)
	ms := v.mv.Load()
	if ms == nil {
		return owners
	}
	p, d := ms.at(c), ms.drained(c)
	if p == nil && d == nil {
		return owners
	}
	out := slices.DeleteFunc(slices.Clone(owners), func(m *mirror) bool { return slices.Contains(p, m) })
	return append(out, d...)
}

// readers returns the mirrors chunk c is read from: those of current,
// but the drained ones once the map shows the copies made (then the
// writer may stop writing them at the next change of the map).
func (v *Volume) readers(c int64) []*mirror {
	if ms := v.mv.Load(); ms != nil && ms.copied.Load() {
		return v.ownersOf(c)
	}
	return v.current(c)
}

// drained returns the drained nodes (members still) that held chunk c
// under prev and hold it no more under nodes.
func (ms *moveState) drained(c int64) []*mirror {
	if c >= int64(len(ms.dropped)) || len(ms.dropped[c]) == 0 {
		return nil
	}
	d := ms.dropped[c]
	if !slices.ContainsFunc(d, func(m *mirror) bool { return m.gone.Load() }) {
		return d
	}
	return slices.DeleteFunc(slices.Clone(d), func(m *mirror) bool { return m.gone.Load() })
}

// mirrorIDs returns the nodes the volume writes: those chunks are placed
// on, and, during a re-placement, the nodes drained out of the set.
func (v *Volume) mirrorIDs() []string {
	ids := v.nodeIDs()
	ms := v.mv.Load()
	if ms == nil {
		return ids
	}
	for _, id := range ms.prev {
		if !slices.Contains(ids, id) && v.mirrors()[id] != nil && !v.mirrors()[id].gone.Load() {
			ids = append(slices.Clip(ids), id)
		}
	}
	return ids
}

// mirrors returns the volume's view of every node it knows.
func (v *Volume) mirrors() map[string]*mirror { return *v.nodes.Load() }

// AddMirrors gives the volume the nodes of ids it does not know yet, with
// the replica replica returns for each: a rebalance (or a re-placement
// the volume was opened before) places chunks on nodes it was not opened
// with, and NotePlacement takes only nodes the volume knows. A new
// mirror is not fenced at this node's claim: it holds no chunk of the
// volume until the writer copies one there, and every copy and write
// carries the writer's epoch, which the mirror then refuses older ones
// below.
func (v *Volume) AddMirrors(ids []string, replica func(id string) Replica) {
	v.growMu.Lock()
	defer v.growMu.Unlock()
	cur := v.mirrors()
	var next map[string]*mirror
	for _, id := range ids {
		if cur[id] != nil || next[id] != nil {
			continue
		}
		if next == nil {
			next = maps.Clone(cur)
		}
		next[id] = &mirror{id: id, r: replica(id), local: id == v.cfg.Self}
	}
	if next != nil {
		v.nodes.Store(&next)
	}
}

// nodeIDs returns the nodes chunks are placed on now.
func (v *Volume) nodeIDs() []string { return *v.set.Load() }

// NotePlacement tells the volume the node set its chunks are placed on
// (nodes) and, while a re-placement is not complete, the set they were on
// (prev; nil: none), and whether the map records its copies made
// (copied). The set can only take nodes it had at Open (as nodes or
// prev): another is ignored (logged). Chunks start going to their
// newcomers only once they are known not to hold copies yet.
func (v *Volume) NotePlacement(nodes, prev []string, copied bool) {
	v.growMu.Lock()
	defer v.growMu.Unlock()
	cur := v.nodeIDs()
	ms := v.mv.Load()
	if slices.Equal(cur, nodes) && (ms == nil && prev == nil || ms != nil && slices.Equal(ms.prev, prev) && ms.copied.Load() == copied) {
		return
	}
	for _, id := range nodes {
		if v.mirrors()[id] == nil {
			v.cfg.Logger.Warn("volume placed on a node it was not opened with; keeping its placement", "volume", v.spec.Name, "mirror", id)
			return
		}
	}
	// The newcomers are known before any read or write sees them as
	// owners.
	if prev == nil {
		v.mv.Store(nil)
	} else {
		v.mv.Store(v.newMove(prev, nodes, copied, int64(len(*v.owners.Load()))))
	}
	for id, m := range v.mirrors() {
		if !slices.Contains(nodes, id) && (!slices.Contains(prev, id) || m.gone.Load()) {
			v.stale.clearAll(id) // no longer a mirror
		}
	}
	if !slices.Equal(cur, nodes) {
		nodes = slices.Clone(nodes)
		v.set.Store(&nodes)
		owners := make([]atomic.Pointer[[]*mirror], len(*v.owners.Load()))
		v.owners.Store(&owners)
		v.cfg.Logger.Info("volume re-placed", "volume", v.spec.Name, "nodes", nodes, "from", prev)
	}
	v.poke()
}

// moveLoop runs the copies of re-placements (move) beside the resync
// loop, so that a long copy does not hold up the probes, resyncs and
// mark retries of the mirrors.
func (v *Volume) moveLoop(ctx context.Context) {
	defer v.wg.Done()
	t := time.NewTicker(v.cfg.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-v.moveKick:
		}
		v.move(ctx)
	}
}

// move copies the chunks of a re-placement in progress to the owners
// that miss them, Config.CopyWorkers chunks at a time, if this volume
// writes, and ends it (Config.Placed) once every chunk is copied. A
// newcomer that is down is left for a later pass.
func (v *Volume) move(ctx context.Context) {
	ms := v.mv.Load()
	if ms == nil || ms.placed.Load() || !v.writer() || v.fencedOff() {
		return
	}
	if ms.copied.Load() {
		v.settle(ctx, ms)
		return
	}
	ep := v.epoch.Load()
	type job struct {
		c int64
		m *mirror
	}
	jobs := make(chan job)
	var left atomic.Int64
	var fenced atomic.Bool
	var wg sync.WaitGroup
	for range v.cfg.CopyWorkers {
		wg.Go(func() {
			// Whole chunks up to 4 MiB per call: 1 MiB calls copied at
			// 0.21 of the disk one chunk at a time, 4 MiB ones at 0.30
			// (TestBenchReplacement).
			buf := make([]byte, min(v.spec.ChunkSize, 4<<20))
			for j := range jobs {
				if fenced.Load() || ctx.Err() != nil || j.m.down.Load() {
					left.Add(1)
					continue
				}
				if err := v.resyncChunk(ctx, ep, j.m, j.c, buf); errors.Is(err, ErrFenced) {
					fenced.Store(true)
				} else if err != nil {
					v.fail(j.m, err)
				}
				if v.moving(j.c, j.m) {
					left.Add(1)
				}
			}
		})
	}
	for c := range ms.pending {
		for _, m := range ms.at(int64(c)) {
			switch {
			case m.gone.Load():
				// Its own re-placement follows this one.
			case m.down.Load() || fenced.Load() || ctx.Err() != nil:
				left.Add(1)
			default:
				jobs <- job{int64(c), m}
			}
		}
	}
	close(jobs)
	wg.Wait()
	if fenced.Load() {
		v.lose(ep)
		return
	}
	if left.Load() > 0 || ctx.Err() != nil {
		return
	}
	if err := v.stale.save(); err != nil {
		v.cfg.Logger.Warn("saving the stale map", "volume", v.spec.Name, "err", err)
		return
	}
	if v.cfg.Placed != nil {
		cctx, cancel := context.WithTimeout(ctx, marksTimeout)
		err := v.cfg.Placed(cctx, ms.nodes, ep, ms.orphanList())
		cancel()
		if err != nil {
			v.cfg.Logger.Warn("could not record the end of the volume's re-placement; will try again", "volume", v.spec.Name, "err", err)
			return
		}
	}
	ms.placed.Store(true)
	v.cfg.Logger.Info("volume chunks copied to their new nodes", "volume", v.spec.Name, "nodes", ms.nodes)
}

// settle ends re-placement ms, whose copies the map records made, through
// Config.Settle, at most once per settleEvery.
func (v *Volume) settle(ctx context.Context, ms *moveState) {
	now := time.Now().UnixNano()
	if v.cfg.Settle == nil || ms.settled.Load() || now-ms.settleAt.Load() < int64(settleEvery) {
		return
	}
	ms.settleAt.Store(now)
	cctx, cancel := context.WithTimeout(ctx, marksTimeout)
	err := v.cfg.Settle(cctx, ms.nodes, v.epoch.Load())
	cancel()
	if err != nil {
		v.cfg.Logger.Debug("the volume's re-placement cannot end yet", "volume", v.spec.Name, "err", err)
		return
	}
	ms.settled.Store(true)
	v.cfg.Logger.Info("volume re-placement ended: its old owners are no longer written", "volume", v.spec.Name, "nodes", ms.nodes)
}

// Claim makes this node the volume's writer, taking the claim from the
// node the map shows holding it (see Claims), so that it resynchronises
// and re-places the volume with no client writing through it.
func (v *Volume) Claim(ctx context.Context) error {
	var from uint64
	if h := v.holder.Load(); h != nil {
		from = h.epoch
	}
	return v.becomeWriter(ctx, from)
}

// CopiesLeft counts, on the volume's writer, the chunk copies a
// re-placement in progress has not made yet (those to nodes gone from the
// cluster aside); 0 elsewhere.
func (v *Volume) CopiesLeft() int {
	ms := v.mv.Load()
	if ms == nil || ms.placed.Load() || ms.copied.Load() || !v.writer() || v.fencedOff() {
		return 0
	}
	n := 0
	for c := range ms.pending {
		for _, m := range ms.at(int64(c)) {
			if !m.gone.Load() {
				n++
			}
		}
	}
	return n
}

// Moving reports whether a re-placement of the volume is in progress here.
func (v *Volume) Moving() bool {
	ms := v.mv.Load()
	return ms != nil && !ms.placed.Load() && !ms.copied.Load()
}
