package node

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/peer"
)

// TestRebalanceRetriesAfterTheSetReturns: copies=2. Node c joins; a's pass
// sends k to c (b, no longer placed, drops its copy of k on its own pass)
// but leaves another copy waiting (a dirty one), so a must pass again.
// Before it does, c is removed: the node set is what it was before c
// joined. k now has one copy (a's) where two were acknowledged, and only
// a can give b its copy back: a must still pass, not take the set it
// started from for settled.
func TestRebalanceRetriesAfterTheSetReturns(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	all := []string{"a", "b", "c"}
	r := newRebalanceRig(t, all...)
	withC := r.m
	withoutC := cluster.NewMap()
	for _, id := range []string{"a", "b"} {
		withoutC.Nodes[id] = withC.Nodes[id]
	}
	for name, b := range withC.Buckets {
		withoutC.Buckets[name] = b
	}
	// k: placed on a and c once c is there (b drops it then); f: placed on
	// b and c, a's copy is dirty and waits.
	var k, f string
	for i := 0; k == "" || f == ""; i++ {
		key := fmt.Sprintf("k%d", i)
		h := top(all, "two", key, 2)
		switch {
		case k == "" && slices.Contains(h, "a") && slices.Contains(h, "c"):
			k = key
		case f == "" && !slices.Contains(h, "a"):
			f = key
		}
	}
	t0 := r.now.Add(-time.Hour)
	r.put("a", "two", k, "acknowledged with two copies", t0, false)
	r.put("a", "two", f, "dirty", t0, true)

	meta := &swapMeta{}
	meta.m.Store(withoutC)
	rb := r.rebalancer("a", time.Minute)
	rb.meta, rb.settle, rb.now = meta, 50*time.Millisecond, time.Now
	rb.at = func(_ *cluster.Map, id string) peer.Local {
		return &localService{meta: meta, store: r.stores[id], tombs: r.tombs[id]}
	}
	done := make(chan struct{})
	go func() { defer close(done); rb.watch(ctx) }()
	defer func() { cancel(); <-done }()

	time.Sleep(200 * time.Millisecond) // the watch has seen the set without c
	meta.m.Store(withC)                // c joins
	waitFor(t, func() bool { return rb.passes.status().Passes >= 1 })
	if r.holds("c", "two", k) == "" {
		t.Fatalf("the pass with c did not send %s to c: %+v", k, rb.passes.status())
	}
	meta.m.Store(withoutC) // c is removed before a passes again
	deadline := time.Now().Add(3 * time.Second)
	for r.holds("b", "two", k) == "" {
		if time.Now().After(deadline) {
			t.Fatalf("%s is left with one copy (on a) of two: a did not pass again once c was removed (%+v)", k, rb.passes.status())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
