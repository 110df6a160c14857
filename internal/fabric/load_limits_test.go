package fabric

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slipstream-io/slipstream/internal/fabric/ibdump"
)

// TestTruncatedLFTDumpIsAnError: an opensm-lfts.dump cut in the middle of
// the last switch's table (OpenSM still writing it, a full disk, a partial
// scp) has no "N lids dumped" footer for that switch. The load fails with
// a file:line syntax error, rather than the LIDs after the cut becoming
// "no LFT entry" and the fabric looking broken instead of the file.
func TestTruncatedLFTDumpIsAnError(t *testing.T) {
	lfts := sampleText(t, FileLFTs)
	subnet := sampleText(t, FileSubnet)
	last := strings.LastIndex(lfts, "Unicast lids [")
	// cut inside an entry line of the last switch: "0x000b 00|4 ..."
	cut := last + strings.Index(lfts[last:], "0x000b ") + len("0x000b 00")
	m, err := loadMem(map[string]string{FileSubnet: subnet, FileLFTs: lfts[:cut]})
	if err == nil {
		a, _ := m.AnalyzeWith(context.Background(), AnalyzeOptions{Workers: 1})
		t.Fatalf("truncated LFT dump (cut at byte %d of %d, mid-line, no footer) loaded without error: %d routes, %d broken",
			cut, len(lfts), a.Routes, a.Broken)
	}
	if !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), FileLFTs+":") {
		t.Errorf("err = %v, want a file:line syntax error", err)
	}
}

// TestTruncatedTopologyIsAnError: opensm-subnet.lst and ibnetdiscover
// output describe every cable from both ends (a subnet list line per
// direction; a port line in each node's record). A file cut short (still
// being written, a full disk, a partial copy) loaded silently before, as
// a fabric with broken routes (cables whose lines were lost became dead
// ports) or fewer hosts (CA records lost); now a cable described from one
// end only is an ErrTopology naming the file and the line of the one
// description. Whole files of every sample still load (see
// TestEverySampleTopologyLoads).
func TestTruncatedTopologyIsAnError(t *testing.T) {
	for _, kind := range []string{FileSubnet, FileIBNetDiscover} {
		lines := strings.SplitAfter(sampleText(t, kind), "\n")
		// (cut after a few lines, no cable is left to be one-sided, but the
		// load fails all the same: no node, or switches of the LFT dump
		// missing from the topology)
		for _, keep := range []int{1, 10, len(lines) / 2, len(lines) * 3 / 4, len(lines) - 3} {
			cut := strings.Join(lines[:keep], "")
			m, err := loadMem(map[string]string{kind: cut, FileLFTs: sampleText(t, FileLFTs)})
			if err == nil {
				a, _ := m.AnalyzeWith(context.Background(), AnalyzeOptions{Workers: 1})
				t.Errorf("%s cut after line %d of %d loaded without error: %d hosts (16 in the full file), %d routes, %d broken",
					kind, keep, len(lines), len(m.Hosts), a.Routes, a.Broken)
				continue
			}
			if keep > 10 && (!errors.Is(err, ErrTopology) || !strings.Contains(err.Error(), kind+":") || !strings.Contains(err.Error(), "only from")) {
				t.Errorf("%s cut after line %d: error %q is not an ErrTopology naming the file and line of a one-sided cable", kind, keep, err)
			}
		}
	}
	// one line less in the middle: the line of the other end is named
	subnet := strings.SplitAfter(sampleText(t, FileSubnet), "\n")
	// line 1: leaf001 port 1 -> node0001; which line describes it from node0001's end?
	other := -1
	for i, l := range subnet {
		if strings.HasPrefix(l, "{ CA-SM Ports:01 SystemGUID:0002c90400000010") {
			other = i + 1
		}
	}
	if other < 0 {
		t.Fatal("unexpected sample")
	}
	_, err := loadMem(map[string]string{FileSubnet: strings.Join(subnet[1:], ""), FileLFTs: sampleText(t, FileLFTs)})
	if want := sprintf("%s:%d: ", FileSubnet, other-1); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("first line removed: err = %v, want one naming %s", err, want)
	}
}

// TestEverySampleTopologyLoads: the real dumps (both topology formats,
// plain and gzipped) describe every cable from both ends, so the check
// for one-sided cables never rejects them.
func TestEverySampleTopologyLoads(t *testing.T) {
	var dirs []string
	filepath.WalkDir(samples, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasPrefix(d.Name(), FileLFTs) {
			dirs = append(dirs, filepath.Dir(p))
		}
		return err
	})
	if len(dirs) < 15 {
		t.Fatalf("found %d sample directories", len(dirs))
	}
	for _, dir := range dirs {
		if testing.Short() && strings.Contains(dir, "h2048") {
			continue
		}
		all, err := FindFiles(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, topo := range []string{FileSubnet, FileIBNetDiscover} {
			m, err := LoadFiles(context.Background(), Files{FileLFTs: all[FileLFTs], topo: all[topo]})
			if err != nil {
				t.Errorf("%s with %s: %v", dir, topo, err)
				continue
			}
			if len(m.Hosts) == 0 {
				t.Errorf("%s with %s: no hosts", dir, topo)
			}
		}
	}
}

// TestLFTTablesBoundedByTopology: the LFTs are kept until the model is
// built, so their memory must follow the fabric, not what a header or a
// stray entry claims: a table whose header claims LIDs up to 0xBFFF and
// that has an entry for 0xBFFF is stored only up to the topology's highest
// LID (plus room for an LMC range), and the fabric loads as before.
func TestLFTTablesBoundedByTopology(t *testing.T) {
	lfts := strings.SplitAfter(sampleText(t, FileLFTs), "\n")
	for i, l := range lfts {
		if strings.HasPrefix(l, "Unicast lids [") {
			lfts[i] = "Unicast lids [0-49151]" + l[strings.Index(l, "]")+1:]
			lfts = append(lfts[:i+1], append([]string{"0xbfff 001\n"}, lfts[i+1:]...)...)
			break
		}
	}
	m, err := loadMem(map[string]string{FileSubnet: sampleText(t, FileSubnet), FileLFTs: strings.Join(lfts, "")})
	if err != nil {
		t.Fatal(err)
	}
	for s, tab := range m.lft {
		if len(tab) > len(m.lidPort)+127 || cap(tab) > len(m.lidPort)+127 {
			t.Errorf("switch %d: table of %d LIDs (capacity %d) for a fabric of %d LIDs", s, len(tab), cap(tab), len(m.lidPort))
		}
	}
	if a := analyze(t, m); a.Routes != 240 || a.Broken != 0 {
		t.Errorf("%d routes, %d broken", a.Routes, a.Broken)
	}
}

// TestSubnetHugePortCount: a "Ports:" value in opensm-subnet.lst above 255
// is refused (InfiniBand nodes have at most 254 ports): the model would
// allocate one Port per port number (a Ports:7FFFFFFF typo is 2^31 ports,
// 64 GB), and Port.Num (uint8) would wrap.
func TestSubnetHugePortCount(t *testing.T) {
	subnet := sampleText(t, FileSubnet)
	lfts := sampleText(t, FileLFTs)
	i := strings.Index(subnet, "Ports:")
	j := i + strings.Index(subnet[i:], " ")
	bad := subnet[:i] + "Ports:00010000" + subnet[j:] // 65536 ports
	m, err := loadMem(map[string]string{FileSubnet: bad, FileLFTs: lfts})
	if err == nil {
		t.Fatalf("Ports:00010000 accepted: model has %d ports (%d with a good file)", len(m.Ports), len(load(t, "ft2-h16/minhop/before").Ports))
	}
}

// TestParallelLFTParseLineNumbers: dumps of 32 MB or more are parsed in
// sections on several cores; every switch still carries the line of its
// header in the whole file (LFT.Line, used in "switch ... is not in the
// topology" errors), as a sequential parse gives.
func TestParallelLFTParseLineNumbers(t *testing.T) {
	path := filepath.Join(samples, "ft3-k4-h16/minhop/before", FileLFTs)
	lines := map[uint64]int{}
	if err := withFile(path, func(r io.Reader, name string) error {
		return ibdump.ParseLFTs(r, name, ibdump.LFTHandler{Switch: func(l *ibdump.LFT) error { lines[l.GUID] = l.Line; return nil }})
	}); err != nil {
		t.Fatal(err)
	}
	var bad []string
	ok, err := parseLFTsParallel(context.Background(), path, 0, 4, 0, func(l *ibdump.LFT) error {
		if lines[l.GUID] != l.Line {
			bad = append(bad, sprintf("%s: line %d, really %d", fmtGUID(l.GUID), l.Line, lines[l.GUID]))
		}
		return nil
	})
	if !ok || err != nil {
		t.Fatalf("parallel parse: %v %v", ok, err)
	}
	if len(bad) > 0 {
		t.Errorf("%d of %d switches carry a wrong header line, e.g. %v", len(bad), len(lines), bad[:min(3, len(bad))])
	}
}

// TestOSMLogGarbageDoesNotFailLoad: osm.log is optional and ParseSMLog
// never fails on content: a line longer than 1 MB (a log whose tail is
// NUL-filled after a crash, or binary garbage) is passed over and the
// load succeeds.
func TestOSMLogGarbageDoesNotFailLoad(t *testing.T) {
	files := map[string]string{
		FileSubnet: sampleText(t, FileSubnet),
		FileLFTs:   sampleText(t, FileLFTs),
		FileOSMLog: sampleText(t, FileOSMLog) + string(bytes.Repeat([]byte{0}, 2<<20)),
	}
	if _, err := loadMem(files); err != nil {
		t.Errorf("load fails because of an unreadable optional log: %v", err)
	}
}

// TestGUID2LIDRangeNotPowerOfTwo: a guid2lid range must hold 2^LMC LIDs.
// A corrupt range of 3 LIDs is refused, rather than rounded up to LMC 2
// (4 LIDs), which would give the endpoint a LID the file never gave it.
func TestGUID2LIDRangeNotPowerOfTwo(t *testing.T) {
	g2l := sampleText(t, FileGUID2LID)
	m0, err := loadMem(map[string]string{FileSubnet: sampleText(t, FileSubnet), FileLFTs: sampleText(t, FileLFTs), FileGUID2LID: g2l})
	if err != nil {
		t.Fatal(err)
	}
	// the endpoint with the highest LID gets a range of 3 LIDs
	top := 0
	var topGUID uint64
	for _, e := range m0.Endpoints {
		if p := m0.Ports[e.Port]; int(p.LID) > top {
			top, topGUID = int(p.LID), p.GUID
		}
	}
	var out []string
	for _, ln := range strings.Split(strings.TrimSpace(g2l), "\n") {
		if strings.HasPrefix(ln, sprintf("0x%016x ", topGUID)) {
			ln = sprintf("0x%016x 0x%04x 0x%04x", topGUID, top, top+2)
		}
		out = append(out, ln)
	}
	m, err := loadMem(map[string]string{FileSubnet: sampleText(t, FileSubnet), FileLFTs: sampleText(t, FileLFTs), FileGUID2LID: strings.Join(out, "\n") + "\n"})
	if err == nil {
		t.Errorf("guid2lid range %#x-%#x (3 LIDs) accepted: max LMC %d, %d LIDs (was %d)", top, top+2, m.Summary().MaxLMC, m.Summary().LIDs, m0.Summary().LIDs)
	}
}

// TestEmptyDumpsAreNoDumps: zero-length opensm-subnet.lst and
// opensm-lfts.dump (OpenSM truncated them and has not written yet, or a
// failed copy) are ErrNoDumps, not a valid fabric of 0 switches and 0
// hosts (watch would report every cable down and every endpoint gone).
func TestEmptyDumpsAreNoDumps(t *testing.T) {
	for _, topo := range []string{FileSubnet, FileIBNetDiscover, FileNeighbors} {
		m, err := loadMem(map[string]string{topo: "", FileLFTs: ""})
		if err == nil {
			t.Errorf("empty %s and %s: loaded %+v, want ErrNoDumps", topo, FileLFTs, m.Summary())
		}
	}
}
