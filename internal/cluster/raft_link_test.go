package cluster_test

import (
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/cluster/clustertest"
	"github.com/slipstream-io/slipstream/internal/cluster/raftlink"
)

// TestRaftPortRefusesStrangers: someone who reaches a node's raft port
// without the cluster secret cannot talk raft to it. A vote request with a
// far higher term, which raft would otherwise take (stepping the leader
// down and adopting the term), gets no answer, whether it comes over plain
// TCP, as the stock transport sends it, or over the raft link with another
// secret; the cluster keeps its leader and its term.
func TestRaftPortRefusesStrangers(t *testing.T) {
	tc := clustertest.Start(t, clustertest.Options{N: 3})
	ctx := testCtx(t, 30*time.Second)
	leader, err := tc.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	target := raft.ServerAddress(leader.Cluster().Self().RaftAddr)
	term := cluster.RaftTerm(leader.Cluster())
	vote := func(trans raft.Transport) error {
		req := &raft.RequestVoteRequest{
			RPCHeader:    raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("intruder"), Addr: []byte(trans.LocalAddr())},
			Term:         term + 100,
			LastLogIndex: 1 << 40,
			LastLogTerm:  term + 99,
		}
		var resp raft.RequestVoteResponse
		return trans.RequestVote("node-x", target, req, &resp)
	}
	logger := hclog.NewNullLogger()

	plain, err := raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, 1, time.Second, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := vote(plain); err == nil {
		t.Fatal("a vote request over plain TCP was answered")
	}

	link, err := raftlink.Listen("127.0.0.1:0", "not-the-secret", raftlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	wrong := raft.NewNetworkTransportWithLogger(link, 1, time.Second, logger)
	defer wrong.Close()
	if err := vote(wrong); err == nil {
		t.Fatal("a vote request with the wrong secret was answered")
	}

	// The cluster did not notice: same leader, same term, and it still
	// takes changes.
	if err := leader.Cluster().CreateBucket(ctx, cluster.BucketProps{Name: "after"}); err != nil {
		t.Fatal(err)
	}
	if got := cluster.RaftTerm(leader.Cluster()); got != term {
		t.Fatalf("term moved from %d to %d", term, got)
	}
	if !leader.Cluster().IsLeader() {
		t.Fatal("the leader stepped down")
	}

	// The same request with the secret is answered: the refusals above
	// come from the secret, not from the request.
	good, err := raftlink.Listen("127.0.0.1:0", clustertest.RaftSecret, raftlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	friend := raft.NewNetworkTransportWithLogger(good, 1, time.Second, logger)
	defer friend.Close()
	term = cluster.RaftTerm(leader.Cluster())
	if err := vote(friend); err != nil {
		t.Fatalf("a vote request with the secret: %v", err)
	}
}
