package fabric

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/slipstream-io/slipstream/internal/fabric/ibdump"
)

// File kinds recognised in a dump directory or file list.
const (
	FileLFTs          = "opensm-lfts.dump"
	FileDumpFTS       = "dump_fts.out"
	FileSubnet        = "opensm-subnet.lst"
	FileIBNetDiscover = "ibnetdiscover.out"
	FileGUID2LID      = "guid2lid"
	FileNeighbors     = "neighbors"
	FileOSMLog        = "osm.log"
	FileOpenSMOut     = "opensm.out"
	FileFDBs          = "opensm.fdbs"
	FileLIDMatrix     = "opensm-lid-matrix.dump"
)

var knownFiles = []string{FileLFTs, FileDumpFTS, FileSubnet, FileIBNetDiscover, FileGUID2LID,
	FileNeighbors, FileOSMLog, FileOpenSMOut, FileFDBs, FileLIDMatrix}

// Files maps a file kind (one of the File* names) to a path.
type Files map[string]string

// FindFiles lists the dump files of a directory as OpenSM writes them
// (each optionally gzipped: name.gz).
func FindFiles(dir string) (Files, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a directory", ErrNoDumps, dir)
	}
	fs := Files{}
	for _, k := range knownFiles {
		for _, name := range []string{k, k + ".gz"} {
			p := filepath.Join(dir, name)
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
				fs[k] = p
				break
			}
		}
	}
	if fs[FileLFTs] == "" && fs[FileDumpFTS] == "" {
		return nil, fmt.Errorf("%w: no %s or %s in %s", ErrNoDumps, FileLFTs, FileDumpFTS, dir)
	}
	return fs, nil
}

// ClassifyFiles assigns explicit paths to file kinds, by name first
// (ignoring .gz and a directory part) and by content otherwise.
func ClassifyFiles(paths []string) (Files, error) {
	fs := Files{}
	for _, p := range paths {
		base := strings.TrimSuffix(filepath.Base(p), ".gz")
		kind := ""
		for _, k := range knownFiles {
			if base == k {
				kind = k
			}
		}
		if kind == "" {
			k, err := sniff(p)
			if err != nil {
				return nil, err
			}
			kind = k
		}
		if kind == "" {
			return nil, fmt.Errorf("%w: cannot tell what %s is", ErrNoDumps, p)
		}
		if old, dup := fs[kind]; dup {
			return nil, fmt.Errorf("%w: %s and %s are both %s", ErrNoDumps, old, p, kind)
		}
		fs[kind] = p
	}
	if fs[FileLFTs] == "" && fs[FileDumpFTS] == "" {
		return nil, fmt.Errorf("%w: need an LFT dump (opensm-lfts.dump or dump_fts output)", ErrNoDumps)
	}
	return fs, nil
}

// sniff guesses a file's kind from its first non-blank lines.
func sniff(path string) (string, error) {
	r, err := ibdump.Open(path)
	if err != nil {
		return "", err
	}
	defer r.Close()
	sc := bufio.NewScanner(io.LimitReader(r, 64<<10))
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	for n := 0; sc.Scan() && n < 20; n++ {
		t := strings.TrimSpace(sc.Text())
		switch {
		case t == "" || t == "#":
			continue
		case strings.HasPrefix(t, "Unicast lids [") && strings.Contains(t, "('"):
			return FileLFTs, nil // OpenSM quotes the description
		case strings.HasPrefix(t, "Unicast lids ["):
			return FileDumpFTS, nil // dump_fts / ibroute
		case strings.HasPrefix(t, "{ "):
			return FileSubnet, nil
		case strings.HasPrefix(t, "# Topology file") || strings.HasPrefix(t, "vendid=") || strings.HasPrefix(t, "switchguid="):
			return FileIBNetDiscover, nil
		case strings.HasPrefix(t, "dump_ucast_routes"):
			return FileFDBs, nil
		case strings.HasPrefix(t, "Switch: guid"):
			return FileLIDMatrix, nil
		case strings.Contains(t, "OpenSM") && strings.Contains(t, " -> "):
			return FileOSMLog, nil
		case strings.HasPrefix(t, "0x") && strings.Contains(t, ":"):
			return FileNeighbors, nil
		case strings.HasPrefix(t, "0x") && len(strings.Fields(t)) == 3:
			return FileGUID2LID, nil
		case strings.HasPrefix(t, "---") || strings.HasPrefix(t, "OpenSM"):
			return FileOpenSMOut, nil
		}
		return "", nil
	}
	return "", sc.Err()
}

// Load reads the OpenSM dumps of a directory (see FindFiles) into a Model.
func Load(ctx context.Context, dir string) (*Model, error) {
	fs, err := FindFiles(dir)
	if err != nil {
		return nil, err
	}
	return LoadFiles(ctx, fs)
}

// LoadPaths loads from a directory (one path) or from explicit files.
func LoadPaths(ctx context.Context, paths []string) (*Model, error) {
	if len(paths) == 1 {
		if st, err := os.Stat(paths[0]); err == nil && st.IsDir() {
			return Load(ctx, paths[0])
		}
	}
	fs, err := ClassifyFiles(paths)
	if err != nil {
		return nil, err
	}
	return LoadFiles(ctx, fs)
}

// LoadFiles builds a Model from the given files. It needs an LFT dump and a
// topology: opensm-subnet.lst, ibnetdiscover output, or neighbors (then
// node descriptions come from the LFT comments). guid2lid adds LMC ranges;
// osm.log and opensm.out tell which routing engine ran.
func LoadFiles(ctx context.Context, fs Files) (*Model, error) {
	return loadFiles(ctx, fs, nil)
}

// opener opens a file for reading (ibdump.Open, or in-memory files in tests).
type opener func(path string) (io.ReadCloser, error)

// loadFiles reads through open (nil: files on disk, ibdump.Open).
func loadFiles(ctx context.Context, fs Files, open opener) (*Model, error) {
	withFile := func(path string, fn func(r io.Reader, name string) error) error {
		if open == nil {
			return withFileFrom(ibdump.Open, path, fn)
		}
		return withFileFrom(open, path, fn)
	}
	b := newBuilder()
	b.topoPath = fs[FileSubnet]
	if b.topoPath == "" {
		b.topoPath = fs[FileIBNetDiscover]
	}
	if b.topoPath == "" {
		b.topoPath = fs[FileNeighbors]
	}
	lftPath := fs[FileLFTs]
	if lftPath == "" {
		lftPath = fs[FileDumpFTS]
	}
	if lftPath == "" {
		return nil, fmt.Errorf("%w: need an LFT dump", ErrNoDumps)
	}
	var err error
	switch {
	case fs[FileSubnet] != "":
		err = withFile(fs[FileSubnet], func(r io.Reader, name string) error {
			return ibdump.ParseSubnetList(r, name, b.subnetLink)
		})
		b.bothEnds = true
	case fs[FileIBNetDiscover] != "":
		err = withFile(fs[FileIBNetDiscover], func(r io.Reader, name string) error {
			return ibdump.ParseIBNetDiscover(r, name, b.ibndNode)
		})
		b.bothEnds = true
	case fs[FileNeighbors] != "":
		err = withFile(fs[FileNeighbors], func(r io.Reader, name string) error {
			return ibdump.ParseNeighbors(r, name, b.neighbor)
		})
		b.fromNeighbors = true
	default:
		return nil, fmt.Errorf("%w: need a topology (%s, %s or %s)", ErrNoDumps, FileSubnet, FileIBNetDiscover, FileNeighbors)
	}
	if err != nil {
		return nil, err
	}
	if len(b.nodes) == 0 {
		// an empty (truncated, not yet written) dump is no dump
		return nil, fmt.Errorf("%w: %s describes no node", ErrNoDumps, b.topoPath)
	}
	if b.bothEnds {
		if err := b.checkBothEnds(); err != nil {
			return nil, err
		}
	}
	if p := fs[FileGUID2LID]; p != "" {
		if err := withFile(p, func(r io.Reader, name string) error {
			return ibdump.ParseGUID2LID(r, name, b.guid2lid)
		}); err != nil {
			return nil, err
		}
	}
	lfts := make(map[uint64]*ibdump.LFT)
	dests := make(map[uint16]ibdump.Dest)
	// The LFTs are kept until the model is built: with the topology's
	// LIDs known, their memory is bounded by the fabric, not by what the
	// dump's headers or stray entries claim.
	h := ibdump.LFTHandler{MaxLID: b.lidBound(), Switch: func(l *ibdump.LFT) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, dup := lfts[l.GUID]; dup {
			return &ibdump.ParseError{File: lftPath, Line: l.Line, Msg: fmt.Sprintf("switch %s listed twice", fmtGUID(l.GUID))}
		}
		lfts[l.GUID] = l
		return nil
	}}
	if b.fromNeighbors {
		h.Dest = func(d ibdump.Dest) error { dests[d.LID] = d; return nil }
	}
	parsed := false
	if h.Dest == nil && open == nil {
		ok, err := parseLFTsParallel(ctx, lftPath, parallelParseMin, runtime.GOMAXPROCS(0), h.MaxLID, h.Switch)
		if err != nil {
			return nil, err
		}
		parsed = ok
	}
	if !parsed {
		clear(lfts)
		if err := withFile(lftPath, func(r io.Reader, name string) error {
			return ibdump.ParseLFTs(r, name, h)
		}); err != nil {
			return nil, err
		}
	}
	if b.fromNeighbors {
		b.applyDests(lfts, dests)
	}
	m, err := b.build(lfts, lftPath)
	if err != nil {
		return nil, err
	}
	var logs []ibdump.SMLog
	for _, k := range []string{FileOpenSMOut, FileOSMLog} {
		p := fs[k]
		if p == "" {
			continue
		}
		if err := withFile(p, func(r io.Reader, name string) error {
			l, err := ibdump.ParseSMLog(r, name)
			logs = append(logs, l)
			return err
		}); err != nil {
			return nil, err
		}
	}
	m.Engine = engineFrom(logs)
	for _, k := range knownFiles {
		if p := fs[k]; p != "" {
			m.Files = append(m.Files, p)
		}
	}
	return m, nil
}

// engineFrom combines what opensm.out and osm.log (in that order) say about
// routing. The requested engines come from the last file that names them
// (opensm.out's "Activate" line); without one, the engines the log shows
// failing were requested (OpenSM only tries the configured ones). The
// engine used, the engines that failed before it and the fat-tree verdict
// come from the last file that shows a sweep configuring the switches. A
// fallback is an engine configuring the switches that was not requested,
// or after another engine failed in the same sweep.
func engineFrom(logs []ibdump.SMLog) EngineInfo {
	var e EngineInfo
	for _, l := range logs {
		if len(l.Requested) > 0 {
			e.Requested = l.Requested
		}
		switch {
		case l.Engine != "":
			e.Used, e.Failed, e.NotFatTree = l.Engine, l.Failed, l.NotFatTree
		case e.Used == "":
			for _, f := range l.Failed {
				if !slices.Contains(e.Failed, f) {
					e.Failed = append(e.Failed, f)
				}
			}
			e.NotFatTree = e.NotFatTree || l.NotFatTree
		}
	}
	if len(e.Requested) == 0 {
		e.Requested = slices.Clone(e.Failed)
	}
	if e.Used != "" {
		e.Fallback = len(e.Requested) > 0 && !slices.Contains(e.Requested, e.Used)
		for _, f := range e.Failed {
			if f != e.Used {
				e.Fallback = true
			}
		}
	}
	return e
}

func withFile(path string, fn func(r io.Reader, name string) error) error {
	return withFileFrom(ibdump.Open, path, fn)
}

func withFileFrom(open opener, path string, fn func(r io.Reader, name string) error) error {
	r, err := open(path)
	if err != nil {
		return err
	}
	defer r.Close()
	return fn(r, path)
}

// --- builder: collects nodes and cables from any topology source ---

// maxPorts is the highest port number a node can have (Port.Num is a
// uint8; InfiniBand nodes have at most 254 ports).
const maxPorts = 255

type bport struct {
	guid     uint64
	lid      uint16
	lmc      uint8
	peerNode uint64
	peerPort int
	linked   bool
	line     int // topology line first describing the port (0: none)
	// from is the topology line describing the port's cable from this
	// end (a subnet list line whose first end is the port, or the port's
	// line in its node's ibnetdiscover record); 0: none
	from int
}

type bnode struct {
	guid   uint64
	kind   NodeKind
	desc   string
	nports int
	lid    uint16
	ports  map[int]*bport
	// declared is the port count a subnet list line gave (-1: none yet)
	declared int
}

type builder struct {
	topoPath      string // the topology file, for error messages
	nodes         map[uint64]*bnode
	lmcByGUID     map[uint64]uint8
	lidByGUID     map[uint64]uint16
	fromNeighbors bool
	// bothEnds: the topology format describes every cable from both ends
	// (opensm-subnet.lst, ibnetdiscover), see checkBothEnds
	bothEnds bool
	// maxG2L is the highest LID of guid2lid
	maxG2L uint16
}

func newBuilder() *builder {
	return &builder{nodes: map[uint64]*bnode{},
		lmcByGUID: map[uint64]uint8{}, lidByGUID: map[uint64]uint16{}}
}

func (b *builder) node(guid uint64, kind NodeKind, desc string, nports int) *bnode {
	n := b.nodes[guid]
	if n == nil {
		n = &bnode{guid: guid, kind: kind, desc: desc, nports: nports, ports: map[int]*bport{}, declared: -1}
		b.nodes[guid] = n
	}
	if n.desc == "" {
		n.desc = desc
	}
	if nports > n.nports {
		n.nports = nports
	}
	return n
}

// at names a line of the topology file.
func (b *builder) at(line int) string {
	return fmt.Sprintf("%s:%d", b.topoPath, line)
}

func (n *bnode) port(p int) *bport {
	bp := n.ports[p]
	if bp == nil {
		bp = &bport{}
		n.ports[p] = bp
	}
	if p > n.nports {
		n.nports = p
	}
	return bp
}

func kindOf(t string) NodeKind {
	switch {
	case strings.HasPrefix(t, "SW"), t == "Switch":
		return KindSwitch
	case strings.HasPrefix(t, "RT"), t == "Rt":
		return KindRouter
	}
	return KindCA
}

// link records a cable between (a, pa) and (c, pc), checking that both
// ends agree.
func (b *builder) link(a *bnode, pa int, c *bnode, pc int, where string) error {
	x, y := a.port(pa), c.port(pc)
	for _, e := range []struct {
		p    *bport
		node uint64
		port int
	}{{x, c.guid, pc}, {y, a.guid, pa}} {
		if e.p.linked && (e.p.peerNode != e.node || e.p.peerPort != e.port) {
			return fmt.Errorf("%w: %s: port cabled to two places (%s:%d, earlier cabled to %s:%d)", ErrTopology, where, fmtGUID(e.node), e.port, fmtGUID(e.p.peerNode), e.p.peerPort)
		}
		e.p.linked, e.p.peerNode, e.p.peerPort = true, e.node, e.port
	}
	return nil
}

// subnetLink records one line of opensm-subnet.lst. Every cable appears
// twice (once from each end), and a node once per cabled port: a node or
// port described differently on two lines is an ErrTopology.
func (b *builder) subnetLink(l ibdump.SubnetLink) error {
	var ns [2]*bnode
	for i, e := range []ibdump.LinkEnd{l.A, l.B} {
		if e.NumPorts < 0 || e.NumPorts > maxPorts || e.Port < 0 || e.Port > maxPorts {
			return fmt.Errorf("%w: %s: node %s: %d ports, port %d (at most %d)", ErrTopology, b.at(l.Line), fmtGUID(e.NodeGUID), e.NumPorts, e.Port, maxPorts)
		}
		k := kindOf(e.Type)
		_, seen := b.nodes[e.NodeGUID]
		n := b.node(e.NodeGUID, k, e.Desc, e.NumPorts)
		ns[i] = n
		if err := b.agree(l.Line, n, seen, e); err != nil {
			return err
		}
		n.declared = e.NumPorts
		p := n.port(e.Port)
		if p.line == 0 {
			p.line = l.Line
		}
		if i == 0 && p.from == 0 {
			p.from = l.Line
		}
		p.guid = e.PortGUID
		if k == KindSwitch {
			n.lid = e.LID
			p0 := n.port(0)
			p0.guid, p0.lid = e.NodeGUID, e.LID
			if p0.line == 0 {
				p0.line = l.Line
			}
		} else {
			p.lid = e.LID
		}
	}
	return b.link(ns[0], l.A.Port, ns[1], l.B.Port, b.at(l.Line))
}

// agree checks a subnet list's description of a node (and the port the
// line names) against what earlier lines said.
func (b *builder) agree(line int, n *bnode, seen bool, e ibdump.LinkEnd) error {
	if !seen {
		return nil
	}
	bad := func(what string, was, now any) error {
		return fmt.Errorf("%w: %s: node %s: %s %v, earlier %v (the two ends of a cable disagree)", ErrTopology, b.at(line), fmtGUID(n.guid), what, now, was)
	}
	if k := kindOf(e.Type); k != n.kind {
		return bad("type", n.kind, k)
	}
	if n.desc != e.Desc {
		return bad("description", fmt.Sprintf("%q", n.desc), fmt.Sprintf("%q", e.Desc))
	}
	if n.declared >= 0 && n.declared != e.NumPorts {
		return bad("port count", n.declared, e.NumPorts)
	}
	if n.kind == KindSwitch {
		if n.lid != e.LID {
			return bad("LID", fmt.Sprintf("%#x", n.lid), fmt.Sprintf("%#x", e.LID))
		}
		return nil
	}
	if p := n.ports[e.Port]; p != nil && p.line != 0 {
		if p.guid != e.PortGUID {
			return bad(fmt.Sprintf("port %d GUID", e.Port), fmtGUID(p.guid), fmtGUID(e.PortGUID))
		}
		if p.lid != e.LID {
			return bad(fmt.Sprintf("port %d LID", e.Port), fmt.Sprintf("%#x", p.lid), fmt.Sprintf("%#x", e.LID))
		}
	}
	return nil
}

func (b *builder) ibndNode(n *ibdump.Node) error {
	if n.GUID == 0 {
		return fmt.Errorf("%w: %s: node %q has no GUID", ErrTopology, b.at(n.Line), n.ID)
	}
	k := kindOf(n.Type)
	bn := b.node(n.GUID, k, n.Desc, n.NumPorts)
	if k == KindSwitch {
		bn.lid = n.LID
		p0 := bn.port(0)
		p0.guid, p0.lid, p0.lmc = n.GUID, n.LID, uint8(n.LMC)
	}
	for _, p := range n.Ports {
		bp := bn.port(p.Port)
		if bp.line == 0 {
			bp.line = p.Line
		}
		if bp.from == 0 {
			bp.from = p.Line
		}
		if k == KindSwitch {
			bp.guid = n.GUID
		} else {
			bp.guid, bp.lid, bp.lmc = p.PortGUID, p.LID, uint8(p.LMC)
		}
		if p.RemoteGUID == 0 {
			return fmt.Errorf("%w: %s: peer %q has no GUID", ErrTopology, b.at(p.Line), p.RemoteID)
		}
		rk := KindCA
		if strings.HasPrefix(p.RemoteID, "S-") {
			rk = KindSwitch
		}
		rn := b.node(p.RemoteGUID, rk, p.RemoteDesc, 0)
		if p.RemotePortGUID != 0 {
			rn.port(p.RemotePort).guid = p.RemotePortGUID
		}
		if err := b.link(bn, p.Port, rn, p.RemotePort, b.at(p.Line)); err != nil {
			return err
		}
	}
	return nil
}

// checkBothEnds checks that every cable of a topology that describes each
// cable from both ends (opensm-subnet.lst, ibnetdiscover) was described
// from both: a cable seen from one end only means the file is cut short
// (OpenSM or ibnetdiscover still writing it, a full disk, a partial copy)
// or edited, and loading it would silently give a smaller fabric or
// broken routes. The error names the line of the one description (the
// first such line in the file).
func (b *builder) checkBothEnds() error {
	// bad is the port no line describes from its end, peerNode the node
	// at the described end
	var bad *bport
	var badNode, peerNode *bnode
	for _, n := range b.nodes {
		for _, p := range n.ports {
			if !p.linked || p.from != 0 {
				continue
			}
			pn := b.nodes[p.peerNode]
			if pn == nil {
				continue
			}
			q := pn.ports[p.peerPort]
			if q == nil || q.from == 0 {
				continue
			}
			if bad == nil || q.from < b.nodes[bad.peerNode].ports[bad.peerPort].from {
				bad, badNode, peerNode = p, n, pn
			}
		}
	}
	if bad == nil {
		return nil
	}
	q := peerNode.ports[bad.peerPort]
	return fmt.Errorf("%w: %s: cable %s port %d <-> %s port %d is described only from this end, never from the other (the file describes every cable from both ends: truncated?)",
		ErrTopology, b.at(q.from), nodeName(peerNode), bad.peerPort, nodeName(badNode), q.peerPort)
}

// nodeName names a builder node for an error message.
func nodeName(n *bnode) string {
	if n.desc != "" {
		return fmt.Sprintf("%s (%s)", fmtGUID(n.guid), n.desc)
	}
	return fmtGUID(n.guid)
}

// lidBound is the highest LID the model can use, as far as the topology
// and guid2lid tell before the LFTs are read, plus room for the largest
// LMC range (a subnet list gives base LIDs only); 0 (no bound) when they
// give no LID, or with neighbors as the topology (the LIDs of ports that
// guid2lid does not name come from the LFT comments).
func (b *builder) lidBound() uint16 {
	if b.fromNeighbors {
		return 0
	}
	top := int(b.maxG2L)
	for _, n := range b.nodes {
		if int(n.lid) > top {
			top = int(n.lid)
		}
		for _, p := range n.ports {
			if int(p.lid) > top {
				top = int(p.lid)
			}
		}
	}
	if top == 0 {
		return 0
	}
	return uint16(min(top+127, ibdump.MaxUnicastLID))
}

// neighbor: switch node GUIDs and CA port GUIDs; a CA port becomes a node
// of its own (its GUID is the port GUID), described later from the LFTs.
func (b *builder) neighbor(n ibdump.Neighbor) error {
	a := b.node(n.GUID, 0, "", 0)
	c := b.node(n.RemoteGUID, 0, "", 0)
	return b.link(a, n.Port, c, n.RemotePort, b.at(n.Line))
}

func (b *builder) guid2lid(g ibdump.GUIDLID) error {
	n := g.Max - g.Min + 1
	lmc := uint8(0)
	for (1 << lmc) < int(n) {
		lmc++
	}
	b.lmcByGUID[g.GUID] = lmc
	b.lidByGUID[g.GUID] = g.Min
	b.maxG2L = max(b.maxG2L, g.Max)
	return nil
}

// applyDests types and names neighbors-only nodes from the LFTs: switches
// are the nodes with an LFT, the others are CA ports described by the LFT
// entry comments. With LMC > 0 every LID of a port's range carries the
// port's GUID: the port's LID is the base of its range, guid2lid's when it
// names the port, else the lowest LID described with the port's GUID.
func (b *builder) applyDests(lfts map[uint64]*ibdump.LFT, dests map[uint16]ibdump.Dest) {
	byGUID := make(map[uint64]ibdump.Dest, len(dests))
	for _, d := range dests {
		if o, ok := byGUID[d.PortGUID]; !ok || d.LID < o.LID {
			byGUID[d.PortGUID] = d
		}
	}
	for g, d := range byGUID {
		if base, ok := b.lidByGUID[g]; ok && base != d.LID {
			d.LID = base
			byGUID[g] = d
		}
	}
	for g, n := range b.nodes {
		if l, ok := lfts[g]; ok {
			n.kind, n.desc, n.lid = KindSwitch, l.Desc, l.LID
			n.port(0).guid, n.port(0).lid = g, l.LID
			continue
		}
		n.kind = KindCA
		for num, p := range n.ports {
			if num == 0 {
				continue
			}
			p.guid = g
			if d, ok := byGUID[g]; ok {
				n.desc, p.lid = d.Desc, d.LID
			}
		}
	}
}

func (b *builder) build(lfts map[uint64]*ibdump.LFT, lftPath string) (*Model, error) {
	m := &Model{nodeByGUID: map[uint64]int32{}, portByGUID: map[uint64]int32{}, hostByName: map[string]int32{}}
	guids := make([]uint64, 0, len(b.nodes))
	for g := range b.nodes {
		guids = append(guids, g)
	}
	sort.Slice(guids, func(i, j int) bool { return guids[i] < guids[j] })
	nports := 0
	for _, g := range guids {
		bn := b.nodes[g]
		if bn.nports < 0 || bn.nports > maxPorts {
			return nil, fmt.Errorf("%w: %s: node %s (%s) has %d ports (at most %d)", ErrTopology, b.topoPath, fmtGUID(g), bn.desc, bn.nports, maxPorts)
		}
		for p := range bn.ports {
			if p < 0 || p > maxPorts {
				return nil, fmt.Errorf("%w: %s: node %s (%s) has port %d (at most %d)", ErrTopology, b.topoPath, fmtGUID(g), bn.desc, p, maxPorts)
			}
		}
		nports += bn.nports + 1
	}
	// HCAs whose node description was never set all report the firmware
	// default ("MT4123 ConnectX6   Mellanox Technologies"): a description
	// shared by CAs with different GUIDs names no host, so each of those
	// CAs becomes a host of its own, named by its GUID.
	descGUIDs := map[string]int{}
	if !b.fromNeighbors {
		for _, g := range guids {
			if bn := b.nodes[g]; bn.desc != "" && (bn.kind == KindCA || bn.kind == 0) {
				descGUIDs[bn.desc]++
			}
		}
	}
	m.Ports = make([]Port, 0, nports)
	for _, g := range guids {
		bn := b.nodes[g]
		if bn.kind == 0 {
			bn.kind = KindCA
		}
		idx := int32(len(m.Nodes))
		n := Node{GUID: g, Kind: bn.kind, Desc: bn.desc, NumPorts: bn.nports, LID: bn.lid,
			portBase: int32(len(m.Ports)), sw: -1}
		if n.Kind == KindCA {
			n.Host = strings.Fields(n.Desc + " ?")[0]
			if n.Desc == "" || descGUIDs[n.Desc] > 1 {
				n.Host = fmtGUID(g)
			}
		}
		if n.Kind == KindSwitch {
			n.sw = int32(len(m.Switches))
			m.Switches = append(m.Switches, idx)
		}
		m.Nodes = append(m.Nodes, n)
		m.nodeByGUID[g] = idx
		for p := 0; p <= bn.nports; p++ {
			pt := Port{Node: idx, Num: uint8(p), Peer: -1}
			if bp := bn.ports[p]; bp != nil {
				pt.GUID, pt.LID, pt.LMC = bp.guid, bp.lid, bp.lmc
				if pt.GUID == 0 && n.Kind == KindSwitch {
					pt.GUID = g
				}
				if lmc, ok := b.lmcByGUID[pt.GUID]; ok && (n.Kind != KindSwitch || p == 0) {
					pt.LMC = lmc
					if pt.LID == 0 {
						pt.LID = b.lidByGUID[pt.GUID]
					}
				}
			}
			if n.Kind == KindSwitch && p > 0 {
				pt.LID, pt.LMC = 0, 0
			}
			if pt.GUID != 0 && (n.Kind != KindSwitch || p == 0) {
				m.portByGUID[pt.GUID] = int32(len(m.Ports))
			}
			m.Ports = append(m.Ports, pt)
		}
	}
	// cables
	for i := range m.Ports {
		pt := &m.Ports[i]
		bn := b.nodes[m.Nodes[pt.Node].GUID]
		bp := bn.ports[int(pt.Num)]
		if bp == nil || !bp.linked {
			continue
		}
		rn, ok := m.nodeByGUID[bp.peerNode]
		if !ok || bp.peerPort > m.Nodes[rn].NumPorts {
			return nil, fmt.Errorf("%w: cable to unknown port %s:%d", ErrTopology, fmtGUID(bp.peerNode), bp.peerPort)
		}
		pt.Peer = m.Nodes[rn].portBase + int32(bp.peerPort)
	}
	// LIDs
	maxLID := 0
	for i, pt := range m.Ports {
		if pt.LID != 0 {
			top := int(pt.LID) + (1 << pt.LMC) - 1
			if top > ibdump.MaxUnicastLID {
				return nil, fmt.Errorf("%w: LIDs %#x-%#x of %s: out of the unicast range (at most %#x)", ErrTopology, pt.LID, top, b.describe(m, int32(i)), ibdump.MaxUnicastLID)
			}
			maxLID = max(maxLID, top)
		}
	}
	m.lidPort = make([]int32, maxLID+1)
	m.lidEP = make([]int32, maxLID+1)
	for i := range m.lidPort {
		m.lidPort[i], m.lidEP[i] = -1, -1
	}
	hostEPs := map[string][]int32{}
	for i, pt := range m.Ports {
		if pt.LID == 0 {
			continue
		}
		n := m.Nodes[pt.Node]
		if n.Kind == KindSwitch && pt.Num != 0 {
			continue
		}
		for l := int(pt.LID); l < int(pt.LID)+(1<<pt.LMC); l++ {
			if m.lidPort[l] >= 0 && m.lidPort[l] != int32(i) {
				return nil, fmt.Errorf("%w: LID %#x assigned to two ports: %s and %s", ErrTopology, l, b.describe(m, m.lidPort[l]), b.describe(m, int32(i)))
			}
			m.lidPort[l] = int32(i)
		}
		if n.Kind == KindCA {
			e := int32(len(m.Endpoints))
			m.Endpoints = append(m.Endpoints, Endpoint{Port: int32(i)})
			hostEPs[n.Host] = append(hostEPs[n.Host], e)
			for l := int(pt.LID); l < int(pt.LID)+(1<<pt.LMC); l++ {
				m.lidEP[l] = e
			}
		}
	}
	for _, name := range sortedKeys(hostEPs) {
		h := int32(len(m.Hosts))
		m.Hosts = append(m.Hosts, Host{Name: name, Endpoints: hostEPs[name]})
		m.hostByName[name] = h
		for _, e := range hostEPs[name] {
			m.Endpoints[e].Host = h
		}
	}
	// LFTs (a table without entries has nil Ports)
	m.lft = make([][]uint8, len(m.Switches))
	have := make([]bool, len(m.Switches))
	for g, l := range lfts {
		ni, ok := m.nodeByGUID[g]
		if !ok || m.Nodes[ni].Kind != KindSwitch {
			return nil, fmt.Errorf("%w: %s:%d: switch %s (%s) is not in the topology", ErrTopology, lftPath, l.Line, fmtGUID(g), l.Desc)
		}
		m.lft[m.Nodes[ni].sw] = l.Ports
		have[m.Nodes[ni].sw] = true
	}
	for s, ni := range m.Switches {
		if !have[s] {
			return nil, fmt.Errorf("%w: %s has no LFT for switch %s (%s)", ErrTopology, lftPath, fmtGUID(m.Nodes[ni].GUID), m.Nodes[ni].Desc)
		}
	}
	m.finish()
	return m, nil
}

// describe names a port of m for an error message: GUID, node and the
// topology line that described it.
func (b *builder) describe(m *Model, p int32) string {
	pt := m.Ports[p]
	n := m.Nodes[pt.Node]
	where := b.topoPath
	if bp := b.nodes[n.GUID].ports[int(pt.Num)]; bp != nil && bp.line > 0 {
		where = b.at(bp.line)
	}
	return fmt.Sprintf("port %s (%s port %d, %s)", fmtGUID(pt.GUID), n.Desc, pt.Num, where)
}

// transpose builds m.fwd from m.lft.
func (m *Model) transpose() {
	S, L := len(m.Switches), len(m.lidPort)
	m.fwd = make([]uint8, S*L)
	for i := range m.fwd {
		m.fwd[i] = ibdump.NoPort
	}
	for s, t := range m.lft {
		for lid := 0; lid < L && lid < len(t); lid++ {
			m.fwd[lid*S+s] = t[lid]
		}
	}
}

// finish derives per-endpoint and per-port helpers.
func (m *Model) finish() {
	m.transpose()
	m.epLeaf = make([]int32, len(m.Endpoints))
	for i, e := range m.Endpoints {
		m.epLeaf[i] = -1
		if peer := m.Ports[e.Port].Peer; peer >= 0 {
			if n := m.Nodes[m.Ports[peer].Node]; n.Kind == KindSwitch {
				m.epLeaf[i] = n.sw
			}
		}
	}
	m.core = make([]bool, len(m.Ports))
	for i, p := range m.Ports {
		if p.Peer >= 0 && m.Nodes[p.Node].Kind == KindSwitch && m.Nodes[m.Ports[p.Peer].Node].Kind == KindSwitch {
			m.core[i] = true
		}
	}
}

// parallelParseMin is the size from which an uncompressed LFT dump is
// parsed in sections on several cores.
const parallelParseMin = 32 << 20

// parseLFTsParallel parses an uncompressed LFT dump of at least minSize
// bytes (tables bounded by maxLID as ibdump.LFTHandler.MaxLID) in up to
// workers sections
// that start at switch headers, calling fn from one goroutine in file
// order. It returns false (and calls nothing) when the file is compressed
// or small, or when a section fails: the caller then parses sequentially,
// which reports the error with its true line number.
func parseLFTsParallel(ctx context.Context, path string, minSize int64, workers int, maxLID uint16, fn func(*ibdump.LFT) error) (bool, error) {
	if strings.HasSuffix(path, ".gz") || workers < 2 {
		return false, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return false, err
	}
	size := st.Size()
	if size < minSize {
		return false, nil
	}
	bounds := []int64{0}
	for i := 1; i < workers; i++ {
		b, err := nextHeader(f, size*int64(i)/int64(workers), size)
		if err != nil {
			return false, err
		}
		if b > bounds[len(bounds)-1] && b < size {
			bounds = append(bounds, b)
		}
	}
	bounds = append(bounds, size)
	parts := make([][]*ibdump.LFT, len(bounds)-1)
	errs := make([]error, len(parts))
	// each section counts lines from 1; its newlines give the next
	// section's offset
	lines := make([]int, len(parts))
	var wg sync.WaitGroup
	for i := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sec := &lineCounter{r: io.NewSectionReader(f, bounds[i], bounds[i+1]-bounds[i])}
			defer func() { lines[i] = sec.n }()
			errs[i] = ibdump.ParseLFTs(sec, path, ibdump.LFTHandler{MaxLID: maxLID, Switch: func(l *ibdump.LFT) error {
				if err := ctx.Err(); err != nil {
					return err
				}
				parts[i] = append(parts[i], l)
				return nil
			}})
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return false, err
	}
	for _, err := range errs {
		if err != nil {
			return false, nil
		}
	}
	off := 0
	for i, p := range parts {
		for _, l := range p {
			l.Line += off
			if err := fn(l); err != nil {
				return false, nil
			}
		}
		off += lines[i]
	}
	return true, nil
}

// lineCounter counts the newlines read through it.
type lineCounter struct {
	r io.Reader
	n int
}

func (c *lineCounter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += bytes.Count(p[:n], []byte{'\n'})
	return n, err
}

// nextHeader finds the first line starting with "Unicast lids [" at or
// after off (size if none).
func nextHeader(f *os.File, off, size int64) (int64, error) {
	const marker = "\nUnicast lids ["
	buf := make([]byte, 256<<10)
	for off < size {
		n, err := f.ReadAt(buf, off)
		if n == 0 && err != nil {
			if err == io.EOF {
				return size, nil
			}
			return 0, err
		}
		if i := bytes.Index(buf[:n], []byte(marker)); i >= 0 {
			return off + int64(i) + 1, nil
		}
		if int64(n) < int64(len(marker)) || err == io.EOF {
			return size, nil
		}
		off += int64(n - len(marker))
	}
	return size, nil
}
