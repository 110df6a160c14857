package fabric

import (
	"fmt"

	"github.com/slipstream-io/slipstream/internal/fabric/ibdump"
)

// Route failure reasons.
const (
	reasonOK          = ""
	reasonNoEntry     = "no LFT entry"
	reasonLoop        = "forwarding loop"
	reasonDeadPort    = "LFT points to an unconnected port"
	reasonWrongCA     = "LFT delivers to another HCA"
	reasonNotAttached = "source port is not cabled to a switch"
)

// walk follows the LFTs from endpoint src to dlid and calls fn with the
// egress port id of every link crossed, the source's own port first. It
// returns "" on success or why the route is broken.
func (m *Model) walk(src int32, dlid uint16, fn func(egress int32)) string {
	p := m.Endpoints[src].Port
	dst := int32(-1)
	if int(dlid) < len(m.lidPort) {
		dst = m.lidPort[dlid]
	}
	if dst < 0 {
		return fmt.Sprintf("LID %#x is not assigned", dlid)
	}
	for hops := 0; hops <= len(m.Switches)+1; hops++ {
		peer := m.Ports[p].Peer
		if peer < 0 {
			if hops == 0 {
				return reasonNotAttached
			}
			return reasonDeadPort
		}
		if fn != nil {
			fn(p)
		}
		if peer == dst {
			return reasonOK
		}
		n := m.Nodes[m.Ports[peer].Node]
		if n.Kind != KindSwitch {
			return reasonWrongCA
		}
		t := m.lft[n.sw]
		if int(dlid) >= len(t) || t[dlid] == ibdump.NoPort {
			return reasonNoEntry
		}
		out := int(t[dlid])
		if out == 0 || out > n.NumPorts {
			return reasonDeadPort
		}
		p = n.portBase + int32(out)
	}
	return reasonLoop
}

// Hop is one link of a route, in the direction of travel.
type Hop struct {
	From PortRef `json:"from"`
	To   PortRef `json:"to"`
	// Load is the number of host-to-host routes leaving through From
	// (filled when the model has been analyzed).
	Load int64 `json:"load"`
}

// Route is the path from one endpoint to one destination LID.
type Route struct {
	Src    string `json:"src"`
	Dst    string `json:"dst"`
	SrcLID uint16 `json:"src_lid"`
	DstLID uint16 `json:"dst_lid"`
	Hops   []Hop  `json:"hops"`
	// Weight is the sum of the loads of the route's links (0 without an analysis).
	Weight int64  `json:"weight"`
	Broken string `json:"broken,omitempty"`
}

// Routes returns every route from a to b: one per pair of their endpoints
// and per destination LID of b's LMC range. a and b are host names, endpoint
// names (host/hca/port), LIDs or port GUIDs. an may be nil; with an analysis
// the hops carry link loads and the routes their weights.
func (m *Model) Routes(a, b string, an *Analysis) ([]Route, error) {
	as, err := m.resolveEndpoints(a)
	if err != nil {
		return nil, err
	}
	bs, err := m.resolveEndpoints(b)
	if err != nil {
		return nil, err
	}
	var out []Route
	for _, s := range as {
		for _, d := range bs {
			if s == d {
				continue
			}
			dp := m.Ports[m.Endpoints[d].Port]
			for i := 0; i < 1<<dp.LMC; i++ {
				dlid := dp.LID + uint16(i)
				r := Route{Src: m.EndpointName(s), Dst: m.EndpointName(d), SrcLID: m.Ports[m.Endpoints[s].Port].LID, DstLID: dlid}
				r.Broken = m.walk(s, dlid, func(e int32) {
					h := Hop{From: m.Ref(e), To: m.Ref(m.Ports[e].Peer)}
					if an != nil {
						h.Load = an.Load[e]
						r.Weight += h.Load
					}
					r.Hops = append(r.Hops, h)
				})
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// RouteLinks appends the egress port ids of the route from endpoint src to
// dlid to buf. ok is false for a broken route.
func (m *Model) RouteLinks(src int32, dlid uint16, buf []int32) ([]int32, bool) {
	reason := m.walk(src, dlid, func(e int32) { buf = append(buf, e) })
	return buf, reason == reasonOK
}
