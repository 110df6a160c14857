package node

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/store"
	"github.com/slipstream-io/slipstream/internal/tier"
)

// TestTakeOverOfRemovedOwner: a holder that restarts after the dead owner
// was removed from the map (admin node rm), or that was itself away when
// the owner was marked down, never sees the owner go down. It takes over
// the replicas it holds for any owner the map shows down or does not
// have: acknowledged writes whose only surviving copy is here are
// destaged.
func TestTakeOverOfRemovedOwner(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{Mountpaths: []string{dir + "/mp"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tr, err := tier.New(ctx, tier.Config{NodeID: "B", JournalDir: dir + "/journal", SpoolDir: dir + "/spool"}, st)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	body := []byte("acknowledged write held for A")
	if _, err := tr.PutReplica(ctx, "A", 1, "wback", "k", bytes.NewReader(body),
		tier.ReplicaOptions{PutOptions: object.PutOptions{Size: int64(len(body))}, ModTime: time.Now()}); err != nil {
		t.Fatal(err)
	}
	took := make(chan string, 4)
	s := &tierSync{tier: tr, log: slog.New(slog.DiscardHandler), props: map[string]cluster.BucketProps{}, taking: map[string]bool{},
		takeover: func(ctx context.Context, owner string) {
			_, _ = tr.TakeOver(ctx, owner)
			took <- owner
		}}
	// The map this restarted holder sees: A is gone from it.
	m := cluster.NewMap()
	m.Nodes["B"] = cluster.NodeInfo{ID: "B", State: cluster.StateUp}
	s.apply(ctx, m)
	select {
	case <-took:
	case <-time.After(time.Second):
	}
	if bl := tr.Backlog(); bl.ReplicaObjects != 0 || bl.Objects == 0 {
		t.Fatalf("replicas held for an owner no longer in the map are never taken over: %+v", bl)
	}
}
