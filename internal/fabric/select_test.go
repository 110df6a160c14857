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

// TestSelectNotWorseThanRandom: select exists to beat a random choice. On
// the 1024-host ftree sample, for k = 150 the greedy phase packs whole
// pods first (cheap while few hosts are chosen: routes inside a pod share
// no core link) and the swaps cannot undo it within their budget, so the
// greedy choice shares more link pairs than any of the random choices
// SelectWith scores itself. When the best random choice beats the greedy
// one, the swaps start from it: the selection is never worse than the
// best random choice scored.
func TestSelectNotWorseThanRandom(t *testing.T) {
	if testing.Short() {
		t.Skip("1024-host sample, about 10 s")
	}
	m := load(t, "ft3-k16-h1024/ftree")
	sel, err := m.SelectWith(context.Background(), SelectRequest{K: 150, RandomTrials: 10, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if sel.Score.SharedPairs > sel.Random.MinSharedPairs || sel.Random.BetterOrEqual > 0 {
		t.Errorf("k=150: selection shares %d link pairs; random choices: mean %.0f, best %d (%.0f%% of them do as well or better)",
			sel.Score.SharedPairs, sel.Random.MeanSharedPairs, sel.Random.MinSharedPairs, 100*sel.Random.BetterOrEqual)
	}
}

// TestSelectBudgets: the phases of SelectWith are bounded in route walks
// as documented: the greedy phase by its budget (scoring a sample of the
// candidates once a full scan would exceed a step's share of what is left,
// at least one), the random comparison by its budget (at least one
// choice; RandomStats.Trials tells how many ran).
func TestSelectBudgets(t *testing.T) {
	m := load(t, "ft3-k8-h128/ftree/before")
	an := analyze(t, m)
	ctx := context.Background()
	all, _ := m.hostIndexes(nil)
	// 128 single-port hosts, LMC 0: k hosts cost k·(k-1) routes
	for _, tc := range []struct {
		k      int
		budget int64
		full   bool // the budget pays for a full scan at every step
	}{
		{16, 1 << 30, true},
		{64, 20_000, false},
		{64, 100_000, false},
	} {
		sc := m.newScorer(an.Load)
		chosen, score, err := m.greedy(ctx, sc, an, all, nil, SelectRequest{K: tc.k}, tc.budget)
		if err != nil {
			t.Fatal(err)
		}
		if len(chosen) != tc.k || score != m.newScorer(an.Load).scoreSet(chosen, nil) {
			t.Errorf("greedy k=%d: %d hosts, score %+v", tc.k, len(chosen), score)
		}
		// a full scan of step j walks (128-j)·2j routes, adding the host 2j
		var fullCost int64
		for j := int64(0); j < int64(tc.k); j++ {
			fullCost += (128-j)*2*j + 2*j
		}
		switch {
		case tc.full && sc.walks != fullCost:
			t.Errorf("greedy k=%d, budget %d: %d route walks, want a full scan (%d)", tc.k, tc.budget, sc.walks, fullCost)
		case !tc.full && (sc.walks > tc.budget || sc.walks < tc.budget/2):
			t.Errorf("greedy k=%d, budget %d: %d route walks (full scans: %d)", tc.k, tc.budget, sc.walks, fullCost)
		}
	}
	for _, tc := range []struct {
		k, trials, budget, want int
	}{
		{4, 100, 1 << 30, 100},
		{4, 100, 120, 10}, // 12 routes a choice
		{4, 100, 5, 1},    // at least one
		{4, -1, 1 << 30, 0},
	} {
		sc := m.newScorer(an.Load)
		rs, scores, best, bestS, err := m.randomChoices(ctx, sc, all, nil, SelectRequest{K: tc.k, RandomTrials: tc.trials}, tc.budget)
		if err != nil {
			t.Fatal(err)
		}
		if rs.Trials != tc.want || len(scores) != tc.want || sc.walks > int64(max(tc.budget, 12)) {
			t.Errorf("%d random choices of %d, budget %d: %d run (%d scores), %d route walks; want %d",
				tc.trials, tc.k, tc.budget, rs.Trials, len(scores), sc.walks, tc.want)
		}
		if tc.want > 0 && (len(best) != tc.k || bestS.SharedPairs != rs.MinSharedPairs) {
			t.Errorf("best random choice %v %+v, min shared pairs %d", best, bestS, rs.MinSharedPairs)
		}
	}
}
