package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster"
)

// readable returns the body id's store serves for bucket/key, or "" if it
// has none or refuses to serve it (a copy marked damaged).
func (r *rebalanceRig) readable(id, bucket, key string) string {
	r.t.Helper()
	rd, err := r.stores[id].Get(context.Background(), bucket, key, nil)
	if err != nil {
		return ""
	}
	return readAll(r.t, rd)
}

// TestRebalanceDoesNotDropForADamagedHolder: copies=1, the key now belongs
// on b, and b's copy of the same version was marked damaged by a scrub
// (not served). a's good copy is the only one that can be read: the
// rebalance must not drop it in favour of b's damaged one.
func TestRebalanceDoesNotDropForADamagedHolder(t *testing.T) {
	ctx := context.Background()
	all := []string{"a", "b"}
	r := newRebalanceRig(t, all...)
	r.m.Buckets["one"] = cluster.BucketProps{Name: "one", Copies: 1, Mode: cluster.ModeLocal}
	key := ""
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("k%d", i); top(all, "one", k, 1)[0] == "b" {
			key = k
		}
	}
	const body = "the only good copy"
	t0 := r.now.Add(-time.Hour)
	r.put("a", "one", key, body, t0, false)
	onB := r.put("b", "one", key, body, t0, false)
	if err := r.stores["b"].MarkDamaged(ctx, onB); err != nil {
		t.Fatal(err)
	}

	p := r.rebalancer("a", time.Minute).run(ctx, "", nil)
	if r.readable("a", "one", key) != body && r.readable("b", "one", key) != body {
		t.Fatalf("pass = %+v: no node serves %s any more (a dropped its good copy for b's damaged one)", p, key)
	}
	if p.Dropped != 0 && r.readable("b", "one", key) != body {
		t.Fatalf("pass = %+v: a's copy dropped while b's is damaged", p)
	}
}
