package fabric

import (
	"container/heap"
	"context"
	"runtime"
	"sort"
	"sync"

	"github.com/slipstream-io/slipstream/internal/fabric/ibdump"
)

// tree is the forwarding tree towards one destination LID: for every switch
// the port it forwards to and the next switch. Buffers are reused.
type tree struct {
	egress []int32 // port id each switch sends to
	next   []int32 // next switch ordinal; -1 delivers to the destination; -2 broken
	depth  []int32 // links from the switch to the destination; 0 = broken
	state  []uint8
	stack  []int32
	order  []int32 // working switches by increasing depth
	counts []int32
}

func newTree(n int) *tree {
	return &tree{egress: make([]int32, n), next: make([]int32, n), depth: make([]int32, n),
		state: make([]uint8, n), order: make([]int32, 0, n)}
}

// build fills the tree towards dlid.
func (m *Model) buildTree(dlid uint16, t *tree) {
	dst := int32(-1)
	if int(dlid) < len(m.lidPort) {
		dst = m.lidPort[dlid]
	}
	S := len(m.Switches)
	var row []uint8
	if dst >= 0 {
		row = m.fwd[int(dlid)*S : (int(dlid)+1)*S]
	}
	for s, ni := range m.Switches {
		t.state[s] = 0
		t.next[s], t.egress[s] = -2, -1
		if row == nil {
			continue
		}
		out := row[s]
		n := &m.Nodes[ni]
		if out == ibdump.NoPort || out == 0 || int(out) > n.NumPorts {
			continue
		}
		g := n.portBase + int32(out)
		peer := m.Ports[g].Peer
		if peer < 0 {
			continue
		}
		t.egress[s] = g
		if peer == dst {
			t.next[s] = -1
			continue
		}
		pn := &m.Nodes[m.Ports[peer].Node]
		if pn.Kind == KindSwitch {
			t.next[s] = pn.sw
		}
	}
	maxDepth := int32(0)
	for s := range m.Switches {
		if t.state[s] != 0 {
			continue
		}
		t.stack = t.stack[:0]
		cur := int32(s)
		for t.state[cur] == 0 && t.next[cur] >= 0 {
			t.state[cur] = 1
			t.stack = append(t.stack, cur)
			cur = t.next[cur]
		}
		dead := false
		switch {
		case t.state[cur] == 1:
			dead = true // a loop
		case t.state[cur] == 0:
			t.state[cur] = 2
			if t.next[cur] == -1 {
				t.depth[cur] = 1
			} else {
				t.depth[cur] = 0
			}
		}
		for i := len(t.stack) - 1; i >= 0; i-- {
			x := t.stack[i]
			t.state[x] = 2
			if dead || t.depth[t.next[x]] == 0 {
				t.depth[x] = 0
				continue
			}
			t.depth[x] = t.depth[t.next[x]] + 1
		}
		if !dead && t.depth[cur] > maxDepth {
			maxDepth = t.depth[cur]
		}
	}
	for s := range m.Switches {
		if t.depth[s] > maxDepth {
			maxDepth = t.depth[s]
		}
	}
	// counting sort of working switches by depth
	if cap(t.counts) < int(maxDepth)+2 {
		t.counts = make([]int32, maxDepth+2)
	}
	c := t.counts[:maxDepth+2]
	for i := range c {
		c[i] = 0
	}
	n := 0
	for s := range m.Switches {
		if d := t.depth[s]; d > 0 {
			c[d+1]++
			n++
		}
	}
	for i := 1; i < len(c); i++ {
		c[i] += c[i-1]
	}
	t.order = t.order[:n]
	for s := range m.Switches {
		if d := t.depth[s]; d > 0 {
			t.order[c[d]] = int32(s)
			c[d]++
		}
	}
}

// Analysis holds the link loads and route weights of every host-to-host
// route (each ordered pair of endpoints on different hosts, each LID of the
// destination's LMC range: both directions are separate routes).
type Analysis struct {
	// Load[p] is the number of routes leaving through port id p (the
	// direction p -> its peer). The reverse direction is Load[peer].
	Load []int64
	// Routes counts working routes; Broken the routes the LFTs do not deliver.
	Routes, Broken int64
	// Route weight (sum of the loads of a route's links) statistics.
	WeightSum            int64
	WeightMin, WeightMax int64
	// HopCount[n] counts routes of n links.
	HopCount []int64
	// Per endpoint: sum of the weights of its routes out and in, and the
	// number of those routes.
	OutWeight, InWeight []int64
	OutRoutes, InRoutes []int64
	// Heaviest routes, heaviest first.
	Heaviest []RouteWeight
}

// RouteWeight names one route and its weight.
type RouteWeight struct {
	Src    int32 // endpoint
	Dst    int32 // endpoint
	DLID   uint16
	Weight int64
	Links  int
}

// AnalyzeOptions tunes Analyze.
type AnalyzeOptions struct {
	// TopRoutes is how many heaviest routes to keep (default 20).
	TopRoutes int
	// Workers bounds parallelism (default GOMAXPROCS).
	Workers int
}

// Analyze computes link loads for every route in both directions, then
// every route's weight, one destination tree at a time.
// The result is computed once per model and shared; do not modify it.
func (m *Model) Analyze(ctx context.Context) (*Analysis, error) {
	m.anMu.Lock()
	defer m.anMu.Unlock()
	if m.an != nil {
		return m.an, nil
	}
	a, err := m.AnalyzeWith(ctx, AnalyzeOptions{})
	if err != nil {
		return nil, err
	}
	m.an = a
	return a, nil
}

type destLID struct {
	ep  int32
	lid uint16
}

func (m *Model) destLIDs() []destLID {
	var ds []destLID
	for e, ep := range m.Endpoints {
		p := m.Ports[ep.Port]
		for i := 0; i < 1<<p.LMC; i++ {
			ds = append(ds, destLID{int32(e), p.LID + uint16(i)})
		}
	}
	return ds
}

// AnalyzeWith is Analyze with options.
func (m *Model) AnalyzeWith(ctx context.Context, o AnalyzeOptions) (*Analysis, error) {
	if o.TopRoutes <= 0 {
		o.TopRoutes = 20
	}
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	S, E := len(m.Switches), len(m.Endpoints)
	attached := make([]int32, S)
	for _, l := range m.epLeaf {
		if l >= 0 {
			attached[l]++
		}
	}
	dests := m.destLIDs()
	if o.Workers > len(dests) {
		o.Workers = max(1, len(dests))
	}

	// Pass 1: loads.
	type p1 struct {
		load           []int64
		reach          []int64 // per switch: destinations it reaches
		sub            []int64 // per endpoint: own-host destinations reached
		routes, broken int64
	}
	res1 := make([]p1, o.Workers)
	err := parallel(ctx, o.Workers, len(dests), func(w, lo, hi int) error {
		r := p1{load: make([]int64, len(m.Ports)), reach: make([]int64, S), sub: make([]int64, E)}
		t := newTree(S)
		cnt := make([]int64, S)
		for i := lo; i < hi; i++ {
			if i&255 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			d := dests[i]
			m.buildTree(d.lid, t)
			for s := range cnt {
				cnt[s] = int64(attached[s])
			}
			for _, a := range m.Hosts[m.Endpoints[d.ep].Host].Endpoints {
				if l := m.epLeaf[a]; l >= 0 {
					cnt[l]--
					if t.depth[l] > 0 {
						r.sub[a]++
					}
				}
			}
			for s := range cnt {
				if t.depth[s] == 0 {
					r.broken += cnt[s]
				} else {
					r.routes += cnt[s]
					r.reach[s]++
				}
			}
			for k := len(t.order) - 1; k >= 0; k-- {
				s := t.order[k]
				c := cnt[s]
				if c == 0 {
					continue
				}
				r.load[t.egress[s]] += c
				if nx := t.next[s]; nx >= 0 {
					cnt[nx] += c
				}
			}
		}
		res1[w] = r
		return nil
	})
	if err != nil {
		return nil, err
	}
	a := &Analysis{Load: make([]int64, len(m.Ports)), OutWeight: make([]int64, E), InWeight: make([]int64, E),
		OutRoutes: make([]int64, E), InRoutes: make([]int64, E)}
	reach := make([]int64, S)
	sub := make([]int64, E)
	for _, r := range res1 {
		for i, v := range r.load {
			a.Load[i] += v
		}
		for i, v := range r.reach {
			reach[i] += v
		}
		for i, v := range r.sub {
			sub[i] += v
		}
		a.Routes += r.routes
		a.Broken += r.broken
	}
	for e, ep := range m.Endpoints {
		if l := m.epLeaf[e]; l >= 0 {
			a.Load[ep.Port] += reach[l] - sub[e]
		}
	}

	// Pass 2: weights.
	type p2 struct {
		sum, min, max      int64
		hops               []int64
		out, in, nout, nin []int64
		top                rwHeap
	}
	res2 := make([]p2, o.Workers)
	err = parallel(ctx, o.Workers, len(dests), func(w, lo, hi int) error {
		r := p2{min: -1, hops: make([]int64, S+3), out: make([]int64, E), nout: make([]int64, E),
			in: make([]int64, E), nin: make([]int64, E)}
		t := newTree(S)
		W := make([]int64, S)
		upl := make([]int64, E)
		for e, ep := range m.Endpoints {
			upl[e] = a.Load[ep.Port]
		}
		own := make([]bool, E)
		for i := lo; i < hi; i++ {
			if i&255 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			d := dests[i]
			m.buildTree(d.lid, t)
			for _, s := range t.order {
				W[s] = a.Load[t.egress[s]]
				if nx := t.next[s]; nx >= 0 {
					W[s] += W[nx]
				}
			}
			hostEPs := m.Hosts[m.Endpoints[d.ep].Host].Endpoints
			for _, x := range hostEPs {
				own[x] = true
			}
			var in, nin int64
			for src := 0; src < E; src++ {
				l := m.epLeaf[src]
				if l < 0 || own[src] || t.depth[l] == 0 {
					continue
				}
				wt := upl[src] + W[l]
				links := 1 + t.depth[l]
				r.sum += wt
				if r.min < 0 || wt < r.min {
					r.min = wt
				}
				if wt > r.max {
					r.max = wt
				}
				r.hops[links]++
				r.out[src] += wt
				r.nout[src]++
				in += wt
				nin++
				if len(r.top) < o.TopRoutes || wt >= r.top[0].Weight {
					rw := RouteWeight{Src: int32(src), Dst: d.ep, DLID: d.lid, Weight: wt, Links: int(links)}
					switch {
					case len(r.top) < o.TopRoutes:
						heap.Push(&r.top, rw)
					case rw.heavier(r.top[0]):
						r.top[0] = rw
						heap.Fix(&r.top, 0)
					}
				}
			}
			r.in[d.ep] += in
			r.nin[d.ep] += nin
			for _, x := range hostEPs {
				own[x] = false
			}
		}
		res2[w] = r
		return nil
	})
	if err != nil {
		return nil, err
	}
	a.WeightMin = -1
	var top []RouteWeight
	maxHop := 0
	for _, r := range res2 {
		a.WeightSum += r.sum
		if r.min >= 0 && (a.WeightMin < 0 || r.min < a.WeightMin) {
			a.WeightMin = r.min
		}
		a.WeightMax = max(a.WeightMax, r.max)
		if a.HopCount == nil {
			a.HopCount = make([]int64, len(r.hops))
		}
		for i, v := range r.hops {
			a.HopCount[i] += v
			if v > 0 && i > maxHop {
				maxHop = i
			}
		}
		for i := range r.out {
			a.OutWeight[i] += r.out[i]
			a.InWeight[i] += r.in[i]
			a.OutRoutes[i] += r.nout[i]
			a.InRoutes[i] += r.nin[i]
		}
		top = append(top, r.top...)
	}
	if a.WeightMin < 0 {
		a.WeightMin = 0
	}
	if a.HopCount != nil {
		a.HopCount = a.HopCount[:maxHop+1]
	}
	sort.Slice(top, func(i, j int) bool { return top[i].heavier(top[j]) })
	if len(top) > o.TopRoutes {
		top = top[:o.TopRoutes]
	}
	a.Heaviest = top
	return a, nil
}

// MeanWeight is the mean route weight.
func (a *Analysis) MeanWeight() float64 {
	if a.Routes == 0 {
		return 0
	}
	return float64(a.WeightSum) / float64(a.Routes)
}

// parallel splits [0,n) into workers contiguous ranges.
func parallel(ctx context.Context, workers, n int, fn func(w, lo, hi int) error) error {
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := 0; w < workers; w++ {
		lo, hi := n*w/workers, n*(w+1)/workers
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[w] = fn(w, lo, hi)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return ctx.Err()
}

// heavier orders the heaviest routes: by weight, heaviest first, ties by
// source endpoint, then by destination LID (a source and a destination LID
// name one route, so the order is total). The per-worker heaps and the
// final sort of Analysis.Heaviest both use it, so the list is the same for
// any number of workers.
func (r RouteWeight) heavier(o RouteWeight) bool {
	if r.Weight != o.Weight {
		return r.Weight > o.Weight
	}
	if r.Src != o.Src {
		return r.Src < o.Src
	}
	return r.DLID < o.DLID
}

// rwHeap is a min-heap of route weights: on top the kept route that comes
// last in the heavier order, the one a heavier route replaces.
type rwHeap []RouteWeight

func (h rwHeap) Len() int           { return len(h) }
func (h rwHeap) Less(i, j int) bool { return h[j].heavier(h[i]) }
func (h rwHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *rwHeap) Push(x any)        { *h = append(*h, x.(RouteWeight)) }
func (h *rwHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// LinkLoad is the load of one cable in one direction.
type LinkLoad struct {
	From PortRef `json:"from"`
	To   PortRef `json:"to"`
	Load int64   `json:"load"`
	// Kind: "switch" (switch to switch), "up" (HCA to switch), "down" (switch to HCA).
	Kind string `json:"kind"`
	port int32
}

// Links lists every cabled direction with its load, heaviest first.
func (a *Analysis) Links(m *Model) []LinkLoad {
	var out []LinkLoad
	for p, pt := range m.Ports {
		if pt.Peer < 0 {
			continue
		}
		k := "switch"
		switch {
		case m.Nodes[pt.Node].Kind != KindSwitch:
			k = "up"
		case m.Nodes[m.Ports[pt.Peer].Node].Kind != KindSwitch:
			k = "down"
		}
		out = append(out, LinkLoad{From: m.Ref(int32(p)), To: m.Ref(pt.Peer), Load: a.Load[p], Kind: k, port: int32(p)})
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Load != out[j].Load {
			return out[i].Load > out[j].Load
		}
		return out[i].port < out[j].port
	})
	return out
}
