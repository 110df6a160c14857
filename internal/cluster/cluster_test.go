package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/cluster/clustertest"
	"github.com/slipstream-io/slipstream/internal/object"
)

func testCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func hasBucket(name string) func(*cluster.Map) bool {
	return func(m *cluster.Map) bool { _, ok := m.Bucket(name); return ok }
}

// isDown is a map condition: node id is marked down.
func isDown(id string) func(*cluster.Map) bool {
	return func(m *cluster.Map) bool { n, _ := m.Node(id); return n.State == cluster.StateDown }
}

// downFollower starts a 3-node cluster, stops a follower and waits until
// the leader marks it down.
func downFollower(t *testing.T) (tc *clustertest.Cluster, ctx context.Context, leader, f *clustertest.Node) {
	t.Helper()
	tc = clustertest.Start(t, clustertest.Options{N: 3})
	ctx = testCtx(t, 30*time.Second)
	leader, err := tc.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f = follower(t, tc)
	tc.Stop(f)
	if err := tc.WaitMap(ctx, leader, isDown(f.ID)); err != nil {
		t.Fatal(err)
	}
	return tc, ctx, leader, f
}

func follower(t *testing.T, tc *clustertest.Cluster) *clustertest.Node {
	t.Helper()
	for _, n := range tc.Nodes() {
		if c := n.Cluster(); c != nil && !c.IsLeader() {
			return n
		}
	}
	t.Fatal("no follower")
	return nil
}

func voterIDs(m *cluster.Map) []string {
	var ids []string
	for _, id := range m.NodeIDs() {
		if m.Nodes[id].Voter {
			ids = append(ids, id)
		}
	}
	return ids
}

func TestThreeNodesBucketOnFollower(t *testing.T) {
	tc := clustertest.Start(t, clustertest.Options{N: 3})
	ctx := testCtx(t, 30*time.Second)
	if _, err := tc.Leader(ctx); err != nil {
		t.Fatal(err)
	}
	f := follower(t, tc)
	start := f.Cluster().Map().Version
	if err := f.Cluster().CreateBucket(ctx, cluster.BucketProps{Name: "alpha", Copies: 2}); err != nil {
		t.Fatalf("create on follower: %v", err)
	}
	if _, ok := f.Cluster().Map().Bucket("alpha"); !ok {
		t.Error("follower's own map lacks the bucket it just created")
	}
	// More copies than nodes: every PUT would fail, so the bucket is refused.
	if err := f.Cluster().CreateBucket(ctx, cluster.BucketProps{Name: "wide", Copies: 4}); !errors.Is(err, object.ErrInvalidArgument) {
		t.Errorf("create with 4 copies on 3 nodes: %v, want ErrInvalidArgument", err)
	}
	if err := f.Cluster().UpdateBucket(ctx, cluster.BucketProps{Name: "alpha", Copies: 4}); !errors.Is(err, object.ErrInvalidArgument) {
		t.Errorf("update to 4 copies on 3 nodes: %v, want ErrInvalidArgument", err)
	}
	for _, n := range tc.Nodes() {
		if err := n.Cluster().Sync(ctx); err != nil {
			t.Fatalf("%s: sync: %v", n.ID, err)
		}
		if _, ok := n.Cluster().Map().Bucket("alpha"); !ok {
			t.Errorf("%s: bucket missing right after Sync", n.ID)
		}
	}
	if err := tc.WaitAll(ctx, hasBucket("alpha")); err != nil {
		t.Fatal(err)
	}
	for _, n := range tc.Nodes() {
		m := n.Cluster().Map()
		b, _ := m.Bucket("alpha")
		if b.Copies != 2 || b.Mode != cluster.ModeLocal || b.Created.IsZero() {
			t.Errorf("%s: bucket props %+v", n.ID, b)
		}
		if m.Version <= start {
			t.Errorf("%s: version %d did not grow past %d", n.ID, m.Version, start)
		}
		if got := voterIDs(m); !slices.Equal(got, []string{"n1", "n2", "n3"}) {
			t.Errorf("%s: voters %v", n.ID, got)
		}
		self, ok := m.Node(n.ID)
		if !ok || !slices.Equal(self.Mountpaths, n.Mountpaths) || self.IntraAddrs[0] != n.URL[len("http://"):] {
			t.Errorf("%s: self entry %+v", n.ID, self)
		}
	}
	// Errors come back as sentinels across forwarding.
	for _, n := range tc.Nodes() {
		err := n.Cluster().CreateBucket(ctx, cluster.BucketProps{Name: "alpha"})
		if !errors.Is(err, object.ErrBucketExists) {
			t.Errorf("%s: duplicate create: %v, want ErrBucketExists", n.ID, err)
		}
		if err := n.Cluster().DeleteBucket(ctx, "nope"); !errors.Is(err, object.ErrBucketNotFound) {
			t.Errorf("%s: delete missing: %v, want ErrBucketNotFound", n.ID, err)
		}
		if err := n.Cluster().SetNodeState(ctx, "ghost", cluster.StateMaintenance); !errors.Is(err, cluster.ErrNodeNotFound) {
			t.Errorf("%s: state of missing node: %v, want ErrNodeNotFound", n.ID, err)
		}
	}
	if err := f.Cluster().CreateBucket(ctx, cluster.BucketProps{Name: "Bad_Name"}); !errors.Is(err, object.ErrInvalidBucketName) {
		t.Errorf("bad name: %v", err)
	}
	// Update, volumes and delete from another follower.
	g := tc.Node((f.Index + 1) % 3)
	if err := g.Cluster().UpdateBucket(ctx, cluster.BucketProps{Name: "alpha", Copies: 3, Validate: "ttl:1m"}); err != nil {
		t.Fatalf("update: %v", err)
	}
	if err := g.Cluster().PutVolume(ctx, cluster.VolumeSpec{Name: "vol1", Size: 1 << 30, Copies: 2}); err != nil {
		t.Fatalf("put volume: %v", err)
	}
	if err := g.Cluster().DeleteVolume(ctx, "vol2", ""); !errors.Is(err, cluster.ErrVolumeNotFound) {
		t.Errorf("delete missing volume: %v", err)
	}
	if err := tc.WaitAll(ctx, func(m *cluster.Map) bool {
		b, _ := m.Bucket("alpha")
		v, ok := m.Volume("vol1")
		return b.Copies == 3 && b.Validate == "ttl:1m" && ok && v.ChunkSize == cluster.DefaultChunkSize
	}); err != nil {
		t.Fatal(err)
	}
	if err := g.Cluster().DeleteBucket(ctx, "alpha"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if err := tc.WaitAll(ctx, func(m *cluster.Map) bool { _, ok := m.Bucket("alpha"); return !ok }); err != nil {
		t.Fatal(err)
	}
}

func TestLeaderKillAndRestart(t *testing.T) {
	tc := clustertest.Start(t, clustertest.Options{N: 3})
	ctx := testCtx(t, 60*time.Second)
	leader, err := tc.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := leader.Cluster().CreateBucket(ctx, cluster.BucketProps{Name: fmt.Sprintf("bkt%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tc.WaitAll(ctx, hasBucket("bkt4")); err != nil {
		t.Fatal(err)
	}
	before := leader.Cluster().Map().Version
	tc.Stop(leader)

	next, err := tc.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if next == leader {
		t.Fatal("stopped node still leads")
	}
	m := next.Cluster().Map()
	for i := range 5 {
		if _, ok := m.Bucket(fmt.Sprintf("bkt%d", i)); !ok {
			t.Errorf("bucket bkt%d lost after failover", i)
		}
	}
	// Writes keep working through the surviving follower.
	f := follower(t, tc)
	if err := f.Cluster().CreateBucket(ctx, cluster.BucketProps{Name: "after"}); err != nil {
		t.Fatalf("create after failover: %v", err)
	}
	// The new leader notices the old one is gone.
	if err := tc.WaitAll(ctx, func(m *cluster.Map) bool {
		n, _ := m.Node(leader.ID)
		return n.State == cluster.StateDown && m.Version > before
	}); err != nil {
		t.Fatalf("old leader never marked down: %v", err)
	}

	// The old leader comes back with its data dir and catches up.
	tc.Restart(leader, true)
	if err := tc.WaitMap(ctx, leader, func(m *cluster.Map) bool {
		n, _ := m.Node(leader.ID)
		_, ok := m.Bucket("after")
		return ok && n.State == cluster.StateUp
	}); err != nil {
		t.Fatalf("restarted node did not catch up: %v", err)
	}
	if err := tc.WaitAll(ctx, func(m *cluster.Map) bool { return len(m.UpNodeIDs()) == 3 }); err != nil {
		t.Fatal(err)
	}
}

func TestRestartWithNewAddresses(t *testing.T) {
	tc := clustertest.Start(t, clustertest.Options{N: 3, Raft: func() cluster.RaftTimeouts {
		r := clustertest.FastRaft()
		r.SnapshotInterval = 100 * time.Millisecond
		r.SnapshotThreshold = 4
		r.TrailingLogs = 2
		return r
	}()})
	ctx := testCtx(t, 60*time.Second)
	if _, err := tc.Leader(ctx); err != nil {
		t.Fatal(err)
	}
	f := follower(t, tc)
	for i := range 10 {
		if err := f.Cluster().CreateBucket(ctx, cluster.BucketProps{Name: fmt.Sprintf("snap%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tc.WaitAll(ctx, hasBucket("snap9")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond) // let snapshots happen
	oldURL, oldRaft := f.URL, f.RaftBind
	tc.Stop(f)
	tc.Restart(f, false)
	if f.URL == oldURL || f.RaftBind == oldRaft {
		t.Fatalf("restart kept addresses %s %s", f.URL, f.RaftBind)
	}
	want := f.Cluster().Self()
	if err := tc.WaitAll(ctx, func(m *cluster.Map) bool {
		n, ok := m.Node(f.ID)
		return ok && n.RaftAddr == want.RaftAddr && slices.Equal(n.IntraAddrs, want.IntraAddrs) && n.State == cluster.StateUp
	}); err != nil {
		t.Fatalf("new addresses not announced: %v", err)
	}
	m := f.Cluster().Map()
	for i := range 10 {
		if _, ok := m.Bucket(fmt.Sprintf("snap%d", i)); !ok {
			t.Errorf("restarted node lost bucket snap%d", i)
		}
	}
	// The cluster still commits through the restarted node.
	if err := f.Cluster().CreateBucket(ctx, cluster.BucketProps{Name: "again"}); err != nil {
		t.Fatal(err)
	}
	if err := tc.WaitAll(ctx, hasBucket("again")); err != nil {
		t.Fatal(err)
	}
}

func TestFiveNodesNonVoters(t *testing.T) {
	tc := clustertest.Start(t, clustertest.Options{N: 5})
	ctx := testCtx(t, 60*time.Second)
	leader, err := tc.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := tc.WaitAll(ctx, func(m *cluster.Map) bool { return len(voterIDs(m)) == 3 && len(m.Nodes) == 5 }); err != nil {
		t.Fatalf("want 3 voters of 5: %v", err)
	}
	voters := voterIDs(leader.Cluster().Map())
	var nonVoter *clustertest.Node
	for _, n := range tc.Nodes() {
		if !slices.Contains(voters, n.ID) {
			nonVoter = n
			break
		}
	}
	if err := nonVoter.Cluster().CreateBucket(ctx, cluster.BucketProps{Name: "from-nonvoter"}); err != nil {
		t.Fatal(err)
	}
	if err := tc.WaitAll(ctx, hasBucket("from-nonvoter")); err != nil {
		t.Fatal(err)
	}
	// Lose a voter that is not the leader: a live non-voter is promoted.
	var lost *clustertest.Node
	for _, n := range tc.Nodes() {
		if slices.Contains(voters, n.ID) && n != leader {
			lost = n
			break
		}
	}
	tc.Stop(lost)
	if err := tc.WaitMap(ctx, leader, func(m *cluster.Map) bool {
		if n := m.Nodes[lost.ID]; n.State != cluster.StateDown || n.Voter {
			return false
		}
		live := 0
		for _, id := range voterIDs(m) {
			if m.Nodes[id].State == cluster.StateUp {
				live++
			}
		}
		return live == 3
	}); err != nil {
		t.Fatalf("down voter not replaced by a live non-voter: %v", err)
	}
	// Another voter lost: still three live voters, so the cluster keeps a quorum
	// even with two of its original voters gone.
	var lost2 *clustertest.Node
	for _, n := range tc.Nodes() {
		if n.Running() && n != leader && leader.Cluster().Map().Nodes[n.ID].Voter {
			lost2 = n
			break
		}
	}
	tc.Stop(lost2)
	if err := tc.WaitMap(ctx, leader, func(m *cluster.Map) bool {
		return m.Nodes[lost2.ID].State == cluster.StateDown && !m.Nodes[lost2.ID].Voter && len(voterIDs(m)) == 3
	}); err != nil {
		t.Fatalf("second down voter not replaced: %v", err)
	}
	if err := leader.Cluster().CreateBucket(ctx, cluster.BucketProps{Name: "after-two-losses"}); err != nil {
		t.Fatal(err)
	}
	m := leader.Cluster().Map()
	for _, id := range m.NodeIDs() {
		t.Logf("%s voter=%v state=%s", id, m.Nodes[id].Voter, m.Nodes[id].State)
	}
	// A stopped original voter comes back as a non-voter.
	tc.Restart(lost, true)
	if err := tc.WaitAll(ctx, func(m *cluster.Map) bool {
		n := m.Nodes[lost.ID]
		return n.State == cluster.StateUp && !n.Voter && len(voterIDs(m)) == 3
	}); err != nil {
		t.Fatal(err)
	}
}

func TestNodeDownDetection(t *testing.T) {
	tc := clustertest.Start(t, clustertest.Options{N: 3, DownAfter: 600 * time.Millisecond})
	ctx := testCtx(t, 30*time.Second)
	leader, err := tc.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := follower(t, tc)
	tc.Stop(f)
	stopped := time.Now()
	if err := tc.WaitMap(ctx, leader, func(m *cluster.Map) bool {
		n, _ := m.Node(f.ID)
		return n.State == cluster.StateDown
	}); err != nil {
		t.Fatal(err)
	}
	took := time.Since(stopped)
	// The last good probe may precede the stop by up to one probe interval
	// (100ms) plus the probe's own duration.
	if took < 600*time.Millisecond-2*100*time.Millisecond {
		t.Errorf("marked down after %v, well before DownAfter", took)
	}
	t.Logf("down detected after %v", took)
	if got := leader.Cluster().Map().UpNodeIDs(); len(got) != 2 || slices.Contains(got, f.ID) {
		t.Errorf("up nodes %v", got)
	}
	// Maintenance is left alone by health checks.
	if err := leader.Cluster().SetNodeState(ctx, f.ID, cluster.StateMaintenance); err != nil {
		t.Fatal(err)
	}
	tc.Restart(f, true)
	time.Sleep(500 * time.Millisecond)
	if n, _ := leader.Cluster().Map().Node(f.ID); n.State != cluster.StateMaintenance {
		t.Errorf("state %q, want maintenance kept", n.State)
	}
	if err := f.Cluster().SetNodeState(ctx, f.ID, cluster.StateUp); err != nil {
		t.Fatal(err)
	}
	// Down again, then back up by itself.
	tc.Stop(f)
	if err := tc.WaitMap(ctx, leader, isDown(f.ID)); err != nil {
		t.Fatal(err)
	}
	tc.Restart(f, true)
	if err := tc.WaitAll(ctx, func(m *cluster.Map) bool { n, _ := m.Node(f.ID); return n.State == cluster.StateUp }); err != nil {
		t.Fatal(err)
	}
}

func TestWatchVersionsInOrder(t *testing.T) {
	tc := clustertest.Start(t, clustertest.Options{N: 3})
	ctx := testCtx(t, 30*time.Second)
	if _, err := tc.Leader(ctx); err != nil {
		t.Fatal(err)
	}
	f := follower(t, tc)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	w := f.Cluster().Watch(wctx)
	first := <-w
	const n = 20
	done := make(chan error, 1)
	go func() {
		for i := range n {
			if err := tc.Node(i%3).Cluster().CreateBucket(ctx, cluster.BucketProps{Name: fmt.Sprintf("watch%02d", i)}); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	last := first.Version
	seen := 0
	for m := range w {
		if m.Version <= last {
			t.Fatalf("version %d after %d", m.Version, last)
		}
		last = m.Version
		seen++
		if len(m.Buckets) == n {
			break
		}
		if seen%5 == 0 {
			time.Sleep(30 * time.Millisecond) // a slow reader skips versions but never blocks the FSM
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if last < first.Version+n {
		t.Errorf("final version %d, want >= %d", last, first.Version+n)
	}
	stop()
	for range w { // closed after cancel
	}
}

func TestLongPollMap(t *testing.T) {
	tc := clustertest.Start(t, clustertest.Options{N: 3})
	ctx := testCtx(t, 30*time.Second)
	if _, err := tc.Leader(ctx); err != nil {
		t.Fatal(err)
	}
	n := tc.Node(2)
	hc := &http.Client{}
	m, err := cluster.FetchMap(ctx, hc, n.URL, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Nodes) != 3 || m.Version == 0 {
		t.Fatalf("map %+v", m)
	}
	// Nothing changes: the poll returns the same version after the wait.
	t0 := time.Now()
	same, err := cluster.FetchMap(ctx, hc, n.URL, m.Version, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if same.Version != m.Version || time.Since(t0) < 150*time.Millisecond {
		t.Errorf("empty poll: version %d after %v", same.Version, time.Since(t0))
	}
	got := make(chan *cluster.Map, 1)
	go func() {
		nm, err := cluster.FetchMap(ctx, hc, n.URL, m.Version, 20*time.Second)
		if err != nil {
			t.Error(err)
		}
		got <- nm
	}()
	time.Sleep(100 * time.Millisecond)
	if err := tc.Node(0).Cluster().CreateBucket(ctx, cluster.BucketProps{Name: "polled"}); err != nil {
		t.Fatal(err)
	}
	select {
	case nm := <-got:
		if nm == nil || nm.Version <= m.Version {
			t.Fatalf("poll answer %+v", nm)
		}
	case <-ctx.Done():
		t.Fatal("long poll never answered")
	}
}

func TestLeave(t *testing.T) {
	tc := clustertest.Start(t, clustertest.Options{N: 3})
	ctx := testCtx(t, 30*time.Second)
	leader, err := tc.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Cluster().Leave(ctx); err != nil {
		t.Fatalf("leader leave: %v", err)
	}
	next, err := tc.Leader(ctx)
	if err != nil || next == leader {
		t.Fatalf("no new leader: %v", err)
	}
	if err := tc.WaitMap(ctx, next, func(m *cluster.Map) bool {
		_, ok := m.Node(leader.ID)
		return !ok && len(m.Nodes) == 2
	}); err != nil {
		t.Fatal(err)
	}
	// A two-node cluster still commits.
	if err := next.Cluster().CreateBucket(ctx, cluster.BucketProps{Name: "two-nodes"}); err != nil {
		t.Fatal(err)
	}
	// A follower leaves too; the last node carries on alone.
	var f *clustertest.Node
	for _, n := range tc.Nodes() {
		if n != leader && n != next {
			f = n
		}
	}
	if err := f.Cluster().Leave(ctx); err != nil {
		t.Fatalf("follower leave: %v", err)
	}
	if err := tc.WaitMap(ctx, next, func(m *cluster.Map) bool { return len(m.Nodes) == 1 }); err != nil {
		t.Fatal(err)
	}
	if st := next.Cluster().Status(); !slices.Equal(st.Voters, []string{next.ID}) {
		t.Errorf("voters after leaves: %v", st.Voters)
	}
	if err := next.Cluster().CreateBucket(ctx, cluster.BucketProps{Name: "alone"}); err != nil {
		t.Fatal(err)
	}
}

func TestFullClusterRestart(t *testing.T) {
	tc := clustertest.Start(t, clustertest.Options{N: 3})
	ctx := testCtx(t, 60*time.Second)
	if _, err := tc.Leader(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tc.Node(1).Cluster().CreateBucket(ctx, cluster.BucketProps{Name: "durable", Copies: 2}); err != nil {
		t.Fatal(err)
	}
	if err := tc.Node(2).Cluster().PutVolume(ctx, cluster.VolumeSpec{Name: "vol", Size: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if err := tc.WaitAll(ctx, func(m *cluster.Map) bool { _, ok := m.Volume("vol"); return ok }); err != nil {
		t.Fatal(err)
	}
	version := tc.Node(0).Cluster().Map().Version
	tc.Close()
	for _, n := range tc.Nodes() {
		tc.RestartAsync(n, true)
	}
	for _, n := range tc.Nodes() {
		if err := n.Cluster().WaitForLeader(ctx); err != nil {
			t.Fatalf("%s: %v", n.ID, err)
		}
	}
	if err := tc.WaitAll(ctx, func(m *cluster.Map) bool {
		b, ok := m.Bucket("durable")
		_, vok := m.Volume("vol")
		return ok && vok && b.Copies == 2 && m.Version >= version && len(m.UpNodeIDs()) == 3
	}); err != nil {
		t.Fatalf("state after full restart: %v", err)
	}
	if err := tc.Node(0).Cluster().CreateBucket(ctx, cluster.BucketProps{Name: "durable"}); !errors.Is(err, object.ErrBucketExists) {
		t.Errorf("create over restored bucket: %v", err)
	}
}

func TestWatchRemoteFailsOver(t *testing.T) {
	tc := clustertest.Start(t, clustertest.Options{N: 3})
	ctx := testCtx(t, 30*time.Second)
	if _, err := tc.Leader(ctx); err != nil {
		t.Fatal(err)
	}
	f := follower(t, tc)
	urls := []string{f.URL}
	for _, n := range tc.Nodes() {
		if n != f {
			urls = append(urls, n.URL)
		}
	}
	w := cluster.WatchRemote(ctx, &http.Client{}, urls)
	first := <-w
	if first == nil || len(first.Nodes) != 3 {
		t.Fatalf("first map %+v", first)
	}
	tc.Stop(f) // the polled node goes away; the watcher moves on
	if err := tc.Node((f.Index+1)%3).Cluster().CreateBucket(ctx, cluster.BucketProps{Name: "remote-seen"}); err != nil {
		t.Fatal(err)
	}
	last := first.Version
	for m := range w {
		if m.Version <= last {
			t.Fatalf("version %d after %d", m.Version, last)
		}
		last = m.Version
		if _, ok := m.Bucket("remote-seen"); ok {
			return
		}
	}
	t.Fatal("watch closed before the bucket showed up")
}

func TestJoinPaths(t *testing.T) {
	tc := clustertest.Start(t, clustertest.Options{N: 3})
	ctx := testCtx(t, 30*time.Second)
	leader, err := tc.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := follower(t, tc)
	// A dead first seed, then a follower that forwards the join to the leader.
	n4 := tc.AddNodeWith(clustertest.NodeOptions{Seeds: []string{"http://127.0.0.1:1", f.URL}})
	// A node told to bootstrap that finds a running cluster joins it instead.
	n5 := tc.AddNodeWith(clustertest.NodeOptions{Bootstrap: true, Seeds: []string{f.URL}})
	if err := tc.WaitAll(ctx, func(m *cluster.Map) bool { return len(m.UpNodeIDs()) == 5 }); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*clustertest.Node{n4, n5} {
		if got := n.Cluster().LeaderID(); got != leader.ID {
			t.Errorf("%s follows %q, want %q", n.ID, got, leader.ID)
		}
		if m := leader.Cluster().Map(); m.Nodes[n.ID].Voter {
			t.Errorf("%s joined as a voter beyond 3", n.ID)
		}
	}
	st := n5.Cluster().Status()
	if len(st.Voters) != 3 || len(st.NonVoters) != 2 || st.Leader != leader.ID || st.Term == 0 {
		t.Errorf("status %+v", st)
	}
	if err := n5.Cluster().CreateBucket(ctx, cluster.BucketProps{Name: "from-n5"}); err != nil {
		t.Fatal(err)
	}
	if err := tc.WaitAll(ctx, hasBucket("from-n5")); err != nil {
		t.Fatal(err)
	}
}

func TestHandlerErrors(t *testing.T) {
	tc := clustertest.Start(t, clustertest.Options{N: 3})
	ctx := testCtx(t, 30*time.Second)
	if _, err := tc.Leader(ctx); err != nil {
		t.Fatal(err)
	}
	f := follower(t, tc)
	tests := []struct {
		name, method, path, body string
		header                   map[string]string
		status                   int
		code                     string
	}{
		{"garbage apply", "POST", cluster.PathApply, "{", nil, http.StatusBadRequest, "invalid"},
		{"unknown op", "POST", cluster.PathApply, `{"op":"explode"}`, nil, http.StatusBadRequest, "invalid"},
		{"forwarded twice", "POST", cluster.PathApply, `{"op":"bucket.delete","name":"x"}`, map[string]string{"X-Slipstream-Forwarded": "1"}, http.StatusServiceUnavailable, "not_leader"},
		{"delete missing via follower", "POST", cluster.PathApply, `{"op":"bucket.delete","name":"missing"}`, nil, http.StatusNotFound, "no_such_bucket"},
		{"bad join", "POST", cluster.PathJoin, `{"id":""}`, nil, http.StatusBadRequest, "invalid"},
		{"bad after", "GET", cluster.PathMap + "?after=x", "", nil, http.StatusBadRequest, "invalid"},
		{"bad wait", "GET", cluster.PathMap + "?after=1&wait=soon", "", nil, http.StatusBadRequest, "invalid"},
		{"wrong method", "GET", cluster.PathJoin, "", nil, http.StatusMethodNotAllowed, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(ctx, tt.method, f.URL+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.status)
			}
			if tt.code != "" {
				var eb struct{ Code string }
				if err := json.NewDecoder(resp.Body).Decode(&eb); err != nil || eb.Code != tt.code {
					t.Errorf("code %q (%v), want %q", eb.Code, err, tt.code)
				}
			}
		})
	}
	// A join that claims a live member's raft address is refused.
	body := fmt.Sprintf(`{"id":"imposter","raftAddr":%q,"intraAddrs":["127.0.0.1:1"]}`, f.Cluster().Self().RaftAddr)
	resp, err := http.Post(f.URL+cluster.PathJoin, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("imposter join: HTTP %d", resp.StatusCode)
	}
	if st := f.Cluster().Status(); len(st.Voters) != 3 || len(st.NonVoters) != 0 {
		t.Errorf("membership changed by imposter: %+v", st)
	}
	resp, err = http.Get(f.URL + cluster.PathMap)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if v := resp.Header.Get(cluster.HeaderVersion); v == "" || v == "0" {
		t.Errorf("map version header %q", v)
	}
}

func TestDeadFirstIntraAddress(t *testing.T) {
	// Every node announces an address nobody listens on before its real one:
	// forwarding, joining and health probes must fall over to the next one.
	tc := clustertest.Start(t, clustertest.Options{N: 3, Announce: func(n *clustertest.Node, self *cluster.NodeInfo) {
		self.IntraAddrs = append([]string{"127.0.0.1:1"}, self.IntraAddrs...)
	}})
	ctx := testCtx(t, 30*time.Second)
	if _, err := tc.Leader(ctx); err != nil {
		t.Fatal(err)
	}
	f := follower(t, tc)
	if err := f.Cluster().CreateBucket(ctx, cluster.BucketProps{Name: "multihomed"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1200 * time.Millisecond) // longer than DownAfter (800ms)
	for _, n := range tc.Nodes() {
		m := n.Cluster().Map()
		if len(m.UpNodeIDs()) != 3 {
			t.Errorf("%s: up nodes %v", n.ID, m.UpNodeIDs())
		}
		if self, _ := m.Node(n.ID); len(self.IntraAddrs) != 2 {
			t.Errorf("%s: intra addrs %v", n.ID, self.IntraAddrs)
		}
	}
}

func TestConcurrentCreates(t *testing.T) {
	tc := clustertest.Start(t, clustertest.Options{N: 3})
	ctx := testCtx(t, 60*time.Second)
	if _, err := tc.Leader(ctx); err != nil {
		t.Fatal(err)
	}
	const workers, perWorker = 6, 5
	type result struct {
		name string
		err  error
	}
	results := make(chan result, workers*perWorker)
	for w := range workers {
		go func() {
			c := tc.Node(w % 3).Cluster()
			for i := range perWorker {
				// Workers w and w+3 race for the same names through different nodes.
				name := fmt.Sprintf("race-%d-%d", w%3, i)
				err := c.CreateBucket(ctx, cluster.BucketProps{Name: name, Created: time.Now().Add(time.Duration(w) * time.Millisecond)})
				results <- result{name, err}
			}
		}()
	}
	wins := map[string]int{}
	for range workers * perWorker {
		r := <-results
		switch {
		case r.err == nil:
			wins[r.name]++
		case errors.Is(r.err, object.ErrBucketExists):
		default:
			t.Errorf("%s: %v", r.name, r.err)
		}
	}
	if len(wins) != 3*perWorker {
		t.Errorf("%d names created, want %d", len(wins), 3*perWorker)
	}
	for name, n := range wins {
		if n != 1 {
			t.Errorf("%s created %d times", name, n)
		}
	}
	if err := tc.WaitAll(ctx, func(m *cluster.Map) bool { return len(m.Buckets) == 3*perWorker }); err != nil {
		t.Fatal(err)
	}
}
