package cluster

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/slipstream-io/slipstream/internal/object"
)

// Operations of the replicated state machine.
const (
	opNodePut      = "node.put"
	opNodeState    = "node.state"
	opNodeRemove   = "node.remove"
	opBucketCreate = "bucket.create"
	opBucketUpdate = "bucket.update"
	opBucketDelete = "bucket.delete"
	opVolumePut    = "volume.put"
	opVolumeDelete = "volume.delete"
	opVolumeStale  = "volume.stale" // Name: the volume; Node.ID: the mirror; State: up (in sync) or down (stale)
	opVolumeClaim  = "volume.claim" // Name, Volume.ID: the volume; Node.ID: its new writer
	// Name, Volume.ID and Volume.Nodes: the volume and the node set its
	// chunks were copied for; Node.ID and Epoch: the writer that copied
	// them, under that claim; Volume.Lost: the chunks it found no copy of
	// to copy from.
	opVolumePlaced = "volume.placed"
	// Name, Volume.ID: the volume; Volume.Lost: the lost chunks whose
	// loss an operator accepts (they read as zeros from then on).
	opVolumeAcceptLoss = "volume.accept-loss"
	// Name, Volume.ID: the volume; Volume.Since: when the proposer asked.
	// Adds to the volume's node set every member that takes placements
	// (up, not drained) and is not in it, recording the set before in
	// Prev: the chunks HRW now gives the new nodes are copied to them.
	opVolumeRebalance = "volume.rebalance"
	// Name, Volume.ID and Volume.Nodes: the volume and its node set;
	// Node.ID and Epoch: its writer. Ends a re-placement whose copies are
	// made (Copied) once the writer found every member's volumes past the
	// map that recorded it: no node reads an old owner any more, and the
	// writer stops writing them.
	opVolumeSettled = "volume.settled"
	opNodeDrain     = "node.drain" // Name: the node; Drain: on or off
	opNodeVoter     = "node.voter" // Node.ID: the node; Node.Voter: its suffrage (nothing else changes)
)

// command is one entry of the raft log, JSON-encoded. Everything that must be
// deterministic (times, defaults) is filled in by the proposer, never by the
// state machine.
type command struct {
	Op    string    `json:"op"`
	Node  *NodeInfo `json:"node,omitempty"`
	Name  string    `json:"name,omitempty"` // node ID, bucket or volume name
	State NodeState `json:"state,omitempty"`
	// From, on node.state, applies the change only if the node is still
	// in this state (the health check decided on an older map).
	From   NodeState    `json:"from,omitempty"`
	Bucket *BucketProps `json:"bucket,omitempty"`
	Volume *VolumeSpec  `json:"volume,omitempty"`
	Drain  bool         `json:"drain,omitempty"`
	Writer string       `json:"writer,omitempty"` // volume.stale: the node whose writes the mirror missed
	// Covered, on volume.stale clearing Writer's mark, clears it only if
	// Writer is not the volume's writer now and the volume's claim is
	// still Epoch: the caller resynchronised the mirror in full, in a
	// resync that began under that claim, since it saw the mark; a writer
	// that claimed the volume in between may have missed more.
	Covered bool   `json:"covered,omitempty"`
	Epoch   uint64 `json:"epoch,omitempty"`
	// IfEpoch, on volume.claim, makes the claim only if the volume's
	// claim is still the one of this epoch (0: never claimed): the
	// claimer decided on it, and another node may have claimed the volume
	// since. Claims without it (older log entries) always apply.
	IfEpoch *uint64 `json:"ifEpoch,omitempty"`
	// At is when the leader proposed the command (by its clock): a
	// node's StateSince. Zero in older log entries.
	At time.Time `json:"at,omitzero"`
}

func decodeCommand(b []byte) (command, error) {
	var c command
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("%w: bad command: %v", ErrInvalid, err)
	}
	return c, nil
}

// applyCommand returns the map that results from applying c to m. It returns
// m itself (same pointer) when c changes nothing or fails; otherwise a new map
// with Version+1. m is never modified.
func applyCommand(m *Map, c command) (*Map, error) {
	var mut func(n *Map) error
	switch c.Op {
	case opNodePut:
		if c.Node == nil || c.Node.ID == "" {
			return m, fmt.Errorf("%w: node.put without a node", ErrInvalid)
		}
		nn := c.Node.Clone()
		old, ok := m.Nodes[c.Node.ID]
		if ok {
			nn.Downs = max(nn.Downs, old.Downs)               // the count survives re-announcements
			nn.Draining, nn.Drains = old.Draining, old.Drains // and so does a drain
			// And maintenance, and the first join's time: decided here,
			// not on the joiner's (maybe older) read of the map, so that
			// an operator's change that lands during a join stays.
			if old.State == StateMaintenance {
				nn.State = StateMaintenance
			}
			if !old.Joined.IsZero() {
				nn.Joined = old.Joined
			}
			nn.StateSince = old.StateSince
			if nn.State != old.State {
				nn.StateSince = c.At
			}
			if nodeEqual(old, nn) {
				return m, nil
			}
		}
		removed, wasRemoved := m.RemovedDowns[c.Node.ID]
		if !ok && wasRemoved {
			nn.Downs = max(nn.Downs, removed) // and a removal
		}
		if !ok {
			nn.StateSince = c.At
		}
		mut = func(n *Map) error {
			n.Nodes[c.Node.ID] = nn
			if wasRemoved {
				delete(n.RemovedDowns, c.Node.ID)
			}
			return nil
		}
	case opNodeState:
		old, ok := m.Nodes[c.Name]
		if !ok {
			return m, fmt.Errorf("%w: %q", ErrNodeNotFound, c.Name)
		}
		if !c.State.Valid() {
			return m, fmt.Errorf("%w: node state %q", ErrInvalid, c.State)
		}
		if old.State == c.State || c.From != "" && old.State != c.From {
			return m, nil
		}
		mut = func(n *Map) error {
			// Downs counts the times the node went away: down, or out of
			// placement for maintenance (writes and deletes of its keys go
			// elsewhere meanwhile, so its copies are checked when it is
			// back).
			if c.State == StateDown || old.State == StateUp && c.State != StateUp {
				old.Downs++
			}
			old.State, old.StateSince = c.State, c.At
			n.Nodes[c.Name] = old
			return nil
		}
	case opNodeDrain:
		old, ok := m.Nodes[c.Name]
		if !ok {
			return m, fmt.Errorf("%w: %q", ErrNodeNotFound, c.Name)
		}
		if old.Draining == c.Drain {
			return m, nil
		}
		mut = func(n *Map) error {
			old.Draining = c.Drain
			old.Drains++
			n.Nodes[c.Name] = old
			if !c.Drain {
				undrainVolumes(n, c.Name)
			}
			replaceVolumes(n)
			return nil
		}
	case opNodeVoter:
		if c.Node == nil || c.Node.ID == "" {
			return m, fmt.Errorf("%w: node.voter without a node", ErrInvalid)
		}
		old, ok := m.Nodes[c.Node.ID]
		if !ok {
			return m, fmt.Errorf("%w: %q", ErrNodeNotFound, c.Node.ID)
		}
		if old.Voter == c.Node.Voter {
			return m, nil
		}
		mut = func(n *Map) error {
			old.Voter = c.Node.Voter
			n.Nodes[c.Node.ID] = old
			return nil
		}
	case opNodeRemove:
		old, ok := m.Nodes[c.Name]
		if !ok {
			return m, nil
		}
		mut = func(n *Map) error {
			delete(n.Nodes, c.Name)
			replaceVolumes(n)
			if n.RemovedDowns == nil {
				n.RemovedDowns = map[string]uint64{}
			}
			n.RemovedDowns[c.Name] = old.Downs + 1
			return nil
		}
	case opBucketCreate:
		if c.Bucket == nil {
			return m, fmt.Errorf("%w: bucket.create without props", ErrInvalid)
		}
		if old, ok := m.Buckets[c.Bucket.Name]; ok {
			if bucketEqual(old, *c.Bucket) {
				return m, nil // a retried proposal of the same create
			}
			return m, fmt.Errorf("%w: %q", object.ErrBucketExists, c.Bucket.Name)
		}
		mut = func(n *Map) error { n.Buckets[c.Bucket.Name] = *c.Bucket; return nil }
	case opBucketUpdate:
		if c.Bucket == nil {
			return m, fmt.Errorf("%w: bucket.update without props", ErrInvalid)
		}
		old, ok := m.Buckets[c.Bucket.Name]
		if !ok {
			return m, fmt.Errorf("%w: %q", object.ErrBucketNotFound, c.Bucket.Name)
		}
		nb := *c.Bucket
		nb.Created = old.Created
		if bucketEqual(old, nb) {
			return m, nil
		}
		mut = func(n *Map) error { n.Buckets[nb.Name] = nb; return nil }
	case opBucketDelete:
		if _, ok := m.Buckets[c.Name]; !ok {
			return m, fmt.Errorf("%w: %q", object.ErrBucketNotFound, c.Name)
		}
		mut = func(n *Map) error { delete(n.Buckets, c.Name); return nil }
	case opVolumePut:
		if c.Volume == nil {
			return m, fmt.Errorf("%w: volume.put without a spec", ErrInvalid)
		}
		nv := *c.Volume
		if old, ok := m.Volumes[nv.Name]; ok {
			// Checked here, not only by the caller on its (maybe lagging)
			// map: a second create of the name, or a resize that raced
			// another, must not change a volume's layout under its data.
			switch {
			case nv.ID != old.ID:
				return m, fmt.Errorf("%w: volume %q exists", ErrInvalid, nv.Name)
			case nv.ChunkSize != old.ChunkSize || nv.Copies != old.Copies || !slices.Equal(nv.Nodes, old.Nodes):
				return m, fmt.Errorf("%w: volume %q: only its size can change", ErrInvalid, nv.Name)
			case nv.Size < old.Size:
				return m, fmt.Errorf("%w: volume %q can only grow (%d < %d)", ErrInvalid, nv.Name, nv.Size, old.Size)
			}
			nv.Created, nv.Stale, nv.StaleBy = old.Created, old.Stale, old.StaleBy
			nv.Writer, nv.Epoch, nv.Prev, nv.Copied, nv.Lost = old.Writer, old.Epoch, old.Prev, old.Copied, old.Lost
			if old.equal(nv) {
				return m, nil
			}
		} else if nv.ID != "" && slices.Contains(m.DeletedVolumes, nv.Key()) {
			// A deleted volume never comes back: a resize (or a retried
			// create) that commits after its delete finds it gone.
			return m, fmt.Errorf("%w: %q was deleted", ErrVolumeNotFound, nv.Name)
		}
		mut = func(n *Map) error { n.Volumes[nv.Name] = nv; return nil }
	case opVolumeStale:
		v, ok := m.Volumes[c.Name]
		if !ok {
			return m, fmt.Errorf("%w: %q", ErrVolumeNotFound, c.Name)
		}
		if c.Node == nil || c.Node.ID == "" || c.State != StateUp && c.State != StateDown {
			return m, fmt.Errorf("%w: volume.stale needs a node and up or down", ErrInvalid)
		}
		if c.Covered && c.State == StateUp && (c.Writer != "" && c.Writer == v.Writer || c.Epoch != v.Epoch) {
			return m, nil
		}
		_, member := m.Nodes[c.Node.ID]
		if c.State == StateDown && len(v.Nodes) > 0 && !slices.Contains(v.Nodes, c.Node.ID) && !(member && slices.Contains(v.Prev, c.Node.ID)) {
			// No longer a mirror (removed while a write was in flight):
			// there is nothing to avoid or resynchronise. (A node drained
			// out of the set is written until the re-placement ends.)
			return m, nil
		}
		marks := setStaleMark(v.StaleMarks(), c.Node.ID, c.Writer, c.State == StateDown)
		if maps.EqualFunc(marks, v.StaleMarks(), slices.Equal) {
			return m, nil
		}
		mut = func(n *Map) error {
			v.setMarks(marks)
			n.Volumes[c.Name] = v
			return nil
		}
	case opVolumeClaim:
		v, ok := m.Volumes[c.Name]
		if !ok || c.Volume == nil || c.Volume.ID != v.ID {
			return m, fmt.Errorf("%w: %q", ErrVolumeNotFound, c.Name)
		}
		if c.Node == nil || c.Node.ID == "" {
			return m, fmt.Errorf("%w: volume.claim needs a node", ErrInvalid)
		}
		if v.Writer == c.Node.ID || c.IfEpoch != nil && *c.IfEpoch != v.Epoch {
			return m, nil // the caller finds the writer in the map
		}
		mut = func(n *Map) error {
			v.Writer = c.Node.ID
			v.Epoch++
			n.Volumes[c.Name] = v
			return nil
		}
	case opVolumePlaced:
		v, ok := m.Volumes[c.Name]
		if !ok || c.Volume == nil || c.Volume.ID != v.ID {
			return m, fmt.Errorf("%w: %q", ErrVolumeNotFound, c.Name)
		}
		if c.Node == nil || v.Prev == nil || v.Copied || !slices.Equal(c.Volume.Nodes, v.Nodes) || v.Writer != c.Node.ID || v.Epoch != c.Epoch {
			// Copied for another node set, or by a writer fenced off since.
			return m, fmt.Errorf("%w: volume %q: not re-placed by this writer for these nodes", ErrStalePlacement, c.Name)
		}
		mut = func(n *Map) error {
			chunks := (v.Size + v.ChunkSize - 1) / max(v.ChunkSize, 1)
			v.Lost = mergeChunks(v.Lost, slices.DeleteFunc(slices.Clone(c.Volume.Lost), func(ch int64) bool { return ch < 0 || ch >= chunks }))
			if dropsMembers(n, v) {
				// An old owner is still written (see Copied).
				v.Copied = true
			} else {
				v = replaceVolume(n, endPlacement(v))
			}
			n.Volumes[c.Name] = v
			return nil
		}
	case opVolumeSettled:
		v, ok := m.Volumes[c.Name]
		if !ok || c.Volume == nil || c.Volume.ID != v.ID {
			return m, fmt.Errorf("%w: %q", ErrVolumeNotFound, c.Name)
		}
		if c.Node == nil || !v.Copied || !slices.Equal(c.Volume.Nodes, v.Nodes) || v.Writer != c.Node.ID || v.Epoch != c.Epoch {
			return m, fmt.Errorf("%w: volume %q: no re-placement with its copies made by this writer for these nodes", ErrStalePlacement, c.Name)
		}
		mut = func(n *Map) error {
			n.Volumes[c.Name] = replaceVolume(n, endPlacement(v))
			return nil
		}
	case opVolumeRebalance:
		v, ok := m.Volumes[c.Name]
		if !ok || c.Volume == nil || c.Volume.ID != v.ID {
			return m, fmt.Errorf("%w: %q", ErrVolumeNotFound, c.Name)
		}
		if v.Prev != nil {
			return m, fmt.Errorf("%w: volume %q: a re-placement is in progress (see volume info); rebalance once it ends", ErrPlacementBusy, c.Name)
		}
		if len(v.Nodes) == 0 {
			// Placed on every member as the map lists them (a volume
			// of an older version): there is no set to grow.
			return m, fmt.Errorf("%w: volume %q is placed on every member already", ErrInvalid, c.Name)
		}
		add := rebalanceAdds(m, v)
		if len(add) == 0 {
			return m, nil
		}
		mut = func(n *Map) error {
			v.Prev, v.Nodes, v.Since = v.Nodes, slices.Sorted(slices.Values(slices.Concat(v.Nodes, add))), c.Volume.Since
			n.Volumes[c.Name] = v
			return nil
		}
	case opVolumeAcceptLoss:
		v, ok := m.Volumes[c.Name]
		if !ok || c.Volume == nil || c.Volume.ID != v.ID {
			return m, fmt.Errorf("%w: %q", ErrVolumeNotFound, c.Name)
		}
		accepted := slices.Sorted(slices.Values(c.Volume.Lost))
		left := slices.DeleteFunc(slices.Clone(v.Lost), func(ch int64) bool { _, ok := slices.BinarySearch(accepted, ch); return ok })
		if len(left) == len(v.Lost) {
			return m, nil
		}
		if len(left) == 0 {
			left = nil
		}
		mut = func(n *Map) error {
			v.Lost = left
			n.Volumes[c.Name] = v
			return nil
		}
	case opVolumeDelete:
		old, ok := m.Volumes[c.Name]
		if !ok || c.Volume != nil && c.Volume.ID != old.ID {
			// With an ID, only that volume goes: not one created since
			// under the same name.
			return m, fmt.Errorf("%w: %q", ErrVolumeNotFound, c.Name)
		}
		mut = func(n *Map) error {
			delete(n.Volumes, c.Name)
			n.DeletedVolumes = append(n.DeletedVolumes, old.Key())
			if extra := len(n.DeletedVolumes) - maxDeletedVolumes; extra > 0 {
				n.DeletedVolumes = n.DeletedVolumes[extra:]
			}
			return nil
		}
	default:
		return m, fmt.Errorf("%w: unknown operation %q", ErrInvalid, c.Op)
	}
	n := m.Clone()
	if err := mut(n); err != nil {
		return m, err
	}
	n.Version++
	return n, nil
}

// replaceVolumes re-places every volume of n that has a node no longer a
// member of n, or a member being drained (see replaceVolume).
func replaceVolumes(n *Map) {
	for name, v := range n.Volumes {
		n.Volumes[name] = replaceVolume(n, v)
	}
}

// replaceVolume takes out of v's node set the nodes that are no longer
// members of n, if v has Copies >= 2 (with one copy there is nothing to
// copy from), and the members being drained, and records the set its
// chunks are on in Prev, if v keeps at least Copies nodes; failing that,
// it takes out only the removed nodes, if that keeps Copies. The removed
// nodes' own stale marks go with them; a drained node keeps its marks,
// since it is written until the re-placement ends. A re-placement whose
// copies are all made (Copied) ends first. While one is copying, nothing
// changes: a node removed or drained meanwhile stays in the set until it
// ends (volume.placed), which then starts the next one from a set whose
// every other owner holds its copies.
func replaceVolume(n *Map, v VolumeSpec) VolumeSpec {
	if v.Copied {
		v = endPlacement(v)
	}
	if v.Prev != nil {
		return v
	}
	removed := func(id string) bool { _, ok := n.Nodes[id]; return !ok && v.Copies >= 2 }
	rest := slices.DeleteFunc(slices.Clone(v.Nodes), func(id string) bool { return removed(id) || n.Nodes[id].Draining })
	if len(rest) < v.Copies {
		rest = slices.DeleteFunc(slices.Clone(v.Nodes), removed)
	}
	if len(rest) == len(v.Nodes) || len(rest) < v.Copies {
		return v
	}
	v.Prev, v.Nodes = v.Nodes, rest
	marks := v.StaleMarks()
	for id := range marks {
		if removed(id) {
			delete(marks, id)
		}
	}
	v.setMarks(marks)
	return v
}

// dropsMembers reports whether v's re-placement takes chunks off nodes
// that are still members of n: nodes drained out of the set, or, when
// the set grew (a rebalance), the owners HRW replaces with the new nodes.
// Those are written until the re-placement ends (see Copied); a set that
// only lost removed nodes has no such owner.
func dropsMembers(n *Map, v VolumeSpec) bool {
	for _, id := range v.Prev {
		if _, member := n.Nodes[id]; member && !slices.Contains(v.Nodes, id) {
			return true
		}
	}
	return slices.ContainsFunc(v.Nodes, func(id string) bool { return !slices.Contains(v.Prev, id) })
}

// rebalanceAdds lists, sorted, the members of m that take placements
// and are not in v's node set: those a rebalance adds.
func rebalanceAdds(m *Map, v VolumeSpec) []string {
	var add []string
	for _, id := range m.NodeIDs() {
		if n := m.Nodes[id]; n.Places() && !slices.Contains(v.Nodes, id) {
			add = append(add, id)
		}
	}
	return add
}

// endPlacement ends v's re-placement: Prev goes, and with it the stale
// marks of the nodes no longer in the set.
func endPlacement(v VolumeSpec) VolumeSpec {
	v.Prev, v.Copied, v.Since = nil, false, time.Time{}
	marks := v.StaleMarks()
	for id := range marks {
		if !slices.Contains(v.Nodes, id) {
			delete(marks, id)
		}
	}
	v.setMarks(marks)
	return v
}

// undrainVolumes gives back to node id, no longer draining, the volumes
// whose re-placement off it is still copying: their set goes back to
// Prev, on whose every member that is still in the cluster the chunks
// are current (it was written throughout). A re-placement whose copies
// are all made ends instead: the node keeps none of those chunks.
func undrainVolumes(n *Map, id string) {
	for name, v := range n.Volumes {
		if !slices.Contains(v.Prev, id) || slices.Contains(v.Nodes, id) {
			continue
		}
		if !v.Copied {
			v.Nodes = v.Prev
		}
		n.Volumes[name] = endPlacement(v)
	}
}

// mergeChunks returns the sorted union of the chunk lists a (sorted) and
// b, without duplicates; a is not modified.
func mergeChunks(a, b []int64) []int64 {
	if len(b) == 0 {
		return a
	}
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}

func nodeEqual(a, b NodeInfo) bool {
	return a.sameIdentity(b) && a.State == b.State && a.Voter == b.Voter && a.Joined.Equal(b.Joined) && a.Downs == b.Downs && a.Draining == b.Draining && a.Drains == b.Drains &&
		a.StateSince.Equal(b.StateSince)
}

func bucketEqual(a, b BucketProps) bool {
	return a.Name == b.Name && a.Created.Equal(b.Created) && a.Copies == b.Copies &&
		a.Mode == b.Mode && a.Backend == b.Backend && a.Validate == b.Validate
}

// fsm is the raft state machine: it holds the current map and publishes
// every new version to the watchers.
type fsm struct {
	pub *publisher
	// hold, when set (only by tests), holds every command back until the
	// channel is closed: the applied state then lags the log.
	hold atomic.Pointer[chan struct{}]
}

var _ raft.FSM = (*fsm)(nil)

// Apply applies one log entry. It returns nil or an error value, which the
// proposer reads from the ApplyFuture's Response.
func (f *fsm) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	if h := f.hold.Load(); h != nil {
		<-*h
	}
	c, err := decodeCommand(l.Data)
	if err != nil {
		return err
	}
	cur := f.pub.current()
	next, err := applyCommand(cur, c)
	if next != cur {
		f.pub.publish(next)
	}
	return err
}

// Snapshot captures the current map; the map is immutable, so no copy is needed.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	return &fsmSnapshot{m: f.pub.current()}, nil
}

// Restore replaces the state with a snapshot.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	m := NewMap()
	if err := json.NewDecoder(rc).Decode(m); err != nil {
		return fmt.Errorf("cluster: restore snapshot: %w", err)
	}
	if m.Nodes == nil {
		m.Nodes = map[string]NodeInfo{}
	}
	if m.Buckets == nil {
		m.Buckets = map[string]BucketProps{}
	}
	if m.Volumes == nil {
		m.Volumes = map[string]VolumeSpec{}
	}
	f.pub.publish(m)
	return nil
}

type fsmSnapshot struct{ m *Map }

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode(s.m); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("cluster: write snapshot: %w", err)
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}

// publisher holds the latest map and wakes watchers when it changes. publish
// never blocks.
type publisher struct {
	mu      sync.Mutex
	m       *Map
	changed chan struct{} // closed and replaced on every publish
}

func newPublisher() *publisher {
	return &publisher{m: NewMap(), changed: make(chan struct{})}
}

func (p *publisher) current() *Map {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m
}

// snapshot returns the current map and a channel closed when it is replaced.
func (p *publisher) snapshot() (*Map, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m, p.changed
}

func (p *publisher) publish(m *Map) {
	p.mu.Lock()
	p.m = m
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// setStaleMark returns marks (mirror -> writers) with writer's mark on
// mirror set or cleared. Clearing the writer "" clears every writer's mark
// on the mirror (an operator's override).
func setStaleMark(marks map[string][]string, mirror, writer string, stale bool) map[string][]string {
	ws := marks[mirror]
	switch {
	case stale && !slices.Contains(ws, writer):
		ws = append(ws, writer)
		slices.Sort(ws)
	case !stale && writer == "":
		ws = nil
	case !stale:
		ws = slices.DeleteFunc(ws, func(w string) bool { return w == writer })
	}
	if len(ws) == 0 {
		delete(marks, mirror)
	} else {
		marks[mirror] = ws
	}
	return marks
}
