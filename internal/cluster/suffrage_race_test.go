package cluster_test

import (
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/cluster/clustertest"
)

// TestSuffrageRecordKeepsOperatorState: the leader records a member's
// suffrage in the map from a map it read moments earlier. An operator's
// state change that lands in between (here: committed while the leader's
// state machine lags, so the leader's map does not show it yet) stands:
// recording the suffrage changes the suffrage only.
func TestSuffrageRecordKeepsOperatorState(t *testing.T) {
	// No health rounds: the test runs the suffrage step itself.
	tc := clustertest.Start(t, clustertest.Options{N: 3, HeartbeatInterval: time.Hour, NoPromotion: true})
	ctx := testCtx(t, 30*time.Second)
	leader, err := tc.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lc := leader.Cluster()
	cluster.SyncVoters(ctx, lc) // the members joined as non-voters
	x := follower(t, tc)

	// The map's record of x disagrees with the raft configuration (x is a
	// voter), as after a promotion not recorded yet.
	rec := lc.Map().Nodes[x.ID]
	if !rec.Voter {
		t.Fatalf("%s is not a voter: %+v", x.ID, rec)
	}
	rec.Voter = false
	if err := cluster.PutNodeRecord(ctx, lc, rec); err != nil {
		t.Fatalf("node.put: %v", err)
	}
	if n := lc.Map().Nodes[x.ID]; n.Voter {
		t.Fatalf("record of %s still says voter", x.ID)
	}

	release := cluster.HoldApply(lc)
	t.Cleanup(release) // before the nodes close: raft waits for its state machine
	waitCommit := func(after uint64) uint64 {
		t.Helper()
		for ctx.Err() == nil {
			if ci := lc.Status().CommitIndex; ci > after {
				return ci
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatal("no new entry committed")
		return 0
	}

	// The operator puts x in maintenance: committed, not yet applied by
	// the leader.
	ci := lc.Status().CommitIndex
	opDone := make(chan error, 1)
	go func() { opDone <- lc.SetNodeState(ctx, x.ID, cluster.StateMaintenance) }()
	ci = waitCommit(ci)

	// The leader records x's suffrage from its (lagging) map.
	votersDone := make(chan struct{})
	go func() {
		defer close(votersDone)
		cluster.SyncVoters(ctx, lc)
	}()
	waitCommit(ci)

	release()
	if err := <-opDone; err != nil {
		t.Fatal(err)
	}
	<-votersDone
	n := lc.Map().Nodes[x.ID]
	if !n.Voter {
		t.Errorf("suffrage of %s not recorded: %+v", x.ID, n)
	}
	if n.State != cluster.StateMaintenance {
		t.Errorf("operator's maintenance mark on %s replaced by %q when the leader recorded its suffrage", x.ID, n.State)
	}
}
