package cluster_test

import (
	"encoding/json"
	"io"
	"net/http"
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

// TestSyncNeedsAQuorum: a leader answers ?sync (the version a follower's
// Sync waits for) only once a quorum confirms that it still leads. A leader
// cut off from the others goes on believing it leads for up to its lease,
// while on the other side a new leader may already acknowledge changes it
// lacks; it cannot tell that from followers that died, as here, where its
// lease is long enough for the question to be asked well within it.
func TestSyncNeedsAQuorum(t *testing.T) {
	tc := clustertest.Start(t, clustertest.Options{N: 3, Raft: cluster.RaftTimeouts{
		Heartbeat: 2 * time.Second, Election: 2 * time.Second, LeaderLease: 2 * time.Second, Commit: 20 * time.Millisecond,
	}})
	ctx := testCtx(t, 60*time.Second)
	lead, err := tc.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := lead.Cluster().Sync(ctx); err != nil { // the term's barrier
		t.Fatal(err)
	}
	health := func() (int, string) {
		resp, err := http.Get(lead.URL + cluster.PathHealth + "?sync")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := health(); code != http.StatusOK {
		t.Fatalf("?sync on a leader with its quorum: %d %s", code, body)
	}
	for _, n := range tc.Nodes() {
		if n != lead {
			tc.Stop(n)
		}
	}
	// raft counts, for a quorum check, the answer to a heartbeat that was
	// on its way when the check began; one answered just before a follower
	// stopped can still be waiting for the leader's replication goroutine
	// on a loaded machine. Those are through well within the lease.
	time.Sleep(500 * time.Millisecond)
	if !lead.Cluster().IsLeader() {
		t.Skip("the leader stepped down before it was asked; nothing to check")
	}
	start := time.Now()
	code, body := health()
	if code == http.StatusOK {
		t.Fatalf("?sync on a leader that lost its quorum answered a version after %v: %s", time.Since(start).Round(time.Millisecond), body)
	}
}

// TestMapSyncReadsYourWrites: GET /cluster/map?sync on a follower that has
// not applied a bucket created a moment ago through the leader waits until
// it has, and then shows it; the plain map shows only what the follower
// applied.
func TestMapSyncReadsYourWrites(t *testing.T) {
	tc := clustertest.Start(t, clustertest.Options{N: 3})
	ctx := testCtx(t, 30*time.Second)
	lead, err := tc.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var follower *clustertest.Node
	for _, n := range tc.Nodes() {
		if n != lead {
			follower = n
			break
		}
	}
	release := cluster.HoldApply(follower.Cluster())
	defer release()
	if err := lead.Cluster().CreateBucket(ctx, cluster.BucketProps{Name: "fresh"}); err != nil {
		t.Fatal(err)
	}
	hasFresh := func(query string) bool {
		resp, err := http.Get(follower.URL + cluster.PathMap + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m cluster.Map
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("GET %s%s: %d %s", cluster.PathMap, query, resp.StatusCode, b)
		}
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			t.Fatal(err)
		}
		_, ok := m.Bucket("fresh")
		return ok
	}
	if hasFresh("") {
		t.Fatal("the held follower's map already has the bucket: the test shows nothing")
	}
	time.AfterFunc(300*time.Millisecond, release)
	if !hasFresh("?sync") {
		t.Fatal("GET /cluster/map?sync on a follower behind the leader lacks a bucket the leader acknowledged")
	}
}
