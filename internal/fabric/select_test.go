package fabric

import (
	"context"
	"testing"
	"time"
)

// TestSelectGreedyPhaseIsBounded: scoring every candidate at every greedy
// step walks about sum_j (C-j)*2j routes for k picks among C candidates
// without targets, O(C*k^2): k=512 of the 2048-host sample would be ~4.5e8
// route walks (over a minute on 2 cores). The greedy phase has a route
// budget (sampling candidates once a full scan would exceed a step's
// share), like the swap phase, so a placement for a 512-node job takes
// seconds.
func TestSelectGreedyPhaseIsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	m := load(t, "ft2-h2048/minhop/before")
	if _, err := m.Analyze(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	_, err := m.SelectWith(ctx, SelectRequest{K: 512, RandomTrials: 1})
	if err != nil {
		t.Fatalf("select k=512 of %d hosts: %v after %v", len(m.Hosts), err, time.Since(start).Round(time.Second))
	}
}

// TestSelectRandomTrials: RandomTrials 0 is the default of 100 random
// choices, a negative value runs none.
func TestSelectRandomTrials(t *testing.T) {
	m := load(t, "ft2-h16/minhop/before")
	for _, tc := range []struct{ req, want int }{{0, 100}, {-1, 0}, {3, 3}} {
		sel, err := m.SelectWith(context.Background(), SelectRequest{K: 2, RandomTrials: tc.req})
		if err != nil {
			t.Fatal(err)
		}
		if sel.Random.Trials != tc.want {
			t.Errorf("RandomTrials %d: %d trials, want %d", tc.req, sel.Random.Trials, tc.want)
		}
	}
}
