package cluster_test

import (
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/cluster/clustertest"
)

// TestSyncAfterLeaderChange: Sync on a follower reads the writes
// acknowledged before it was called even right after a leader change. A
// new leader learns which entries of its log its predecessor committed
// only once it commits an entry of its own term, and applies them later
// still: until then its map lacks acknowledged writes, and the version it
// reports must not be taken as the cluster's. Here both followers apply
// slowly (their state machines are held back) when the leader that
// acknowledged a bucket creation dies.
func TestSyncAfterLeaderChange(t *testing.T) {
	tc := clustertest.Start(t, clustertest.Options{N: 3})
	ctx := testCtx(t, 30*time.Second)
	old, err := tc.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var rest []*clustertest.Node
	for _, n := range tc.Nodes() {
		if n != old {
			rest = append(rest, n)
		}
	}
	v0 := old.Cluster().Map().Version
	for _, n := range rest {
		if err := tc.WaitMap(ctx, n, func(m *cluster.Map) bool { return m.Version >= v0 }); err != nil {
			t.Fatal(err)
		}
	}
	var releases []func()
	releaseAll := func() {
		for _, r := range releases {
			r()
		}
	}
	for _, n := range rest {
		releases = append(releases, cluster.HoldApply(n.Cluster()))
	}
	t.Cleanup(releaseAll) // before the nodes close: raft waits for its state machine
	if a, b := rest[0].Cluster().Map().Version, rest[1].Cluster().Map().Version; a != b {
		t.Fatalf("followers held at versions %d and %d (the cluster was not idle)", a, b)
	}

	if err := old.Cluster().CreateBucket(ctx, cluster.BucketProps{Name: "late"}); err != nil {
		t.Fatal(err)
	}
	tc.Stop(old)

	var lead, f *clustertest.Node
	for lead == nil {
		for i, n := range rest {
			if o := rest[1-i]; n.Cluster().IsLeader() && o.Cluster().LeaderID() == n.ID {
				lead, f = n, o
			}
		}
		select {
		case <-ctx.Done():
			t.Fatal("no new leader")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if _, ok := f.Cluster().Map().Bucket("late"); ok {
		t.Fatalf("%s applied the bucket although its state machine is held", f.ID)
	}

	time.AfterFunc(300*time.Millisecond, releaseAll)
	if err := f.Cluster().Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Cluster().Map().Bucket("late"); !ok {
		t.Errorf("Sync on %s returned before its map held a bucket whose creation was acknowledged before the call: "+
			"the new leader %s answered with a version that lacks its predecessor's entries", f.ID, lead.ID)
	}
}
