package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/cluster/clustertest"
)

// startExtra starts one more cluster node outside tc (fresh data
// directory, new loopback ports) and stops it at the end of the test.
func startExtra(t *testing.T, id string, bootstrap bool, seeds []string) *cluster.Cluster {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := cluster.New(ctx, cluster.Config{
		NodeID:            id,
		DataDir:           t.TempDir(),
		RaftBind:          "127.0.0.1:0",
		Self:              cluster.NodeInfo{PublicAddrs: []string{ln.Addr().String()}, IntraAddrs: []string{ln.Addr().String()}},
		Seeds:             seeds,
		Bootstrap:         bootstrap,
		HTTPClient:        &http.Client{Timeout: 5 * time.Second},
		HeartbeatInterval: 100 * time.Millisecond,
		DownAfter:         800 * time.Millisecond,
		Raft:              clustertest.FastRaft(),
		RaftSecret:        clustertest.RaftSecret,
	})
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/cluster/", c.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c.Close(ctx)
	})
	return c
}

// TestBootstrapNodeJoinsClusterWithoutLeader: the bootstrap node lost its
// data directory and restarts (same config: Bootstrap and seeds) while the
// running cluster has no leader (an election, or a lost quorum). A seed
// that has applied a map shows that a cluster exists even without a
// leader: the node joins it rather than bootstrapping a second, empty one
// next to it (split brain).
func TestBootstrapNodeJoinsClusterWithoutLeader(t *testing.T) {
	tc := clustertest.Start(t, clustertest.Options{N: 3})
	ctx := testCtx(t, 30*time.Second)
	if err := tc.Node(0).Cluster().CreateBucket(ctx, cluster.BucketProps{Name: "data"}); err != nil {
		t.Fatal(err)
	}
	n3 := tc.Node(2)
	if err := tc.WaitMap(ctx, n3, hasBucket("data")); err != nil {
		t.Fatal(err)
	}
	tc.Stop(tc.Node(0))
	tc.Stop(tc.Node(1))
	deadline := time.Now().Add(10 * time.Second)
	for n3.Cluster().LeaderID() != "" {
		if time.Now().After(deadline) {
			t.Fatal("n3 still names a leader")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// n1 comes back with an empty data directory, as configured: bootstrap, seeds.
	c := startExtra(t, "n1", true, []string{tc.Node(1).URL, n3.URL})
	time.Sleep(3 * time.Second)
	if st := c.Status(); c.IsLeader() && slices.Equal(st.Voters, []string{"n1"}) {
		_, hasData := c.Map().Bucket("data")
		t.Errorf("n1 bootstrapped a second cluster (voters %v, leader of its own, bucket \"data\" known: %v) while n3 of the running cluster answered its seed probe", st.Voters, hasData)
	}
}

// TestProbeChecksWhoAnswers: the leader's health probe accepts an answer
// only from the member itself (Health.ID): a dead node whose address
// another process took over (a replacement node, a recycled address) stays
// down instead of being placed on again.
func TestProbeChecksWhoAnswers(t *testing.T) {
	_, _, leader, f := downFollower(t)
	addr := strings.TrimPrefix(f.URL, "http://")
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot take over %s: %v", addr, err)
	}
	other := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(cluster.Health{ID: "someone-else", RaftState: "Follower"})
	})}
	go other.Serve(ln)
	t.Cleanup(func() { other.Close() })
	time.Sleep(1500 * time.Millisecond)
	if n, _ := leader.Cluster().Map().Node(f.ID); n.State != cluster.StateDown {
		t.Errorf("dead node %s marked %s because another process answers on its old address", f.ID, n.State)
	}
}

// TestJoinWithIDOfLiveNodeRefused: a second process configured with the
// ID of a live member (a copied config) joins with other addresses. The
// member still answers as that ID on its own addresses, so the join is
// refused and the member keeps its entry and its place in raft.
func TestJoinWithIDOfLiveNodeRefused(t *testing.T) {
	tc := clustertest.Start(t, clustertest.Options{N: 3})
	ctx := testCtx(t, 30*time.Second)
	leader, err := tc.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	victim := follower(t, tc)
	orig, _ := leader.Cluster().Map().Node(victim.ID)
	startExtra(t, victim.ID, false, tc.Seeds())
	time.Sleep(3 * time.Second)
	now, _ := leader.Cluster().Map().Node(victim.ID)
	if !slices.Equal(now.IntraAddrs, orig.IntraAddrs) || now.RaftAddr != orig.RaftAddr {
		t.Errorf("a second process with the ID of live node %s took over its entry: intra %v -> %v, raft %s -> %s",
			victim.ID, orig.IntraAddrs, now.IntraAddrs, orig.RaftAddr, now.RaftAddr)
	}
}

// TestBootstrapNodeWithDataRefusesToFoundASecondCluster: a bootstrap node
// whose raft state is gone but whose drives hold data, and whose seeds do
// not answer, refuses to start (it would found a second cluster beside the
// one its data belongs to); a node with empty drives, as in a new cluster,
// bootstraps.
func TestBootstrapNodeWithDataRefusesToFoundASecondCluster(t *testing.T) {
	for _, holds := range []bool{true, false} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := cluster.New(ctx, cluster.Config{
			NodeID:     "n1",
			DataDir:    t.TempDir(),
			RaftBind:   "127.0.0.1:0",
			Self:       cluster.NodeInfo{PublicAddrs: []string{"127.0.0.1:1"}, IntraAddrs: []string{"127.0.0.1:1"}},
			Seeds:      []string{"http://127.0.0.1:1"}, // nothing listens there
			Bootstrap:  true,
			HoldsData:  holds,
			HTTPClient: &http.Client{Timeout: time.Second},
			Raft:       clustertest.FastRaft(),
			RaftSecret: clustertest.RaftSecret,
		})
		switch {
		case holds && !errors.Is(err, cluster.ErrLostState):
			t.Errorf("drives with data: %v, want ErrLostState", err)
		case !holds && err != nil:
			t.Errorf("empty drives: %v, want a bootstrapped node", err)
		}
		if err == nil {
			if !holds {
				if err := c.WaitForLeader(ctx); err != nil {
					t.Errorf("empty drives: no leader: %v", err)
				}
			}
			c.Close(ctx)
		}
		cancel()
	}
}
