package node

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/placement"
)

// TestDeleteRemembersADownHolderPastTheReplicas: copies=1; three nodes
// joined and rank above the old owner of a key, whose copy the rebalance
// has not moved yet. The old owner is marked down (a crash) when the key
// is DELETEd: every up node takes the delete and it is acknowledged. When
// the old owner comes back (later than the nodes remember recent deletes
// in memory), neither a GET nor its rejoin check may bring
// the deleted object back: the delete must be remembered for it.
func TestDeleteRemembersADownHolderPastTheReplicas(t *testing.T) {
	ctx := context.Background()
	r := newHolderRig(t, "old1", "old2")
	r.m.Buckets["bkt"] = cluster.BucketProps{Name: "bkt", Copies: 1, Mode: cluster.ModeLocal}
	newIDs := []string{"new1", "new2", "new3"}
	all := append([]string{"old1", "old2"}, newIDs...)
	key := ""
	for i := 0; key == ""; i++ {
		k := fmt.Sprintf("key%d", i)
		if o := placement.Order(all, placement.ObjectName("bkt", k)); slices.Contains(newIDs, o[0]) &&
			slices.Contains(newIDs, o[1]) && slices.Contains(newIDs, o[2]) {
			key = k
		}
	}
	oldOwner := placement.Order([]string{"old1", "old2"}, placement.ObjectName("bkt", key))[0]
	body := "written before the join"
	if _, err := r.gateway(oldOwner).PutObject(ctx, "bkt", key, bytes.NewReader([]byte(body)), object.PutOptions{Size: int64(len(body))}); err != nil {
		t.Fatal(err)
	}
	for _, id := range newIDs {
		r.addNode(ctx, id)
	}
	g := r.gateway("new1")

	// The old owner crashes and is marked down; the DELETE goes through.
	n := r.m.Nodes[oldOwner]
	n.State, n.Downs = cluster.StateDown, 1
	r.m.Nodes[oldOwner] = n
	if err := g.DeleteObject(ctx, "bkt", key); err != nil {
		t.Fatal(err)
	}

	// It comes back 11 minutes later (past the nodes' in-memory
	// recollection of recent deletes), with its copy, and checks it.
	r.mu.Lock()
	r.tombNow = time.Now().Add(11 * time.Minute)
	r.mu.Unlock()
	n.State = cluster.StateUp
	r.m.Nodes[oldOwner] = n
	rj := &rejoin{self: oldOwner, meta: fixedMap{r.m}, store: r.stores[oldOwner], at: r.gateway(oldOwner).at,
		log: slog.New(slog.DiscardHandler), stateFile: filepath.Join(t.TempDir(), "rejoin-downs")}
	r.locals[oldOwner].rejoin = rj
	rj.begin(ctx, 1)
	rj.wg.Wait()

	if rd, err := g.GetObject(ctx, "bkt", key, object.GetOptions{}); err == nil {
		t.Errorf("an acknowledged DELETE undone: GET serves %q from %s, which was down during it", readAll(t, rd), oldOwner)
	}
	if got := r.holds(oldOwner, "bkt", key); got != "" {
		t.Errorf("%s kept its copy of the deleted key after checking its copies: %q", oldOwner, got)
	}
}
