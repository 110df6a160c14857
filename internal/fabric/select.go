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
	// (0: the default of 100; negative: none). Seed makes them reproducible.
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

// greedyBudget bounds the route walks of the greedy phase of SelectWith;
// minGreedySample is the fewest candidates a sampled step scores.
const (
	greedyBudget    = 30_000_000
	minGreedySample = 32
)

// scorer keeps per-link counters of a growing route set.
type scorer struct {
	m    *Model
	load []int64 // fabric-wide loads (may be nil)
	cnt  []int32
	buf  []int32
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
// order. When scoring every candidate would exceed the step's share of a
// fixed route budget, a step scores a random sample of the candidates
// (seeded by Seed). Then it swaps a chosen host for an unchosen candidate
// while that lowers the broken routes, or keeps them and lowers the shared
// pairs. The result is compared with random choices of the same size.
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
	// Each step gets an equal share of greedyBudget; a step whose full scan
	// would exceed it scores a random sample of the candidates instead.
	perStep := max(greedyBudget/req.K, 1)
	grng := rand.New(rand.NewPCG(req.Seed, 0x9eed))
	var free []int32
	for len(chosen) < req.K {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		free = free[:0]
		for _, c := range cands {
			if !used[c] {
				free = append(free, c)
			}
		}
		// routes scored per candidate (an estimate: hosts with several
		// endpoints or an LMC have more)
		per := 2 * len(chosen)
		if len(targets) > 0 {
			per = 2 * len(targets)
		}
		if n := perStep / max(per, 1); per > 0 && len(free) > max(n, minGreedySample) {
			n = max(n, minGreedySample)
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
					return nil, err
				}
			}
			s := sc.add(pairsFor(c, chosen, targets), false)
			w := hostWeight(c)
			if best < 0 || s.Less(bestS) || (!bestS.Less(s) && w < bestW) {
				best, bestS, bestW = c, s, w
			}
		}
		sc.add(pairsFor(best, chosen, targets), true)
		chosen = append(chosen, best)
		used[best] = true
		total.Routes += bestS.Routes
	}
	chosen = m.improveBySwaps(ctx, sc, chosen, cands, targets, 4_000_000)
	sel := &Selection{Searched: len(cands)}
	sel.Score = sc.scoreSet(chosen, targets)
	for _, h := range chosen {
		sel.Hosts = append(sel.Hosts, m.Hosts[h].Name)
	}
	sort.Strings(sel.Hosts)
	for _, t := range targets {
		sel.Targets = append(sel.Targets, m.Hosts[t].Name)
	}
	// random comparison
	rng := rand.New(rand.NewPCG(req.Seed, 0x5eed))
	rs := RandomStats{Trials: req.RandomTrials, MinSharedPairs: -1}
	pick := make([]int32, len(cands))
	for t := 0; t < req.RandomTrials; t++ {
		if t&15 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		copy(pick, cands)
		for i := 0; i < req.K; i++ {
			j := i + rng.IntN(len(pick)-i)
			pick[i], pick[j] = pick[j], pick[i]
		}
		s := sc.scoreSet(pick[:req.K], targets)
		rs.MeanSharedPairs += float64(s.SharedPairs)
		rs.MeanMaxShare += float64(s.MaxShare)
		rs.MeanWeight += float64(s.Weight)
		if rs.MinSharedPairs < 0 || s.SharedPairs < rs.MinSharedPairs {
			rs.MinSharedPairs = s.SharedPairs
		}
		if s.SharedPairs <= sel.Score.SharedPairs {
			rs.BetterOrEqual++
		}
	}
	if rs.Trials > 0 {
		n := float64(rs.Trials)
		rs.MeanSharedPairs /= n
		rs.MeanMaxShare /= n
		rs.MeanWeight /= n
		rs.BetterOrEqual /= n
	}
	sel.Random = rs
	return sel, nil
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
// prefer low-overlap copies. Unknown replicas keep their order at the end.
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
		name string
		s    Score
		ok   bool
		i    int
	}
	rs := make([]rk, len(replicas))
	for i, r := range replicas {
		rs[i] = rk{name: r, i: i}
		if h, ok := m.hostByName[r]; ok {
			rs[i].ok = true
			rs[i].s = sc.add([][2]int32{{c, h}, {h, c}}, false)
		}
	}
	sort.SliceStable(rs, func(i, j int) bool {
		if rs[i].ok != rs[j].ok {
			return rs[i].ok
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
// shared pairs they accounted for and how many of them were broken.
func (sc *scorer) remove(pairs [][2]int32) (lost int64, broken int) {
	for _, p := range pairs {
		sc.routesBetween(p[0], p[1], func(links []int32, ok bool) {
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
	return lost, broken
}

// improveBySwaps refines a greedy choice: it replaces a chosen host by an
// unchosen candidate whenever that lowers the number of broken routes, or
// keeps it and lowers the number of shared link pairs,
// until no swap helps or about budget routes have been evaluated. The
// counters of sc hold the routes of chosen on entry and on return.
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
			lost, lostBroken := sc.remove(pairsFor(h, rest, targets))
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
				sc.add(pairsFor(h, rest, targets), true)
				continue
			}
			sc.add(pairsFor(best, rest, targets), true)
			delete(in, h)
			in[best] = true
			chosen[i] = best
			improved = true
		}
	}
	return chosen
}
