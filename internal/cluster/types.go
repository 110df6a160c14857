package cluster

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/slipstream-io/slipstream/internal/backend"
	"github.com/slipstream-io/slipstream/internal/object"
)

// NodeState is the health of a node as the cluster map records it.
type NodeState string

// Node states.
const (
	StateUp          NodeState = "up"
	StateDown        NodeState = "down"
	StateMaintenance NodeState = "maintenance"
)

// Valid reports whether s is one of the known states.
func (s NodeState) Valid() bool {
	return s == StateUp || s == StateDown || s == StateMaintenance
}

// NodeInfo describes one member of the cluster. Addresses are lists so a node
// can be reached on each of its interfaces. An intra address is either
// "host:port" (plain HTTP) or a base URL such as "https://host:port".
type NodeInfo struct {
	ID          string    `json:"id"`
	PublicAddrs []string  `json:"publicAddrs,omitempty"`
	IntraAddrs  []string  `json:"intraAddrs,omitempty"`
	RaftAddr    string    `json:"raftAddr"`
	Mountpaths  []string  `json:"mountpaths,omitempty"`
	State       NodeState `json:"state"`
	// StateSince is when the cluster recorded State, by the leader's
	// clock (zero if not known: recorded before this field was).
	StateSince time.Time `json:"stateSince,omitzero"`
	Voter      bool      `json:"voter"`
	Joined     time.Time `json:"joined"`
	// Downs counts the times the cluster marked the node down. A node
	// compares it with the count it last checked its copies at: writes may
	// have gone to other nodes while it was down.
	Downs uint64 `json:"downs,omitempty"`
	// Draining takes the node out of placement while it stays up: new
	// writes go to other nodes, reads still reach it, and the rebalance
	// moves its copies away, so that it can be removed without losing
	// a copy (admin node drain). Kept across re-announcements.
	Draining bool `json:"draining,omitempty"`
	// Drains counts the times Draining changed. Nodes compare it with the
	// count they last moved copies at: a drain undone before a node looked
	// still made the drained node give its copies away.
	Drains uint64 `json:"drains,omitempty"`
}

// Places reports whether new copies are placed on the node: it is up and
// not draining.
func (n NodeInfo) Places() bool { return n.State == StateUp && !n.Draining }

// Clone returns a deep copy of n.
func (n NodeInfo) Clone() NodeInfo {
	n.PublicAddrs = slices.Clone(n.PublicAddrs)
	n.IntraAddrs = slices.Clone(n.IntraAddrs)
	n.Mountpaths = slices.Clone(n.Mountpaths)
	return n
}

// IntraURLs returns the node's intra-cluster addresses as HTTP base URLs
// (no trailing slash).
func (n NodeInfo) IntraURLs() []string {
	out := make([]string, 0, len(n.IntraAddrs))
	for _, a := range n.IntraAddrs {
		out = append(out, BaseURL(a))
	}
	return out
}

// sameIdentity reports whether a and b announce the same addresses and
// mountpaths (state, voter and join time are not compared).
func (n NodeInfo) sameIdentity(o NodeInfo) bool {
	return n.ID == o.ID && n.RaftAddr == o.RaftAddr &&
		slices.Equal(n.PublicAddrs, o.PublicAddrs) &&
		slices.Equal(n.IntraAddrs, o.IntraAddrs) &&
		slices.Equal(n.Mountpaths, o.Mountpaths)
}

// BaseURL turns an address ("host:port" or a URL) into an HTTP base URL
// without a trailing slash.
func BaseURL(addr string) string {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	return strings.TrimRight(addr, "/")
}

// Bucket modes.
const (
	ModeLocal     = "local"
	ModeCache     = "cache"
	ModeWriteback = "writeback"
)

// Backend kinds.
const (
	BackendS3 = "s3"
	BackendFS = "fs"
)

// BackendSpec names the remote backend of a cache or writeback bucket: the
// backend package's own spec, stored as it is in the bucket's properties.
type BackendSpec = backend.Spec

// BucketProps are the properties of one bucket.
type BucketProps struct {
	Name     string      `json:"name"`
	Created  time.Time   `json:"created"`
	Copies   int         `json:"copies"`
	Mode     string      `json:"mode"`
	Backend  BackendSpec `json:"backend"`
	Validate string      `json:"validate"` // "never", "always" or "ttl:<duration>"
}

// WithDefaults returns b with empty fields set to their defaults: one copy,
// mode "local", validation "never".
func (b BucketProps) WithDefaults() BucketProps {
	if b.Copies == 0 {
		b.Copies = 1
	}
	if b.Mode == "" {
		b.Mode = ModeLocal
	}
	if b.Validate == "" {
		b.Validate = string(ValidateNever)
	}
	return b
}

// Check reports the first invalid field of b (after defaults), wrapping
// object.ErrInvalidBucketName or object.ErrInvalidArgument.
func (b BucketProps) Check() error {
	if err := object.ValidateBucketName(b.Name); err != nil {
		return err
	}
	if b.Copies < 1 || b.Copies > 16 {
		return fmt.Errorf("%w: bucket %q: copies must be 1..16, got %d", object.ErrInvalidArgument, b.Name, b.Copies)
	}
	switch b.Mode {
	case ModeLocal:
	case ModeCache, ModeWriteback:
		switch b.Backend.Kind {
		case BackendS3:
			if b.Backend.Bucket == "" {
				return fmt.Errorf("%w: bucket %q: backend.bucket is required for an s3 backend", object.ErrInvalidArgument, b.Name)
			}
		case BackendFS:
			if b.Backend.Path == "" {
				return fmt.Errorf("%w: bucket %q: backend.path is required for an fs backend", object.ErrInvalidArgument, b.Name)
			}
		default:
			return fmt.Errorf("%w: bucket %q: backend.kind must be %q or %q for mode %q, got %q",
				object.ErrInvalidArgument, b.Name, BackendS3, BackendFS, b.Mode, b.Backend.Kind)
		}
	default:
		return fmt.Errorf("%w: bucket %q: mode must be local, cache or writeback, got %q", object.ErrInvalidArgument, b.Name, b.Mode)
	}
	if _, _, err := ParseValidate(b.Validate); err != nil {
		return fmt.Errorf("bucket %q: %w", b.Name, err)
	}
	return nil
}

// ValidatePolicy says when a warm copy is checked against the backend.
type ValidatePolicy string

// Validation policies.
const (
	ValidateNever  ValidatePolicy = "never"
	ValidateAlways ValidatePolicy = "always"
	ValidateTTL    ValidatePolicy = "ttl"
)

// ParseValidate parses a bucket's validation setting: "never", "always",
// "ttl:<duration>" (a positive Go duration such as "ttl:30s"), or "ttl"
// (duration 0: each node's configured default, tier.ttl). An empty string
// means "never".
func ParseValidate(s string) (ValidatePolicy, time.Duration, error) {
	switch s {
	case "", string(ValidateNever):
		return ValidateNever, 0, nil
	case string(ValidateAlways):
		return ValidateAlways, 0, nil
	case string(ValidateTTL):
		return ValidateTTL, 0, nil
	}
	rest, ok := strings.CutPrefix(s, "ttl:")
	if !ok {
		return "", 0, fmt.Errorf("%w: validate must be never, always, ttl or ttl:<duration>, got %q", object.ErrInvalidArgument, s)
	}
	d, err := time.ParseDuration(rest)
	if err != nil || d <= 0 {
		return "", 0, fmt.Errorf("%w: validate %q: want ttl:<positive duration>", object.ErrInvalidArgument, s)
	}
	return ValidateTTL, d, nil
}

// DefaultChunkSize is the chunk size of a volume that does not name one.
const DefaultChunkSize = 4 << 20

// VolumeSpec describes one block volume.
type VolumeSpec struct {
	Name      string    `json:"name"`
	Size      int64     `json:"size"`
	ChunkSize int64     `json:"chunkSize"`
	Copies    int       `json:"copies"`
	Created   time.Time `json:"created"`
	// ID tells this volume from earlier ones of the same name (see Key).
	ID string `json:"id,omitempty"`
	// Stale lists the mirrors that missed writes and are not resynchronised
	// yet (the keys of StaleBy).
	Stale []string `json:"stale,omitempty"`
	// StaleBy names, for each stale mirror, the nodes whose writes it
	// missed. Each such writer knows which chunks and clears its own name
	// once it has resynchronised them; any other node that has the volume
	// open treats every chunk of the mirror as stale.
	StaleBy map[string][]string `json:"staleBy,omitempty"`
	// Nodes are the members chunks are placed on, set when the volume is
	// created: joins do not move chunks, a rebalance (volume.rebalance)
	// adds the members not in it. Removing a member (Copies >= 2) or
	// draining one takes it out of Nodes when the others still number at
	// least Copies, at once or when the re-placement in progress ends:
	// its chunks are then re-placed on the others (HRW over the rest only
	// adds owners, it never moves a chunk between surviving nodes; over a
	// larger set it only moves chunks to the nodes added).
	Nodes []string `json:"nodes,omitempty"`
	// Prev is the node set chunks were placed on before the change (a
	// removal, drain or rebalance) whose
	// re-placement is not complete yet (nil: none). While it is set, an
	// owner of a chunk under Nodes that is not one under Prev (a
	// newcomer) holds no copy of the chunk until the volume's writer has
	// copied it there; the writer then clears Prev (volume.placed, or
	// volume.settled once Copied).
	Prev []string `json:"prev,omitempty"`
	// Copied, with Prev, says that the re-placement's copies are all made
	// while owners it takes chunks off are still members (nodes drained
	// out of the set, or the owners a rebalance replaces): the volume's
	// writer goes on writing them until the re-placement ends, so that a
	// node whose map is one change behind, reading them, reads current
	// data; nodes that have seen Copied read the set's owners only. The
	// writer ends it (volume.settled) once every member's volumes have
	// seen Copied; the next change of the set ends it too (the removal of
	// a drained node, the end of its drain, another removal or drain).
	Copied bool `json:"copied,omitempty"`
	// Since is when a rebalance (volume.rebalance) began the
	// re-placement in progress (zero for others): a node added to the set
	// by it whose state began later was wiped since, and its copies are
	// lost.
	Since time.Time `json:"since,omitzero"`
	// Lost lists, sorted, the chunks a re-placement found no copy of to
	// copy from: every node that held one was removed from the cluster
	// (or missed writes the removed ones had). Reads and writes of them
	// fail until an operator accepts the loss (volume.accept-loss); they
	// then read as zeros.
	Lost []int64 `json:"lost,omitempty"`
	// Writer is the node that last claimed the volume for writing, and
	// Epoch the number of claims by a new node so far: the mirrors refuse
	// writes of a writer with an older epoch (see volume.Claims).
	Writer string `json:"writer,omitempty"`
	Epoch  uint64 `json:"epoch,omitempty"`
}

// equal reports whether v and o describe the same volume.
func (v VolumeSpec) equal(o VolumeSpec) bool {
	return v.Name == o.Name && v.Size == o.Size && v.ChunkSize == o.ChunkSize && v.Copies == o.Copies &&
		v.Created.Equal(o.Created) && v.ID == o.ID && slices.Equal(v.Nodes, o.Nodes) && slices.Equal(v.Prev, o.Prev) && v.Copied == o.Copied && v.Since.Equal(o.Since) && slices.Equal(v.Lost, o.Lost) && slices.Equal(v.Stale, o.Stale) &&
		maps.EqualFunc(v.StaleBy, o.StaleBy, slices.Equal) && v.Writer == o.Writer && v.Epoch == o.Epoch
}

// Replaces reports whether removing node id from the cluster re-places
// the volume's chunks on its other nodes (see Nodes): id is one of them,
// and they number at least Copies >= 2 without it (during a re-placement
// in progress, once it ends).
func (v VolumeSpec) Replaces(id string) bool {
	return v.Copies >= 2 && len(v.Nodes)-1 >= v.Copies && slices.Contains(v.Nodes, id)
}

// Draining returns v as the map m would have it once node id is drained:
// out of its set (Prev set) if v keeps enough other nodes and no other
// re-placement of it is copying, else unchanged.
func (v VolumeSpec) Draining(m *Map, id string) VolumeSpec {
	n := m.Clone()
	ni, ok := n.Nodes[id]
	if !ok {
		return v
	}
	ni.Draining = true
	n.Nodes[id] = ni
	return replaceVolume(n, v)
}

// MarkedBy reports whether node marks any mirror of the volume stale.
func (v VolumeSpec) MarkedBy(node string) bool {
	for _, ws := range v.StaleBy {
		if slices.Contains(ws, node) {
			return true
		}
	}
	return false
}

// StaleMarks returns, for each stale mirror, the writers whose writes it
// missed; a mirror a map of an earlier version lists without writers has
// the unknown writer "".
func (v VolumeSpec) StaleMarks() map[string][]string {
	out := make(map[string][]string, len(v.Stale))
	for _, m := range v.Stale {
		if ws, ok := v.StaleBy[m]; ok {
			out[m] = slices.Clone(ws)
		} else {
			out[m] = []string{""}
		}
	}
	return out
}

// setMarks records marks (mirror -> writers, see StaleMarks) as the
// volume's Stale and StaleBy.
func (v *VolumeSpec) setMarks(marks map[string][]string) {
	v.Stale, v.StaleBy = slices.Sorted(maps.Keys(marks)), marks
	if len(marks) == 0 {
		v.Stale, v.StaleBy = nil, nil
	}
}

// Key is the name the volume's chunks are stored under on the nodes: the
// name, and the ID if it has one (volume.Spec.Key).
func (v VolumeSpec) Key() string {
	if v.ID == "" {
		return v.Name
	}
	return v.Name + "@" + v.ID
}

// WithDefaults returns v with a default chunk size and one copy if unset.
func (v VolumeSpec) WithDefaults() VolumeSpec {
	if v.ChunkSize == 0 {
		v.ChunkSize = DefaultChunkSize
	}
	if v.Copies == 0 {
		v.Copies = 1
	}
	return v
}

// Check reports the first invalid field of v, wrapping object.ErrInvalidArgument.
func (v VolumeSpec) Check() error {
	if v.Name == "" || len(v.Name) > 63 {
		return fmt.Errorf("%w: volume name must be 1..63 characters, got %q", object.ErrInvalidArgument, v.Name)
	}
	for i := 0; i < len(v.Name); i++ {
		c := v.Name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("%w: volume name %q: only a-z, 0-9, '-', '_' and '.' are allowed", object.ErrInvalidArgument, v.Name)
		}
	}
	if v.Size <= 0 {
		return fmt.Errorf("%w: volume %q: size must be positive", object.ErrInvalidArgument, v.Name)
	}
	if v.ChunkSize < 4096 || v.ChunkSize&(v.ChunkSize-1) != 0 {
		return fmt.Errorf("%w: volume %q: chunk size must be a power of two >= 4096, got %d", object.ErrInvalidArgument, v.Name, v.ChunkSize)
	}
	if v.Copies < 1 || v.Copies > 16 {
		return fmt.Errorf("%w: volume %q: copies must be 1..16, got %d", object.ErrInvalidArgument, v.Name, v.Copies)
	}
	if len(v.ID) > 32 || strings.IndexFunc(v.ID, func(r rune) bool { return !(r >= 'a' && r <= 'f' || r >= '0' && r <= '9') }) >= 0 {
		return fmt.Errorf("%w: volume %q: ID must be up to 32 lower-case hex digits, got %q", object.ErrInvalidArgument, v.Name, v.ID)
	}
	if len(v.Nodes) > 0 && len(v.Nodes) < v.Copies {
		return fmt.Errorf("%w: volume %q: %d copies need as many nodes, %d given", object.ErrInvalidArgument, v.Name, v.Copies, len(v.Nodes))
	}
	return nil
}

// Map is one version of the cluster map. A published Map is immutable:
// readers share it and must not modify it; changes make a new copy.
type Map struct {
	Version uint64                 `json:"version"`
	Nodes   map[string]NodeInfo    `json:"nodes"`
	Buckets map[string]BucketProps `json:"buckets"`
	Volumes map[string]VolumeSpec  `json:"volumes"`
	// DeletedVolumes lists the storage keys (VolumeSpec.Key) of deleted
	// volumes, oldest first, the last maxDeletedVolumes: a node that was
	// away for a delete removes the chunks it still has.
	DeletedVolumes []string `json:"deletedVolumes,omitempty"`
	// RemovedDowns keeps the Downs count (plus one: the removal) of nodes
	// removed from the cluster: one that comes back with its data is away
	// again by that count, so it checks its copies.
	RemovedDowns map[string]uint64 `json:"removedDowns,omitempty"`
}

// maxDeletedVolumes bounds Map.DeletedVolumes.
const maxDeletedVolumes = 4096

// NewMap returns an empty map at version 0.
func NewMap() *Map {
	return &Map{Nodes: map[string]NodeInfo{}, Buckets: map[string]BucketProps{}, Volumes: map[string]VolumeSpec{}}
}

// Clone returns a deep copy of m.
func (m *Map) Clone() *Map {
	c := &Map{
		Version: m.Version,
		Nodes:   make(map[string]NodeInfo, len(m.Nodes)),
		Buckets: make(map[string]BucketProps, len(m.Buckets)),
		Volumes: make(map[string]VolumeSpec, len(m.Volumes)),
	}
	for k, v := range m.Nodes {
		c.Nodes[k] = v.Clone()
	}
	for k, v := range m.Buckets {
		c.Buckets[k] = v
	}
	for k, v := range m.Volumes {
		c.Volumes[k] = v
	}
	c.DeletedVolumes = slices.Clone(m.DeletedVolumes)
	c.RemovedDowns = maps.Clone(m.RemovedDowns)
	return c
}

// RedactedSecret stands for a backend's secret key where it is not shown.
const RedactedSecret = "***"

// Redacted returns a copy of m without the backends' secret keys, for
// readers without the cluster secret.
func (m *Map) Redacted() *Map {
	c := m.Clone()
	for k, b := range c.Buckets {
		if b.Backend.SecretKey != "" {
			b.Backend.SecretKey = RedactedSecret
			c.Buckets[k] = b
		}
	}
	return c
}

// Node returns the node with the given ID.
func (m *Map) Node(id string) (NodeInfo, bool) {
	n, ok := m.Nodes[id]
	return n, ok
}

// NodeIDs returns the IDs of all nodes, sorted.
func (m *Map) NodeIDs() []string {
	ids := make([]string, 0, len(m.Nodes))
	for id := range m.Nodes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// UpNodeIDs returns the IDs of the nodes in state up, sorted.
func (m *Map) UpNodeIDs() []string {
	ids := make([]string, 0, len(m.Nodes))
	for id, n := range m.Nodes {
		if n.State == StateUp {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// Bucket returns the properties of the named bucket.
func (m *Map) Bucket(name string) (BucketProps, bool) {
	b, ok := m.Buckets[name]
	return b, ok
}

// BucketNames returns the names of all buckets, sorted.
func (m *Map) BucketNames() []string {
	names := make([]string, 0, len(m.Buckets))
	for n := range m.Buckets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Volume returns the named volume.
func (m *Map) Volume(name string) (VolumeSpec, bool) {
	v, ok := m.Volumes[name]
	return v, ok
}

// VolumeNames returns the names of all volumes, sorted.
func (m *Map) VolumeNames() []string {
	names := make([]string, 0, len(m.Volumes))
	for n := range m.Volumes {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
