package tier_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/tier"
)

// TestSupersededHoldersSurviveCompaction: A's write v1 has its replica on
// B; A's DELETE of the key, which B misses (down), supersedes v1 before it
// is destaged, so the delete must tell B when it is destaged. A restarts
// twice before that (each start compacts the journal): B must still be
// told, or its replica of v1 stays dirty and, when A dies, B's take-over
// uploads the deleted object again.
func TestSupersededHoldersSurviveCompaction(t *testing.T) {
	a, b, c := newEnv(t, "fs"), newEnv(t, "fs"), newEnv(t, "fs")
	b.be, c.be = a.be, a.be // one remote bucket
	a.be.set(func(x *ctl) { x.failPuts = true })
	p := &peers{tiers: map[string]*tier.Tier{}, order: []string{"A", "B", "C"}, down: map[string]bool{}}
	wb2 := map[string]tier.Bucket{"wback": {Mode: tier.ModeWriteback, Copies: 2}}
	cfgA := tier.Config{NodeID: "A", Replicator: p, RetryBackoff: 20 * time.Millisecond,
		SpoolDir: a.dir + "/spool", JournalDir: a.dir + "/journal"}
	ctx := context.Background()
	startA := func() *tier.Tier {
		tr, err := tier.New(ctx, cfgA, a.local)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		if err := tr.AddBucket("wback", tier.Bucket{Mode: tier.ModeWriteback, Copies: 2, Backend: a.be}); err != nil {
			t.Fatal(err)
		}
		p.set("A", tr)
		return tr
	}
	ta := startA()
	tb := b.newTier(t, tier.Config{NodeID: "B", Replicator: p, RetryBackoff: 20 * time.Millisecond}, wb2)
	tc := c.newTier(t, tier.Config{NodeID: "C", Replicator: p, RetryBackoff: 20 * time.Millisecond}, wb2)
	p.set("B", tb)
	p.set("C", tc)

	if _, err := ta.Put(ctx, "wback", "k", bytesReader([]byte("v1")), putOpts(2)); err != nil {
		t.Fatal(err)
	}
	if tb.Backlog().ReplicaObjects != 1 {
		t.Fatal("B holds no replica of v1")
	}
	p.mu.Lock()
	p.down["B"] = true
	p.mu.Unlock()
	if err := ta.Delete(ctx, "wback", "k"); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.down["B"] = false
	p.mu.Unlock()

	ta.Close()
	ta = startA() // replays and compacts
	ta.Close()
	ta = startA() // replays the compacted journal
	a.be.set(func(x *ctl) { x.failPuts = false })
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := ta.WaitDestaged(wctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "B to be told that v1 will never be destaged", func() bool { return tb.Backlog().ReplicaObjects == 0 })
	// A dies for good; B takes over whatever it still holds for A.
	ta.Close()
	if _, err := tb.TakeOver(ctx, "A"); err != nil {
		t.Fatal(err)
	}
	if err := tb.WaitDestaged(wctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.raw.Stat(ctx, "k"); !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("the acknowledged DELETE of k was undone in the backend: %v", err)
	}
}
