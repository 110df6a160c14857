package cluster_test

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/cluster/clustertest"
)

// TestHealthRoundKeepsOperatorState: a health round decides on a map
// snapshot, probes every member, then changes states. An operator who puts
// a down node into maintenance while a round is probing it keeps that
// mark: the round's change applies only if the node is still in the state
// the round saw.
func TestHealthRoundKeepsOperatorState(t *testing.T) {
	const (
		healthy = iota
		failing
		slowOK
	)
	var mode atomic.Int32
	probed := make(chan struct{}, 1)
	tc := clustertest.Start(t, clustertest.Options{N: 3, Mount: func(n *clustertest.Node, mux *http.ServeMux) {
		if n.Index != 2 {
			return
		}
		mux.HandleFunc("/cluster/health", func(w http.ResponseWriter, r *http.Request) {
			switch mode.Load() {
			case failing:
				http.Error(w, "sick", http.StatusInternalServerError)
				return
			case slowOK:
				select {
				case probed <- struct{}{}:
					time.Sleep(70 * time.Millisecond)
				default:
				}
			}
			if c := n.Cluster(); c != nil {
				c.Handler().ServeHTTP(w, r)
			}
		})
	}})
	ctx := testCtx(t, 30*time.Second)
	leader, err := tc.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	x := tc.Node(2)
	if leader == x {
		t.Skip("the probed node leads")
	}
	mode.Store(failing)
	if err := tc.WaitMap(ctx, leader, isDown(x.ID)); err != nil {
		t.Fatal(err)
	}
	mode.Store(slowOK)
	<-probed // a round that saw x down is probing it
	if err := leader.Cluster().SetNodeState(ctx, x.ID, cluster.StateMaintenance); err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond)
	if n, _ := leader.Cluster().Map().Node(x.ID); n.State != cluster.StateMaintenance {
		t.Errorf("operator's maintenance mark on %s replaced by %q by a health round in flight", x.ID, n.State)
	}
}

// TestRemovedNodeRejoinKeepsDowns: a down node removed with admin node rm
// that later starts again with its data directory is re-admitted with a
// Downs count above the one it had, so internal/node's rejoin checks its
// copies.
func TestRemovedNodeRejoinKeepsDowns(t *testing.T) {
	tc, ctx, leader, f := downFollower(t)
	downs := leader.Cluster().Map().Nodes[f.ID].Downs
	removeNode(ctx, t, tc, leader, f)
	tc.Restart(f, true)
	if err := tc.WaitMap(ctx, leader, func(m *cluster.Map) bool { n, ok := m.Node(f.ID); return ok && n.State == cluster.StateUp }); err != nil {
		t.Fatal(err)
	}
	if got := leader.Cluster().Map().Nodes[f.ID].Downs; got <= downs {
		t.Errorf("%s came back after removal with Downs %d (was %d before removal): its copies are never checked", f.ID, got, downs)
	}
}
