package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/cluster/clustertest"
)

// TestRemoveVoterReplacesWithFollowingNode: when a voter is removed, the
// leader promotes a non-voter in its place at once. It must pick one that
// follows it over raft, as the health round does: a member whose raft
// address leads nowhere (it answers its health probes, so it stays up in
// the map) would become a voter that can never vote, which the health
// round never demotes (it is not down), and one more voter going down
// would then cost the cluster its quorum although a live non-voter was
// there to take the removed voter's place.
func TestRemoveVoterReplacesWithFollowingNode(t *testing.T) {
	tc := clustertest.Start(t, clustertest.Options{N: 4, Voters: 3})
	ctx := testCtx(t, 60*time.Second)
	leader, err := tc.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st := leader.Cluster().Status()
	if len(st.Voters) != 3 || len(st.NonVoters) != 1 {
		t.Fatalf("voters %v, non-voters %v", st.Voters, st.NonVoters)
	}

	// A member whose raft address accepts connections and never answers,
	// and whose intra address answers health as it, naming no leader. Its
	// ID sorts before the live non-voter's.
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
			defer c.Close()
		}
	}()
	ghost := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(cluster.Health{ID: "ghost", RaftState: "Follower"})
	}))
	defer ghost.Close()
	join := `{"id":"ghost","raftAddr":"` + sink.Addr().String() + `","intraAddrs":["` + strings.TrimPrefix(ghost.URL, "http://") + `"]}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, leader.URL+cluster.PathJoin, strings.NewReader(join))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("ghost join: HTTP %d", resp.StatusCode)
	}
	if err := tc.WaitMap(ctx, leader, func(m *cluster.Map) bool {
		n, ok := m.Node("ghost")
		return ok && n.State == cluster.StateUp
	}); err != nil {
		t.Fatal(err)
	}

	others := otherVoters(tc, leader)
	removed, next := others[0], others[1]
	resp, err = http.Post(leader.URL+cluster.PathLeave, "application/json", bytes.NewReader([]byte(`{"id":"`+removed.ID+`"}`)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("remove %s: HTTP %d", removed.ID, resp.StatusCode)
	}
	if got := leader.Cluster().Status().Voters; slices.Contains(got, "ghost") {
		t.Errorf("voters after removing %s: %v: the member whose raft address is dead was promoted", removed.ID, got)
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
