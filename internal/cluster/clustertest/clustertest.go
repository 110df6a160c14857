// Package clustertest starts clusters of in-process cluster nodes on loopback
// for tests: each node has its own raft transport, data directory and HTTP
// listener serving the cluster handler under "/cluster/". Timeouts are short
// so elections and failure detection take well under a second.
package clustertest

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster"
)

// FastRaft returns the raft timings test clusters use unless Options
// override them.
func FastRaft() cluster.RaftTimeouts {
	return cluster.RaftTimeouts{
		Heartbeat:   300 * time.Millisecond,
		Election:    300 * time.Millisecond,
		LeaderLease: 150 * time.Millisecond,
		Commit:      20 * time.Millisecond,
	}
}

const (
	fastHeartbeat = 100 * time.Millisecond
	fastDownAfter = 800 * time.Millisecond
)

// RaftSecret is the secret every test cluster's raft link runs with.
const RaftSecret = "clustertest-raft-secret"

// Options shape a test cluster. Zero values pick defaults.
type Options struct {
	N          int    // nodes to start (default 3)
	Voters     int    // voters (default 3)
	BaseDir    string // data directories go under it (default t.TempDir())
	Mountpaths int    // mountpath directories announced per node (default 2)
	Log        *slog.Logger
	// Health and raft timings (defaults: 100ms probes, down after 800ms,
	// 300ms raft heartbeat and election timeouts).
	HeartbeatInterval time.Duration
	DownAfter         time.Duration
	Raft              cluster.RaftTimeouts
	// Mount, if set, adds handlers to a node's intra-cluster mux before the
	// node starts serving (the cluster handler is already under "/cluster/").
	// It runs again on every restart.
	Mount func(n *Node, mux *http.ServeMux)
	// NoPromotion: Start does not wait for the leader's health loop to
	// promote the new members to voters (a test that runs no health
	// rounds promotes them itself, with cluster.SyncVoters).
	NoPromotion bool
	// StartTimeout bounds Start and Restart (default 30s).
	StartTimeout time.Duration
	// Announce, if set, may change what a node announces about itself
	// (addresses, mountpaths) before it starts.
	Announce func(n *Node, self *cluster.NodeInfo)
}

// Node is one member of a test cluster.
type Node struct {
	Index      int
	ID         string
	Dir        string   // data directory (raft state under Dir/raft)
	Mountpaths []string // directories announced as mountpaths
	URL        string   // intra-cluster base URL, e.g. "http://127.0.0.1:40123"
	RaftBind   string   // raft address; reused on restart

	mu  sync.Mutex
	c   *cluster.Cluster
	srv *http.Server
}

// Cluster returns the node's running cluster handle, or nil while it is stopped.
func (n *Node) Cluster() *cluster.Cluster {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.c
}

// Running reports whether the node is started.
func (n *Node) Running() bool { return n.Cluster() != nil }

// Cluster is a set of in-process nodes.
type Cluster struct {
	t     testing.TB
	opts  Options
	mu    sync.Mutex
	nodes []*Node
}

// Start starts opts.N nodes: the first bootstraps, the others join through
// the nodes started before them. It returns when every node sees all N nodes
// in its map. Everything is stopped by t.Cleanup.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.N <= 0 {
		opts.N = 3
	}
	if opts.BaseDir == "" {
		opts.BaseDir = t.TempDir()
	}
	if opts.Mountpaths <= 0 {
		opts.Mountpaths = 2
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = fastHeartbeat
	}
	if opts.DownAfter <= 0 {
		opts.DownAfter = fastDownAfter
	}
	if opts.Raft == (cluster.RaftTimeouts{}) {
		opts.Raft = FastRaft()
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 30 * time.Second
	}
	tc := &Cluster{t: t, opts: opts}
	t.Cleanup(tc.Close)
	for i := 0; i < opts.N; i++ {
		if _, err := tc.add(i == 0, nil); err != nil {
			t.Fatalf("clustertest: start node %d: %v", i+1, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), opts.StartTimeout)
	defer cancel()
	voters := opts.Voters
	if voters <= 0 {
		voters = cluster.DefaultVoters
	}
	voters = min(voters, opts.N)
	if opts.NoPromotion {
		voters = 1
	}
	for _, n := range tc.Nodes() {
		// New members join as non-voters; the leader promotes them once
		// they follow it.
		formed := func(m *cluster.Map) bool { return len(m.UpNodeIDs()) == opts.N && VoterCount(m) >= voters }
		if err := tc.WaitMap(ctx, n, formed); err != nil {
			t.Fatalf("clustertest: %s never saw %d nodes up and %d voters: %v", n.ID, opts.N, voters, err)
		}
	}
	return tc
}

// VoterCount is the number of voters m records.
func VoterCount(m *cluster.Map) int {
	n := 0
	for _, ni := range m.Nodes {
		if ni.Voter {
			n++
		}
	}
	return n
}

// Nodes returns all nodes, running or not.
func (tc *Cluster) Nodes() []*Node {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return append([]*Node(nil), tc.nodes...)
}

// Node returns the node with the given index (0-based).
func (tc *Cluster) Node(i int) *Node { return tc.Nodes()[i] }

// Seeds returns the intra URLs of all nodes.
func (tc *Cluster) Seeds() []string {
	var s []string
	for _, n := range tc.Nodes() {
		s = append(s, n.URL)
	}
	return s
}

// AddNode starts one more node that joins through the existing ones and
// waits until it has joined.
func (tc *Cluster) AddNode() *Node {
	tc.t.Helper()
	return tc.AddNodeWith(NodeOptions{})
}

// NodeOptions change how AddNodeWith starts a node.
type NodeOptions struct {
	Seeds     []string // default: every other node's URL
	Bootstrap bool     // ask to bootstrap (it joins anyway if a seed names a leader)
}

// AddNodeWith starts one more node with the given options and waits until
// it has joined.
func (tc *Cluster) AddNodeWith(o NodeOptions) *Node {
	tc.t.Helper()
	n, err := tc.add(o.Bootstrap, o.Seeds)
	if err != nil {
		tc.t.Fatalf("clustertest: add node: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), tc.opts.StartTimeout)
	defer cancel()
	if err := n.Cluster().WaitForLeader(ctx); err != nil {
		tc.t.Fatalf("clustertest: %s did not join: %v", n.ID, err)
	}
	return n
}

func (tc *Cluster) add(bootstrap bool, seeds []string) (*Node, error) {
	tc.mu.Lock()
	i := len(tc.nodes)
	n := &Node{Index: i, ID: fmt.Sprintf("n%d", i+1), Dir: filepath.Join(tc.opts.BaseDir, fmt.Sprintf("n%d", i+1)), RaftBind: "127.0.0.1:0"}
	for j := 0; j < tc.opts.Mountpaths; j++ {
		n.Mountpaths = append(n.Mountpaths, filepath.Join(n.Dir, fmt.Sprintf("mp%d", j+1)))
	}
	tc.nodes = append(tc.nodes, n)
	tc.mu.Unlock()
	return n, tc.start(n, bootstrap, "127.0.0.1:0", seeds)
}

// start launches n's HTTP listener on httpAddr and its cluster node. Nil
// seeds mean every other node.
func (tc *Cluster) start(n *Node, bootstrap bool, httpAddr string, seeds []string) error {
	ln, err := net.Listen("tcp", httpAddr)
	if err != nil {
		return err
	}
	n.URL = "http://" + ln.Addr().String()
	if seeds == nil {
		for _, o := range tc.Nodes() {
			if o != n {
				seeds = append(seeds, o.URL)
			}
		}
	}
	cfg := cluster.Config{
		NodeID:   n.ID,
		DataDir:  n.Dir,
		RaftBind: n.RaftBind,
		Self: cluster.NodeInfo{
			PublicAddrs: []string{ln.Addr().String()},
			IntraAddrs:  []string{ln.Addr().String()},
			Mountpaths:  n.Mountpaths,
		},
		Seeds:             seeds,
		Bootstrap:         bootstrap,
		Voters:            tc.opts.Voters,
		HTTPClient:        &http.Client{Timeout: 5 * time.Second},
		Log:               tc.opts.Log.With("node", n.ID),
		HeartbeatInterval: tc.opts.HeartbeatInterval,
		DownAfter:         tc.opts.DownAfter,
		Raft:              tc.opts.Raft,
		RaftSecret:        RaftSecret,
	}
	if tc.opts.Announce != nil {
		tc.opts.Announce(n, &cfg.Self)
	}
	ctx, cancel := context.WithTimeout(context.Background(), tc.opts.StartTimeout)
	defer cancel()
	c, err := cluster.New(ctx, cfg)
	if err != nil {
		ln.Close()
		return err
	}
	n.RaftBind = c.Self().RaftAddr
	mux := http.NewServeMux()
	mux.Handle("/cluster/", c.Handler())
	if tc.opts.Mount != nil {
		tc.opts.Mount(n, mux)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	n.mu.Lock()
	n.c, n.srv = c, srv
	n.mu.Unlock()
	if bootstrap && len(seeds) == 0 {
		if err := c.WaitForLeader(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Stop stops a node as a crash would look to its peers: its listener and
// raft transport go away without leaving the cluster. Its data stays.
func (tc *Cluster) Stop(n *Node) {
	tc.t.Helper()
	n.mu.Lock()
	c, srv := n.c, n.srv
	n.c, n.srv = nil, nil
	n.mu.Unlock()
	if c == nil {
		return
	}
	srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		tc.t.Errorf("clustertest: stop %s: %v", n.ID, err)
	}
}

// Restart starts a stopped node again with its data directory. With
// sameAddrs it reuses its HTTP and raft addresses; otherwise it takes new
// ports, and must re-announce itself. It waits until the node has a leader.
func (tc *Cluster) Restart(n *Node, sameAddrs bool) {
	tc.t.Helper()
	tc.RestartAsync(n, sameAddrs)
	ctx, cancel := context.WithTimeout(context.Background(), tc.opts.StartTimeout)
	defer cancel()
	if err := n.Cluster().WaitForLeader(ctx); err != nil {
		tc.t.Fatalf("clustertest: %s after restart: %v", n.ID, err)
	}
}

// RestartAsync starts a stopped node again like Restart but does not wait
// for a leader (for restarting several nodes of a stopped cluster).
func (tc *Cluster) RestartAsync(n *Node, sameAddrs bool) {
	tc.t.Helper()
	httpAddr := "127.0.0.1:0"
	if sameAddrs {
		httpAddr = n.URL[len("http://"):]
	} else {
		n.RaftBind = "127.0.0.1:0"
	}
	if err := tc.start(n, false, httpAddr, nil); err != nil {
		tc.t.Fatalf("clustertest: restart %s: %v", n.ID, err)
	}
}

// Leader waits for a running node that is the leader and returns it.
func (tc *Cluster) Leader(ctx context.Context) (*Node, error) {
	for {
		for _, n := range tc.Nodes() {
			if c := n.Cluster(); c != nil && c.IsLeader() {
				return n, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("clustertest: no leader: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// WaitMap waits until cond holds for n's current map.
func (tc *Cluster) WaitMap(ctx context.Context, n *Node, cond func(*cluster.Map) bool) error {
	c := n.Cluster()
	if c == nil {
		return fmt.Errorf("clustertest: %s is stopped", n.ID)
	}
	w := c.Watch(ctx)
	for m := range w {
		if cond(m) {
			return nil
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return fmt.Errorf("clustertest: %s closed while waiting", n.ID)
}

// WaitAll waits until cond holds on every running node.
func (tc *Cluster) WaitAll(ctx context.Context, cond func(*cluster.Map) bool) error {
	for _, n := range tc.Nodes() {
		if !n.Running() {
			continue
		}
		if err := tc.WaitMap(ctx, n, cond); err != nil {
			return fmt.Errorf("%s: %w", n.ID, err)
		}
	}
	return nil
}

// Close stops every node. Start registers it with t.Cleanup.
func (tc *Cluster) Close() {
	var wg sync.WaitGroup
	for _, n := range tc.Nodes() {
		wg.Go(func() { tc.Stop(n) })
	}
	wg.Wait()
}
