package fabric

// Tests on a hand-built 2-level fat tree (leaves x spines, one cable from
// every leaf to every spine, d-mod-k routing), written as opensm-subnet.lst
// and opensm-lfts.dump text and loaded through the real parsers with an
// in-memory opener.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// fatTree describes a 2-level fat tree. hosts[i] lists the host names on
// leaf i. broken names hosts that no switch has an LFT entry for and whose
// leaf forwards nothing (a host the LFTs neither reach nor leave).
type fatTree struct {
	spines int
	hosts  [][]string
	broken map[string]bool
	// edit, when set, may change an LFT entry: (switch name, dlid, port) -> port
	edit func(sw string, dlid, port int) int
	// leafPort, when set, is the leaf port cabled to spine j (default H+1+j).
	leafPort func(leaf, j, H int) int
}

type fatTreeFiles struct {
	subnet, lfts string
	hostLID      map[string]int
}

func (rt fatTree) build() fatTreeFiles {
	L, P := len(rt.hosts), rt.spines
	H := 0
	for _, hs := range rt.hosts {
		H = max(H, len(hs))
	}
	leafGUID := func(i int) uint64 { return 0x0002c90300000100 + uint64(i) }
	spineGUID := func(j int) uint64 { return 0x0002c90300000200 + uint64(j) }
	leafLID := func(i int) int { return 1 + i }
	spineLID := func(j int) int { return 1 + L + j }
	type host struct {
		name       string
		leaf, port int
		lid        int
		node, pg   uint64
	}
	var hs []host
	lid := 1 + L + P
	for i, names := range rt.hosts {
		for k, n := range names {
			hs = append(hs, host{n, i, 1 + k, lid, 0x0002c90400001000 + uint64(len(hs))*16, 0x0002c90400001000 + uint64(len(hs))*16 + 1})
			lid++
		}
	}
	maxLID := lid - 1
	sw := func(guid uint64, nports int, desc string, lid, pn int) string {
		return fmt.Sprintf("{ SW Ports:%02X SystemGUID:%016X NodeGUID:%016X PortGUID:%016X VenID:000000 DevID:0000 Rev:000000A1 {%s} LID:%04X PN:%02X }", nports, guid, guid, guid, desc, lid, pn)
	}
	ca := func(h host) string {
		return fmt.Sprintf("{ CA Ports:01 SystemGUID:%016X NodeGUID:%016X PortGUID:%016X VenID:00000000 DevID:0000 Rev:000000A1 {%s mlx5_0} LID:%04X PN:01 }", h.node, h.node, h.pg, h.name, h.lid)
	}
	leafName := func(i int) string { return fmt.Sprintf("leaf%03d", i+1) }
	spineName := func(j int) string { return fmt.Sprintf("spine%03d", j+1) }
	var sb strings.Builder
	link := func(a, b string) { fmt.Fprintf(&sb, "%s %s PHY=4x LOG=ACT SPD=2.5\n", a, b) }
	for _, h := range hs {
		l := sw(leafGUID(h.leaf), H+P, leafName(h.leaf), leafLID(h.leaf), h.port)
		link(l, ca(h))
		link(ca(h), l)
	}
	for i := 0; i < L; i++ {
		for j := 0; j < P; j++ {
			lp := H + 1 + j
			if rt.leafPort != nil {
				lp = rt.leafPort(i, j, H)
			}
			a := sw(leafGUID(i), H+P, leafName(i), leafLID(i), lp)
			b := sw(spineGUID(j), L, spineName(j), spineLID(j), 1+i)
			link(a, b)
			link(b, a)
		}
	}
	var lb strings.Builder
	entry := func(name string, dlid, port int) {
		if rt.edit != nil {
			port = rt.edit(name, dlid, port)
		}
		if port >= 0 {
			fmt.Fprintf(&lb, "0x%04x %03d\n", dlid, port)
		}
	}
	hostLID := map[string]int{}
	for _, h := range hs {
		hostLID[h.name] = h.lid
	}
	for i := 0; i < L; i++ {
		fmt.Fprintf(&lb, "Unicast lids [0-%d] of switch Lid %d guid 0x%016x ('%s'):\n", maxLID, leafLID(i), leafGUID(i), leafName(i))
		entry(leafName(i), leafLID(i), 0)
		leafBroken := false
		for _, h := range hs {
			if h.leaf == i && rt.broken[h.name] {
				leafBroken = true
			}
		}
		for _, h := range hs {
			if rt.broken[h.name] || leafBroken {
				continue
			}
			if h.leaf == i {
				entry(leafName(i), h.lid, h.port)
			} else {
				entry(leafName(i), h.lid, H+1+h.lid%P)
			}
		}
		fmt.Fprintf(&lb, "%d lids dumped\n", maxLID+1)
	}
	for j := 0; j < P; j++ {
		fmt.Fprintf(&lb, "Unicast lids [0-%d] of switch Lid %d guid 0x%016x ('%s'):\n", maxLID, spineLID(j), spineGUID(j), spineName(j))
		entry(spineName(j), spineLID(j), 0)
		for _, h := range hs {
			if rt.broken[h.name] {
				continue
			}
			entry(spineName(j), h.lid, 1+h.leaf)
		}
		fmt.Fprintf(&lb, "%d lids dumped\n", maxLID+1)
	}
	return fatTreeFiles{subnet: sb.String(), lfts: lb.String(), hostLID: hostLID}
}

func (f fatTreeFiles) load(t testing.TB) *Model {
	t.Helper()
	m, err := loadMem(map[string]string{FileSubnet: f.subnet, FileLFTs: f.lfts})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// loadMem loads in-memory files named by their kind.
func loadMem(files map[string]string) (*Model, error) {
	fs := Files{}
	for k := range files {
		fs[k] = k
	}
	open := func(p string) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader([]byte(files[p]))), nil
	}
	return loadFiles(context.Background(), fs, open)
}

// withTimeout runs fn and fails the test if it does not return in d.
func withTimeout(t *testing.T, d time.Duration, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("did not return within %v (hang?)", d)
	}
}

// bruteBest scores every k-subset of cands and returns the best score.
func bruteBest(t *testing.T, m *Model, cands []string, k int, targets []string) (Score, []string) {
	t.Helper()
	var best Score
	var bestSet []string
	first := true
	var rec func(start int, cur []string)
	rec = func(start int, cur []string) {
		if len(cur) == k {
			s, err := m.Overlap(context.Background(), cur, targets)
			if err != nil {
				t.Fatal(err)
			}
			if first || s.Less(best) {
				best, bestSet, first = s, append([]string(nil), cur...), false
			}
			return
		}
		for i := start; i < len(cands); i++ {
			rec(i+1, append(cur, cands[i]))
		}
	}
	rec(0, nil)
	return best, bestSet
}

// TestFatTreeSanity: the hand-built tree loads, every route works, the
// link loads match walking every route, and a forwarding loop is reported
// (not followed forever).
func TestFatTreeSanity(t *testing.T) {
	rt := fatTree{spines: 2, hosts: [][]string{{"c01", "c02"}, {"c03", "c04"}, {"c05", "c06"}, {"s01", "s02"}}}
	m := rt.build().load(t)
	a, err := m.AnalyzeWith(context.Background(), AnalyzeOptions{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	if a.Routes != 8*7 || a.Broken != 0 {
		t.Fatalf("routes %d broken %d, want 56, 0", a.Routes, a.Broken)
	}
	load, _, n := bruteForce(m)
	if n != a.Routes {
		t.Fatalf("brute force %d routes", n)
	}
	for p := range load {
		if load[p] != a.Load[p] {
			t.Fatalf("port %v: load %d, brute force %d", m.Ref(int32(p)), a.Load[p], load[p])
		}
	}
	// a loop: spine001 sends s01's LID back down to leaf001, which sends it up again
	f := rt.build()
	sl := f.hostLID["s01"]
	rt.edit = func(sw string, dlid, port int) int {
		if dlid == sl && strings.HasPrefix(sw, "spine") {
			return 1 // leaf001
		}
		if dlid == sl && sw == "leaf001" {
			return 3 // spine001 (H=2: spines on ports 3, 4)
		}
		return port
	}
	m = rt.build().load(t)
	withTimeout(t, 10*time.Second, func() {
		rs, err := m.Routes("c01", "s01", nil)
		if err != nil || len(rs) != 1 || rs[0].Broken != reasonLoop {
			t.Errorf("routes %+v %v, want a loop", rs, err)
		}
		a, err := m.AnalyzeWith(context.Background(), AnalyzeOptions{Workers: 1})
		if err != nil || a.Broken == 0 {
			t.Errorf("analysis %+v %v", a, err)
		}
		if _, err := m.SelectWith(context.Background(), SelectRequest{K: 2, Targets: []string{"s01"}, RandomTrials: 5}); err != nil {
			t.Error(err)
		}
	})
}

// TestSelectMatchesBruteForce: on a tree this small the best choice can be
// found by scoring every subset; the selection must score as well.
func TestSelectMatchesBruteForce(t *testing.T) {
	rt := fatTree{spines: 2, hosts: [][]string{{"c01", "c02"}, {"c03", "c04"}, {"c05", "c06"}, {"s01", "s02"}}}
	m := rt.build().load(t)
	cands := []string{"c01", "c02", "c03", "c04", "c05", "c06"}
	for _, tc := range []struct {
		k       int
		targets []string
	}{{2, []string{"s01"}}, {3, []string{"s01"}}, {3, []string{"s01", "s02"}}, {2, nil}, {3, nil}, {4, nil}} {
		sel, err := m.SelectWith(context.Background(), SelectRequest{K: tc.k, Candidates: cands, Targets: tc.targets, RandomTrials: 10})
		if err != nil {
			t.Fatal(err)
		}
		best, set := bruteBest(t, m, cands, tc.k, tc.targets)
		if best.Less(sel.Score) {
			t.Errorf("k=%d targets=%v: selected %v scoring %+v; %v scores %+v", tc.k, tc.targets, sel.Hosts, sel.Score, set, best)
		}
	}
}

// TestSelectAvoidsHostsWithoutWorkingRoutes: c07 sits on its own leaf
// whose LFT forwards nothing, and no switch has an entry for c07's LID:
// every route from and to c07 is broken. Select must not recommend it
// (Score.Less ranks broken routes first): the greedy first pick, which
// breaks ties on the mean weight of a host's working routes, ranks a host
// without any working route last, and the swap phase never trades a host
// for one with more broken routes (a host with only broken routes has no
// shared pairs, yet is the worst choice).
func TestSelectAvoidsHostsWithoutWorkingRoutes(t *testing.T) {
	rt := fatTree{spines: 2,
		hosts:  [][]string{{"c01", "c02"}, {"c03", "c04"}, {"c05", "c06"}, {"s01", "s02"}, {"c07"}},
		broken: map[string]bool{"c07": true}}
	m := rt.build().load(t)
	cands := []string{"c01", "c02", "c03", "c04", "c05", "c06", "c07"}
	for _, tc := range []struct {
		name    string
		k       int
		targets []string
	}{{"with-targets", 2, []string{"s01"}}, {"job-placement", 2, nil}, {"job-placement-3", 3, nil}} {
		t.Run(tc.name, func(t *testing.T) {
			sel, err := m.SelectWith(context.Background(), SelectRequest{K: tc.k, Candidates: cands, Targets: tc.targets, RandomTrials: 10})
			if err != nil {
				t.Fatal(err)
			}
			best, set := bruteBest(t, m, cands, tc.k, tc.targets)
			if sel.Score.Broken != 0 || best.Less(sel.Score) {
				t.Errorf("selected %v score %+v (broken routes %d); best is %v score %+v", sel.Hosts, sel.Score, sel.Score.Broken, set, best)
			}
		})
	}
}

// linkKey names a link direction by GUIDs and port numbers, so it
// compares across models.
func linkKey(m *Model, p int32) string {
	pt, peer := m.Ports[p], m.Ports[m.Ports[p].Peer]
	return sprintf("%x:%d>%x:%d", m.Nodes[pt.Node].GUID, pt.Num, m.Nodes[peer.Node].GUID, peer.Num)
}

// TestDiffCountsRoutesOfMovedCables: the leaf001 uplinks to the two spines
// are swapped (ports 3 and 4 exchange cables) while the LFTs stay the
// same, so every route leaving leaf001 towards another leaf now crosses
// the other spine, and every route into leaf001 enters through the other
// port. Compare counts a route unchanged only if every hop leaves through
// the same port, cabled to the same peer port, towards the same next
// switch; it must count exactly the routes whose links differ when every
// route of both models is walked.
func TestDiffCountsRoutesOfMovedCables(t *testing.T) {
	rt := fatTree{spines: 2, hosts: [][]string{{"c01", "c02"}, {"c03", "c04"}, {"c05", "c06"}, {"s01", "s02"}}}
	old := rt.build().load(t)
	rt.leafPort = func(leaf, j, H int) int {
		if leaf == 0 {
			return H + 2 - j // spine001 on port 4, spine002 on port 3
		}
		return H + 1 + j
	}
	cur := rt.build().load(t)
	d, err := Compare(context.Background(), old, cur, DiffOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// brute force: walk every route in both models and compare the links
	var routes, changed int64
	for s := range old.Endpoints {
		for dd, dep := range old.Endpoints {
			if old.Endpoints[s].Host == dep.Host {
				continue
			}
			lid := old.Ports[dep.Port].LID
			routes++
			a, oka := old.RouteLinks(int32(s), lid, nil)
			b, okb := cur.RouteLinks(int32(s), cur.Ports[cur.Endpoints[dd].Port].LID, nil)
			same := oka == okb && len(a) == len(b)
			for i := 0; same && i < len(a); i++ {
				same = linkKey(old, a[i]) == linkKey(cur, b[i])
			}
			if !same {
				changed++
			}
		}
	}
	if d.Routes != routes || d.Changed != changed {
		t.Errorf("Compare: %d of %d routes changed; walking every route: %d of %d (cables down %d, up %d)",
			d.Changed, d.Routes, changed, routes, len(d.CablesDown), len(d.CablesUp))
	}
}
