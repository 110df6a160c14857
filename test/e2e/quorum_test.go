package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/localcluster"
)

// TestQuorumLoss: with two of three voters killed, the node left says so
// (admin status, and its metrics for the alert), and once they are back
// the cluster has a leader again and nothing needs attention.
func TestQuorumLoss(t *testing.T) {
	c := startCluster(t, localcluster.Spec{})
	const noLeader = "cluster: no node that answered knows a raft leader"
	if status := admin(t, c, 0, "status"); strings.Contains(status, noLeader) || metric(t, c, 0, "slipstream_cluster_leader_known") != 1 {
		t.Fatalf("a healthy cluster reports no leader:\n%s", status)
	}
	c.Kill(1)
	c.Kill(2)
	waitFor(t, 30*time.Second, "node1 to lose its leader", func() bool {
		return metric(t, c, 0, "slipstream_cluster_leader_known") == 0
	})
	if status := admin(t, c, 0, "status"); !strings.Contains(status, noLeader) || !strings.Contains(status, "no leader could confirm") {
		t.Errorf("admin status without a quorum:\n%s", status)
	}
	startAgain(t, c, 1)
	startAgain(t, c, 2)
	waitFor(t, 30*time.Second, "a leader and nothing that needs attention", func() bool {
		return metric(t, c, 0, "slipstream_cluster_leader_known") == 1 && strings.Contains(admin(t, c, 0, "status"), "nothing needs attention\n")
	})
}
