// Package cluster keeps Slipstream's replicated cluster metadata: the cluster
// map (nodes, their addresses, mountpaths and health), bucket properties and
// volume tables, with a version that grows with every change.
//
// The map is a state machine replicated with hashicorp/raft (durable log in
// raft-boltdb, file snapshots holding the map as JSON). Three nodes are voters
// by default; later nodes join as non-voters. Every node serves the package's
// HTTP handler under "/cluster/" on its intra-cluster listener: nodes join
// through it, followers forward mutations to the leader through it, and nodes
// and smart clients fetch and long-poll the map through it. The leader probes
// every member and records nodes going down and coming back through the log.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/slipstream-io/slipstream/internal/cluster/raftlink"
	"github.com/slipstream-io/slipstream/internal/object"
)

// Sentinel errors. Bucket errors use object.ErrBucketExists and
// object.ErrBucketNotFound; invalid properties wrap object.ErrInvalidArgument
// or object.ErrInvalidBucketName.
var (
	ErrNoLeader       = errors.New("cluster: no leader")
	ErrNotLeader      = errors.New("cluster: not the leader")
	ErrNodeNotFound   = errors.New("cluster: no such node")
	ErrVolumeNotFound = errors.New("cluster: no such volume")
	// ErrStalePlacement refuses to end a volume's re-placement for a node
	// set or a claim that is no longer the volume's.
	ErrStalePlacement = errors.New("cluster: volume placement changed")
	// ErrPlacementBusy refuses to rebalance a volume while a re-placement
	// of it is in progress.
	ErrPlacementBusy = errors.New("cluster: volume re-placement in progress")
	ErrInvalid       = errors.New("cluster: invalid request")
	ErrClosed        = errors.New("cluster: closed")
	// ErrNotMapEndpoint is returned by FetchMap when the URL answers, but
	// not as a node's map endpoint does: a node's public (S3) address, or
	// another server.
	ErrNotMapEndpoint = errors.New("cluster: not a map endpoint")
	ErrForbidden      = errors.New("cluster: the cluster secret is required")
	// ErrLostState refuses to bootstrap a node that was a member before.
	ErrLostState = errors.New("cluster: no cluster state, but the node's drives hold data")
)

// Defaults.
const (
	DefaultVoters            = 3
	DefaultHeartbeatInterval = 500 * time.Millisecond
	DefaultDownAfter         = 2 * time.Second
)

// RaftTimeouts tunes the consensus library. Zero fields keep hashicorp/raft's
// defaults (1s heartbeat and election timeouts, 500ms leader lease). Tests
// shorten them.
type RaftTimeouts struct {
	Heartbeat         time.Duration
	Election          time.Duration
	LeaderLease       time.Duration
	Commit            time.Duration
	SnapshotInterval  time.Duration
	SnapshotThreshold uint64
	TrailingLogs      uint64
}

// Config configures one node's membership in the cluster.
type Config struct {
	NodeID  string
	DataDir string // raft state lives in DataDir (created if missing)
	// RaftBind is the host:port the raft transport listens on. Port 0 picks
	// a free port (the map records the real one).
	RaftBind string
	// RaftAdvertise is the address other nodes dial; defaults to the bound address.
	RaftAdvertise string
	// Self describes this node. ID and RaftAddr are filled from NodeID and the
	// transport; IntraAddrs must list at least one address on which the node
	// serves Handler under "/cluster/".
	Self NodeInfo
	// Seeds are intra HTTP base URLs of other nodes (e.g.
	// "http://127.0.0.2:9201"), tried in turn when joining.
	Seeds []string
	// Bootstrap makes a node without raft state start a one-node cluster with
	// itself. Exactly one node of a new cluster sets it.
	Bootstrap bool
	// HoldsData says the node's drives hold data (objects or volume
	// chunks): without raft state it lost that state, it is not new. Such
	// a node with Bootstrap and Seeds does not found a cluster when no
	// seed answers as a member of one (ErrLostState): it would be a
	// second cluster beside the one its data belongs to.
	HoldsData bool
	// Voters is the number of voting members (default 3); more nodes join as
	// non-voters.
	Voters     int
	HTTPClient *http.Client
	Log        *slog.Logger
	// HeartbeatInterval is how often the leader probes every member
	// (default 500ms); DownAfter is how long a member may stay silent before
	// the leader marks it down (default 2s).
	HeartbeatInterval time.Duration
	DownAfter         time.Duration
	// HealthPath is what the leader GETs on a member's intra addresses to
	// see it is alive (default "/cluster/health", served by Handler); a node
	// may point it at its own health endpoint.
	HealthPath string
	Raft       RaftTimeouts
	// Authorized reports whether a request to Handler carries the
	// cluster's credentials (nil: every request does). Others may read
	// health, status and the map without the backends' secret keys; a
	// join, apply or leave from them is refused with ErrForbidden. The
	// node's own HTTPClient must carry the credentials: it joins and
	// forwards changes to the leader through these endpoints.
	Authorized func(r *http.Request) bool
	// RaftSecret, when set, puts the raft transport on TLS and admits only
	// peers that prove they hold it (package raftlink); every node of a
	// cluster must set the same one. Empty keeps plain TCP, which anyone
	// who reaches RaftBind can talk raft to: the node always sets it.
	RaftSecret string
}

func (cfg *Config) setDefaults() error {
	if cfg.NodeID == "" {
		cfg.NodeID = cfg.Self.ID
	}
	if cfg.NodeID == "" {
		return fmt.Errorf("%w: config: NodeID is empty", ErrInvalid)
	}
	if cfg.Self.ID != "" && cfg.Self.ID != cfg.NodeID {
		return fmt.Errorf("%w: config: Self.ID %q differs from NodeID %q", ErrInvalid, cfg.Self.ID, cfg.NodeID)
	}
	cfg.Self = cfg.Self.Clone()
	cfg.Self.ID = cfg.NodeID
	if cfg.DataDir == "" {
		return fmt.Errorf("%w: config: DataDir is empty", ErrInvalid)
	}
	if cfg.RaftBind == "" {
		return fmt.Errorf("%w: config: RaftBind is empty", ErrInvalid)
	}
	if len(cfg.Self.IntraAddrs) == 0 {
		return fmt.Errorf("%w: config: Self.IntraAddrs is empty", ErrInvalid)
	}
	if cfg.Voters <= 0 {
		cfg.Voters = DefaultVoters
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if cfg.DownAfter <= 0 {
		cfg.DownAfter = DefaultDownAfter
	}
	if cfg.HealthPath == "" {
		cfg.HealthPath = PathHealth
	}
	return nil
}

// Cluster is one node's view of, and handle on, the replicated metadata.
type Cluster struct {
	cfg   Config
	self  NodeInfo
	log   *slog.Logger
	hc    *http.Client
	pub   *publisher
	fsm   *fsm
	raft  *raft.Raft
	trans *raft.NetworkTransport
	store *raftboltdb.BoltStore

	// memberMu serialises the leader's membership changes, which read the
	// raft configuration and then change it.
	memberMu sync.Mutex

	// syncMu serialises the barrier the leader runs once per term before
	// it answers followers' Sync; syncTerm is the term of the last one that
	// completed (see syncedVersion).
	syncMu   sync.Mutex
	syncTerm atomic.Uint64

	// rejoinAfter is how long a member may know no leader before it
	// announces itself again (see announceLoop).
	rejoinAfter time.Duration

	ctx       context.Context // cancelled by Leave/Close; ends background loops
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// New opens (or creates) the node's raft state under cfg.DataDir, starts the
// raft transport and, in the background, joins the cluster: a node with
// Bootstrap and no state starts a one-node cluster; any other new node asks
// the seeds to admit it; a restarted node re-announces itself if its
// addresses changed. New does not wait for a leader: call WaitForLeader.
func New(ctx context.Context, cfg Config) (*Cluster, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	dir := filepath.Join(cfg.DataDir, "raft")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	hlog := newHCLogger(cfg.Log)

	c := &Cluster{cfg: cfg, log: cfg.Log, hc: cfg.HTTPClient, pub: newPublisher()}
	var err error
	cleanup := func() {
		if c.trans != nil {
			c.trans.Close()
		}
		if c.store != nil {
			c.store.Close()
		}
	}
	c.store, err = raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	if err != nil {
		return nil, fmt.Errorf("cluster: open log store: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hlog)
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("cluster: open snapshot store: %w", err)
	}
	c.trans, err = newTransport(cfg, hlog)
	if err != nil {
		cleanup()
		return nil, err
	}
	c.self = cfg.Self
	c.self.RaftAddr = string(c.trans.LocalAddr())

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.Logger = hlog
	t := cfg.Raft
	if t.Heartbeat > 0 {
		rc.HeartbeatTimeout = t.Heartbeat
	}
	if t.Election > 0 {
		rc.ElectionTimeout = t.Election
	}
	if t.LeaderLease > 0 {
		rc.LeaderLeaseTimeout = t.LeaderLease
	}
	if rc.LeaderLeaseTimeout > rc.HeartbeatTimeout {
		rc.LeaderLeaseTimeout = rc.HeartbeatTimeout
	}
	if t.Commit > 0 {
		rc.CommitTimeout = t.Commit
	}
	if t.SnapshotInterval > 0 {
		rc.SnapshotInterval = t.SnapshotInterval
	}
	if t.SnapshotThreshold > 0 {
		rc.SnapshotThreshold = t.SnapshotThreshold
	}
	if t.TrailingLogs > 0 {
		rc.TrailingLogs = t.TrailingLogs
	}
	if err := raft.ValidateConfig(rc); err != nil {
		cleanup()
		return nil, fmt.Errorf("%w: raft config: %v", ErrInvalid, err)
	}
	// A member without a leader starts an election after a heartbeat
	// timeout, and one normally ends within an election timeout or two.
	c.rejoinAfter = 4 * max(rc.HeartbeatTimeout, rc.ElectionTimeout)

	existing, err := raft.HasExistingState(c.store, c.store, snaps)
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("cluster: read raft state: %w", err)
	}
	if !existing && !cfg.Bootstrap && len(cfg.Seeds) == 0 {
		cleanup()
		return nil, fmt.Errorf("%w: config: a new node needs Seeds or Bootstrap", ErrInvalid)
	}
	bootstrap := !existing && cfg.Bootstrap
	if bootstrap && len(cfg.Seeds) > 0 {
		// A bootstrap node that lost its state must not start a second
		// cluster next to a running one: join it instead.
		if seed := c.seedInCluster(ctx); seed != "" {
			c.log.Warn("a cluster already runs: joining it instead of bootstrapping", "seed", seed)
			bootstrap = false
		} else if cfg.HoldsData {
			cleanup()
			return nil, fmt.Errorf("%w, and no seed answers as a member of a cluster (%s): not founding a second cluster beside the one the data belongs to; start this node again once a seed is up, or remove seeds from its config to found a new cluster with this data", ErrLostState, strings.Join(cfg.Seeds, ", "))
		}
	}
	logs, err := raft.NewLogCache(512, c.store)
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("cluster: %w", err)
	}
	c.fsm = &fsm{pub: c.pub}
	c.raft, err = raft.NewRaft(rc, c.fsm, logs, c.store, snaps, c.trans)
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("cluster: start raft: %w", err)
	}
	if bootstrap {
		boot := raft.Configuration{Servers: []raft.Server{{
			Suffrage: raft.Voter, ID: rc.LocalID, Address: c.trans.LocalAddr(),
		}}}
		if err := c.raft.BootstrapCluster(boot).Error(); err != nil {
			c.raft.Shutdown()
			cleanup()
			return nil, fmt.Errorf("cluster: bootstrap: %w", err)
		}
	}
	c.log.Info("cluster node started", "id", cfg.NodeID, "raft", c.self.RaftAddr,
		"existingState", existing, "bootstrap", bootstrap)

	c.ctx, c.cancel = context.WithCancel(context.WithoutCancel(ctx))
	c.wg.Add(2)
	go c.announceLoop()
	go c.healthLoop()
	return c, nil
}

// seedInCluster returns the first seed whose health endpoint shows it in a
// running cluster (it names a leader, or has applied a map: a cluster
// between leaders, in an election or without quorum, still exists), or "".
// Seeds that are as new as this node (starting a cluster together) show
// neither.
func (c *Cluster) seedInCluster(ctx context.Context) string {
	for _, seed := range c.cfg.Seeds {
		var h Health
		if err := c.get(ctx, BaseURL(seed)+PathHealth, time.Second, &h); err == nil && h.ID != c.cfg.NodeID && (h.Leader != "" || h.Version > 0) {
			return seed
		}
	}
	return ""
}

// Map returns the current cluster map. It is shared and must not be modified.
func (c *Cluster) Map() *Map { return c.pub.current() }

// Self returns this node's info as it announces it (RaftAddr filled in).
func (c *Cluster) Self() NodeInfo { return c.self.Clone() }

// NodeID returns this node's ID.
func (c *Cluster) NodeID() string { return c.self.ID }

// LeaderID returns the ID of the current leader, or "" when none is known.
func (c *Cluster) LeaderID() string {
	_, id := c.raft.LeaderWithID()
	return string(id)
}

// IsLeader reports whether this node is the raft leader.
func (c *Cluster) IsLeader() bool { return c.raft.State() == raft.Leader }

// Status is a node's view of the consensus state, for operators.
type Status struct {
	ID           string    `json:"id"`
	RaftState    string    `json:"raftState"` // Follower, Candidate, Leader, Shutdown
	Leader       string    `json:"leader"`
	Version      uint64    `json:"version"`
	Term         uint64    `json:"term"`
	CommitIndex  uint64    `json:"commitIndex"`
	AppliedIndex uint64    `json:"appliedIndex"`
	LastContact  time.Time `json:"lastContact,omitzero"` // with the leader; zero on the leader
	Voters       []string  `json:"voters"`
	NonVoters    []string  `json:"nonVoters"`
}

// Status returns this node's view of the consensus state.
func (c *Cluster) Status() Status {
	s := Status{
		ID: c.self.ID, RaftState: c.raft.State().String(), Leader: c.LeaderID(), Version: c.Map().Version,
		Term: c.raft.CurrentTerm(), CommitIndex: c.raft.CommitIndex(), AppliedIndex: c.raft.AppliedIndex(),
		Voters: []string{}, NonVoters: []string{},
	}
	if s.RaftState != raft.Leader.String() {
		s.LastContact = c.raft.LastContact()
	}
	if cf := c.raft.GetConfiguration(); cf.Error() == nil {
		for _, srv := range cf.Configuration().Servers {
			if srv.Suffrage == raft.Voter {
				s.Voters = append(s.Voters, string(srv.ID))
			} else {
				s.NonVoters = append(s.NonVoters, string(srv.ID))
			}
		}
	}
	slices.Sort(s.Voters)
	slices.Sort(s.NonVoters)
	return s
}

// WaitForLeader blocks until a leader is known and this node appears in the
// map, i.e. the node has joined and can serve.
func (c *Cluster) WaitForLeader(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if c.LeaderID() != "" {
			if _, ok := c.Map().Nodes[c.self.ID]; ok {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ErrNoLeader, ctx.Err())
		case <-c.ctx.Done():
			return ErrClosed
		case <-t.C:
		}
	}
}

// Watch returns a channel that delivers the current map and then every newer
// version, in increasing version order. It has latest-value semantics: a slow
// reader skips intermediate versions but always gets the newest one. The
// channel is closed when ctx ends or the cluster is closed.
func (c *Cluster) Watch(ctx context.Context) <-chan *Map {
	out := make(chan *Map)
	go func() {
		defer close(out)
		var last uint64
		sent := false
		for {
			m, changed := c.pub.snapshot()
			if !sent || m.Version > last {
				select {
				case out <- m:
					last, sent = m.Version, true
				case <-changed:
				case <-ctx.Done():
					return
				case <-c.ctx.Done():
					return
				}
				continue
			}
			select {
			case <-changed:
			case <-ctx.Done():
				return
			case <-c.ctx.Done():
				return
			}
		}
	}()
	return out
}

// Mutations below go through the leader (forwarded when called on a
// follower), retry while leadership moves, and return once the change is
// committed and, unless ctx ends first, visible in this node's Map.

// CreateBucket adds a bucket (defaults applied, Created set to now if zero).
// It fails with object.ErrBucketExists if the name is taken.
func (c *Cluster) CreateBucket(ctx context.Context, b BucketProps) error {
	b = b.WithDefaults()
	if b.Created.IsZero() {
		b.Created = time.Now().UTC()
	}
	if err := b.Check(); err != nil {
		return err
	}
	if err := c.checkCopies(b); err != nil {
		return err
	}
	return c.propose(ctx, command{Op: opBucketCreate, Bucket: &b})
}

// checkCopies refuses a bucket that wants more copies than the cluster has
// nodes: every PUT into it would fail. Checked where the change is asked
// for, not in the state machine, so that replaying an older log gives the
// same map.
func (c *Cluster) checkCopies(b BucketProps) error {
	if n := len(c.Map().Nodes); b.Copies > n {
		return fmt.Errorf("%w: bucket %s wants %d copies on distinct nodes, and the cluster has %d nodes", object.ErrInvalidArgument, b.Name, b.Copies, n)
	}
	return nil
}

// UpdateBucket replaces the properties of an existing bucket (its creation
// time is kept). It fails with object.ErrBucketNotFound.
func (c *Cluster) UpdateBucket(ctx context.Context, b BucketProps) error {
	b = b.WithDefaults()
	if err := b.Check(); err != nil {
		return err
	}
	if err := c.checkCopies(b); err != nil {
		return err
	}
	return c.propose(ctx, command{Op: opBucketUpdate, Bucket: &b})
}

// DeleteBucket removes a bucket from the map. It fails with
// object.ErrBucketNotFound. Emptying the bucket is the caller's job.
func (c *Cluster) DeleteBucket(ctx context.Context, name string) error {
	return c.propose(ctx, command{Op: opBucketDelete, Name: name})
}

// PutVolume creates or replaces a volume (its creation time is kept).
func (c *Cluster) PutVolume(ctx context.Context, v VolumeSpec) error {
	v = v.WithDefaults()
	if v.Created.IsZero() {
		v.Created = time.Now().UTC()
	}
	if err := v.Check(); err != nil {
		return err
	}
	return c.propose(ctx, command{Op: opVolumePut, Volume: &v})
}

// SetVolumeStale records whether mirror of volume name missed writes made
// through writer that are not resynchronised yet (VolumeSpec.StaleBy).
// Clearing the writer "" clears every writer's mark on the mirror. It
// fails with ErrVolumeNotFound.
func (c *Cluster) SetVolumeStale(ctx context.Context, name, mirror, writer string, stale bool) error {
	st := StateUp
	if stale {
		st = StateDown
	}
	return c.propose(ctx, command{Op: opVolumeStale, Name: name, Node: &NodeInfo{ID: mirror}, State: st, Writer: writer})
}

// ClaimVolume makes node the writer of volume name (if it is still the
// volume with that ID; ErrVolumeNotFound otherwise), taking it from the
// claim of epoch from (0: none), and returns the volume as this node's
// map has it after the claim. A claim by the node that is the writer
// already changes nothing; nor does one whose from is not the volume's
// Epoch any more (another node claimed it since the caller decided);
// any other raises the volume's Epoch. The caller checks the returned
// Writer.
func (c *Cluster) ClaimVolume(ctx context.Context, name, id, node string, from uint64) (VolumeSpec, error) {
	err := c.propose(ctx, command{Op: opVolumeClaim, Name: name, Volume: &VolumeSpec{Name: name, ID: id}, Node: &NodeInfo{ID: node}, IfEpoch: &from})
	if err != nil {
		return VolumeSpec{}, err
	}
	v, ok := c.Map().Volume(name)
	if !ok || v.ID != id {
		return VolumeSpec{}, fmt.Errorf("%w: %q", ErrVolumeNotFound, name)
	}
	return v, nil
}

// VolumePlaced ends the re-placement of volume name (VolumeSpec.Prev):
// node, holding the volume's claim of epoch, has copied every chunk to
// its owners among nodes, but for the chunks lost, which had no copy
// left to copy from (added to VolumeSpec.Lost). It fails with
// ErrStalePlacement when nodes is no longer the volume's node set or the
// claim has moved on.
func (c *Cluster) VolumePlaced(ctx context.Context, name, id, node string, epoch uint64, nodes []string, lost []int64) error {
	return c.propose(ctx, command{Op: opVolumePlaced, Name: name, Volume: &VolumeSpec{Name: name, ID: id, Nodes: nodes, Lost: lost}, Node: &NodeInfo{ID: node}, Epoch: epoch})
}

// RebalanceVolume adds to the node set of volume name (if it is still the
// volume with that ID) every member that takes placements and is not in
// it: the chunks HRW gives them are copied to them by the volume's
// writer, which writes their old owners until the re-placement settles
// (VolumeSettled). ErrPlacementBusy while another re-placement is in
// progress; nothing changes when every such member is in the set.
func (c *Cluster) RebalanceVolume(ctx context.Context, name, id string) error {
	return c.propose(ctx, command{Op: opVolumeRebalance, Name: name, Volume: &VolumeSpec{Name: name, ID: id, Since: time.Now().UTC()}})
}

// VolumeSettled ends the re-placement of volume name whose copies are
// made (VolumeSpec.Copied), for node, its writer under the claim of
// epoch, once it found every member's volumes past the map that
// recorded it; ErrStalePlacement when nodes is no longer the volume's
// node set, the copies are not recorded made, or the claim moved.
func (c *Cluster) VolumeSettled(ctx context.Context, name, id, node string, epoch uint64, nodes []string) error {
	return c.propose(ctx, command{Op: opVolumeSettled, Name: name, Volume: &VolumeSpec{Name: name, ID: id, Nodes: nodes}, Node: &NodeInfo{ID: node}, Epoch: epoch})
}

// AcceptVolumeLoss takes the chunks lost of volume name (if it is still
// the volume with that ID; ErrVolumeNotFound otherwise) out of its Lost
// list: an operator accepts that their data is gone, and they read as
// zeros from then on. Chunks not in the list are ignored.
func (c *Cluster) AcceptVolumeLoss(ctx context.Context, name, id string, lost []int64) error {
	return c.propose(ctx, command{Op: opVolumeAcceptLoss, Name: name, Volume: &VolumeSpec{Name: name, ID: id, Lost: lost}})
}

// ClearCoveredMark clears writer's mark on mirror of volume name, which
// a resync that began under the volume's claim of epoch covered, unless
// writer is the volume's writer or the volume was claimed again since
// epoch when the change applies (see command.Covered).
func (c *Cluster) ClearCoveredMark(ctx context.Context, name, mirror, writer string, epoch uint64) error {
	return c.propose(ctx, command{Op: opVolumeStale, Name: name, Node: &NodeInfo{ID: mirror}, State: StateUp, Writer: writer, Covered: true, Epoch: epoch})
}

// DeleteVolume removes volume name if it is still the volume with that ID
// (ErrVolumeNotFound otherwise): a delete decided on one volume never
// removes another created since under its name.
func (c *Cluster) DeleteVolume(ctx context.Context, name, id string) error {
	return c.propose(ctx, command{Op: opVolumeDelete, Name: name, Volume: &VolumeSpec{Name: name, ID: id}})
}

// SetNodeState records a node's state. It fails with ErrNodeNotFound. The
// leader's health checks move nodes between up and down; they leave nodes in
// maintenance alone.
func (c *Cluster) SetNodeState(ctx context.Context, id string, state NodeState) error {
	if !state.Valid() {
		return fmt.Errorf("%w: node state %q", ErrInvalid, state)
	}
	return c.propose(ctx, command{Op: opNodeState, Name: id, State: state})
}

// SetDraining takes node id out of placement (or puts it back) while it
// stays up; see NodeInfo.Draining.
func (c *Cluster) SetDraining(ctx context.Context, id string, on bool) error {
	return c.propose(ctx, command{Op: opNodeDrain, Name: id, Drain: on})
}

// Leave removes this node from the cluster (from the raft configuration and
// from the map), then closes it. A leader hands leadership over first.
func (c *Cluster) Leave(ctx context.Context) error {
	c.cancel()
	c.wg.Wait()
	if c.IsLeader() {
		cf := c.raft.GetConfiguration()
		if cf.Error() == nil && len(cf.Configuration().Servers) == 1 {
			return c.Close(ctx)
		}
		for i := 0; i < 3 && c.IsLeader() && ctx.Err() == nil; i++ {
			if err := c.raft.LeadershipTransfer().Error(); err != nil {
				c.log.Warn("leadership transfer before leave failed", "err", err)
			}
		}
	}
	err := c.retry(ctx, func() error {
		if !c.inConfiguration() {
			return nil // the removal has reached this node already
		}
		if c.IsLeader() {
			return c.removeMember(ctx, c.self.ID)
		}
		return c.postLeader(ctx, "/cluster/leave", leaveRequest{ID: c.self.ID}, nil)
	})
	if cerr := c.Close(ctx); err == nil {
		err = cerr
	}
	return err
}

// inConfiguration reports whether the latest raft configuration this node
// knows lists it.
func (c *Cluster) inConfiguration() bool {
	cf := c.raft.GetConfiguration()
	if cf.Error() != nil {
		return true
	}
	for _, s := range cf.Configuration().Servers {
		if string(s.ID) == c.self.ID {
			return true
		}
	}
	return false
}

// Close stops the node's raft instance and background work. The node stays
// a member: restarting it with the same DataDir rejoins with its state.
func (c *Cluster) Close(ctx context.Context) error {
	c.closeOnce.Do(func() {
		c.cancel()
		c.wg.Wait()
		err := c.raft.Shutdown().Error()
		c.trans.CloseStreams() // pooled connections to peers: their readers end too
		errs := []error{err, c.trans.Close(), c.store.Close()}
		c.closeErr = errors.Join(errs...)
		c.log.Info("cluster node stopped", "id", c.self.ID)
	})
	return c.closeErr
}

// propose applies cmd through the leader, retrying while there is no leader
// or leadership moves, until ctx ends.
func (c *Cluster) propose(ctx context.Context, cmd command) error {
	uncertain := false
	return c.retry(ctx, func() error {
		var err error
		if c.IsLeader() {
			err = c.applyLocal(ctx, cmd)
		} else {
			var resp applyResponse
			if err = c.postLeader(ctx, PathApply, cmd, &resp); err == nil {
				c.waitVersion(ctx, resp.Version)
			}
		}
		if errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, errUnreachable) {
			// The entry may or may not have been committed.
			uncertain = true
		}
		if uncertain && (cmd.Op == opBucketDelete && errors.Is(err, object.ErrBucketNotFound) ||
			cmd.Op == opVolumeDelete && errors.Is(err, ErrVolumeNotFound)) {
			return nil
		}
		return err
	})
}

// waitVersion waits until this node's map reaches version v or ctx ends.
func (c *Cluster) waitVersion(ctx context.Context, v uint64) bool {
	for {
		m, changed := c.pub.snapshot()
		if m.Version >= v {
			return true
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		case <-c.ctx.Done():
			return false
		}
	}
}

// Sync makes this node's map at least as new as every change acknowledged
// when Sync was called (read-your-writes across nodes): on the leader it is
// a raft barrier, once per term (see syncedVersion); on a follower it asks
// the leader for a version that holds every acknowledged change and waits
// to apply it.
func (c *Cluster) Sync(ctx context.Context) error {
	return c.retry(ctx, func() error {
		if c.IsLeader() {
			// Everything acknowledged is applied here once the first
			// barrier of this term is through.
			_, err := c.syncedVersion(ctx)
			return err
		}
		_, id := c.raft.LeaderWithID()
		leader, ok := c.Map().Nodes[string(id)]
		if id == "" || !ok {
			return ErrNoLeader
		}
		var h Health
		var err error = errUnreachable
		for _, base := range leader.IntraURLs() {
			if err = c.get(ctx, base+PathHealth+"?sync", timeoutFrom(ctx, 5*time.Second), &h); err == nil && h.ID != string(id) {
				// Another process took over the address: its version
				// is not the leader's.
				err = fmt.Errorf("%w: %s answers as %q, not the leader %q", errUnreachable, base, h.ID, id)
			}
			if err == nil {
				break
			}
		}
		if err != nil {
			return err
		}
		if h.Leader != string(id) {
			return ErrNotLeader // it lost leadership meanwhile
		}
		if !c.waitVersion(ctx, h.Version) {
			if c.ctx.Err() != nil {
				return ErrClosed
			}
			return fmt.Errorf("%w: %w", ErrNoLeader, ctx.Err())
		}
		return nil
	})
}

// syncedVersion returns, on the leader, a map version that holds every
// change acknowledged so far; it answers followers' Sync. The leader's map
// alone may not: a leader just elected learns which entries of its log its
// predecessors committed (and acknowledged) only once it commits an entry
// of its own term, and applies them after that. So the first call in a term
// waits for a raft barrier (every entry before it applied); later calls in
// the term answer after one heartbeat round, since the leader applies
// every change it acknowledges before acknowledging it.
func (c *Cluster) syncedVersion(ctx context.Context) (uint64, error) {
	// The term is read first: a barrier that completes in a later term
	// (leadership lost and won again) then counts for no term.
	term := c.raft.CurrentTerm()
	if !c.IsLeader() {
		return 0, ErrNotLeader
	}
	if c.syncTerm.Load() != term {
		c.syncMu.Lock()
		defer c.syncMu.Unlock()
		if c.syncTerm.Load() != term {
			if err := c.raft.Barrier(timeoutFrom(ctx, 5*time.Second)).Error(); err != nil {
				if errors.Is(err, raft.ErrRaftShutdown) {
					return 0, ErrClosed
				}
				return 0, err
			}
			c.syncTerm.Store(term)
		}
	}
	v := c.Map().Version
	// A leader cut off from the others keeps believing it leads for up
	// to its lease, while a new leader may already acknowledge changes
	// it lacks: the version counts only once a quorum has confirmed this
	// node still leads, after it was read (a raft read index).
	if err := c.raft.VerifyLeader().Error(); err != nil {
		if errors.Is(err, raft.ErrRaftShutdown) {
			return 0, ErrClosed
		}
		return 0, fmt.Errorf("%w: %w", ErrNotLeader, err)
	}
	return v, nil
}

// retry runs f until it returns nil or an error that a new leader cannot
// fix, or ctx ends.
func (c *Cluster) retry(ctx context.Context, f func() error) error {
	delay := 20 * time.Millisecond
	for {
		err := f()
		if err == nil || !retryable(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w (last error: %v)", ErrNoLeader, ctx.Err(), err)
		case <-time.After(delay):
		}
		if delay < 500*time.Millisecond {
			delay *= 2
		}
	}
}

func retryable(err error) bool {
	for _, e := range []error{ErrNoLeader, ErrNotLeader, errUnreachable, raft.ErrNotLeader,
		raft.ErrLeadershipLost, raft.ErrLeadershipTransferInProgress, raft.ErrEnqueueTimeout} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// applyLocal appends cmd to the log on this node, which must be the leader,
// and returns the state machine's verdict.
func (c *Cluster) applyLocal(ctx context.Context, cmd command) error {
	if cmd.At.IsZero() {
		cmd.At = time.Now().UTC()
	}
	data, err := encodeJSON(cmd)
	if err != nil {
		return err
	}
	f := c.raft.Apply(data, timeoutFrom(ctx, 10*time.Second))
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrRaftShutdown) {
			return ErrClosed
		}
		return err
	}
	if err, ok := f.Response().(error); ok {
		return err
	}
	return nil
}

func timeoutFrom(ctx context.Context, def time.Duration) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		if t := time.Until(d); t > 0 {
			return t
		}
		return time.Millisecond
	}
	return def
}

// newTransport starts the raft transport cfg asks for: TLS with the
// secret's proof when cfg.RaftSecret is set, plain TCP otherwise.
func newTransport(cfg Config, hlog hclog.Logger) (*raft.NetworkTransport, error) {
	bind, err := net.ResolveTCPAddr("tcp", cfg.RaftBind)
	if err != nil {
		return nil, fmt.Errorf("cluster: raft bind %q: %w", cfg.RaftBind, err)
	}
	var adv net.Addr
	if cfg.RaftAdvertise != "" {
		if adv, err = net.ResolveTCPAddr("tcp", cfg.RaftAdvertise); err != nil {
			return nil, fmt.Errorf("cluster: raft advertise %q: %w", cfg.RaftAdvertise, err)
		}
	}
	const maxPool, timeout = 3, 5 * time.Second
	if cfg.RaftSecret == "" {
		t, err := raft.NewTCPTransportWithLogger(bind.String(), adv, maxPool, timeout, hlog)
		if err != nil {
			return nil, fmt.Errorf("cluster: raft transport on %s: %w", cfg.RaftBind, err)
		}
		return t, nil
	}
	link, err := raftlink.Listen(bind.String(), cfg.RaftSecret, raftlink.Options{Advertise: adv, Log: cfg.Log})
	if err != nil {
		return nil, fmt.Errorf("cluster: raft transport on %s: %w", cfg.RaftBind, err)
	}
	return raft.NewNetworkTransportWithLogger(link, maxPool, timeout, hlog), nil
}
