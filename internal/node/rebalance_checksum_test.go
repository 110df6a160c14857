package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster"
)

// TestRebalanceDoesNotSpreadRot: a's copy rotted on its drive since it
// was written (no scrub has read it yet), and the key now belongs on b.
// The rebalance must not hand b the rotten bytes as a good copy (b would
// record a checksum of the rotten bytes, so no scrub could ever find it)
// and drop a's: the damage must stay where a scrub can see it.
func TestRebalanceDoesNotSpreadRot(t *testing.T) {
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
	body := string(randomish(5000))
	r.put("a", "one", key, body, r.now.Add(-time.Hour), false)
	damage(t, r.dir("a"), 5000)

	p := r.rebalancer("a", time.Minute).run(ctx, "", nil)
	if got := r.holds("b", "one", key); got != "" && got != body {
		t.Errorf("pass = %+v: b took a's rotten bytes as a good copy", p)
		if _, err := r.stores["b"].Verify(ctx, "one", key, nil); err == nil {
			t.Errorf("and b's scrub cannot tell: its checksum matches the rotten bytes")
		}
	}
	if r.holds("b", "one", key) != body && r.holds("a", "one", key) == "" {
		t.Errorf("pass = %+v: a dropped its (damaged) copy without a good one placed", p)
	}
}
