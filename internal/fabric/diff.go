package fabric

import (
	"context"
	"sort"
)

// Diff is what changed between two models of the same fabric (matched by
// GUIDs, so LIDs may differ).
type Diff struct {
	OldEngine EngineInfo `json:"old_engine"`
	NewEngine EngineInfo `json:"new_engine"`
	// Routes compared (ordered endpoint pairs on different hosts present in
	// both, per LID of the LMC range) and how many differ in any link.
	Routes  int64 `json:"routes"`
	Changed int64 `json:"changed"`
	// Broken routes (no delivery) in each model.
	OldBroken int64 `json:"old_broken"`
	NewBroken int64 `json:"new_broken"`
	// Cables present in only one model.
	CablesDown []Cable `json:"cables_down"`
	CablesUp   []Cable `json:"cables_up"`
	// Endpoints present in only one model.
	EndpointsGone  []string `json:"endpoints_gone,omitempty"`
	EndpointsAdded []string `json:"endpoints_added,omitempty"`
	// Links whose load changed, largest change first (only when loads
	// were computed).
	LoadChanges []LoadChange `json:"load_changes,omitempty"`
	// ChangedBySource counts changed routes per source host (top entries).
	ChangedBySource map[string]int64 `json:"changed_by_source,omitempty"`
}

// Cable is one physical link.
type Cable struct {
	A PortRef `json:"a"`
	B PortRef `json:"b"`
}

// LoadChange is the load of one link direction before and after.
type LoadChange struct {
	From PortRef `json:"from"`
	To   PortRef `json:"to"`
	Old  int64   `json:"old"`
	New  int64   `json:"new"`
}

// DiffOptions tunes Compare.
type DiffOptions struct {
	// Loads also compares link loads (runs Analyze on both models).
	Loads bool
	// TopLoads bounds LoadChanges (default 50; negative = all).
	TopLoads int
}

// Compare reports the route, cable and load changes from old to new.
// Routes are compared without storing them: per destination, a switch's
// path is unchanged when it forwards through the same port in both models,
// that port is still cabled to the same peer port, and the next switch is
// the same with an unchanged path (or both deliver to the destination).
func Compare(ctx context.Context, old, cur *Model, o DiffOptions) (*Diff, error) {
	if o.TopLoads == 0 {
		o.TopLoads = 50
	}
	d := &Diff{OldEngine: old.Engine, NewEngine: cur.Engine, ChangedBySource: map[string]int64{}}
	// port map old -> new by (node GUID, port number)
	pmap := make([]int32, len(old.Ports))
	for i, p := range old.Ports {
		pmap[i] = -1
		if ni, ok := cur.nodeByGUID[old.Nodes[p.Node].GUID]; ok {
			n := cur.Nodes[ni]
			if int(p.Num) <= n.NumPorts {
				pmap[i] = n.portBase + int32(p.Num)
			}
		}
	}
	swmap := make([]int32, len(old.Switches))
	for s, ni := range old.Switches {
		swmap[s] = -1
		if nj, ok := cur.nodeByGUID[old.Nodes[ni].GUID]; ok && cur.Nodes[nj].Kind == KindSwitch {
			swmap[s] = cur.Nodes[nj].sw
		}
	}
	// cables
	for i, p := range old.Ports {
		if p.Peer < int32(i) {
			continue
		}
		a, b := pmap[i], pmap[p.Peer]
		if a < 0 || b < 0 || cur.Ports[a].Peer != b {
			d.CablesDown = append(d.CablesDown, Cable{old.Ref(int32(i)), old.Ref(p.Peer)})
		}
	}
	rev := make([]int32, len(cur.Ports))
	for i := range rev {
		rev[i] = -1
	}
	for i, v := range pmap {
		if v >= 0 {
			rev[v] = int32(i)
		}
	}
	for i, p := range cur.Ports {
		if p.Peer < int32(i) {
			continue
		}
		a, b := rev[i], rev[p.Peer]
		if a < 0 || b < 0 || old.Ports[a].Peer != b {
			d.CablesUp = append(d.CablesUp, Cable{cur.Ref(int32(i)), cur.Ref(p.Peer)})
		}
	}
	// endpoints
	epmap := make([]int32, len(old.Endpoints))
	curEP := make(map[int32]int32, len(cur.Endpoints))
	for e, ep := range cur.Endpoints {
		curEP[ep.Port] = int32(e)
	}
	seen := make([]bool, len(cur.Endpoints))
	for e, ep := range old.Endpoints {
		epmap[e] = -1
		if np := pmap[ep.Port]; np >= 0 {
			if ne, ok := curEP[np]; ok {
				epmap[e] = ne
				seen[ne] = true
				continue
			}
		}
		d.EndpointsGone = append(d.EndpointsGone, old.EndpointName(int32(e)))
	}
	for e, s := range seen {
		if !s {
			d.EndpointsAdded = append(d.EndpointsAdded, cur.EndpointName(int32(e)))
		}
	}
	// routes, per destination
	to, tn := newTree(len(old.Switches)), newTree(len(cur.Switches))
	same := make([]bool, len(old.Switches))
	bySrc := make([]int64, len(old.Hosts))
	for de, dep := range old.Endpoints {
		if de&255 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		ne := epmap[de]
		if ne < 0 {
			continue
		}
		op, np := old.Ports[dep.Port], cur.Ports[cur.Endpoints[ne].Port]
		nl := min(1<<op.LMC, 1<<np.LMC)
		for i := 0; i < nl; i++ {
			old.buildTree(op.LID+uint16(i), to)
			cur.buildTree(np.LID+uint16(i), tn)
			// broken switches first (depth 0), then by increasing depth
			for s := range old.Switches {
				if to.depth[s] == 0 {
					ns := swmap[s]
					same[s] = ns >= 0 && tn.depth[ns] == 0
				}
			}
			for _, s := range to.order {
				ns := swmap[s]
				ok := ns >= 0 && tn.depth[ns] > 0
				if ok {
					// same port, still cabled to the same peer port
					oe, ne := to.egress[s], tn.egress[ns]
					ok = pmap[oe] == ne && old.Ports[oe].Peer >= 0 && pmap[old.Ports[oe].Peer] == cur.Ports[ne].Peer
				}
				if ok {
					// the same next switch (or both deliver) with an
					// unchanged path from there
					switch nx, nn := to.next[s], tn.next[ns]; {
					case nx >= 0:
						ok = nn >= 0 && swmap[nx] == nn && same[nx] && to.depth[nx] > 0
					default:
						ok = nn < 0
					}
				}
				same[s] = ok
			}
			dh := dep.Host
			for se, sep := range old.Endpoints {
				if sep.Host == dh || epmap[se] < 0 || cur.Endpoints[epmap[se]].Host == cur.Endpoints[ne].Host {
					continue
				}
				ol, nl2 := old.epLeaf[se], cur.epLeaf[epmap[se]]
				d.Routes++
				ob := ol < 0 || to.depth[ol] == 0
				nb := nl2 < 0 || tn.depth[nl2] == 0
				if ob {
					d.OldBroken++
				}
				if nb {
					d.NewBroken++
				}
				unchanged := false
				switch {
				case ob && nb:
					unchanged = true
				case !ob && !nb:
					unchanged = swmap[ol] == nl2 && pmap[sep.Port] >= 0 && cur.Ports[pmap[sep.Port]].Peer == pmap[old.Ports[sep.Port].Peer] && same[ol]
				}
				if !unchanged {
					d.Changed++
					bySrc[sep.Host]++
				}
			}
		}
	}
	type hc struct {
		h string
		n int64
	}
	var hcs []hc
	for h, n := range bySrc {
		if n > 0 {
			hcs = append(hcs, hc{old.Hosts[h].Name, n})
		}
	}
	sort.Slice(hcs, func(i, j int) bool {
		if hcs[i].n != hcs[j].n {
			return hcs[i].n > hcs[j].n
		}
		return hcs[i].h < hcs[j].h
	})
	for i, x := range hcs {
		if i >= 20 {
			break
		}
		d.ChangedBySource[x.h] = x.n
	}
	if o.Loads {
		oa, err := old.Analyze(ctx)
		if err != nil {
			return nil, err
		}
		na, err := cur.Analyze(ctx)
		if err != nil {
			return nil, err
		}
		for i, p := range old.Ports {
			if p.Peer < 0 {
				continue
			}
			nv := int64(0)
			np := pmap[i]
			if np >= 0 {
				nv = na.Load[np]
			}
			if nv != oa.Load[i] {
				d.LoadChanges = append(d.LoadChanges, LoadChange{From: old.Ref(int32(i)), To: old.Ref(p.Peer), Old: oa.Load[i], New: nv})
			}
		}
		for i, p := range cur.Ports {
			if p.Peer >= 0 && rev[i] < 0 && na.Load[i] != 0 {
				d.LoadChanges = append(d.LoadChanges, LoadChange{From: cur.Ref(int32(i)), To: cur.Ref(p.Peer), New: na.Load[i]})
			}
		}
		sort.SliceStable(d.LoadChanges, func(i, j int) bool {
			return abs(d.LoadChanges[i].New-d.LoadChanges[i].Old) > abs(d.LoadChanges[j].New-d.LoadChanges[j].Old)
		})
		if o.TopLoads > 0 && len(d.LoadChanges) > o.TopLoads {
			d.LoadChanges = d.LoadChanges[:o.TopLoads]
		}
	}
	return d, nil
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
