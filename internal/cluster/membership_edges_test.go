package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/cluster/clustertest"
)

// hasSnapshot reports whether n's raft directory holds a snapshot.
func hasSnapshot(n *clustertest.Node) bool {
	ents, err := os.ReadDir(filepath.Join(n.Dir, "raft", "snapshots"))
	return err == nil && len(ents) > 0
}

// TestRemovedNodeWithSnapshotRejoins: a node removed from the cluster
// (admin node rm) that starts again with its old raft directory holding a
// snapshot restores a map that still lists it, up, with its addresses. That
// map is not the cluster's: no leader talks to a removed node, so it must
// still ask to be admitted again, as it does when its directory holds only
// log entries (which it does not apply before a leader tells it what is
// committed).
func TestRemovedNodeWithSnapshotRejoins(t *testing.T) {
	rt := clustertest.FastRaft()
	rt.SnapshotInterval = 50 * time.Millisecond
	rt.SnapshotThreshold = 4
	rt.TrailingLogs = 4
	tc := clustertest.Start(t, clustertest.Options{N: 3, Raft: rt, StartTimeout: 20 * time.Second})
	ctx := testCtx(t, 90*time.Second)
	leader, err := tc.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := follower(t, tc)
	// Enough entries for every node to snapshot a map that lists f.
	for i := 0; i < 40 && !hasSnapshot(f); i++ {
		if err := leader.Cluster().CreateBucket(ctx, cluster.BucketProps{Name: "snap-" + string(rune('a'+i%26)) + string(rune('a'+i/26))}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Millisecond)
	}
	if !hasSnapshot(f) {
		t.Skip("no snapshot taken on the follower")
	}
	tc.Stop(f)
	if err := tc.WaitMap(ctx, leader, isDown(f.ID)); err != nil {
		t.Fatal(err)
	}
	removeNode(ctx, t, tc, leader, f)
	tc.RestartAsync(f, true)
	// Generous: with the other packages' tests on the same two cores, a
	// join after a restart has taken over 10 s.
	waitRejoined(ctx, t, tc, leader, f, 40*time.Second, "removed, restarted with a snapshot in its raft directory")
}

// removeNode removes n from the cluster (admin node rm) and waits until
// the leader's map no longer lists it.
func removeNode(ctx context.Context, t *testing.T, tc *clustertest.Cluster, leader, n *clustertest.Node) {
	t.Helper()
	resp, err := http.Post(leader.URL+cluster.PathLeave, "application/json", bytes.NewReader([]byte(`{"id":"`+n.ID+`"}`)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("leave %s: %s", n.ID, resp.Status)
	}
	if err := tc.WaitMap(ctx, leader, func(m *cluster.Map) bool { _, ok := m.Node(n.ID); return !ok }); err != nil {
		t.Fatal(err)
	}
}

// waitRejoined waits up to within until the leader's map has n up again
// and n knows a leader.
func waitRejoined(ctx context.Context, t *testing.T, tc *clustertest.Cluster, leader, n *clustertest.Node, within time.Duration, what string) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	if err := tc.WaitMap(wctx, leader, func(m *cluster.Map) bool { nd, ok := m.Node(n.ID); return ok && nd.State == cluster.StateUp }); err != nil {
		t.Fatalf("%s, %s, was never admitted again: %v", n.ID, what, err)
	}
	if err := n.Cluster().WaitForLeader(wctx); err != nil {
		t.Fatalf("%s after rejoining: %v", n.ID, err)
	}
}

// TestRemoveVoterKeepsVoters: removing a voter (admin node rm, or a
// voter's Leave) while a live non-voter could take its place leaves the
// cluster with Config.Voters voters at once, not only after the leader's
// next health round: with three voters and one removed, a second voter
// going down right after must not cost the cluster its quorum. Health
// rounds are slow here so that only the removal itself can keep the count.
func TestRemoveVoterKeepsVoters(t *testing.T) {
	tc := clustertest.Start(t, clustertest.Options{N: 4, Voters: 3, HeartbeatInterval: 10 * time.Second})
	ctx := testCtx(t, 40*time.Second)
	leader, err := tc.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st := leader.Cluster().Status()
	if len(st.Voters) != 3 || len(st.NonVoters) != 1 {
		t.Fatalf("voters %v, non-voters %v", st.Voters, st.NonVoters)
	}
	others := otherVoters(tc, leader)
	removed, next := others[0], others[1]
	resp, err := http.Post(leader.URL+cluster.PathLeave, "application/json", bytes.NewReader([]byte(`{"id":"`+removed.ID+`"}`)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("remove %s: HTTP %d", removed.ID, resp.StatusCode)
	}
	if got := leader.Cluster().Status().Voters; len(got) != 3 {
		t.Errorf("voters right after removing %s: %v, want 3", removed.ID, got)
	}
	tc.Stop(removed)
	tc.Stop(next)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := leader.Cluster().CreateBucket(cctx, cluster.BucketProps{Name: "after-removal"}); err != nil {
		t.Errorf("with %s removed and %s down, %s and the live non-voter %s lost quorum: %v",
			removed.ID, next.ID, leader.ID, st.NonVoters[0], err)
	}
}

// TestHandlerRefusesMalformed: the intra-cluster endpoints refuse what no
// node sends. Membership changes go through join and leave only (which
// change the raft configuration with the map): an apply of node.put,
// node.remove or node.voter would let the map and raft disagree on who is
// a member. Bucket and volume changes carry properties the proposer
// checked; ones that fail the check are refused, not written into the map.
// A join needs a raft address raft can dial, a leave a node ID.
func TestHandlerRefusesMalformed(t *testing.T) {
	tc := clustertest.Start(t, clustertest.Options{N: 3})
	ctx := testCtx(t, 30*time.Second)
	leader, err := tc.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := follower(t, tc)
	v0 := leader.Cluster().Map().Version
	tests := []struct{ name, path, body string }{
		{"node.remove by apply", cluster.PathApply, `{"op":"node.remove","name":"` + f.ID + `"}`},
		{"node.put by apply", cluster.PathApply, `{"op":"node.put","node":{"id":"ghost","state":"bogus"}}`},
		{"node.voter by apply", cluster.PathApply, `{"op":"node.voter","node":{"id":"` + f.ID + `","voter":false}}`},
		{"bucket without copies", cluster.PathApply, `{"op":"bucket.create","bucket":{"name":"zero-copies","mode":"local","validate":"never"}}`},
		{"bucket with a bad name", cluster.PathApply, `{"op":"bucket.create","bucket":{"name":"NO","copies":1,"mode":"local","validate":"never"}}`},
		{"volume of size 0", cluster.PathApply, `{"op":"volume.put","volume":{"name":"empty","chunkSize":4096,"copies":1}}`},
		{"join with a bad raft address", cluster.PathJoin, `{"id":"bad","raftAddr":"nowhere","intraAddrs":["127.0.0.1:1"]}`},
		{"leave without an ID", cluster.PathLeave, `{}`},
	}
	for _, tt := range tests {
		for _, n := range []*clustertest.Node{leader, f} {
			resp, err := http.Post(n.URL+tt.path, "application/json", bytes.NewReader([]byte(tt.body)))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("%s through %s: HTTP %d, want %d", tt.name, n.ID, resp.StatusCode, http.StatusBadRequest)
			}
		}
	}
	if err := f.Cluster().Sync(ctx); err != nil {
		t.Fatal(err)
	}
	m := f.Cluster().Map()
	if m.Version != v0 {
		t.Errorf("map changed from version %d to %d by refused requests: nodes %v, buckets %v, volumes %v",
			v0, m.Version, m.NodeIDs(), m.BucketNames(), m.VolumeNames())
	}
	if st := leader.Cluster().Status(); len(st.Voters) != 3 || len(st.NonVoters) != 0 {
		t.Errorf("membership changed: %+v", st)
	}
}

// TestSlowHealthRoundMarksNoOneDown: the leader marks a member down after
// DownAfter without an answer to its probes, not after DownAfter without
// being asked. A health round that stalls (here on recording a state
// change while the leader's state machine is slow) for longer than
// DownAfter must not make the next round take one failed probe of a member
// for DownAfter of silence.
func TestSlowHealthRoundMarksNoOneDown(t *testing.T) {
	var failing [3]atomic.Bool   // the node's health probes fail
	var failOnce [3]atomic.Int32 // the node's next probes that fail
	tc := clustertest.Start(t, clustertest.Options{N: 3, Mount: func(n *clustertest.Node, mux *http.ServeMux) {
		mux.HandleFunc("GET /cluster/health", func(w http.ResponseWriter, r *http.Request) {
			if failing[n.Index].Load() || failOnce[n.Index].Add(-1) >= 0 {
				http.Error(w, "sick", http.StatusInternalServerError)
				return
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
	// The round updates members in ID order: y's last answer is recorded
	// before the round stalls on x.
	var y, x *clustertest.Node
	for _, n := range tc.Nodes() {
		if n == leader {
			continue
		}
		if y == nil {
			y = n
		} else {
			x = n
		}
	}
	downs := leader.Cluster().Map().Nodes[y.ID].Downs
	failing[x.Index].Store(true)
	if err := tc.WaitMap(ctx, leader, isDown(x.ID)); err != nil {
		t.Fatal(err)
	}
	release := cluster.HoldApply(leader.Cluster())
	t.Cleanup(release)
	failing[x.Index].Store(false) // the next round marks x up, and waits
	time.Sleep(1500 * time.Millisecond)
	failOnce[y.Index].Store(1)
	release()
	if err := tc.WaitMap(ctx, leader, func(m *cluster.Map) bool { n, _ := m.Node(x.ID); return n.State == cluster.StateUp }); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) && failOnce[y.Index].Load() >= 0 {
		time.Sleep(20 * time.Millisecond)
	}
	if failOnce[y.Index].Load() >= 0 {
		t.Fatalf("%s was not probed after the slow round", y.ID)
	}
	time.Sleep(300 * time.Millisecond)
	if n, _ := leader.Cluster().Map().Node(y.ID); n.State != cluster.StateUp || n.Downs != downs {
		t.Errorf("%s marked down after one failed probe, following a round that stalled for longer than DownAfter (state %s, downs %d, was %d)",
			y.ID, n.State, n.Downs, downs)
	}
}

// TestJoinWithLeaderIDRefused: a join with the ID of the leader itself,
// from other addresses (a second process with a copied configuration), is
// refused like one with the ID of any other live member: it must not move
// the leader's raft address or its map entry to the impostor.
func TestJoinWithLeaderIDRefused(t *testing.T) {
	tc := clustertest.Start(t, clustertest.Options{N: 3})
	ctx := testCtx(t, 30*time.Second)
	leader, err := tc.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := follower(t, tc)
	before := leader.Cluster().Self()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	body := `{"id":"` + leader.ID + `","raftAddr":"` + ln.Addr().String() + `","intraAddrs":["` + ln.Addr().String() + `"]}`
	resp, err := http.Post(f.URL+cluster.PathJoin, "application/json", bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("join with the leader's ID from other addresses: HTTP %d, want %d", resp.StatusCode, http.StatusBadRequest)
	}
	if err := f.Cluster().Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := f.Cluster().Map().Node(leader.ID); n.RaftAddr != before.RaftAddr || !slices.Equal(n.IntraAddrs, before.IntraAddrs) {
		t.Errorf("leader's entry taken over: %+v", n)
	}
}

// TestSyncChecksWhoAnswers: Sync on a follower takes the version it waits
// for only from the leader itself (Health.ID), as the health probe does: a
// process that took over an address the map still lists for the leader
// (here: another member answering there) reports its own map's version,
// which may lack changes the leader acknowledged. Sync then keeps trying
// and fails when its context ends rather than returning early.
func TestSyncChecksWhoAnswers(t *testing.T) {
	var taken atomic.Int32 // 1 + the index of the node whose address answers as another
	var nodes atomic.Pointer[[]*clustertest.Node]
	tc := clustertest.Start(t, clustertest.Options{N: 3, Mount: func(n *clustertest.Node, mux *http.ServeMux) {
		mux.HandleFunc("GET /cluster/health", func(w http.ResponseWriter, r *http.Request) {
			h := n
			if int(taken.Load()) == n.Index+1 {
				for _, o := range *nodes.Load() {
					if o != n && o.Running() && !o.Cluster().IsLeader() {
						h = o
						break
					}
				}
			}
			if c := h.Cluster(); c != nil {
				c.Handler().ServeHTTP(w, r)
			}
		})
	}})
	all := tc.Nodes()
	nodes.Store(&all)
	ctx := testCtx(t, 30*time.Second)
	leader, err := tc.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := tc.WaitAll(ctx, func(m *cluster.Map) bool { return m.Version == leader.Cluster().Map().Version }); err != nil {
		t.Fatal(err)
	}
	var releases []func()
	for _, n := range all {
		if n != leader {
			releases = append(releases, cluster.HoldApply(n.Cluster()))
		}
	}
	t.Cleanup(func() {
		for _, r := range releases {
			r()
		}
	})
	if err := leader.Cluster().CreateBucket(ctx, cluster.BucketProps{Name: "acked"}); err != nil {
		t.Fatal(err)
	}
	taken.Store(int32(leader.Index + 1))
	f := follower(t, tc)
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := f.Cluster().Sync(sctx); err == nil {
		if _, ok := f.Cluster().Map().Bucket("acked"); !ok {
			t.Errorf("Sync on %s returned without a bucket whose creation %s acknowledged: it took the version of another node answering on the leader's address", f.ID, leader.ID)
		}
	}
}

// TestJoinWithDeadRaftAddressKeepsQuorum: a node whose advertised raft
// address leads somewhere else (here a listener that accepts connections
// and never answers) joins a one-voter cluster. It answers its health
// probes, so it looks alive, but it never hears the leader over raft: it
// must not become a voter, which would give the cluster two voters of
// which one can never vote, and stop it.
func TestJoinWithDeadRaftAddressKeepsQuorum(t *testing.T) {
	tc := clustertest.Start(t, clustertest.Options{N: 1})
	ctx := testCtx(t, 30*time.Second)
	leader, err := tc.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sink, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	go func() {
		for {
			c, err := sink.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	// The joiner's intra address answers health as the joiner, naming no
	// leader: its raft never hears from the cluster.
	ghost := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(cluster.Health{ID: "ghost", RaftState: "Follower"})
	}))
	defer ghost.Close()
	join := `{"id":"ghost","raftAddr":"` + sink.Addr().String() + `","intraAddrs":["` + strings.TrimPrefix(ghost.URL, "http://") + `"]}`
	jctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(jctx, http.MethodPost, leader.URL+cluster.PathJoin, strings.NewReader(join))
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	time.Sleep(time.Second) // ten health rounds
	if st := leader.Cluster().Status(); slices.Contains(st.Voters, "ghost") {
		t.Fatalf("a member whose raft address is dead became a voter: %+v", st)
	}
	bctx, bcancel := context.WithTimeout(ctx, 5*time.Second)
	defer bcancel()
	if err := leader.Cluster().CreateBucket(bctx, cluster.BucketProps{Name: "after-ghost"}); err != nil {
		t.Fatalf("the cluster no longer commits changes: %v", err)
	}
}

// otherVoters are tc's voting nodes other than leader, in the order the
// leader's status lists them.
func otherVoters(tc *clustertest.Cluster, leader *clustertest.Node) []*clustertest.Node {
	var others []*clustertest.Node
	for _, id := range leader.Cluster().Status().Voters {
		if id != leader.ID {
			for _, n := range tc.Nodes() {
				if n.ID == id {
					others = append(others, n)
				}
			}
		}
	}
	return others
}

// TestRemovedLiveMemberRejoins: a member removed while it runs (a removal
// that raced its restart, or one that took the heartbeat the leader sent
// as it stopped replicating to it for a sign of membership) hears from no
// leader again. It must not stay outside the cluster while it runs: once
// it has known no leader for a few election timeouts it asks to be
// admitted again.
func TestRemovedLiveMemberRejoins(t *testing.T) {
	tc := clustertest.Start(t, clustertest.Options{N: 3, Raft: clustertest.FastRaft()})
	ctx := testCtx(t, 60*time.Second)
	leader, err := tc.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := follower(t, tc)
	removeNode(ctx, t, tc, leader, f)
	waitRejoined(ctx, t, tc, leader, f, 30*time.Second, "removed while it ran")
}
