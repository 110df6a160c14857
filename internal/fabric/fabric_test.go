package fabric

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/fabric/ibdump"
)

const samples = "testdata/samples"

func load(t testing.TB, dir string) *Model {
	t.Helper()
	m, err := Load(context.Background(), filepath.Join(samples, dir))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func analyze(t testing.TB, m *Model) *Analysis {
	t.Helper()
	a, err := m.Analyze(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// bruteForce walks every route on its own and counts loads and weights:
// the straightforward method the per-destination trees must agree with.
func bruteForce(m *Model) (load []int64, weights map[[2]int32]int64, routes int64) {
	load = make([]int64, len(m.Ports))
	type r struct {
		src   int32
		dlid  uint16
		links []int32
	}
	var all []r
	for s := range m.Endpoints {
		for d, dep := range m.Endpoints {
			if m.Endpoints[s].Host == dep.Host {
				continue
			}
			p := m.Ports[dep.Port]
			for i := 0; i < 1<<p.LMC; i++ {
				links, ok := m.RouteLinks(int32(s), p.LID+uint16(i), nil)
				if !ok {
					continue
				}
				_ = d
				all = append(all, r{int32(s), p.LID + uint16(i), links})
				for _, l := range links {
					load[l]++
				}
			}
		}
	}
	weights = map[[2]int32]int64{}
	for _, x := range all {
		var w int64
		for _, l := range x.links {
			w += load[l]
		}
		weights[[2]int32{x.src, int32(x.dlid)}] = w
	}
	return load, weights, int64(len(all))
}

func TestAnalyzeMatchesBruteForce(t *testing.T) {
	for _, tc := range []struct {
		dir       string
		endpoints int
		routes    int64
	}{
		{"ft2-h16/minhop/before", 16, 240},
		{"ft2-h16/minhop/after", 16, 240},
		{"ft2-h16/updn", 16, 240},
		{"ft2-h16/ftree", 16, 240},
		{"ft2-h16/dfsssp", 16, 240},
		{"ft3-k4-h16/ftree/before", 16, 240},
		{"ft3-k4-h16/ftree/after", 16, 240},
		{"mr2-h16/minhop", 32, 32 * 30}, // 16 hosts x 2 HCAs; no routes within a host
		{"mr2-h16/ftree", 32, 32 * 30},
		{"dp-h8/minhop", 16, 16 * 14},
		{"ft3-k8-h128/ftree/after", 128, 128 * 127},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			m := load(t, tc.dir)
			a := analyze(t, m)
			if len(m.Endpoints) != tc.endpoints || a.Routes != tc.routes || a.Broken != 0 {
				t.Fatalf("endpoints %d routes %d broken %d, want %d, %d, 0", len(m.Endpoints), a.Routes, a.Broken, tc.endpoints, tc.routes)
			}
			load, weights, n := bruteForce(m)
			if n != a.Routes {
				t.Fatalf("brute force found %d routes, trees %d", n, a.Routes)
			}
			for p := range load {
				if load[p] != a.Load[p] {
					t.Fatalf("port %v: load %d, brute force %d", m.Ref(int32(p)), a.Load[p], load[p])
				}
			}
			var sum, mn, mx int64
			mn = -1
			for _, w := range weights {
				sum += w
				if mn < 0 || w < mn {
					mn = w
				}
				mx = max(mx, w)
			}
			if sum != a.WeightSum || mn != a.WeightMin || mx != a.WeightMax {
				t.Errorf("weights sum/min/max %d/%d/%d, brute force %d/%d/%d", a.WeightSum, a.WeightMin, a.WeightMax, sum, mn, mx)
			}
			for _, h := range a.Heaviest {
				if w := weights[[2]int32{h.Src, int32(h.DLID)}]; w != h.Weight {
					t.Errorf("heaviest %+v: brute force weight %d", h, w)
				}
			}
			var out, in int64
			for e := range m.Endpoints {
				out += a.OutWeight[e]
				in += a.InWeight[e]
			}
			if out != sum || in != sum {
				t.Errorf("per-endpoint weights add up to %d out, %d in; want %d", out, in, sum)
			}
		})
	}
}

// TestCrossCheckOpenSM compares routes with OpenSM's own hop counts
// (opensm.fdbs, opensm-lid-matrix.dump) and with dump_fts output.
func TestCrossCheckOpenSM(t *testing.T) {
	dirs := 0
	err := filepath.Walk(samples, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.Name() != "opensm.fdbs" {
			return err
		}
		dir := filepath.Dir(p)
		fs, err := FindFiles(dir)
		if err != nil {
			return err
		}
		m, err := LoadFiles(context.Background(), fs)
		if err != nil {
			return err
		}
		res, err := m.Check(context.Background(), fs)
		if err != nil {
			return err
		}
		if len(res) < 2 {
			t.Errorf("%s: %d checks ran", dir, len(res))
		}
		for _, r := range res {
			if r.Checked == 0 || r.Mismatches != 0 {
				t.Errorf("%s: %+v", r.File, r)
			}
		}
		// The check must be able to fail: redirect one switch's route.
		s := 0
		for lid := range m.lft[s] {
			if m.lft[s][lid] != ibdump.NoPort && m.lft[s][lid] != 0 {
				m.setLFT(int32(s), uint16(lid), m.lft[s][lid]%uint8(m.Nodes[m.Switches[s]].NumPorts)+1)
				break
			}
		}
		res, err = m.Check(context.Background(), fs)
		if err != nil {
			return err
		}
		if res[0].Mismatches == 0 {
			t.Errorf("%s: a changed LFT entry went unnoticed", dir)
		}
		dirs++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if dirs < 12 {
		t.Errorf("checked only %d dump directories", dirs)
	}
}

// TestWiringMatchesFabricJSON checks the cables against the generator's
// intended structure.
func TestWiringMatchesFabricJSON(t *testing.T) {
	type link struct {
		RemoteGUID string `json:"remote_guid"`
		RemotePort int    `json:"remote_port"`
	}
	type fabricJSON struct {
		Switches []struct {
			GUID  string          `json:"guid"`
			Desc  string          `json:"desc"`
			Links map[string]link `json:"links"`
		} `json:"switches"`
		Hosts []struct {
			Name string `json:"name"`
			HCAs []struct {
				NodeGUID string `json:"node_guid"`
				Ports    []struct {
					Port     int    `json:"port"`
					PortGUID string `json:"port_guid"`
					LeafGUID string `json:"leaf_guid"`
					LeafPort int    `json:"leaf_port"`
				} `json:"ports"`
			} `json:"hcas"`
		} `json:"hosts"`
	}
	for _, tc := range []struct {
		json, dir string
		missing   int // cables taken down in dir
	}{
		{"ft2-h16/fabric.json", "ft2-h16/minhop/before", 0},
		{"ft2-h16/fabric.json", "ft2-h16/minhop/after", 1},
		{"ft3-k4-h16/fabric.json", "ft3-k4-h16/ftree/before", 0},
		{"ft3-k4-h16/fabric.json", "ft3-k4-h16/ftree/after", 1},
		{"mr2-h16/fabric.json", "mr2-h16/ftree", 0},
		{"dp-h8/fabric.json", "dp-h8/minhop", 0},
		{"ft3-k8-h128/fabric.json.gz", "ft3-k8-h128/ftree/before", 0},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			r, err := ibdump.Open(filepath.Join(samples, tc.json))
			if err != nil {
				t.Fatal(err)
			}
			var fj fabricJSON
			err = json.NewDecoder(r).Decode(&fj)
			r.Close()
			if err != nil {
				t.Fatal(err)
			}
			m := load(t, tc.dir)
			peerOf := func(guid string, port int) (uint64, int, bool) {
				g, _ := strconv.ParseUint(strings.TrimPrefix(guid, "0x"), 16, 64)
				ni, ok := m.nodeByGUID[g]
				if !ok || port > m.Nodes[ni].NumPorts {
					return 0, 0, false
				}
				peer := m.Ports[m.PortID(ni, port)].Peer
				if peer < 0 {
					return 0, 0, false
				}
				return m.Nodes[m.Ports[peer].Node].GUID, int(m.Ports[peer].Num), true
			}
			want, missing := 0, 0
			for _, sw := range fj.Switches {
				for ps, l := range sw.Links {
					p, _ := strconv.Atoi(ps)
					want++
					g, rp, ok := peerOf(sw.GUID, p)
					rg, _ := strconv.ParseUint(strings.TrimPrefix(l.RemoteGUID, "0x"), 16, 64)
					if !ok {
						missing++
						continue
					}
					if g != rg || rp != l.RemotePort {
						t.Errorf("%s[%d]: cabled to %x[%d], fabric.json says %s[%d]", sw.Desc, p, g, rp, l.RemoteGUID, l.RemotePort)
					}
				}
			}
			hosts := 0
			for _, h := range fj.Hosts {
				if _, ok := m.hostByName[h.Name]; !ok {
					t.Errorf("host %s missing", h.Name)
				}
				hosts++
				for _, hca := range h.HCAs {
					for _, p := range hca.Ports {
						g, rp, ok := peerOf(hca.NodeGUID, p.Port)
						lg, _ := strconv.ParseUint(strings.TrimPrefix(p.LeafGUID, "0x"), 16, 64)
						if !ok || g != lg || rp != p.LeafPort {
							t.Errorf("%s port %d: cabled to %x[%d], fabric.json says %s[%d]", h.Name, p.Port, g, rp, p.LeafGUID, p.LeafPort)
						}
					}
				}
			}
			if hosts != len(m.Hosts) {
				t.Errorf("%d hosts, fabric.json has %d", len(m.Hosts), hosts)
			}
			// every cable is listed from both switch ends when it joins two switches
			if missing != 2*tc.missing && missing != tc.missing {
				t.Errorf("%d switch port links missing, want %d cable(s) down", missing, tc.missing)
			}
			if s := m.Summary(); s.Cables*2 < want {
				t.Errorf("%d cables for %d switch link ends", s.Cables, want)
			}
		})
	}
}

// TestRouteChangeCounts checks the diff against the route-change counts
// OpenSM's own before/after runs produced (README of the samples).
func TestRouteChangeCounts(t *testing.T) {
	for _, tc := range []struct {
		dir             string
		changed, routes int64
		fallback        bool
		cable           string
	}{
		{"ft2-h16/minhop", 72, 240, false, "leaf001[5]-spine001[1]"},
		{"ft3-k4-h16/ftree", 96, 240, true, "pod01-agg01[3]-core001[1]"},
		{"ft3-k8-h128/ftree", 10880, 16256, true, "pod01-agg01[5]-core001[1]"},
		{"ft2-h2048/minhop", 129056, 4192256, false, "leaf001[33]-spine001[1]"},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			if testing.Short() && tc.routes > 1e6 {
				t.Skip("large sample")
			}
			old, cur := load(t, tc.dir+"/before"), load(t, tc.dir+"/after")
			d, err := Compare(context.Background(), old, cur, DiffOptions{Loads: true})
			if err != nil {
				t.Fatal(err)
			}
			if d.Changed != tc.changed || d.Routes != tc.routes {
				t.Errorf("%d of %d routes changed, want %d of %d", d.Changed, d.Routes, tc.changed, tc.routes)
			}
			if d.NewEngine.Fallback != tc.fallback || d.OldEngine.Fallback {
				t.Errorf("engines %+v -> %+v, want fallback %v", d.OldEngine, d.NewEngine, tc.fallback)
			}
			if len(d.CablesDown) != 1 || len(d.CablesUp) != 0 {
				t.Fatalf("cables down %v up %v", d.CablesDown, d.CablesUp)
			}
			c := d.CablesDown[0]
			got := c.A.Desc + "[" + strconv.Itoa(c.A.Port) + "]-" + c.B.Desc + "[" + strconv.Itoa(c.B.Port) + "]"
			if got != tc.cable {
				t.Errorf("cable down %s, want %s", got, tc.cable)
			}
			if len(d.LoadChanges) == 0 || d.LoadChanges[0].New == d.LoadChanges[0].Old {
				t.Errorf("load changes %v", d.LoadChanges)
			}
			// the same dumps compared with themselves: nothing changes
			same, err := Compare(context.Background(), old, old, DiffOptions{Loads: true})
			if err != nil {
				t.Fatal(err)
			}
			if same.Changed != 0 || len(same.CablesDown) != 0 || len(same.LoadChanges) != 0 {
				t.Errorf("self-diff: %+v", same)
			}
		})
	}
}

func TestRoutesBothDirections(t *testing.T) {
	m := load(t, "ft2-h16/minhop/before")
	a := analyze(t, m)
	via := func(src, dst string) string {
		rs, err := m.Routes(src, dst, a)
		if err != nil || len(rs) != 1 || rs[0].Broken != "" {
			t.Fatalf("Routes(%s, %s) = %v, %v", src, dst, rs, err)
		}
		var hops []string
		for _, h := range rs[0].Hops {
			hops = append(hops, h.From.Desc+":"+strconv.Itoa(h.From.Port))
		}
		return strings.Join(hops, " ")
	}
	// Read off opensm-lfts.dump: leaf001 sends LID 8 (stor004) to port 6
	// (spine002); leaf004 sends LID 1 (node0001) to port 5 (spine001).
	if got := via("node0001", "stor004"); got != "node0001 mlx5_0:1 leaf001:6 spine002:4 leaf004:4" {
		t.Errorf("node0001->stor004 = %s", got)
	}
	if got := via("stor004", "node0001"); got != "stor004 mlx5_0:1 leaf004:5 spine001:1 leaf001:1" {
		t.Errorf("stor004->node0001 = %s", got)
	}
	for _, name := range []string{"1", "0x1", "0x0002c90400000011", "node0001/mlx5_0/1", "node0001/mlx5_0"} {
		if rs, err := m.Routes(name, "stor004", nil); err != nil || len(rs) != 1 {
			t.Errorf("Routes(%q) = %v, %v", name, rs, err)
		}
	}
	for _, name := range []string{"node9999", "0x99", "node0001/mlx5_7", "0x0002c90400009999"} {
		if _, err := m.Routes(name, "stor004", nil); !errors.Is(err, ErrNotFound) {
			t.Errorf("Routes(%q) err = %v, want ErrNotFound", name, err)
		}
	}
	// multi-rail: 2 HCAs each side -> 4 routes
	mr := load(t, "mr2-h16/ftree")
	if rs, err := mr.Routes("node0001", "node0002", nil); err != nil || len(rs) != 4 {
		t.Errorf("multi-rail routes = %d, %v", len(rs), err)
	}
	// Asymmetry is common: count pairs whose cables differ by direction.
	k8 := load(t, "ft3-k8-h128/ftree/before")
	asym := 0
	for x := 0; x < 16; x++ {
		for y := 0; y < 128; y++ {
			if x == y {
				continue
			}
			ex, ey := int32(x), int32(y)
			fw, _ := k8.RouteLinks(ex, k8.Ports[k8.Endpoints[ey].Port].LID, nil)
			bw, _ := k8.RouteLinks(ey, k8.Ports[k8.Endpoints[ex].Port].LID, nil)
			fc, bc := map[int32]bool{}, map[int32]bool{}
			for _, l := range fw {
				fc[min(l, k8.Ports[l].Peer)] = true
			}
			for _, l := range bw {
				bc[min(l, k8.Ports[l].Peer)] = true
			}
			for c := range fc {
				if !bc[c] {
					asym++
					break
				}
			}
		}
	}
	if asym == 0 {
		t.Error("no asymmetric routes in an ftree fabric")
	}
}

// TestTopologySources: the same fabric read from opensm-subnet.lst,
// ibnetdiscover output or neighbors+guid2lid, and with dump_fts instead of
// opensm-lfts.dump, gives the same loads on switch ports.
func TestTopologySources(t *testing.T) {
	for _, dir := range []string{"ft2-h16/minhop/before", "mr2-h16/ftree", "dp-h8/minhop"} {
		full, err := FindFiles(filepath.Join(samples, dir))
		if err != nil {
			t.Fatal(err)
		}
		variants := map[string][]string{
			"subnet":        {FileLFTs, FileSubnet},
			"ibnetdiscover": {FileLFTs, FileIBNetDiscover},
			"neighbors":     {FileLFTs, FileNeighbors, FileGUID2LID},
		}
		if full[FileDumpFTS] != "" {
			variants["dump_fts"] = []string{FileDumpFTS, FileSubnet}
		}
		type res struct {
			routes, sum int64
			loads       map[[2]uint64]int64
			hosts       string
		}
		var ref *res
		for _, name := range sortedKeys(variants) {
			fs := Files{}
			for _, k := range variants[name] {
				fs[k] = full[k]
			}
			m, err := LoadFiles(context.Background(), fs)
			if err != nil {
				t.Fatalf("%s %s: %v", dir, name, err)
			}
			a := analyze(t, m)
			r := &res{routes: a.Routes, sum: a.WeightSum, loads: map[[2]uint64]int64{}, hosts: strings.Join(m.HostNames(), ",")}
			for p, pt := range m.Ports {
				if m.Nodes[pt.Node].Kind == KindSwitch && pt.Peer >= 0 {
					r.loads[[2]uint64{m.Nodes[pt.Node].GUID, uint64(pt.Num)}] = a.Load[p]
				}
			}
			if ref == nil {
				ref = r
				continue
			}
			if r.routes != ref.routes || r.sum != ref.sum || r.hosts != ref.hosts || len(r.loads) != len(ref.loads) {
				t.Errorf("%s %s: routes %d sum %d hosts %d, want %d %d %d", dir, name, r.routes, r.sum, len(r.loads), ref.routes, ref.sum, len(ref.loads))
			}
			for k, v := range ref.loads {
				if r.loads[k] != v {
					t.Errorf("%s %s: load %x:%d = %d, want %d", dir, name, k[0], k[1], r.loads[k], v)
					break
				}
			}
		}
	}
}

func copyDir(t testing.TB, src, dst string, gz bool) {
	t.Helper()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		name := e.Name()
		if gz && !strings.HasSuffix(name, ".gz") {
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			zw.Write(b)
			zw.Close()
			b, name = buf.Bytes(), name+".gz"
		}
		if err := os.WriteFile(filepath.Join(dst, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestGzipAndExplicitFiles(t *testing.T) {
	src := filepath.Join(samples, "ft2-h16/minhop/before")
	ref := analyze(t, load(t, "ft2-h16/minhop/before"))
	dir := t.TempDir()
	copyDir(t, src, dir, true)
	m, err := Load(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if a := analyze(t, m); a.WeightSum != ref.WeightSum || a.Routes != ref.Routes {
		t.Errorf("gzipped: %d routes weight %d, want %d %d", a.Routes, a.WeightSum, ref.Routes, ref.WeightSum)
	}
	// explicit files under other names: recognised by content
	other := t.TempDir()
	var paths []string
	for i, n := range []string{"opensm-lfts.dump", "opensm-subnet.lst", "osm.log"} {
		b, err := os.ReadFile(filepath.Join(src, n))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(other, "file"+strconv.Itoa(i)+".txt")
		os.WriteFile(p, b, 0o644)
		paths = append(paths, p)
	}
	m, err = LoadPaths(context.Background(), paths)
	if err != nil {
		t.Fatal(err)
	}
	if a := analyze(t, m); a.WeightSum != ref.WeightSum || m.Engine.Used != "minhop" {
		t.Errorf("explicit files: weight %d engine %+v", a.WeightSum, m.Engine)
	}
	if _, err := LoadPaths(context.Background(), paths[1:]); !errors.Is(err, ErrNoDumps) {
		t.Errorf("without an LFT dump: %v, want ErrNoDumps", err)
	}
	if _, err := Load(context.Background(), t.TempDir()); !errors.Is(err, ErrNoDumps) {
		t.Errorf("empty dir: %v, want ErrNoDumps", err)
	}
}

func TestLoadErrorsNameFileAndLine(t *testing.T) {
	src := filepath.Join(samples, "ft2-h16/minhop/before")
	for _, tc := range []struct {
		file, want string
		edit       func(lines []string) []string
		sentinel   error
	}{
		{"opensm-lfts.dump", "opensm-lfts.dump:5: bad port", func(l []string) []string { l[4] = "0x0004 0x5"; return l }, ErrSyntax},
		{"opensm-subnet.lst", "opensm-subnet.lst:3: ", func(l []string) []string { l[2] = "{ SW Ports:zz }"; return l }, ErrSyntax},
		{"opensm-lfts.dump", "opensm-lfts.dump:25: switch", func(l []string) []string {
			l[24] = strings.Replace(l[24], "0x0002c90300000200", "0x0002c90300009900", 1)
			return l
		}, ErrTopology},
	} {
		dir := t.TempDir()
		copyDir(t, src, dir, false)
		p := filepath.Join(dir, tc.file)
		b, _ := os.ReadFile(p)
		lines := tc.edit(strings.Split(string(b), "\n"))
		os.WriteFile(p, []byte(strings.Join(lines, "\n")), 0o644)
		_, err := Load(context.Background(), dir)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, tc.sentinel) {
			t.Errorf("%s: err = %v, want %q (%v)", tc.file, err, tc.want, tc.sentinel)
		}
	}
}

// TestLMC builds a tiny fabric by hand: one switch, two HCAs, LMC 1, so
// every destination has two LIDs and each LID is a route. As OpenSM writes
// opensm-subnet.lst, each cable is listed from both ends.
func TestLMC(t *testing.T) {
	dir := t.TempDir()
	sw := "{ SW Ports:04 SystemGUID:0000000000000100 NodeGUID:0000000000000100 PortGUID:0000000000000100 VenID:000000 DevID:0000 Rev:000000A1 {leaf} LID:0001 PN:%02X }"
	ca := "{ CA Ports:01 SystemGUID:%[1]s NodeGUID:%[1]s PortGUID:%[2]s VenID:00000000 DevID:0000 Rev:000000A1 {%[3]s mlx5_0} LID:%[4]s PN:01 }"
	a1, b1 := sprintf(ca, "0000000000000010", "0000000000000011", "a1", "0002"), sprintf(ca, "0000000000000020", "0000000000000021", "b1", "0004")
	subnet := strings.Join([]string{
		sprintf(sw, 1) + " " + a1 + " PHY=4x LOG=ACT SPD=2.5",
		a1 + " " + sprintf(sw, 1) + " PHY=4x LOG=ACT SPD=2.5",
		sprintf(sw, 2) + " " + b1 + " PHY=4x LOG=ACT SPD=2.5",
		b1 + " " + sprintf(sw, 2) + " PHY=4x LOG=ACT SPD=2.5",
	}, "\n") + "\n"
	lfts := "Unicast lids [0-5] of switch Lid 1 guid 0x0000000000000100 ('leaf'):\n0x0001 000\n0x0002 001\n0x0003 001\n0x0004 002\n0x0005 002\n5 lids dumped\n"
	g2l := "0x0000000000000100 0x0001 0x0001\n0x0000000000000011 0x0002 0x0003\n0x0000000000000021 0x0004 0x0005\n"
	for n, c := range map[string]string{FileSubnet: subnet, FileLFTs: lfts, FileGUID2LID: g2l} {
		os.WriteFile(filepath.Join(dir, n), []byte(c), 0o644)
	}
	m, err := Load(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	a := analyze(t, m)
	if s := m.Summary(); s.MaxLMC != 1 || s.LIDs != 5 || a.Routes != 4 {
		t.Fatalf("summary %+v routes %d", s, a.Routes)
	}
	if rs, err := m.Routes("a1", "3", nil); err != nil || len(rs) != 0 {
		t.Errorf("LID 3 is a1's own: %v %v", rs, err)
	}
	rs, err := m.Routes("a1", "b1", a)
	if err != nil || len(rs) != 2 || rs[0].DstLID != 4 || rs[1].DstLID != 5 || len(rs[1].Hops) != 2 {
		t.Fatalf("routes %+v %v", rs, err)
	}
	// each HCA cable carries 2 routes each way
	if rs[0].Weight != 4 {
		t.Errorf("weight %d, want 4", rs[0].Weight)
	}
}

// The lmc* files describe one switch ("leaf", LID 1, 4 ports) with two
// single-port HCAs a1 (LIDs 2-3, LMC 1) and b1 (LIDs 4-5, LMC 1), as
// OpenSM writes them: every LID of an LMC range is an LFT entry whose
// comment names the port, and neighbors lists each cable from both ends.
const (
	lmcLFTs = "Unicast lids [0-5] of switch Lid 1 guid 0x0000000000000100 ('leaf'):\n" +
		"0x0001 000 # Switch portguid 0x0000000000000100: 'leaf'\n" +
		"0x0002 001 # Channel Adapter portguid 0x0000000000000011: 'a1 mlx5_0'\n" +
		"0x0003 001 # Channel Adapter portguid 0x0000000000000011: 'a1 mlx5_0'\n" +
		"0x0004 002 # Channel Adapter portguid 0x0000000000000021: 'b1 mlx5_0'\n" +
		"0x0005 002 # Channel Adapter portguid 0x0000000000000021: 'b1 mlx5_0'\n" +
		"6 lids dumped\n"
	lmcGUID2LID  = "0x0000000000000100 0x0001 0x0001\n\n0x0000000000000011 0x0002 0x0003\n\n0x0000000000000021 0x0004 0x0005\n"
	lmcNeighbors = "0x0000000000000011:1 0x0000000000000100:1\n\n0x0000000000000100:1 0x0000000000000011:1\n\n" +
		"0x0000000000000021:1 0x0000000000000100:2\n\n0x0000000000000100:2 0x0000000000000021:1\n"
)

// TestNeighborsTopologyWithLMC: with neighbors as the topology, an HCA
// port's LID comes from the LFT entry comments, and with LMC > 0 every LID
// of the port's range names the same port GUID. The port gets the base of
// its range (guid2lid's, or the lowest LID naming the port), every time:
// not whichever LID a map iteration yields last (which shifted a1's range
// onto b1's, a spurious "LID assigned to two ports", or onto LIDs outside
// the range, and changed from run to run).
func TestNeighborsTopologyWithLMC(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
	}{
		{"guid2lid", map[string]string{FileNeighbors: lmcNeighbors, FileGUID2LID: lmcGUID2LID, FileLFTs: lmcLFTs}},
		// without guid2lid the range is unknown (LMC 0): the base LID is
		// still the port's, so routes to it work
		{"LFT comments only", map[string]string{FileNeighbors: lmcNeighbors, FileLFTs: lmcLFTs}},
	} {
		routes := int64(4)
		if tc.files[FileGUID2LID] == "" {
			routes = 2
		}
		for i := 0; i < 30; i++ {
			m, err := loadMem(tc.files)
			if err != nil {
				t.Fatalf("%s, run %d: load from neighbors with LMC 1: %v", tc.name, i, err)
			}
			lids := map[string]uint16{}
			for _, e := range m.Endpoints {
				lids[m.Hosts[e.Host].Name] = m.Ports[e.Port].LID
			}
			if lids["a1"] != 2 || lids["b1"] != 4 {
				t.Fatalf("%s, run %d: base LIDs %v, want a1=2 b1=4 (ranges 2-3, 4-5)", tc.name, i, lids)
			}
			a, err := m.AnalyzeWith(context.Background(), AnalyzeOptions{Workers: 1})
			if err != nil {
				t.Fatal(err)
			}
			if a.Routes != routes || a.Broken != 0 {
				t.Fatalf("%s, run %d: %d routes %d broken, want %d and 0", tc.name, i, a.Routes, a.Broken, routes)
			}
		}
	}
}

// TestHeaviestRoutesIndependentOfWorkers: Analysis.Heaviest (the heaviest
// routes of fabric loads) is the same for any number of workers, although
// many routes weigh the same (in ft2-h16/minhop/before 192 routes weigh
// 78): the per-worker top-N heaps break ties by (source, destination LID)
// exactly as the final sort does, instead of keeping the first routes of
// each worker's range of destinations.
func TestHeaviestRoutesIndependentOfWorkers(t *testing.T) {
	for _, dir := range []string{"ft2-h16/minhop/before", "mr2-h16/ftree"} {
		m := load(t, dir)
		var ref string
		for w := 1; w <= 4; w++ {
			for _, top := range []int{0, 7} {
				a, err := m.AnalyzeWith(context.Background(), AnalyzeOptions{Workers: w, TopRoutes: top})
				if err != nil {
					t.Fatal(err)
				}
				for i := 1; i < len(a.Heaviest); i++ {
					if !a.Heaviest[i-1].heavier(a.Heaviest[i]) {
						t.Fatalf("%s: Heaviest not in order at %d: %v", dir, i, a.Heaviest)
					}
				}
				got := sprintf("%v", a.Heaviest)
				if top == 7 {
					// a shorter list is a prefix of the longer one
					if !strings.HasPrefix(ref, strings.TrimSuffix(got, "]")) {
						t.Errorf("%s: top 7 with %d workers %s is not a prefix of %s", dir, w, got, ref)
					}
					continue
				}
				if w == 1 {
					ref = got
					continue
				}
				if got != ref {
					t.Errorf("%s: Heaviest with %d workers:\n  %s\nwith 1 worker:\n  %s", dir, w, got, ref)
				}
			}
		}
	}
}

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

func TestBrokenRoutesAndLoops(t *testing.T) {
	m := load(t, "ft2-h16/minhop/before")
	// leaf001 (switch LID 2) sends stor004's LID 8 to spine002; make spine002
	// send it back to leaf001: a loop for every source behind leaf001.
	var leaf, spine int32 = -1, -1
	for s, ni := range m.Switches {
		switch m.Nodes[ni].Desc {
		case "leaf001":
			leaf = int32(s)
		case "spine002":
			spine = int32(s)
		}
	}
	if m.lft[leaf][8] != 6 {
		t.Fatalf("unexpected sample: leaf001 LID 8 -> %d", m.lft[leaf][8])
	}
	m.setLFT(spine, 8, 1) // spine002 port 1 goes to leaf001
	a, err := m.AnalyzeWith(context.Background(), AnalyzeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Every source on leaf001..leaf003 whose route to stor004 crosses spine002 breaks.
	if a.Broken == 0 || a.Routes+a.Broken != 240 {
		t.Errorf("routes %d broken %d", a.Routes, a.Broken)
	}
	rs, _ := m.Routes("node0001", "stor004", nil)
	if len(rs) != 1 || rs[0].Broken != reasonLoop {
		t.Errorf("route = %+v", rs)
	}
	_, _, n := bruteForce(m)
	if n != a.Routes {
		t.Errorf("brute force %d working routes, trees %d", n, a.Routes)
	}
}

func TestSelectBeatsRandom(t *testing.T) {
	m := load(t, "ft3-k16-h1024/ftree")
	ctx := context.Background()
	var storage, clients []string
	for _, h := range m.HostNames() {
		if strings.HasPrefix(h, "stor") {
			storage = append(storage, h)
		} else {
			clients = append(clients, h)
		}
	}
	for _, tc := range []struct {
		name string
		req  SelectRequest
	}{
		{"all", SelectRequest{K: 8}},
		{"clients-vs-storage", SelectRequest{K: 16, Candidates: clients, Targets: storage[:8]}},
		{"spread", SelectRequest{K: 32, Candidates: clients[:256]}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.RandomTrials = 30
			sel, err := m.SelectWith(ctx, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if len(sel.Hosts) != tc.req.K || !sort.StringsAreSorted(sel.Hosts) {
				t.Fatalf("hosts %v", sel.Hosts)
			}
			if sel.Score.SharedPairs > sel.Random.MinSharedPairs || float64(sel.Score.SharedPairs) >= sel.Random.MeanSharedPairs {
				t.Errorf("selection %+v not better than random %+v", sel.Score, sel.Random)
			}
			// the reported score is the score of the hosts
			var targets []string
			if len(tc.req.Targets) > 0 {
				targets = tc.req.Targets
			}
			s, err := m.Overlap(ctx, sel.Hosts, targets)
			if err != nil || s != sel.Score {
				t.Errorf("Overlap = %+v %v, want %+v", s, err, sel.Score)
			}
		})
	}
	if _, err := m.Select(ctx, 2000, nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("k too big: %v", err)
	}
	if _, err := m.Select(ctx, 1, []string{"nohost"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown candidate: %v", err)
	}
}

func TestRank(t *testing.T) {
	m := load(t, "ft3-k8-h128/ftree/after")
	ctx := context.Background()
	reps := []string{"stor001", "node0002", "node0100", "ghost", "stor009"}
	got, err := m.Rank(ctx, "node0001", reps)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(reps) || got[len(got)-1] != "ghost" {
		t.Fatalf("Rank = %v", got)
	}
	a := analyze(t, m)
	weight := func(h string) int64 {
		var w int64
		for _, pair := range [][2]string{{"node0001", h}, {h, "node0001"}} {
			rs, _ := m.Routes(pair[0], pair[1], a)
			for _, r := range rs {
				w += r.Weight
			}
		}
		return w
	}
	for i := 1; i < len(got)-1; i++ {
		if weight(got[i-1]) > weight(got[i]) {
			t.Errorf("Rank %v: %s (%d) before %s (%d)", got, got[i-1], weight(got[i-1]), got[i], weight(got[i]))
		}
	}
	// node0002 shares node0001's leaf: the lightest replica
	if got[0] != "node0002" {
		t.Errorf("Rank = %v, want node0002 first", got)
	}
	if _, err := m.Rank(ctx, "ghost", reps); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown client: %v", err)
	}
}

// TestRankLocalReplicaFirst: a replica held by the client's own host
// crosses no fabric link (routes between endpoints of one host are not
// routes), so Rank puts it first, instead of scoring a fictitious route
// from the HCA up to its leaf and back (as heavy as a replica on another
// host of the same leaf).
func TestRankLocalReplicaFirst(t *testing.T) {
	m := load(t, "ft2-h16/minhop/before")
	for _, reps := range [][]string{
		{"node0002", "node0001"},
		{"ghost", "stor004", "node0002", "node0001"},
	} {
		got, err := m.Rank(context.Background(), "node0001", reps)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(reps) || got[0] != "node0001" {
			t.Errorf("Rank(node0001, %v) = %v, want the local replica node0001 first", reps, got)
		}
	}
}

func TestWatch(t *testing.T) {
	dir := t.TempDir()
	copyDir(t, filepath.Join(samples, "ft2-h16/minhop/before"), dir, false)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// OpenSM rewrites its dumps after the cable failure. The new files are
	// written beside the directory and renamed in, so that a slow copy on a
	// loaded machine does not leave half a set stable for a poll interval.
	staged := t.TempDir()
	copyDir(t, filepath.Join(samples, "ft2-h16/minhop/after"), staged, false)
	rewrote := make(chan error, 1)
	rewrite := func() {
		time.Sleep(50 * time.Millisecond)
		ents, err := os.ReadDir(staged)
		for _, e := range ents {
			if err == nil {
				err = os.Rename(filepath.Join(staged, e.Name()), filepath.Join(dir, e.Name()))
			}
		}
		rewrote <- err
	}
	var events []WatchEvent
	err := Watch(ctx, dir, WatchOptions{Interval: 20 * time.Millisecond}, func(ev WatchEvent) error {
		events = append(events, ev)
		switch len(events) {
		case 1:
			go rewrite()
		case 2:
			return ErrStopWatch
		}
		return nil
	})
	if len(events) > 0 {
		if err := <-rewrote; err != nil {
			t.Fatalf("rewrite the dumps: %v", err)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 2 || events[0].Diff != nil || events[1].Diff == nil {
		t.Fatalf("events %+v", events)
	}
	if d := events[1].Diff; d.Changed != 72 || d.Routes != 240 || len(d.CablesDown) != 1 {
		t.Errorf("diff %+v", d)
	}
}

func TestHeatmapInput(t *testing.T) {
	// the PNG itself is drawn by package heatmap; here: Links covers every
	// cable in both directions
	m := load(t, "ft2-h16/minhop/before")
	a := analyze(t, m)
	ls := a.Links(m)
	if s := m.Summary(); len(ls) != 2*s.Cables {
		t.Errorf("%d link directions for %d cables", len(ls), s.Cables)
	}
	for i := 1; i < len(ls); i++ {
		if ls[i].Load > ls[i-1].Load {
			t.Fatal("links not sorted by load")
		}
	}
}

// FuzzLoadLFT feeds arbitrary LFT dumps against a real topology: loading
// and analysing must never panic or hang (loops, dead ports, stray LIDs).
func FuzzLoadLFT(f *testing.F) {
	src := filepath.Join(samples, "ft2-h16/minhop/before")
	b, err := os.ReadFile(filepath.Join(src, FileLFTs))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(bytes.Replace(b, []byte("0x0008 006"), []byte("0x0008 003"), -1))
	subnet, err := os.ReadFile(filepath.Join(src, FileSubnet))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, lft []byte) {
		files := map[string][]byte{"s": subnet, "l": lft}
		open := func(p string) (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(files[p])), nil }
		m, err := loadFiles(context.Background(), Files{FileSubnet: "s", FileLFTs: "l"}, open)
		if err != nil {
			return
		}
		a, err := m.AnalyzeWith(context.Background(), AnalyzeOptions{Workers: 1})
		if err != nil {
			t.Fatal(err)
		}
		if a.Routes+a.Broken != 240 {
			t.Fatalf("routes %d + broken %d != 240", a.Routes, a.Broken)
		}
		if _, err := m.Routes("node0001", "stor004", a); err != nil {
			t.Fatal(err)
		}
	})
}

// TestAsymmetricPairs: the samples' README reports that in the 1024-host
// ftree fabric about 509 k of the 524 k host pairs do not use the same
// cables in both directions.
func TestAsymmetricPairs(t *testing.T) {
	if testing.Short() {
		t.Skip("walks 1 M routes")
	}
	m := load(t, "ft3-k16-h1024/ftree")
	E := len(m.Endpoints)
	cable := func(l int32) int32 { return min(l, m.Ports[l].Peer) }
	var fw, bw []int32
	pairs, asym := 0, 0
	for x := 0; x < E; x++ {
		for y := x + 1; y < E; y++ {
			pairs++
			fw, _ = m.RouteLinks(int32(x), m.Ports[m.Endpoints[y].Port].LID, fw[:0])
			bw, _ = m.RouteLinks(int32(y), m.Ports[m.Endpoints[x].Port].LID, bw[:0])
			same := len(fw) == len(bw)
			for i := 0; same && i < len(fw); i++ {
				// the reverse route crosses the same cables in reverse order
				same = cable(fw[i]) == cable(bw[len(bw)-1-i])
			}
			if !same {
				asym++
			}
		}
	}
	if pairs != 523776 || asym < 508500 || asym > 509500 {
		t.Errorf("%d of %d pairs asymmetric, README: about 509 k of 524 k", asym, pairs)
	}
	t.Logf("%d of %d host pairs use different cables in each direction", asym, pairs)
}

func TestParseLFTsParallel(t *testing.T) {
	path := filepath.Join(samples, "ft3-k4-h16/minhop/before", FileLFTs)
	var seq []*ibdump.LFT
	if err := withFile(path, func(r io.Reader, name string) error {
		return ibdump.ParseLFTs(r, name, ibdump.LFTHandler{Switch: func(l *ibdump.LFT) error { seq = append(seq, l); return nil }})
	}); err != nil {
		t.Fatal(err)
	}
	for _, workers := range []int{2, 3, 7, 64} {
		var par []*ibdump.LFT
		ok, err := parseLFTsParallel(context.Background(), path, 0, workers, 0, func(l *ibdump.LFT) error { par = append(par, l); return nil })
		if err != nil || !ok {
			t.Fatalf("workers %d: %v %v", workers, ok, err)
		}
		if len(par) != len(seq) {
			t.Fatalf("workers %d: %d switches, want %d", workers, len(par), len(seq))
		}
		for i := range seq {
			if par[i].GUID != seq[i].GUID || !bytes.Equal(par[i].Ports, seq[i].Ports) {
				t.Fatalf("workers %d: switch %d differs", workers, i)
			}
		}
	}
	// a damaged section makes it decline, so the sequential parse can name the line
	dir := t.TempDir()
	b, _ := os.ReadFile(path)
	b = bytes.Replace(b, []byte("0x0010 001"), []byte("0x0010 0z1"), 1)
	bad := filepath.Join(dir, FileLFTs)
	os.WriteFile(bad, b, 0o644)
	called := false
	ok, err := parseLFTsParallel(context.Background(), bad, 0, 4, 0, func(*ibdump.LFT) error { called = true; return nil })
	if ok || err != nil || called {
		t.Errorf("damaged file: ok %v err %v called %v", ok, err, called)
	}
	// gzip and small files are left to the sequential parser
	if ok, _ := parseLFTsParallel(context.Background(), path, 1<<40, 4, 0, nil); ok {
		t.Error("small file parsed in parallel")
	}
}

// TestIBRoute: ibroute output for one switch (taken from the same
// simulated fabric) is recognised by content and agrees with OpenSM's dump.
func TestIBRoute(t *testing.T) {
	d := filepath.Join(samples, "ft2-h16/minhop/before")
	fs, err := ClassifyFiles([]string{filepath.Join(d, FileLFTs), filepath.Join(d, FileSubnet), "testdata/ibroute-leaf004.out"})
	if err != nil {
		t.Fatal(err)
	}
	if fs[FileDumpFTS] != "testdata/ibroute-leaf004.out" {
		t.Fatalf("classified as %v", fs)
	}
	m, err := LoadFiles(context.Background(), fs)
	if err != nil {
		t.Fatal(err)
	}
	res, err := m.Check(context.Background(), fs)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Checked != 22 || res[0].Mismatches != 0 {
		t.Errorf("check %+v", res)
	}
}

func TestImproveBySwaps(t *testing.T) {
	m := load(t, "ft3-k8-h128/ftree/before")
	a := analyze(t, m)
	all, _ := m.hostIndexes(nil)
	// a poor start: hosts spread over every pod
	start := []int32{all[0], all[20], all[40], all[60], all[80], all[100]}
	sc := m.newScorer(a.Load)
	before := sc.scoreSet(start, nil)
	got := m.improveBySwaps(context.Background(), sc, append([]int32(nil), start...), all, nil, 1<<30)
	after := m.newScorer(a.Load).scoreSet(got, nil)
	if before.SharedPairs == 0 || after.SharedPairs >= before.SharedPairs {
		t.Errorf("swaps: %d -> %d shared pairs", before.SharedPairs, after.SharedPairs)
	}
	// the counters left in sc describe the final set
	var sum int64
	for _, c := range sc.cnt {
		sum += int64(c) * int64(c-1) / 2
	}
	if sum != after.SharedPairs {
		t.Errorf("counters say %d shared pairs, rescoring %d", sum, after.SharedPairs)
	}
}

// TestClassifyByContent: every dump kind is recognised under another name.
func TestClassifyByContent(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(samples, "ft2-h16/minhop/before")
	for _, k := range []string{FileLFTs, FileDumpFTS, FileSubnet, FileIBNetDiscover, FileGUID2LID,
		FileNeighbors, FileOSMLog, FileOpenSMOut, FileFDBs, FileLIDMatrix} {
		b, err := os.ReadFile(filepath.Join(src, k))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, "x-"+strings.ReplaceAll(k, ".", "_"))
		os.WriteFile(p, b, 0o644)
		got, err := sniff(p)
		if err != nil || got != k {
			t.Errorf("%s recognised as %q (%v)", k, got, err)
		}
	}
	p := filepath.Join(dir, "junk")
	os.WriteFile(p, []byte("hello\n"), 0o644)
	if _, err := ClassifyFiles([]string{p}); !errors.Is(err, ErrNoDumps) {
		t.Errorf("junk: %v", err)
	}
}
