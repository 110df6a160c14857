package node

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/cluster/clustertest"
)

// TestLeaderSyncWithoutLeader: with no leader (an election, or a lost
// quorum) there is no newer map to wait for: catching up fails at once
// instead of stalling every bucket lookup for mapLag.
func TestLeaderSyncWithoutLeader(t *testing.T) {
	tc := clustertest.Start(t, clustertest.Options{N: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := tc.Leader(ctx); err != nil {
		t.Fatal(err)
	}
	left := tc.Node(2)
	tc.Stop(tc.Node(0))
	tc.Stop(tc.Node(1))
	for left.Cluster().LeaderID() != "" {
		if ctx.Err() != nil {
			t.Fatal("the last node still names a leader")
		}
		time.Sleep(20 * time.Millisecond)
	}
	start := time.Now()
	err := leaderSync(left.Cluster())(ctx)
	if !errors.Is(err, cluster.ErrNoLeader) {
		t.Errorf("catching up without a leader: %v, want ErrNoLeader", err)
	}
	if d := time.Since(start); d >= mapLag {
		t.Errorf("catching up without a leader took %v, the whole map lag", d)
	}
}
