package fabric

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
)

// SelectRequest asks for K hosts whose routes overlap least.
type SelectRequest struct {
	K int
	// Candidates to choose from (host names); empty = every host.
	Candidates []string
	// Targets, when set, are fixed peers (e.g. storage hosts): the routes
	// scored are those between each chosen host and every target, both
	// directions. Without targets the routes among the chosen hosts are
	// scored.
	Targets []string
	// RandomTrials random choices of K candidates are scored for comparison
	// (0: the default of 100; negative: none), fewer when scoring them
	// would exceed randomBudget route walks (at least one is scored;
	// RandomStats.Trials says how many were). The selection is never
	// worse than the best of them. Seed makes them reproducible.
	RandomTrials int
	Seed         uint64
}

// Score measures how much a set of routes overlaps on switch-to-switch
// links (the links a placement can avoid; a host's own cable is shared by
// all its routes whatever is chosen).
type Score struct {
	// Routes scored.
	Routes int `json:"routes"`
	// SharedPairs is the number of pairs of routes that cross a common
	// switch-to-switch link in the same direction (lower is better).
	SharedPairs int64 `json:"shared_pairs"`
	// MaxShare is the most routes crossing one link direction.
	MaxShare int `json:"max_share"`
	// Weight is the sum of the fabric-wide loads along the routes (the
	// background traffic they meet when every host talks to every host).
	Weight int64 `json:"weight"`
	// Broken counts routes the LFTs do not deliver.
	Broken int `json:"broken"`
}

// Less orders scores: fewer shared pairs, then lower maximum, then lower weight.
func (s Score) Less(o Score) bool {
	if s.Broken != o.Broken {
		return s.Broken < o.Broken
	}
	if s.SharedPairs != o.SharedPairs {
		return s.SharedPairs < o.SharedPairs
	}
	if s.MaxShare != o.MaxShare {
		return s.MaxShare < o.MaxShare
	}
	return s.Weight < o.Weight
}

// RandomStats summarises the scores of random choices.
type RandomStats struct {
	Trials          int     `json:"trials"`
	MeanSharedPairs float64 `json:"mean_shared_pairs"`
	MinSharedPairs  int64   `json:"min_shared_pairs"`
	MeanMaxShare    float64 `json:"mean_max_share"`
	MeanWeight      float64 `json:"mean_weight"`
	// BetterOrEqual is the fraction of random choices that score at least
	// as well as the selection (on shared pairs).
	BetterOrEqual float64 `json:"better_or_equal"`
}

// Selection is the answer to a SelectRequest.
type Selection struct {
	Hosts    []string    `json:"hosts"`
	Score    Score       `json:"score"`
	Random   RandomStats `json:"random"`
	Targets  []string    `json:"targets,omitempty"`
	Searched int         `json:"candidates"`
}

// Select picks k hosts among candidates (nil = all hosts) whose routes
// overlap least. It is the short form of SelectWith.
func (m *Model) Select(ctx context.Context, k int, candidates []string) (*Selection, error) {
	return m.SelectWith(ctx, SelectRequest{K: k, Candidates: candidates})
}

// Route walk budgets of SelectWith. greedyBudget bounds the greedy phase
// (scoring candidates and adding the chosen ones), shared among its steps;
// a step scores at least one candidate even when the budget is spent, so
// the phase also ends for a k too large for it. swapBudget bounds the swap
// phase, randomBudget the scoring of the random choices (at least one).
// Scoring the selection itself adds one walk per route scored.
const (
	greedyBudget = 30_000_000
	swapBudget   = 4_000_000
	randomBudget = 30_000_000
)

// scorer keeps per-link counters of a growing route set.
type scorer struct {
	m    *Model
	load []int64 // fabric-wide loads (may be nil)
	cnt  []int32
	buf  []int32
	// walks counts the routes walked (the unit of the select budgets)
	walks int64
}

func (m *Model) newScorer(load []int64) *scorer {
	return &scorer{m: m, load: load, cnt: make([]int32, len(m.Ports))}
}

// routesBetween calls fn with every route's links from host x to host y.
func (sc *scorer) routesBetween(x, y int32, fn func(links []int32, ok bool)) {
	m := sc.m
	for _, s := range m.Hosts[x].Endpoints {
		for _, d := range m.Hosts[y].Endpoints {
			dp := m.Ports[m.Endpoints[d].Port]
			for i := 0; i < 1<<dp.LMC; i++ {
				var ok bool
				sc.buf, ok = m.RouteLinks(s, dp.LID+uint16(i), sc.buf[:0])
				sc.walks++
				fn(sc.buf, ok)
			}
		}
	}
}

// pairs lists the host pairs (both directions) that adding x to set
// contributes.
func pairsFor(x int32, set, targets []int32) [][2]int32 {
	var ps [][2]int32
	peers := set
	if len(targets) > 0 {
		peers = targets
	}
	for _, y := range peers {
		if y == x {
			continue
		}
		ps = append(ps, [2]int32{x, y}, [2]int32{y, x})
	}
	return ps
}

// add adds the routes of pairs, returning the score increment; with
// commit false the counters are restored.
func (sc *scorer) add(pairs [][2]int32, commit bool) Score {
	var s Score
	var touched []int32
	for _, p := range pairs {
		sc.routesBetween(p[0], p[1], func(links []int32, ok bool) {
			s.Routes++
			if !ok {
				s.Broken++
				return
			}
			for _, l := range links {
				if sc.load != nil {
					s.Weight += sc.load[l]
				}
				if !sc.m.core[l] {
					continue
				}
				s.SharedPairs += int64(sc.cnt[l])
				sc.cnt[l]++
				if int(sc.cnt[l]) > s.MaxShare {
					s.MaxShare = int(sc.cnt[l])
				}
				touched = append(touched, l)
			}
		})
	}
	if !commit {
		for _, l := range touched {
			sc.cnt[l]--
		}
	}
	return s
}

func (sc *scorer) reset() {
	for i := range sc.cnt {
		sc.cnt[i] = 0
	}
}

// scoreSet scores a whole set from scratch.
func (sc *scorer) scoreSet(set, targets []int32) Score {
	sc.reset()
	var tot Score
	for i, x := range set {
		var ps [][2]int32
		if len(targets) > 0 {
			ps = pairsFor(x, nil, targets)
		} else {
			ps = pairsFor(x, set[:i], nil)
		}
		s := sc.add(ps, true)
		tot.Routes += s.Routes
		tot.Broken += s.Broken
		tot.SharedPairs += s.SharedPairs
		tot.Weight += s.Weight
		tot.MaxShare = max(tot.MaxShare, s.MaxShare)
	}
	return tot
}

// SelectWith chooses hosts greedily: each step adds the candidate whose
// routes (to the hosts already chosen, or to the targets) add the fewest
// broken routes, then the fewest shared link pairs, ties broken by lower
// maximum sharing, then by lower mean fabric-wide load along the host's
// routes (a host without a working route comes last), then by candidate
// order. When scoring every candidate would exceed the step's share of
// what is left of a fixed route budget (greedyBudget), a step scores a
// random sample of the candidates (seeded by Seed). The greedy choice is
// a heuristic, not an optimum: when one of the random choices of the same
// size (scored for comparison, RandomTrials) scores better (Score.Less),
// the next phase starts from that one instead, so the selection is never
// worse than any random choice scored. Then it swaps a chosen host for an
// unchosen candidate while that lowers the broken routes, or keeps them
// and lowers the shared pairs (within swapBudget).
func (m *Model) SelectWith(ctx context.Context, req SelectRequest) (*Selection, error) {
	cands, err := m.hostIndexes(req.Candidates)
	if err != nil {
		return nil, err
	}
	var targets []int32
	if len(req.Targets) > 0 {
		if targets, err = m.hostIndexes(req.Targets); err != nil {
			return nil, err
		}
		isT := map[int32]bool{}
		for _, t := range targets {
			isT[t] = true
		}
		var c2 []int32
		for _, c := range cands {
			if !isT[c] {
				c2 = append(c2, c)
			}
		}
		cands = c2
	}
	if req.K <= 0 || req.K > len(cands) {
		return nil, fmt.Errorf("%w: cannot pick %d of %d candidate hosts", ErrNotFound, req.K, len(cands))
	}
	if req.RandomTrials == 0 {
		req.RandomTrials = 100
	}
	req.RandomTrials = max(req.RandomTrials, 0)
	an, err := m.Analyze(ctx)
	if err != nil {
		return nil, err
	}
	sc := m.newScorer(an.Load)
	// The random choices come first: the best of them may be where the
	// swap phase starts.
	rs, randScores, bestRand, bestRandScore, err := m.randomChoices(ctx, sc, cands, targets, req, randomBudget)
	if err != nil {
		return nil, err
	}
	sc.reset()
	chosen, greedyScore, err := m.greedy(ctx, sc, an, cands, targets, req, greedyBudget)
	if err != nil {
		return nil, err
	}
	if bestRand != nil && bestRandScore.Less(greedyScore) {
		chosen = bestRand
		sc.scoreSet(chosen, targets)
	}
	chosen = m.improveBySwaps(ctx, sc, chosen, cands, targets, swapBudget)
	sel := &Selection{Searched: len(cands)}
	sel.Score = sc.scoreSet(chosen, targets)
	for _, h := range chosen {
		sel.Hosts = append(sel.Hosts, m.Hosts[h].Name)
	}
	sort.Strings(sel.Hosts)
	for _, t := range targets {
		sel.Targets = append(sel.Targets, m.Hosts[t].Name)
	}
	for _, s := range randScores {
		if s.SharedPairs <= sel.Score.SharedPairs {
			rs.BetterOrEqual++
		}
	}
	if rs.Trials > 0 {
		rs.BetterOrEqual /= float64(rs.Trials)
	}
	sel.Random = rs
	return sel, nil
}

// hostLIDs counts the destination LIDs of a host's endpoints.
func (m *Model) hostLIDs(h int32) int64 {
	var n int64
	for _, e := range m.Hosts[h].Endpoints {
		n += 1 << m.Ports[m.Endpoints[e].Port].LMC
	}
	return n
}

// greedy is the greedy phase of SelectWith, within budget route walks
// (see greedyBudget): it returns the chosen hosts and their score, and
// leaves their routes in the counters of sc (which must be empty on
// entry).
func (m *Model) greedy(ctx context.Context, sc *scorer, an *Analysis, cands, targets []int32, req SelectRequest, budget int64) ([]int32, Score, error) {
	// hostWeight: mean weight of a host's routes, the tie-breaker of the first pick.
	hostWeight := func(h int32) float64 {
		var w, n int64
		for _, e := range m.Hosts[h].Endpoints {
			w += an.OutWeight[e] + an.InWeight[e]
			n += an.OutRoutes[e] + an.InRoutes[e]
		}
		if n == 0 {
			// no working route: the host sorts after every reachable one
			return math.Inf(1)
		}
		return float64(w) / float64(n)
	}
	var chosen []int32
	used := make(map[int32]bool)
	var total Score
	// The greedy phase scores every unchosen candidate against the hosts
	// chosen so far (or the targets): O(C·k²) route walks without targets.
	// Each step gets an equal share of what is left of the budget; a step
	// whose full scan (and adding the chosen host) would exceed it scores
	// a random sample of the candidates instead (at least one).
	spent := int64(0)
	// endpoints and destination LIDs of the peers a candidate is scored
	// against: a candidate c adds ne(c)·peerLIDs + peerEPs·nl(c) routes
	var peerEPs, peerLIDs int64
	for _, t := range targets {
		peerEPs += int64(len(m.Hosts[t].Endpoints))
		peerLIDs += m.hostLIDs(t)
	}
	grng := rand.New(rand.NewPCG(req.Seed, 0x9eed))
	var free []int32
	for len(chosen) < req.K {
		if err := ctx.Err(); err != nil {
			return nil, Score{}, err
		}
		free = free[:0]
		var full int64 // route walks of scoring every free candidate
		for _, c := range cands {
			if !used[c] {
				free = append(free, c)
				full += int64(len(m.Hosts[c].Endpoints))*peerLIDs + peerEPs*m.hostLIDs(c)
			}
		}
		share := max(budget-spent, 0) / int64(req.K-len(chosen))
		if avg := full / int64(len(free)); full+avg > share {
			// n candidates and the chosen one's routes fit in the share
			n := int(min(max(share*int64(len(free))/full-1, 1), int64(len(free))))
			for i := 0; i < n; i++ {
				j := i + grng.IntN(len(free)-i)
				free[i], free[j] = free[j], free[i]
			}
			free = free[:n]
		}
		best := int32(-1)
		var bestS Score
		var bestW float64
		for i, c := range free {
			if i&63 == 63 {
				if err := ctx.Err(); err != nil {
					return nil, Score{}, err
				}
			}
			s := sc.add(pairsFor(c, chosen, targets), false)
			spent += int64(s.Routes)
			w := hostWeight(c)
			if best < 0 || s.Less(bestS) || (!bestS.Less(s) && w < bestW) {
				best, bestS, bestW = c, s, w
			}
		}
		sc.add(pairsFor(best, chosen, targets), true)
		spent += int64(bestS.Routes)
		chosen = append(chosen, best)
		used[best] = true
		if len(targets) == 0 {
			peerEPs += int64(len(m.Hosts[best].Endpoints))
			peerLIDs += m.hostLIDs(best)
		}
		total.Routes += bestS.Routes
		total.Broken += bestS.Broken
		total.SharedPairs += bestS.SharedPairs
		total.Weight += bestS.Weight
		total.MaxShare = max(total.MaxShare, bestS.MaxShare)
	}
	return chosen, total, nil
}

// randomChoices scores req.RandomTrials random choices of req.K candidates
// (within budget route walks, at least one choice) and returns their
// statistics (BetterOrEqual not yet computed), every score, and the best
// choice with its score (nil when none was scored). It uses the counters
// of sc.
func (m *Model) randomChoices(ctx context.Context, sc *scorer, cands, targets []int32, req SelectRequest, budget int) (RandomStats, []Score, []int32, Score, error) {
	rng := rand.New(rand.NewPCG(req.Seed, 0x5eed))
	rs := RandomStats{MinSharedPairs: -1}
	var scores []Score
	var best []int32
	var bestS Score
	pick := make([]int32, len(cands))
	spent, last := 0, 0
	for t := 0; t < req.RandomTrials; t++ {
		if t&15 == 0 {
			if err := ctx.Err(); err != nil {
				return rs, nil, nil, Score{}, err
			}
		}
		if t > 0 && spent+last > budget {
			break
		}
		copy(pick, cands)
		for i := 0; i < req.K; i++ {
			j := i + rng.IntN(len(pick)-i)
			pick[i], pick[j] = pick[j], pick[i]
		}
		s := sc.scoreSet(pick[:req.K], targets)
		spent, last = spent+s.Routes, s.Routes
		scores = append(scores, s)
		if best == nil || s.Less(bestS) {
			best, bestS = append(best[:0], pick[:req.K]...), s
		}
		rs.MeanSharedPairs += float64(s.SharedPairs)
		rs.MeanMaxShare += float64(s.MaxShare)
		rs.MeanWeight += float64(s.Weight)
		if rs.MinSharedPairs < 0 || s.SharedPairs < rs.MinSharedPairs {
			rs.MinSharedPairs = s.SharedPairs
		}
	}
	rs.Trials = len(scores)
	if rs.Trials > 0 {
		n := float64(rs.Trials)
		rs.MeanSharedPairs /= n
		rs.MeanMaxShare /= n
		rs.MeanWeight /= n
	}
	return rs, scores, best, bestS, nil
}

// Overlap scores the routes among hosts (or between hosts and targets).
func (m *Model) Overlap(ctx context.Context, hosts, targets []string) (Score, error) {
	hs, err := m.hostIndexes(hosts)
	if err != nil {
		return Score{}, err
	}
	var ts []int32
	if len(targets) > 0 {
		if ts, err = m.hostIndexes(targets); err != nil {
			return Score{}, err
		}
	}
	an, err := m.Analyze(ctx)
	if err != nil {
		return Score{}, err
	}
	return m.newScorer(an.Load).scoreSet(hs, ts), nil
}

// Rank orders replicas for a client: the replicas whose routes from and to
// the client are lightest (fabric-wide load) come first, so a cluster can
// prefer low-overlap copies. A replica on the client's own host uses no
// fabric link (weight 0, nothing broken) and comes before every other;
// replicas with broken routes come after those without. Unknown replicas
// keep their order at the end.
func (m *Model) Rank(ctx context.Context, client string, replicas []string) ([]string, error) {
	c, ok := m.hostByName[client]
	if !ok {
		return nil, fmt.Errorf("%w: host %q", ErrNotFound, client)
	}
	an, err := m.Analyze(ctx)
	if err != nil {
		return nil, err
	}
	sc := m.newScorer(an.Load)
	type rk struct {
		name  string
		s     Score
		ok    bool
		local bool // on the client's host: no route
	}
	rs := make([]rk, len(replicas))
	for i, r := range replicas {
		rs[i] = rk{name: r}
		h, ok := m.hostByName[r]
		switch {
		case !ok:
		case h == c:
			rs[i].ok, rs[i].local = true, true
		default:
			rs[i].ok = true
			rs[i].s = sc.add([][2]int32{{c, h}, {h, c}}, false)
		}
	}
	sort.SliceStable(rs, func(i, j int) bool {
		if rs[i].ok != rs[j].ok {
			return rs[i].ok
		}
		if rs[i].local != rs[j].local {
			return rs[i].local
		}
		if rs[i].s.Broken != rs[j].s.Broken {
			return rs[i].s.Broken < rs[j].s.Broken
		}
		return rs[i].s.Weight < rs[j].s.Weight
	})
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.name
	}
	return out, nil
}

// remove takes the routes of pairs out of the counters and returns how many
// shared pairs they accounted for, how many of them were broken, and how
// many routes were walked.
func (sc *scorer) remove(pairs [][2]int32) (lost int64, broken, routes int) {
	for _, p := range pairs {
		sc.routesBetween(p[0], p[1], func(links []int32, ok bool) {
			routes++
			if !ok {
				broken++
				return
			}
			for _, l := range links {
				if sc.m.core[l] {
					sc.cnt[l]--
					lost += int64(sc.cnt[l])
				}
			}
		})
	}
	return lost, broken, routes
}

// improveBySwaps refines a choice: it replaces a chosen host by an
// unchosen candidate whenever that lowers the number of broken routes, or
// keeps it and lowers the number of shared link pairs, until no swap helps
// or about budget route walks (taking a host's routes out, scoring
// candidates, putting the better one's in) have been spent. The result
// never scores worse than chosen. The counters of sc hold the routes of
// chosen on entry and on return.
func (m *Model) improveBySwaps(ctx context.Context, sc *scorer, chosen, cands, targets []int32, budget int) []int32 {
	in := make(map[int32]bool, len(chosen))
	for _, h := range chosen {
		in[h] = true
	}
	others := func(skip int) []int32 {
		out := make([]int32, 0, len(chosen))
		for i, h := range chosen {
			if i != skip {
				out = append(out, h)
			}
		}
		return out
	}
	spent := 0
	for improved := true; improved && spent < budget; {
		improved = false
		for i := 0; i < len(chosen) && spent < budget; i++ {
			if ctx.Err() != nil {
				return chosen
			}
			h := chosen[i]
			rest := others(i)
			lost, lostBroken, walked := sc.remove(pairsFor(h, rest, targets))
			spent += walked
			// a swap must not add broken routes; fewer broken routes
			// beat fewer shared pairs
			best, bestBroken, bestGain := int32(-1), 0, int64(0)
			for _, c := range cands {
				if in[c] {
					continue
				}
				s := sc.add(pairsFor(c, rest, targets), false)
				spent += s.Routes
				fixed, gain := lostBroken-s.Broken, lost-s.SharedPairs
				if fixed > bestBroken || (fixed == bestBroken && fixed >= 0 && gain > bestGain) {
					best, bestBroken, bestGain = c, fixed, gain
				}
				if spent >= budget {
					break
				}
			}
			if best < 0 {
				spent += sc.add(pairsFor(h, rest, targets), true).Routes
				continue
			}
			spent += sc.add(pairsFor(best, rest, targets), true).Routes
			delete(in, h)
			in[best] = true
			chosen[i] = best
			improved = true
		}
	}
	return chosen
}
