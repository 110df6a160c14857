package tier_test

import (
	"context"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/tier"
)

// TestTakeOverOfLateDeleteKeepsOwnedWrite: B took a client write of k (v2,
// acknowledged, not yet destaged) while A was away; A then redelivers a
// delete notice of k that B had missed (A deleted k before it went away),
// and later dies for good. B's take-over must not turn that late delete
// into a delete newer than B's own write: v2 must reach the backend.
func TestTakeOverOfLateDeleteKeepsOwnedWrite(t *testing.T) {
	e := newEnv(t, "fs")
	e.be.set(func(c *ctl) { c.failPuts = true }) // the backend is unreachable for a while
	tb := e.newTier(t, tier.Config{NodeID: "B", RetryBackoff: 20 * time.Millisecond}, wbBucket)
	ctx := context.Background()
	v2 := []byte("v2 written through B while A was down")
	if _, err := tb.Put(ctx, "wback", "k", bytesReader(v2), putOpts(len(v2))); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	// A is back and redelivers the delete notice B missed.
	if err := tb.DeleteReplica(ctx, "A", 2, "wback", "k"); err != nil {
		t.Fatal(err)
	}
	// A dies for good.
	if _, err := tb.TakeOver(ctx, "A"); err != nil {
		t.Fatal(err)
	}
	e.be.set(func(c *ctl) { c.failPuts = false })
	if got, err := e.destaged(t, tb, "k"); err != nil || got != string(v2) {
		t.Fatalf("backend k = %q (%v), want B's acknowledged write %q; ops %v", got, err, v2, e.be.ops())
	}
}
