package fabric

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slipstream-io/slipstream/internal/fabric/ibdump"
)

// sampleText reads a file of the ft2-h16/minhop/before sample.
func sampleText(t testing.TB, name string) string {
	t.Helper()
	b, err := readSample(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readSample(name string) (string, error) {
	b, err := os.ReadFile(filepath.Join(samples, "ft2-h16/minhop/before", name))
	return string(b), err
}

// TestLIDArgumentsAreDecimalOrHex: an endpoint named by LID is decimal,
// also zero-padded ("0010" is LID 10, not octal 8), or hex with a 0x
// prefix.
func TestLIDArgumentsAreDecimalOrHex(t *testing.T) {
	m := load(t, "ft2-h16/minhop/before")
	for _, lid := range []int{10, 19} {
		if got, err := m.Routes("node0001", sprintf("0x%04x", lid), nil); err != nil || len(got) != 1 || got[0].DstLID != uint16(lid) {
			t.Errorf("destination %#x: %+v %v", lid, got, err)
		}
		want, err := m.Routes("node0001", sprintf("%d", lid), nil)
		if err != nil || len(want) == 0 {
			t.Fatalf("LID %d: %v", lid, err)
		}
		got, err := m.Routes("node0001", sprintf("%04d", lid), nil)
		if err != nil || len(got) != 1 || got[0].DstLID != uint16(lid) {
			var dst any = err
			if err == nil && len(got) > 0 {
				dst = sprintf("LID %d (%s)", got[0].DstLID, got[0].Dst)
			}
			t.Errorf("destination %q resolves to %v, want LID %d (%s)", sprintf("%04d", lid), dst, lid, want[0].Dst)
		}
	}
}

// TestIdenticalCADescriptionsBecomeSeparateHosts: HCAs whose node
// description was never set (no rdma-ndd, fresh install, containers) all
// report the firmware default, e.g. "MT4123 ConnectX6   Mellanox
// Technologies". They must not collapse into one host "MT4123" (whose
// routes would all be "within one host" and dropped): CAs with different
// GUIDs and the same description each become a host named by GUID.
func TestIdenticalCADescriptionsBecomeSeparateHosts(t *testing.T) {
	subnet := sampleText(t, FileSubnet)
	var out []string
	for _, ln := range strings.Split(subnet, "\n") {
		for _, host := range []string{"node", "stor"} {
			for {
				i := strings.Index(ln, "{"+host)
				if i < 0 {
					break
				}
				j := i + strings.Index(ln[i:], "}")
				ln = ln[:i] + "{MT4123 ConnectX6   Mellanox Technologies" + ln[j:]
			}
		}
		out = append(out, ln)
	}
	m, err := loadMem(map[string]string{FileSubnet: strings.Join(out, "\n"), FileLFTs: sampleText(t, FileLFTs)})
	if err != nil {
		t.Fatal(err)
	}
	a, err := m.AnalyzeWith(context.Background(), AnalyzeOptions{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Hosts) != 16 || a.Routes != 16*15 {
		t.Errorf("16 HCAs with the default description: %d hosts %v, %d endpoints, %d routes, %d broken, no error",
			len(m.Hosts), m.HostNames(), len(m.Endpoints), a.Routes, a.Broken)
	}
}

// TestTopologyErrorsNameFileAndLine: "malformed input is reported as
// file:line: what is wrong", also for contradictions found while building
// the topology (a load reads up to ten files): a port cabled twice names
// the topology file and line, two ports claiming one LID name both ports'
// GUIDs and lines.
func TestTopologyErrorsNameFileAndLine(t *testing.T) {
	subnet := strings.Split(sampleText(t, FileSubnet), "\n")
	// line 2 now claims leaf001 port 1 (already cabled to node0001 on line 1)
	dupPort := append([]string(nil), subnet...)
	dupPort[1] = strings.Replace(dupPort[1], "PN:02", "PN:01", 1)
	// two HCAs with the same LID: node0002 (LID 9) claims node0001's LID 1
	dupLID := strings.Split(strings.ReplaceAll(sampleText(t, FileSubnet), "{node0002 mlx5_0} LID:0009", "{node0002 mlx5_0} LID:0001"), "\n")
	for name, lines := range map[string][]string{"port cabled twice": dupPort, "LID used twice": dupLID} {
		_, err := loadMem(map[string]string{FileSubnet: strings.Join(lines, "\n"), FileLFTs: sampleText(t, FileLFTs)})
		if err == nil {
			t.Errorf("%s: loaded", name)
			continue
		}
		if !errors.Is(err, ErrTopology) || !strings.Contains(err.Error(), FileSubnet+":") {
			t.Errorf("%s: error %q is not a topology error naming %s and the line", name, err, FileSubnet)
		}
		if name == "LID used twice" && strings.Count(err.Error(), FileSubnet+":") != 2 {
			t.Errorf("%s: error %q does not name both claims", name, err)
		}
	}
}

// TestCableEndsMustAgree: every cable appears twice in opensm-subnet.lst
// (once from each end). When the two lines describe a node differently
// (here: an HCA's LID; also its description, port GUID, port count) the
// load fails with ErrTopology naming the line, rather than the line read
// last winning.
func TestCableEndsMustAgree(t *testing.T) {
	subnet := strings.Replace(sampleText(t, FileSubnet), "{node0002 mlx5_0} LID:0009", "{node0002 mlx5_0} LID:0030", 1)
	m, err := loadMem(map[string]string{FileSubnet: subnet, FileLFTs: sampleText(t, FileLFTs)})
	if err != nil && (!errors.Is(err, ErrTopology) || !strings.Contains(err.Error(), FileSubnet+":")) {
		t.Errorf("err = %v, want a topology error naming %s and the line", err, FileSubnet)
	}
	if err == nil {
		lids := ""
		for _, e := range m.Hosts[m.hostByName["node0002"]].Endpoints {
			lids += sprintf(" %#x", m.Ports[m.Endpoints[e].Port].LID)
		}
		t.Errorf("node0002 is LID 0x30 on one line and 0x9 on the other: loaded, node0002 has LID%s", lids)
	}
}

// TestBuildRejectsMoreThan255Ports: a node claiming more ports than
// InfiniBand allows (Port.Num is a uint8) is a topology error, not an
// allocation of one Port per claimed port number.
func TestBuildRejectsMoreThan255Ports(t *testing.T) {
	for _, np := range []int{256, 1 << 20} {
		b := newBuilder()
		b.topoPath = FileSubnet
		b.node(0x10, KindCA, "h1 mlx5_0", np)
		if _, err := b.build(nil, FileLFTs); !errors.Is(err, ErrTopology) {
			t.Errorf("%d ports: err = %v, want ErrTopology", np, err)
		}
	}
}

// TestTopologyLIDOutOfRangeNamesFileAndLine: "malformed input is reported
// as file:line: what is wrong", also a LID above the unicast range
// (0xBFFF) in opensm-subnet.lst or ibnetdiscover output: the error names
// the file and the line assigning the LID, not only the LID. A range that
// an LMC pushes past 0xBFFF names the port and its line.
func TestTopologyLIDOutOfRangeNamesFileAndLine(t *testing.T) {
	for _, tc := range []struct {
		kind, from, to string
	}{
		{FileSubnet, "{node0002 mlx5_0} LID:0009", "{node0002 mlx5_0} LID:C000"},
		{FileSubnet, "{node0002 mlx5_0} LID:0009", "{node0002 mlx5_0} LID:10000"},
		{FileIBNetDiscover, `# "leaf004" base port 0 lid 5 lmc 0`, `# "leaf004" base port 0 lid 49152 lmc 0`},
		{FileIBNetDiscover, "lid 9 lmc 0", "lid 70000 lmc 0"},
	} {
		lines := strings.Split(sampleText(t, tc.kind), "\n")
		line := -1
		for i, l := range lines {
			if strings.Contains(l, tc.from) {
				lines[i] = strings.ReplaceAll(l, tc.from, tc.to)
				if line < 0 {
					line = i + 1
				}
			}
		}
		if line < 0 {
			t.Fatalf("%s: no %q in the sample", tc.kind, tc.from)
		}
		_, err := loadMem(map[string]string{tc.kind: strings.Join(lines, "\n"), FileLFTs: sampleText(t, FileLFTs)})
		if err == nil {
			t.Errorf("%s: %q accepted", tc.kind, tc.to)
			continue
		}
		if want := sprintf("%s:%d: ", tc.kind, line); !strings.Contains(err.Error(), want) || !errors.Is(err, ErrSyntax) {
			t.Errorf("%s: error %q does not name %s (file:line of the LID) or is not ErrSyntax", tc.kind, err, want)
		}
	}
	// base LID 0xBFFF (valid) with LMC 1 from guid2lid: 0xBFFF-0xC000
	b := newBuilder()
	b.topoPath = FileSubnet
	n := b.node(0x10, KindCA, "h1 mlx5_0", 1)
	p := n.port(1)
	p.guid, p.lid, p.line = 0x11, ibdump.MaxUnicastLID, 7
	b.lmcByGUID[0x11] = 1
	if _, err := b.build(nil, FileLFTs); !errors.Is(err, ErrTopology) || !strings.Contains(err.Error(), FileSubnet+":7") {
		t.Errorf("LIDs 0xbfff-0xc000: err = %v, want ErrTopology naming %s:7", err, FileSubnet)
	}
}

// TestFallbackDetectedFromOSMLogAlone: the ftree -> minhop fallback is
// what fabric diff/watch warn about. A production SM's dump directory
// holds osm.log but often no opensm.out (no "Activate 'ftree'" line), and
// osm.log alone shows ftree failing ("ucast_mgr_route: ftree: cannot
// build lid matrices", ERR AB0D) before "minhop tables configured": that
// is a fallback, with ftree as the requested engine, with or without
// opensm.out. A sweep in which the requested engine routes is none.
func TestFallbackDetectedFromOSMLogAlone(t *testing.T) {
	for _, tc := range []struct {
		dir   string
		files []string
		want  EngineInfo
	}{
		{"ft3-k4-h16/ftree/after", []string{FileOSMLog},
			EngineInfo{Requested: []string{"ftree"}, Used: "minhop", Failed: []string{"ftree"}, NotFatTree: true, Fallback: true}},
		{"ft3-k4-h16/ftree/after", []string{FileOSMLog, FileOpenSMOut},
			EngineInfo{Requested: []string{"ftree"}, Used: "minhop", Failed: []string{"ftree"}, NotFatTree: true, Fallback: true}},
		{"ft3-k4-h16/ftree/after", []string{FileOpenSMOut},
			EngineInfo{Requested: []string{"ftree"}}},
		{"ft3-k4-h16/ftree/before", []string{FileOSMLog},
			EngineInfo{Used: "ftree"}},
		{"ft3-k4-h16/ftree/before", []string{FileOSMLog, FileOpenSMOut},
			EngineInfo{Requested: []string{"ftree"}, Used: "ftree"}},
	} {
		dir := filepath.Join(samples, tc.dir)
		fs := Files{FileLFTs: filepath.Join(dir, FileLFTs), FileSubnet: filepath.Join(dir, FileSubnet)}
		for _, k := range tc.files {
			fs[k] = filepath.Join(dir, k)
		}
		m, err := LoadFiles(context.Background(), fs)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := sprintf("%+v", m.Engine), sprintf("%+v", tc.want); got != want {
			t.Errorf("%s with %v: engine %s, want %s", tc.dir, tc.files, got, want)
		}
	}
	// minhop configured as ftree's fallback (routing_engine ftree,minhop):
	// minhop was requested, but routing with it after ftree failed is still
	// a fallback
	osmLog, err := os.ReadFile(filepath.Join(samples, "ft3-k4-h16/ftree/after", FileOSMLog))
	if err != nil {
		t.Fatal(err)
	}
	m, err := loadMem(map[string]string{FileSubnet: sampleText(t, FileSubnet), FileLFTs: sampleText(t, FileLFTs),
		FileOSMLog: string(osmLog), FileOpenSMOut: "OpenSM 3.3.23\nCommand Line Arguments:\n Activate 'ftree,minhop' routing engine(s)\n"})
	if err != nil {
		t.Fatal(err)
	}
	if e := m.Engine; !e.Fallback || e.Used != "minhop" || strings.Join(e.Requested, ",") != "ftree,minhop" {
		t.Errorf("ftree,minhop requested, ftree failed: engine %+v, want a fallback to minhop", e)
	}
}
