package node

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/config"
	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/peer"
	"github.com/slipstream-io/slipstream/internal/placement"
	"github.com/slipstream-io/slipstream/internal/seclink"
	"github.com/slipstream-io/slipstream/internal/volume"
	"github.com/slipstream-io/slipstream/internal/volume/nbd"
)

// volumes serves this node's part of the block volumes: its chunk replica
// (to the other nodes, under /volume/ on the intra listeners) and an NBD
// export of every volume of the cluster map (on the node's NBD addresses).
type volumes struct {
	self     string
	meta     mapView
	marks    volumeMarker // records mirrors that missed writes in the map
	local    *volume.Local
	handler  *volume.Handler
	stateDir string
	secret   string           // the cluster secret, sent to other nodes' chunk endpoints
	dial     seclink.DialFunc // to other nodes' intra addresses
	log      *slog.Logger
	// sync catches this node's map up with the leader's before a volume
	// is opened (nil: no-op).
	sync func(ctx context.Context) error
	// electionWait is how long Lookup waits for a leader when there is
	// none (an election, after the leader stopped) before it refuses to
	// open a volume.
	electionWait time.Duration
	// born is when this node's volume state began (zero: unknown, older).
	born time.Time

	mu   sync.Mutex
	open map[string]openVolume // by name
	// claiming names the volumes this node is claiming to re-place them.
	claiming map[string]bool
	clients  map[string]*volume.Client
	server   *nbd.Server
	// metrics, if set, measures the NBD server's requests.
	metrics *nbdMetrics
	// dropped: keys of volumes dropMoved has checked and holds nothing
	// of (used by collect's goroutine only).
	dropped map[string]bool
	// swept: the node set each volume's chunks were last swept for
	// (sweepMoved; used by collect's goroutine only), and how long after
	// a re-placement ends they are.
	swept      map[string]string
	sweepDelay time.Duration
}

type openVolume struct {
	spec cluster.VolumeSpec
	vol  *volume.Volume
}

// toVolumeSpec converts the cluster's volume record.
func toVolumeSpec(v cluster.VolumeSpec) volume.Spec {
	return volume.Spec{Name: v.Name, Size: v.Size, ChunkSize: v.ChunkSize, Copies: v.Copies, ID: v.ID}
}

// replica returns the chunk replica of node id.
func (vs *volumes) replica(m *cluster.Map, id string) volume.Replica {
	if id == vs.self {
		return vs.local
	}
	if c, ok := vs.clients[id]; ok {
		return c
	}
	ni, _ := m.Node(id)
	base := ""
	if len(ni.IntraAddrs) > 0 {
		base = cluster.BaseURL(ni.IntraAddrs[0])
	}
	var hdr http.Header
	if vs.secret != "" {
		hdr = http.Header{peer.SecretHeader: {vs.secret}}
	}
	c, err := volume.NewClientConfig(volume.ClientConfig{BaseURL: base, Header: hdr, Dial: vs.dial, Addrs: vs.addrsOf(id)})
	if err != nil {
		vs.log.Warn("volume replica client", "peer", id, "err", err)
		c = volume.NewClient(base, nil)
	}
	vs.clients[id] = c
	return c
}

// addrsOf returns node id's intra addresses as the map shows them now:
// its chunk client keeps a stream connection to each (multihoming), and
// dials them in turn when one does not answer, or when the node came back
// on other addresses (a new machine under the ID of a dead one).
func (vs *volumes) addrsOf(id string) func() []string {
	return func() []string {
		ni, _ := vs.meta.Map().Node(id)
		return ni.IntraAddrs
	}
}

// Lookup implements nbd.Exports: it opens the volume once, with a replica
// for each node it is placed on. A node holds one Volume per volume: a
// resize grows the open one in place (connections opened before keep
// their size), so that its stale maps and unsynced writes are never split
// between two Volumes over one stale file.
//
// The map is first caught up with the leader's: a volume created through
// another node a moment ago is found, and the volume's stale marks are all
// there. A node that just restarted applies the map entries after its raft
// snapshot only once a leader reaches it; a volume opened from that older
// map could read this node's mirror of a chunk it missed writes to while
// it was down. If the leader cannot be asked, the volume is not opened.
func (vs *volumes) Lookup(ctx context.Context, name string) (nbd.Device, error) {
	if vs.sync != nil {
		err := vs.sync(ctx)
		for until := time.Now().Add(vs.electionWait); errors.Is(err, cluster.ErrNoLeader) && time.Now().Before(until); err = vs.sync(ctx) {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
		if err != nil {
			return nil, fmt.Errorf("volume %q: this node's map may be behind, and the leader could not be asked: %w", name, err)
		}
	}
	return vs.lookup(name)
}

// lookup is Lookup from this node's map as it is.
func (vs *volumes) lookup(name string) (nbd.Device, error) {
	m := vs.meta.Map()
	spec, ok := m.Volume(name)
	if !ok && name == "" && len(m.Volumes) == 1 {
		for _, v := range m.Volumes {
			spec, ok = v, true
		}
	}
	if !ok {
		return nil, fmt.Errorf("%w: %q", nbd.ErrUnknownExport, name)
	}
	vs.mu.Lock()
	defer vs.mu.Unlock()
	if ov, ok := vs.open[spec.Name]; ok && ov.spec.ID == spec.ID {
		if ov.spec.Size != spec.Size {
			if err := ov.vol.Grow(spec.Size); err != nil {
				return nil, err
			}
			ov.spec = spec
			vs.open[spec.Name] = ov
		}
		vs.noteMap(ov.vol, m, spec)
		return ov.vol, nil
	}
	nodes := spec.Nodes
	if len(nodes) == 0 {
		nodes = m.NodeIDs()
	}
	reps := map[string]volume.Replica{}
	for _, id := range slices.Concat(nodes, spec.Prev) {
		reps[id] = vs.replica(m, id)
	}
	cfg := volume.Config{
		Spec: toVolumeSpec(spec), Nodes: nodes, Prev: spec.Prev, Copied: spec.Copied, Self: vs.self, Replicas: reps,
		StateDir: filepath.Join(vs.stateDir, spec.Key()), Logger: vs.log,
		Stale: spec.StaleMarks(), Lost: spec.Lost,
	}
	if vs.marks != nil {
		sm := staleMarks{m: vs.marks, name: spec.Name, id: spec.ID, self: vs.self, meta: vs.meta}
		cfg.Marks, cfg.Claims, cfg.Writer, cfg.Epoch = sm, sm, spec.Writer, spec.Epoch
		cfg.Placed = sm.Placed
		cfg.Settle = func(ctx context.Context, nodes []string, epoch uint64) error {
			return vs.settle(ctx, spec.Name, spec.ID, nodes, epoch)
		}
		cfg.Forward = vs
		cfg.MapVersion = func() uint64 { return vs.meta.Map().Version }
	}
	v, err := volume.Open(context.Background(), cfg)
	if err != nil {
		return nil, err
	}
	v.NoteVersion(m.Version)
	v.NoteGone(goneOf(m, slices.Concat(spec.Nodes, spec.Prev)))
	if cur := vs.meta.Map(); cur.Version > m.Version {
		// collect may have noted a newer map before this one was opened,
		// and told the other nodes (volume.Handler.NoteSeen) that every
		// volume here took it in.
		if s2, ok := cur.Volume(spec.Name); ok && s2.ID == spec.ID {
			vs.noteMap(v, cur, s2)
		}
	}
	if old, ok := vs.open[spec.Name]; ok {
		old.vol.Close() // a deleted volume of the same name
	}
	vs.open[spec.Name] = openVolume{spec: spec, vol: v}
	return v, nil
}

// Forward implements volume.Forwarder over the chunk clients.
func (vs *volumes) Forward(ctx context.Context, node, vol string, op volume.Op) (uint64, error) {
	vs.mu.Lock()
	r := vs.replica(vs.meta.Map(), node)
	vs.mu.Unlock()
	c, ok := r.(*volume.Client)
	if !ok {
		return 0, fmt.Errorf("%w: %s is this node", volume.ErrNotWriter, node)
	}
	return c.Forward(ctx, vol, op)
}

// coordinator returns the open volume whose key is key (nil if none): the
// one ops forwarded by other nodes go to.
func (vs *volumes) coordinator(key string) *volume.Volume {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	for _, ov := range vs.open {
		if ov.spec.Key() == key {
			return ov.vol
		}
	}
	return nil
}

// List implements nbd.Exports.
func (vs *volumes) List(ctx context.Context) ([]string, error) {
	return vs.meta.Map().VolumeNames(), nil
}

var _ nbd.Exports = (*volumes)(nil)

// serve starts the NBD server on every configured address and socket.
// With tlsCfg, clients of addrs must start TLS first.
func (vs *volumes) serve(ctx context.Context, addrs []string, socket string, tlsCfg *tls.Config) error {
	cfg := nbd.Config{Exports: vs, TLS: tlsCfg}
	if vs.metrics != nil {
		cfg.Observe = vs.metrics.observe
	}
	srv, err := nbd.NewServer(cfg)
	if err != nil {
		return err
	}
	vs.mu.Lock()
	vs.server = srv
	vs.mu.Unlock()
	var lns []net.Listener
	for _, a := range addrs {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			closeListeners(lns)
			return fmt.Errorf("nbd listen %s: %w", a, err)
		}
		lns = append(lns, ln)
	}
	if socket != "" {
		_ = os.Remove(socket) // a stale socket of an earlier run
		ln, err := net.Listen("unix", socket)
		if err != nil {
			closeListeners(lns)
			return fmt.Errorf("nbd listen %s: %w", socket, err)
		}
		lns = append(lns, ln)
	}
	for _, ln := range lns {
		go func(ln net.Listener) { _ = srv.Serve(ctx, ln) }(ln)
	}
	return nil
}

func closeListeners(lns []net.Listener) {
	for _, l := range lns {
		l.Close()
	}
}

// stopServing stops the NBD server: it stops reading requests and answers
// those in flight.
func (vs *volumes) stopServing() {
	if vs.server != nil {
		_ = vs.server.Close()
	}
}

// close stops the NBD server and closes the open volumes.
func (vs *volumes) close() error {
	var errs []error
	if vs.server != nil {
		errs = append(errs, vs.server.Close())
	}
	vs.mu.Lock()
	for _, ov := range vs.open {
		errs = append(errs, ov.vol.Close())
	}
	vs.open = map[string]openVolume{}
	vs.mu.Unlock()
	if vs.handler != nil {
		errs = append(errs, vs.handler.Close())
	}
	return errors.Join(errs...)
}

// volumeMarker records in the cluster map which mirrors of a volume missed
// writes, and which node writes it (the cluster implements it).
type volumeMarker interface {
	SetVolumeStale(ctx context.Context, name, mirror, writer string, stale bool) error
	ClearCoveredMark(ctx context.Context, name, mirror, writer string, epoch uint64) error
	ClaimVolume(ctx context.Context, name, id, node string, from uint64) (cluster.VolumeSpec, error)
	VolumePlaced(ctx context.Context, name, id, node string, epoch uint64, nodes []string, lost []int64) error
	VolumeSettled(ctx context.Context, name, id, node string, epoch uint64, nodes []string) error
}

// staleMarks is one volume's volume.StaleMarks and volume.Claims on this
// node.
type staleMarks struct {
	m    volumeMarker
	name string
	id   string
	self string
	meta interface{ Map() *cluster.Map }
}

// Claim implements volume.Claims.
func (s staleMarks) Claim(ctx context.Context, from uint64) (uint64, error) {
	v, err := s.m.ClaimVolume(ctx, s.name, s.id, s.self, from)
	if err != nil {
		return 0, err
	}
	if v.Writer != s.self {
		return 0, fmt.Errorf("%w: %s holds claim %d (this node took it to be %d)", volume.ErrFenced, v.Writer, v.Epoch, from)
	}
	return v.Epoch, nil
}

// Placed ends the volume's re-placement (volume.Config.Placed).
func (s staleMarks) Placed(ctx context.Context, nodes []string, epoch uint64, lost []int64) error {
	return s.m.VolumePlaced(ctx, s.name, s.id, s.self, epoch, nodes, lost)
}

func (s staleMarks) SetStale(ctx context.Context, mirror string, stale bool) error {
	return s.m.SetVolumeStale(ctx, s.name, mirror, s.self, stale)
}

// ClearCovered clears the marks of the writers that can no longer write
// the volume: those another node claimed it from since (their writes are
// fenced off), and, of a volume no node claimed, those the map holds
// down. A node that may still write clears its own mark. The cluster
// checks again, as it applies the change, that the writer is not the
// volume's writer by then and that the volume's claim is still epoch.
func (s staleMarks) ClearCovered(ctx context.Context, mirror string, writers []string, epoch uint64) error {
	m := s.meta.Map()
	spec, _ := m.Volume(s.name)
	for _, w := range writers {
		n, ok := m.Node(w)
		switch {
		case w == s.self || w != "" && w == spec.Writer:
			continue
		case spec.Writer == "" && ok && n.State != cluster.StateDown:
			continue
		}
		if err := s.m.ClearCoveredMark(ctx, s.name, mirror, w, epoch); err != nil {
			return err
		}
	}
	return nil
}

// newVolumeID returns a random ID that tells a volume from earlier ones
// of the same name.
func newVolumeID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// collect follows the map until ctx ends: it tells the open volumes which
// mirrors the map marks stale, and removes what this node still keeps of
// deleted volumes (it was away for the delete, or the delete's call to it
// failed): their chunks, stale maps and open handles.
func (vs *volumes) collect(ctx context.Context) {
	for m := range vs.meta.Watch(ctx) {
		vs.noteStale(ctx, m)
		vs.dropMoved(ctx, m)
		vs.sweepMoved(ctx, m)
		if len(m.DeletedVolumes) == 0 {
			continue
		}
		deleted := map[string]bool{}
		for _, k := range m.DeletedVolumes {
			deleted[k] = true
		}
		vs.mu.Lock()
		for name, ov := range vs.open {
			if deleted[ov.spec.Key()] {
				ov.vol.Close()
				delete(vs.open, name)
			}
		}
		vs.mu.Unlock()
		keys, err := vs.local.Keys()
		if err != nil {
			vs.log.Warn("listing volume chunks", "err", err)
		}
		if ents, err := os.ReadDir(vs.stateDir); err == nil {
			for _, e := range ents {
				if !slices.Contains(keys, e.Name()) {
					keys = append(keys, e.Name())
				}
			}
		}
		for _, k := range keys {
			if !deleted[k] {
				continue
			}
			err := errors.Join(vs.local.Delete(ctx, k), os.RemoveAll(filepath.Join(vs.stateDir, k)))
			if err != nil {
				vs.log.Warn("removing a deleted volume's chunks", "volume", k, "err", err)
				continue
			}
			vs.log.Info("removed the chunks of a volume deleted while this node was away", "volume", k)
		}
	}
}

// dropMoved removes, sweepDelay after it sees it, this node's chunks of
// the volumes of m whose set it has left for good: drained out of it, the
// re-placement ended (the writers no longer write it, once a write sent
// before the end has landed; no node reads it). Its copies of a volume it
// still serves over NBD are not needed for that: the volume reads and
// writes its set's mirrors.
func (vs *volumes) dropMoved(ctx context.Context, m *cluster.Map) {
	var specs []cluster.VolumeSpec
	for _, spec := range m.Volumes {
		if len(spec.Nodes) > 0 && !slices.Contains(spec.Nodes, vs.self) && !slices.Contains(spec.Prev, vs.self) && !vs.dropped[spec.Key()] {
			specs = append(specs, spec)
		}
	}
	if len(specs) == 0 {
		return
	}
	held, err := vs.local.Keys()
	if err != nil {
		vs.log.Warn("listing volume chunks", "err", err)
		return
	}
	if vs.dropped == nil {
		vs.dropped = map[string]bool{}
	}
	for _, spec := range specs {
		k := spec.Key()
		// Checked once: a volume this node never held (created before it
		// joined, or without it) does not list the chunks again at every
		// change of the map.
		vs.dropped[k] = true
		if !slices.Contains(held, k) {
			continue
		}
		vs.later(ctx, func() {
			cur, ok := vs.meta.Map().Volume(spec.Name)
			if ok && cur.ID == spec.ID && (slices.Contains(cur.Nodes, vs.self) || slices.Contains(cur.Prev, vs.self)) {
				return // back in the set (a rebalance)
			}
			if err := vs.local.Delete(ctx, k); err != nil {
				vs.log.Warn("removing the chunks of a volume moved off this node", "volume", k, "err", err)
				return
			}
			vs.log.Info("removed the chunks of a volume moved off this node", "volume", k)
		})
	}
}

// later runs f sweepDelay from now, unless ctx ends first.
func (vs *volumes) later(ctx context.Context, f func()) {
	go func() {
		select {
		case <-ctx.Done():
			return
		case <-time.After(vs.sweepDelay):
		}
		f()
	}()
}

// sweepDelay is how long after a re-placement's end a node deletes the
// chunks it no longer holds for the volume (sweepMoved, dropMoved): a
// write the writer sent before the end may still be on its way (bounded
// by the replica timeout), and would create the chunk file again.
const sweepDelay = 15 * time.Second

// sweepMoved deletes, sweepDelay after it sees the re-placement of a
// volume of m end, this node's chunks of the volume that HRW over its set
// no longer gives it: those a rebalance or drain moved to other nodes,
// and copies a newcomer got before a drain was called off. It checks
// each volume once per node set (used by collect's goroutine only).
func (vs *volumes) sweepMoved(ctx context.Context, m *cluster.Map) {
	if vs.swept == nil {
		vs.swept = map[string]string{}
	}
	for _, spec := range m.Volumes {
		set := strings.Join(spec.Nodes, ",")
		if spec.Prev != nil || !slices.Contains(spec.Nodes, vs.self) || vs.swept[spec.Key()] == set {
			continue
		}
		vs.swept[spec.Key()] = set
		vs.later(ctx, func() { vs.sweep(spec) })
	}
}

// sweep deletes this node's chunks of volume spec that HRW over its node
// set does not give it, if the map still shows that set with no
// re-placement in progress.
func (vs *volumes) sweep(spec cluster.VolumeSpec) {
	cur, ok := vs.meta.Map().Volume(spec.Name)
	if !ok || cur.ID != spec.ID || cur.Prev != nil || !slices.Equal(cur.Nodes, spec.Nodes) {
		return
	}
	chunks, err := vs.local.Chunks(spec.Key())
	if err != nil {
		vs.log.Warn("listing a volume's chunks", "volume", spec.Name, "err", err)
		return
	}
	dropped := 0
	for _, c := range chunks {
		if slices.Contains(placement.Owners(cur.Nodes, volume.ChunkName(cur.Name, c), cur.Copies), vs.self) {
			continue
		}
		if err := vs.local.DropChunk(spec.Key(), c); err != nil {
			vs.log.Warn("removing a chunk moved off this node", "volume", spec.Name, "chunk", c, "err", err)
			continue
		}
		dropped++
	}
	if dropped > 0 {
		vs.log.Info("removed the chunks moved off this node", "volume", spec.Name, "chunks", dropped)
	}
}

// noteMap tells v the claim, lost chunks, placement and stale marks of
// spec, its record in map m (vs.mu held). The lost chunks come before the
// placement: the end of a re-placement that found chunks lost is also
// the end of the re-placement state that kept them lost on its writer.
// Nodes a rebalance added are given to v before the placement that uses
// them.
func (vs *volumes) noteMap(v *volume.Volume, m *cluster.Map, spec cluster.VolumeSpec) {
	v.NoteClaim(spec.Writer, spec.Epoch)
	v.NoteLost(spec.Lost)
	if len(spec.Nodes) > 0 {
		ids := slices.Concat(spec.Nodes, spec.Prev)
		v.NoteGone(goneOf(m, ids))
		v.AddMirrors(ids, func(id string) volume.Replica { return vs.replica(m, id) })
		v.NotePlacement(spec.Nodes, spec.Prev, spec.Copied)
	}
	v.NoteStaleAt(spec.StaleMarks(), m.Version)
}

// goneOf lists the nodes of ids that are not members of m, once each.
func goneOf(m *cluster.Map, ids []string) []string {
	var gone []string
	for _, id := range ids {
		if _, ok := m.Node(id); !ok && !slices.Contains(gone, id) {
			gone = append(gone, id)
		}
	}
	return gone
}

// noteStale passes the map's stale marks to the open volumes. A volume
// the map lists this node as a writer of, which it does not have open (it
// restarted), is opened: it resynchronises the chunks its stale map holds
// and clears its mark, which only it can do while it is up. So is a
// volume with stale marks whose claim this node holds, and one this node
// lost its chunks of.
func (vs *volumes) noteStale(ctx context.Context, m *cluster.Map) {
	vs.mu.Lock()
	var reopen []string
	for name, spec := range m.Volumes {
		ov, ok := vs.open[name]
		switch {
		case ok && spec.ID == ov.spec.ID:
			vs.noteMap(ov.vol, m, spec)
		case spec.MarkedBy(vs.self):
			reopen = append(reopen, name)
		case spec.Writer == vs.self && len(spec.Stale) > 0:
			// This node holds the claim, which fences every other node
			// off the resync, but it restarted since and has not opened
			// the volume again: marks another writer left (a node that
			// lost its chunks marks its own mirror) would wait for a
			// client to open it here.
			reopen = append(reopen, name)
		case slices.Contains(spec.Nodes, vs.self):
			// Chunks this node lost (a drive replaced, the node wiped):
			// the volume marks its mirror stale and has it resynchronised.
			if lost, err := vs.local.Lost(spec.Key()); err == nil && lost {
				reopen = append(reopen, name)
			}
		}
	}
	if vs.handler != nil {
		// Every volume open here has taken m in; one opened later starts
		// from a map at least as new.
		vs.handler.NoteSeen(m.Version)
	}
	vs.mu.Unlock()
	for _, name := range reopen {
		// No catch-up: the map that marked the volume is applied here.
		if _, err := vs.lookup(name); err != nil {
			vs.log.Warn("opening a volume to resynchronise the mirrors it marked stale", "volume", name, "err", err)
		}
	}
	for name, spec := range m.Volumes {
		if spec.Prev != nil && moverOf(m, spec) == vs.self {
			vs.move(ctx, name, spec)
		}
	}
}

// moverOf returns the node that copies the chunks of volume spec's
// re-placement: its writer while that one is a member and not down, else
// the first node of its set that is up (which claims the volume).
func moverOf(m *cluster.Map, spec cluster.VolumeSpec) string {
	if n, ok := m.Node(spec.Writer); ok && spec.Writer != "" && n.State != cluster.StateDown {
		return spec.Writer
	}
	for _, id := range spec.Nodes {
		if n, ok := m.Node(id); ok && n.State == cluster.StateUp {
			return id
		}
	}
	return ""
}

// move opens volume name, whose re-placement this node is to carry out,
// and claims it unless it holds the claim: its move loop then copies
// the chunks to their new owners, records them copied, and, when the
// re-placement takes chunks off nodes still in the cluster, ends it once
// no node reads those any more (settle).
func (vs *volumes) move(ctx context.Context, name string, spec cluster.VolumeSpec) {
	dev, err := vs.lookup(name)
	if err != nil {
		vs.log.Warn("opening a volume to re-place its chunks", "volume", name, "err", err)
		return
	}
	v, ok := dev.(*volume.Volume)
	if !ok || spec.Writer == vs.self || !v.Moving() && !spec.Copied {
		return
	}
	vs.mu.Lock()
	if vs.claiming[name] {
		vs.mu.Unlock()
		return
	}
	if vs.claiming == nil {
		vs.claiming = map[string]bool{}
	}
	vs.claiming[name] = true
	vs.mu.Unlock()
	go func() {
		defer func() {
			vs.mu.Lock()
			delete(vs.claiming, name)
			vs.mu.Unlock()
		}()
		if err := v.Claim(ctx); err != nil {
			vs.log.Warn("claiming a volume to re-place its chunks", "volume", name, "err", err)
			return
		}
		vs.log.Info("claimed the volume to copy its chunks to their new nodes", "volume", name)
	}()
}

// seenWait bounds how long settle waits for one node's answer.
const seenWait = 2 * time.Second

// settle ends the re-placement of volume name (ID id), whose copies to
// nodes the map records made, for this node, its writer under the claim
// of epoch (volume.Config.Settle). The old owners of the moved chunks are
// still written until then, and every node reads them until its volumes
// take in the map that records the copies; so every member of the
// cluster must answer first that its volumes have taken in this node's
// map (volume.Handler.NoteSeen), which holds it. A member that does not
// answer (down, cut off) holds the end back: the old owners are written
// meanwhile, which costs writes but no data; its removal ends the
// re-placement.
func (vs *volumes) settle(ctx context.Context, name, id string, nodes []string, epoch uint64) error {
	m := vs.meta.Map()
	vs.mu.Lock()
	type peer struct {
		id string
		c  *volume.Client
	}
	var peers []peer
	for _, nid := range m.NodeIDs() {
		if c, ok := vs.replica(m, nid).(*volume.Client); ok {
			peers = append(peers, peer{nid, c})
		}
	}
	vs.mu.Unlock()
	errs := make([]error, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, seenWait)
			defer cancel()
			ver, err := p.c.Seen(sctx)
			if err == nil && ver < m.Version {
				err = fmt.Errorf("its volumes have taken in map version %d, not %d yet", ver, m.Version)
			}
			if err != nil {
				errs[i] = fmt.Errorf("node %s: %w", p.id, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return vs.marks.VolumeSettled(ctx, name, id, vs.self, epoch, nodes)
}

// VolumeState is what an open volume on this node knows of its mirrors.
type VolumeState struct {
	Stale map[string]int `json:"stale"` // chunks each mirror missed, not yet resynchronised
	Down  []string       `json:"down"`  // mirrors that do not answer
	// Forwarded counts this node's clients' writes sent to the node that
	// holds the volume's claim; Applied those of other nodes' clients it
	// applied as the holder (since the volume was opened here).
	Forwarded int64 `json:"forwarded"`
	Applied   int64 `json:"appliedForOthers"`
	// Copying counts the chunk copies a re-placement (a node removed) has
	// still to make, on the node that makes them.
	Copying int `json:"copying,omitempty"`
	// Writer is whether this node holds the volume's claim: only the
	// writer knows which chunks a stale mirror missed; other nodes count
	// every chunk of it.
	Writer bool `json:"writer,omitempty"`
}

// states reports the mirror state of the volumes this node has open.
func (vs *volumes) states() map[string]VolumeState {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	out := map[string]VolumeState{}
	m := vs.meta.Map()
	for name, ov := range vs.open {
		sent, applied := ov.vol.Forwarded()
		spec, _ := m.Volume(name)
		out[name] = VolumeState{Stale: ov.vol.StaleChunks(), Down: ov.vol.Down(), Forwarded: sent, Applied: applied, Copying: ov.vol.CopiesLeft(),
			Writer: spec.Writer == vs.self}
	}
	return out
}

// VolumeInfo is the admin view of a volume.
type VolumeInfo struct {
	cluster.VolumeSpec
	Chunks int64 `json:"chunks"`
	// URIs are the NBD URIs of the volume on every node that serves NBD.
	URIs []string `json:"uris"`
	// ChunksPerNode counts the chunk copies each node holds.
	ChunksPerNode map[string]int64 `json:"chunksPerNode"`
	// Placement lists, for the first chunks, the nodes holding each.
	Placement [][]string `json:"placement,omitempty"`
	// Removed lists the nodes the volume is placed on that are no longer
	// members of the cluster: their chunks are a copy short until a node
	// joins under that ID.
	Removed []string `json:"removed,omitempty"`
	// Copying counts, while a re-placement is in progress (Prev), the
	// chunk copies it makes on the volume's other nodes.
	Copying int64 `json:"copying,omitempty"`
	// Drained lists, while a re-placement is in progress, the nodes
	// drained out of the set: members still, written until it ends.
	Drained []string `json:"drained,omitempty"`
	// Added lists, while a re-placement is in progress, the nodes a
	// rebalance added to the set.
	Added []string `json:"added,omitempty"`
	// Down lists the members holding chunks of the volume that are not
	// up (down, or in maintenance).
	Down []string `json:"down,omitempty"`
	// Degraded counts the chunks with a copy on a node that is not up
	// (down, or gone from the cluster); Unavailable those with
	// none, whose reads and writes fail until a holder is back. While a
	// re-placement's copies are being made, a chunk's copies are on the
	// nodes it was placed on before.
	Degraded    int64 `json:"degraded,omitempty"`
	Unavailable int64 `json:"unavailable,omitempty"`
}

// VolumeCopies counts the chunk copies of one volume on one node.
type VolumeCopies struct {
	Volume string `json:"volume"`
	Copies int    `json:"copies"` // the volume's copies per chunk
	Chunks int64  `json:"chunks"` // chunks with a copy on the node
	// Replaced: removing the node re-places these chunks on the volume's
	// other nodes (cluster.VolumeSpec.Replaces).
	Replaced bool `json:"replaced,omitempty"`
	// Copying: the node is drained out of the volume's set and its
	// chunks (Chunks counts those it held) are still being copied off it.
	Copying bool `json:"copying,omitempty"`
}

// VolumesOn lists, by name, the volumes of m with chunk copies on node id.
// Removing the node re-places the chunks of those marked Replaced on
// their volume's other nodes; the others stay a copy short (and those of
// copies=1 volumes are lost) until a node joins under the same ID.
func VolumesOn(m *cluster.Map, id string) []VolumeCopies {
	var out []VolumeCopies
	names := slices.Sorted(maps.Keys(m.Volumes))
	for _, name := range names {
		v := m.Volumes[name]
		if n := volumeInfo(m, v, nil, 0).ChunksPerNode[id]; n > 0 {
			out = append(out, VolumeCopies{Volume: name, Copies: v.Copies, Chunks: n, Replaced: v.Replaces(id)})
		} else if !v.Copied && slices.Contains(v.Prev, id) {
			before := v
			before.Nodes, before.Prev = v.Prev, nil
			out = append(out, VolumeCopies{Volume: name, Copies: v.Copies, Chunks: volumeInfo(m, before, nil, 0).ChunksPerNode[id], Copying: true})
		}
	}
	return out
}

// volumeInfo computes where the volume's chunks live.
func volumeInfo(m *cluster.Map, v cluster.VolumeSpec, nbdURLs map[string][]string, listChunks int) VolumeInfo {
	nodes := v.Nodes
	if len(nodes) == 0 {
		nodes = m.NodeIDs()
	}
	spec := toVolumeSpec(v).WithDefaults()
	// Without a node set of its own, the volume is on the members.
	info := VolumeInfo{VolumeSpec: v, Chunks: spec.Chunks(), ChunksPerNode: map[string]int64{}, Removed: goneOf(m, v.Nodes)}
	for _, id := range v.Prev {
		if _, member := m.Node(id); member && !slices.Contains(v.Nodes, id) {
			info.Drained = append(info.Drained, id)
		}
	}
	for _, id := range v.Nodes {
		if v.Prev != nil && !slices.Contains(v.Prev, id) {
			info.Added = append(info.Added, id)
		}
	}
	up := map[string]bool{}
	for _, id := range append(slices.Clone(nodes), v.Prev...) {
		ni, ok := m.Node(id)
		up[id] = ok && ni.State == cluster.StateUp
		if ok && ni.State != cluster.StateUp && !slices.Contains(info.Down, id) {
			info.Down = append(info.Down, id)
		}
	}
	for i := int64(0); i < info.Chunks; i++ {
		name := volume.ChunkName(v.Name, i)
		owners := placement.Owners(nodes, name, v.Copies)
		for _, o := range owners {
			info.ChunksPerNode[o]++
		}
		holders := owners
		if v.Prev != nil && !v.Copied {
			before := placement.Owners(v.Prev, name, v.Copies)
			for _, o := range owners {
				if !slices.Contains(before, o) {
					info.Copying++
				}
			}
			holders = before
		}
		n := 0
		for _, id := range holders {
			if up[id] {
				n++
			}
		}
		switch {
		case n == 0:
			info.Unavailable++
			info.Degraded++
		case n < len(holders):
			info.Degraded++
		}
		if i < int64(listChunks) {
			info.Placement = append(info.Placement, owners)
		}
	}
	ids := make([]string, 0, len(nbdURLs))
	for id := range nbdURLs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		for _, u := range nbdURLs[id] {
			info.URIs = append(info.URIs, u+"/"+v.Name)
		}
	}
	return info
}

// initState makes the chunk replica keep an identity of each volume's
// chunks (volume.Local.SetState): chunks that vanish under it (a drive
// replaced, the node wiped and started again under its ID) are then
// noticed, never read as current, marked stale in the map and
// resynchronised. It runs before the node serves any chunk request.
func (vs *volumes) initState() {
	vs.born = vs.loadBorn()
	vs.local.SetState(vs.stateDir, vs.prior)
	vs.local.OnLost(func(key string) {
		for name, spec := range vs.meta.Map().Volumes {
			if spec.Key() == key {
				vs.log.Warn("this node lost its chunks of the volume; marking its mirror stale to resynchronise it", "volume", name)
				if _, err := vs.lookup(name); err != nil {
					vs.log.Warn("opening a volume to mark its lost chunks", "volume", name, "err", err)
				}
			}
		}
	})
}

// bornFile, in the volume state directory, holds when this node's volume
// state began (empty: before this was recorded).
const bornFile = "born"

// loadBorn returns when this node's volume state began, recording it the
// first time: now for a node that holds nothing of any volume (new, or
// wiped), the zero time for one that held volumes before this was kept.
func (vs *volumes) loadBorn() time.Time {
	p := filepath.Join(vs.stateDir, bornFile)
	if b, err := os.ReadFile(p); err == nil {
		t, _ := time.Parse(time.RFC3339Nano, string(b))
		return t
	}
	var born time.Time
	ents, _ := os.ReadDir(vs.stateDir)
	keys, _ := vs.local.Keys()
	if len(ents) == 0 && len(keys) == 0 {
		born = time.Now().UTC()
	}
	body := ""
	if !born.IsZero() {
		body = born.Format(time.RFC3339Nano)
	}
	if err := os.MkdirAll(vs.stateDir, 0o755); err == nil {
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			vs.log.Warn("recording the volume state's start", "err", err)
		}
	}
	return born
}

// prior reports whether the volume of key, of which this node holds
// nothing (no chunks, no state), may hold data written before this
// node's volume state began: a volume written (claimed) before this node
// started from an empty data directory, which lists it as a mirror. Its
// mirror is then lost, not in sync. A volume the map does not know yet
// is looked for again after catching up with the leader.
func (vs *volumes) prior(key string) bool {
	if vs.born.IsZero() {
		return false
	}
	find := func() (cluster.VolumeSpec, bool) {
		for _, spec := range vs.meta.Map().Volumes {
			if spec.Key() == key {
				return spec, true
			}
		}
		return cluster.VolumeSpec{}, false
	}
	spec, ok := find()
	if !ok && vs.sync != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if vs.sync(ctx) == nil {
			spec, ok = find()
		}
		cancel()
	}
	// A node a rebalance in progress added to the set (not in Prev)
	// holds nothing until the writer copies chunks to it; only if its
	// state began after the rebalance did, it was wiped since.
	newcomer := spec.Prev != nil && !slices.Contains(spec.Prev, vs.self) && !spec.Since.Before(vs.born)
	return ok && spec.Epoch > 0 && spec.Created.Before(vs.born) && slices.Contains(spec.Nodes, vs.self) && !newcomer
}

// registerVolumeAdmin adds the volume endpoints to the admin API.
func (n *Node) registerVolumeAdmin() {
	n.adminExtras["GET "+AdminPrefix+"volumes"] = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := n.cluster.Map()
		var out []VolumeInfo
		for _, name := range m.VolumeNames() {
			v, _ := m.Volume(name)
			out = append(out, volumeInfo(m, v, n.nbdURLs(r), 0))
		}
		writeAdmin(w, out, nil)
	})
	n.adminExtras["GET "+AdminPrefix+"volumes/{name}"] = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := n.cluster.Map()
		v, ok := m.Volume(r.PathValue("name"))
		if !ok {
			writeAdmin(w, nil, fmt.Errorf("%w: volume %q", object.ErrInvalidArgument, r.PathValue("name")))
			return
		}
		writeAdmin(w, volumeInfo(m, v, n.nbdURLs(r), 64), nil)
	})
	n.adminExtras["POST "+AdminPrefix+"volumes"] = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var v cluster.VolumeSpec
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&v); err != nil {
			writeAdmin(w, nil, fmt.Errorf("%w: %v", object.ErrInvalidArgument, err))
			return
		}
		m := n.cluster.Map()
		cur, exists := m.Volume(v.Name)
		grow := r.URL.Query().Get("resize") == "true"
		switch {
		case grow && !exists:
			writeAdmin(w, nil, fmt.Errorf("%w: no volume %q", object.ErrInvalidArgument, v.Name))
			return
		case grow:
			if v.Size < cur.Size {
				writeAdmin(w, nil, fmt.Errorf("%w: volume %q can only grow (%d < %d)", object.ErrInvalidArgument, v.Name, v.Size, cur.Size))
				return
			}
			cur.Size = v.Size
			v = cur
		case exists:
			writeAdmin(w, nil, fmt.Errorf("%w: volume %q exists", object.ErrInvalidArgument, v.Name))
			return
		default:
			v = v.WithDefaults()
			up := m.UpNodeIDs()
			if len(up) < v.Copies {
				writeAdmin(w, nil, fmt.Errorf("%w: %d copies, %d nodes up", object.ErrUnavailable, v.Copies, len(up)))
				return
			}
			v.Nodes = nil // every member but those being drained
			for _, id := range m.NodeIDs() {
				if ni, _ := m.Node(id); !ni.Draining {
					v.Nodes = append(v.Nodes, id)
				}
			}
			if len(v.Nodes) < v.Copies {
				writeAdmin(w, nil, fmt.Errorf("%w: %d copies, %d nodes not draining", object.ErrUnavailable, v.Copies, len(v.Nodes)))
				return
			}
			v.Created = time.Now().UTC()
			v.ID, v.Stale = newVolumeID(), nil
		}
		if err := volume.ValidName(v.Name); err != nil {
			writeAdmin(w, nil, fmt.Errorf("%w: %v", object.ErrInvalidArgument, err))
			return
		}
		err := n.cluster.PutVolume(r.Context(), v)
		writeAdmin(w, volumeInfo(n.cluster.Map(), v, n.nbdURLs(r), 0), err)
	})
	n.adminExtras["POST "+AdminPrefix+"volumes/{name}/rebalance"] = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		v, ok := n.cluster.Map().Volume(name)
		if !ok {
			writeAdmin(w, nil, fmt.Errorf("%w: no volume %q", object.ErrInvalidArgument, name))
			return
		}
		if err := n.cluster.RebalanceVolume(r.Context(), name, v.ID); err != nil {
			if errors.Is(err, cluster.ErrPlacementBusy) || errors.Is(err, cluster.ErrInvalid) {
				err = fmt.Errorf("%w: %w", object.ErrInvalidArgument, err)
			}
			writeAdmin(w, nil, err)
			return
		}
		m := n.cluster.Map()
		v, _ = m.Volume(name)
		writeAdmin(w, volumeInfo(m, v, n.nbdURLs(r), 0), nil)
	})
	n.adminExtras["POST "+AdminPrefix+"volumes/{name}/accept-loss"] = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Lost []int64 `json:"lost"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 16<<20)).Decode(&req); err != nil {
			writeAdmin(w, nil, fmt.Errorf("%w: %v", object.ErrInvalidArgument, err))
			return
		}
		name := r.PathValue("name")
		v, ok := n.cluster.Map().Volume(name)
		if !ok {
			writeAdmin(w, nil, fmt.Errorf("%w: no volume %q", object.ErrInvalidArgument, name))
			return
		}
		if err := n.cluster.AcceptVolumeLoss(r.Context(), name, v.ID, req.Lost); err != nil {
			writeAdmin(w, nil, err)
			return
		}
		m := n.cluster.Map()
		v, _ = m.Volume(name)
		writeAdmin(w, volumeInfo(m, v, n.nbdURLs(r), 0), nil)
	})
	n.adminExtras["DELETE "+AdminPrefix+"volumes/{name}"] = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		m := n.cluster.Map()
		v, ok := m.Volume(name)
		if !ok {
			writeAdmin(w, nil, fmt.Errorf("%w: no volume %q", object.ErrInvalidArgument, name))
			return
		}
		if err := n.cluster.DeleteVolume(r.Context(), name, v.ID); err != nil {
			writeAdmin(w, nil, err)
			return
		}
		nodes := v.Nodes
		if len(nodes) == 0 {
			nodes = m.NodeIDs()
		}
		var errs []error
		n.vols.mu.Lock()
		if ov, ok := n.vols.open[name]; ok {
			ov.vol.Close()
			delete(n.vols.open, name)
		}
		reps := map[string]volume.Replica{}
		for _, id := range nodes {
			if ni, ok := m.Node(id); ok && ni.State == cluster.StateUp {
				reps[id] = n.vols.replica(m, id) // the others remove theirs when they return (collect)
			}
		}
		n.vols.mu.Unlock()
		for id, rep := range reps {
			if err := rep.Delete(r.Context(), v.Key()); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", id, err))
			}
		}
		errs = append(errs, os.RemoveAll(filepath.Join(n.vols.stateDir, v.Key())))
		writeAdmin(w, struct{}{}, errors.Join(errs...))
	})
}

// nbdURLs returns every node's NBD URLs ("nbd://host:port", or
// "nbds://host:port" where TLS is required). The cluster map carries only
// S3 and intra addresses, so the answering node asks its peers.
func (n *Node) nbdURLs(r *http.Request) map[string][]string {
	out := map[string][]string{n.cfg.ID: nodeNBDURLs(n.cfg)}
	m := n.cluster.Map()
	for _, id := range m.UpNodeIDs() {
		if id == n.cfg.ID {
			continue
		}
		ni, _ := m.Node(id)
		if len(ni.IntraAddrs) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, cluster.BaseURL(ni.IntraAddrs[0])+nbdInfoPath, nil)
		resp, err := n.hc.Do(req)
		if err == nil {
			var addrs []string
			if json.NewDecoder(resp.Body).Decode(&addrs) == nil {
				out[id] = addrs
			}
			resp.Body.Close()
		}
		cancel()
	}
	return out
}

// nbdInfoPath serves a node's NBD URLs on its intra listeners.
const nbdInfoPath = "/volume-nbd-urls"

// nodeNBDURLs are the URLs of cfg's NBD addresses, without an export.
func nodeNBDURLs(cfg config.Node) []string {
	scheme := "nbd://"
	if cfg.NBDTLS.Enabled() {
		scheme = "nbds://"
	}
	urls := make([]string, len(cfg.NBD))
	for i, a := range cfg.NBD {
		urls[i] = scheme + a
	}
	return urls
}
