// Package fabric models an InfiniBand fabric from the dumps its subnet
// manager writes and answers the questions storage placement needs: which
// links every host-to-host route crosses (in both directions), how loaded
// each link is, how heavy each route is, which k hosts overlap least, and
// what changed between two sets of dumps.
//
// Routes are read, not probed: every switch's linear forwarding table (LFT)
// from opensm-lfts.dump (or dump_fts/ibroute output) is followed from the
// source HCA port to the destination LID. Because a switch forwards on the
// destination LID only, all routes to one destination form a tree, so link
// loads and route weights are computed per destination in
// O(destinations × (switches + endpoints)) time with memory bounded by the
// size of the LFTs, never by the number of routes.
//
// The typical use is
//
//	m, err := fabric.Load(ctx, "/var/log")          // a directory of OpenSM dumps
//	a, err := m.Analyze(ctx)                        // link loads, route weights
//	sel, err := m.SelectWith(ctx, fabric.SelectRequest{K: 4, Candidates: hosts})
package fabric

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/slipstream-io/slipstream/internal/fabric/ibdump"
)

// Sentinel errors; test with errors.Is.
var (
	// ErrNotFound: a host, port or LID the caller named is not in the fabric.
	ErrNotFound = errors.New("fabric: not found")
	// ErrTopology: the dumps contradict each other (a switch in the LFTs is
	// missing from the topology, a cable is described differently from its
	// two ends, ...).
	ErrTopology = errors.New("fabric: inconsistent dumps")
	// ErrNoDumps: a directory or file list holds no usable dump.
	ErrNoDumps = errors.New("fabric: no usable dump files")
	// ErrSyntax is the parsers' syntax error (ibdump.ErrSyntax).
	ErrSyntax = ibdump.ErrSyntax
)

// NodeKind says what a node is.
type NodeKind uint8

// Node kinds.
const (
	KindSwitch NodeKind = iota + 1
	KindCA
	KindRouter
)

func (k NodeKind) String() string {
	switch k {
	case KindSwitch:
		return "switch"
	case KindCA:
		return "ca"
	case KindRouter:
		return "router"
	}
	return "unknown"
}

// Node is a switch, HCA or router.
type Node struct {
	GUID     uint64
	Kind     NodeKind
	Desc     string
	Host     string // HCAs: the first word of Desc (the host name)
	NumPorts int
	LID      uint16 // switches: the LID of port 0
	portBase int32  // Model.Ports index of port 0
	sw       int32  // switch ordinal, -1 for other nodes
}

// Port is one port of a node; Model.Ports holds every port of every node,
// indexed by a port id (node's port 0 id + port number).
type Port struct {
	Node int32  // index into Model.Nodes
	Num  uint8  // port number
	GUID uint64 // port GUID (switch ports: the node GUID)
	LID  uint16 // base LID (HCA ports; switch port 0)
	LMC  uint8
	Peer int32 // port id of the other end of the cable, -1 if none
}

// Endpoint is an HCA port with a LID: a source and destination of routes.
type Endpoint struct {
	Port int32 // port id
	Host int32 // index into Model.Hosts
}

// Host groups the endpoints of one machine (the first word of the node
// description of its HCAs).
type Host struct {
	Name      string
	Endpoints []int32 // indices into Model.Endpoints
}

// EngineInfo says which routing engine OpenSM was asked for and which one
// really routed (ftree silently falls back to minhop on a broken fat tree),
// as of the last SM start and the last sweep the logs show.
type EngineInfo struct {
	// Requested: the configured engines (opensm.out's "Activate" line);
	// without opensm.out, the engines osm.log shows failing.
	Requested []string `json:"requested,omitempty"`
	// Used configured the switches in the last sweep.
	Used string `json:"used,omitempty"`
	// Failed lists the engines that failed in that sweep before Used
	// configured the switches ("ftree: cannot build lid matrices").
	Failed []string `json:"failed,omitempty"`
	// NotFatTree: ftree rejected the topology in that sweep (ERR AB0D).
	NotFatTree bool `json:"not_fat_tree,omitempty"`
	// Fallback: Used was not requested, or another engine failed first.
	Fallback bool `json:"fallback"`
}

// Model is a fabric: nodes, ports, cables, hosts and the switches' LFTs. It
// is read-only after Load and safe for concurrent use.
type Model struct {
	Nodes     []Node
	Ports     []Port
	Endpoints []Endpoint
	Hosts     []Host
	Switches  []int32 // node index of each switch ordinal
	Engine    EngineInfo
	Files     []string // the files the model was read from

	lft [][]uint8 // by switch ordinal: out port per LID
	// fwd is lft transposed for the LIDs of the topology: fwd[lid*S+s] is
	// the port switch s forwards lid to, so one destination's tree reads
	// one contiguous row.
	fwd        []uint8
	lidPort    []int32 // LID -> port id owning it (LMC ranges expanded), -1
	lidEP      []int32 // LID -> endpoint index, -1
	nodeByGUID map[uint64]int32
	portByGUID map[uint64]int32
	hostByName map[string]int32

	// per endpoint: the switch ordinal its cable leads to (-1 if none)
	// and its own port id as the egress of its first hop.
	epLeaf []int32
	// core[p] is true when port p and its peer are both switch ports.
	core []bool

	anMu sync.Mutex
	an   *Analysis // cached by Analyze
}

// PortRef names a port for people and JSON.
type PortRef struct {
	GUID string `json:"guid"`
	Port int    `json:"port"`
	Desc string `json:"desc"`
}

// Ref describes port id p.
func (m *Model) Ref(p int32) PortRef {
	if p < 0 || int(p) >= len(m.Ports) {
		return PortRef{}
	}
	pt := m.Ports[p]
	n := m.Nodes[pt.Node]
	return PortRef{GUID: fmtGUID(n.GUID), Port: int(pt.Num), Desc: n.Desc}
}

func fmtGUID(g uint64) string { return fmt.Sprintf("0x%016x", g) }

// Summary is a short description of the model.
type Summary struct {
	Switches  int        `json:"switches"`
	CAs       int        `json:"cas"`
	Hosts     int        `json:"hosts"`
	Endpoints int        `json:"endpoints"`
	LIDs      int        `json:"lids"`
	Cables    int        `json:"cables"`
	MaxLMC    int        `json:"max_lmc"`
	MultiPort int        `json:"multi_port_hosts"`
	Engine    EngineInfo `json:"engine"`
	Files     []string   `json:"files"`
}

// Summary counts what the model holds.
func (m *Model) Summary() Summary {
	s := Summary{Switches: len(m.Switches), Hosts: len(m.Hosts), Endpoints: len(m.Endpoints), Engine: m.Engine, Files: m.Files}
	for _, n := range m.Nodes {
		if n.Kind == KindCA {
			s.CAs++
		}
	}
	for _, l := range m.lidPort {
		if l >= 0 {
			s.LIDs++
		}
	}
	for i, p := range m.Ports {
		if p.Peer > int32(i) {
			s.Cables++
		}
		if int(p.LMC) > s.MaxLMC {
			s.MaxLMC = int(p.LMC)
		}
	}
	for _, h := range m.Hosts {
		if len(h.Endpoints) > 1 {
			s.MultiPort++
		}
	}
	return s
}

// EndpointName is "host/desc-suffix/port", e.g. "node0001/mlx5_1/1".
func (m *Model) EndpointName(e int32) string {
	pt := m.Ports[m.Endpoints[e].Port]
	n := m.Nodes[pt.Node]
	hca := strings.TrimSpace(strings.TrimPrefix(n.Desc, n.Host))
	if hca == "" {
		hca = fmtGUID(n.GUID)
	}
	return fmt.Sprintf("%s/%s/%d", n.Host, hca, pt.Num)
}

// HostNames lists the hosts in name order.
func (m *Model) HostNames() []string {
	out := make([]string, len(m.Hosts))
	for i, h := range m.Hosts {
		out[i] = h.Name
	}
	return out
}

// resolveEndpoints turns a name into endpoints: a host name (all its
// endpoints), an endpoint name (host/hca/port), a LID (decimal or 0x hex) or
// a port GUID (see isGUID).
func (m *Model) resolveEndpoints(name string) ([]int32, error) {
	if h, ok := m.hostByName[name]; ok {
		return m.Hosts[h].Endpoints, nil
	}
	if strings.Contains(name, "/") {
		host := name[:strings.Index(name, "/")]
		if h, ok := m.hostByName[host]; ok {
			for _, e := range m.Hosts[h].Endpoints {
				en := m.EndpointName(e)
				if en == name || strings.HasPrefix(en, name+"/") {
					return []int32{e}, nil
				}
			}
		}
		return nil, fmt.Errorf("%w: endpoint %q", ErrNotFound, name)
	}
	if digits, ok := isGUID(name); ok {
		g, err := strconv.ParseUint(digits, 16, 64)
		if err == nil {
			if p, ok := m.portByGUID[g]; ok {
				for i, ep := range m.Endpoints {
					if ep.Port == p {
						return []int32{int32(i)}, nil
					}
				}
			}
		}
		return nil, fmt.Errorf("%w: port GUID %q", ErrNotFound, name)
	}
	if l, err := parseLID(name); err == nil {
		if int(l) < len(m.lidEP) && m.lidEP[l] >= 0 {
			return []int32{m.lidEP[l]}, nil
		}
		return nil, fmt.Errorf("%w: LID %s", ErrNotFound, name)
	}
	return nil, fmt.Errorf("%w: host %q", ErrNotFound, name)
}

// isGUID tells a GUID from a LID and returns its hex digits: more than 8
// hex digits after 0x ("0x0002c90400000011"), or 6 to 16 hex digits
// without a prefix, as opensm-subnet.lst ("PortGUID:0002c90400000011") and
// ibnetdiscover ("(2c90400000011)") print them; a LID has at most 5
// decimal digits or 4 hex digits.
func isGUID(name string) (string, bool) {
	digits, prefixed := strings.CutPrefix(strings.ToLower(name), "0x")
	if prefixed {
		return digits, len(digits) > 8
	}
	if len(digits) < 6 || len(digits) > 16 {
		return "", false
	}
	for _, c := range digits {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return "", false
		}
	}
	return digits, true
}

// parseLID reads a LID as decimal ("8", also zero-padded: "0008") or as
// hex with a 0x prefix ("0x8"). (opensm-subnet.lst prints LIDs as four
// hex digits without 0x: its "LID:0010" is LID 16, "0x0010" here.)
func parseLID(s string) (uint64, error) {
	if h, ok := strings.CutPrefix(strings.ToLower(s), "0x"); ok {
		return strconv.ParseUint(h, 16, 16)
	}
	return strconv.ParseUint(s, 10, 16)
}

// hostIndexes resolves host names; an empty list means every host.
func (m *Model) hostIndexes(names []string) ([]int32, error) {
	if len(names) == 0 {
		out := make([]int32, len(m.Hosts))
		for i := range out {
			out[i] = int32(i)
		}
		return out, nil
	}
	seen := make(map[int32]bool, len(names))
	out := make([]int32, 0, len(names))
	for _, n := range names {
		h, ok := m.hostByName[n]
		if !ok {
			return nil, fmt.Errorf("%w: host %q", ErrNotFound, n)
		}
		if !seen[h] {
			seen[h] = true
			out = append(out, h)
		}
	}
	return out, nil
}

func sortedKeys[K ~string, V any](mp map[K]V) []K {
	out := make([]K, 0, len(mp))
	for k := range mp {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// PortID is the Ports index of port num of node.
func (m *Model) PortID(node int32, num int) int32 { return m.Nodes[node].portBase + int32(num) }

// setLFT changes one forwarding entry (both layouts).
func (m *Model) setLFT(s int32, lid uint16, port uint8) {
	m.lft[s][lid] = port
	if int(lid) < len(m.lidPort) {
		m.fwd[int(lid)*len(m.Switches)+int(s)] = port
	}
	m.an = nil
}
