package ibdump

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// TestParseLFTsTruncatedDumpIsAnError checks that an LFT dump cut short is
// a ParseError naming the switch whose table is open at EOF. Both formats
// end every switch's table with a footer ("3 lids dumped", "2 valid lids
// dumped"); without it the last table is incomplete, and a cut mid-line
// can even leave a valid-looking entry ("0x0003 00": port 0).
func TestParseLFTsTruncatedDumpIsAnError(t *testing.T) {
	dumpFTS := lftSample[strings.Index(lftSample, "Unicast lids [0x0"):]
	for _, tc := range []struct {
		what, in, sw string
	}{
		{"opensm-lfts.dump cut mid-line", lftSample[:strings.Index(lftSample, "0x0003 005")+len("0x0003 00")], "leaf001"},
		{"opensm-lfts.dump cut between entries", lftSample[:strings.Index(lftSample, "0x0003 005")], "leaf001"},
		{"opensm-lfts.dump cut after the header", lftSample[:strings.Index(lftSample, "0x0001 001")], "leaf001"},
		{"opensm-lfts.dump cut before the second footer", lftSample[:strings.Index(lftSample, "2 valid")], "leaf002"},
		{"dump_fts cut in the column titles", dumpFTS[:strings.Index(dumpFTS, "0x0001 005")], "leaf002"},
		{"dump_fts cut mid-line", dumpFTS[:strings.Index(dumpFTS, "0x0003 000")+len("0x0003 0")], "leaf002"},
	} {
		var got []string
		err := ParseLFTs(strings.NewReader(tc.in), "opensm-lfts.dump", LFTHandler{Switch: func(l *LFT) error {
			got = append(got, fmt.Sprintf("%s:%d entries", l.Desc, l.Entries))
			return nil
		}})
		var pe *ParseError
		if !errors.As(err, &pe) || pe.File != "opensm-lfts.dump" || !strings.Contains(pe.Msg, tc.sw) || !strings.Contains(pe.Msg, "truncated") {
			t.Errorf("%s: err %v (switches %v), want a ParseError saying %s's table is truncated", tc.what, err, got, tc.sw)
		}
	}
	// Complete tables in both formats, and a file without any table, parse.
	for _, in := range []string{lftSample, dumpFTS, "", "\n\n"} {
		if err := ParseLFTs(strings.NewReader(in), "x", LFTHandler{}); err != nil {
			t.Errorf("ParseLFTs(%.40q): %v", in, err)
		}
	}
}

// TestParseSubnetListPortCountRange checks that "Ports:" above 255 is a
// ParseError naming file and line: a node has at most 254 ports, and the
// model allocates one Port per port number (numbers are uint8), so a
// GUID pasted into the field must not become 7.8e14 ports.
func TestParseSubnetListPortCountRange(t *testing.T) {
	line := func(ports string) string {
		return "{ SW Ports:" + ports + " SystemGUID:0000000000000100 NodeGUID:0000000000000100 PortGUID:0000000000000100 VenID:000000 DevID:0000 Rev:000000A1 {leaf} LID:0001 PN:01 } " +
			"{ CA Ports:01 SystemGUID:0000000000000010 NodeGUID:0000000000000010 PortGUID:0000000000000011 VenID:00000000 DevID:0000 Rev:000000A1 {a1 mlx5_0} LID:0002 PN:01 } PHY=4x LOG=ACT SPD=2.5\n"
	}
	for _, ports := range []string{"0100", "7FFFFFFF", "0002c90300000600", "FFFFFFFFFFFFFFFF"} {
		var got SubnetLink
		err := ParseSubnetList(strings.NewReader("\n"+line(ports)), "opensm-subnet.lst", func(l SubnetLink) error { got = l; return nil })
		var pe *ParseError
		if !errors.As(err, &pe) || pe.File != "opensm-subnet.lst" || pe.Line != 2 || !strings.Contains(pe.Msg, "Ports") {
			t.Errorf("Ports:%s: err %v (NumPorts %d), want a ParseError at opensm-subnet.lst:2 about Ports", ports, err, got.A.NumPorts)
		}
	}
	for ports, want := range map[string]int{"24": 36, "FF": 255} {
		var got SubnetLink
		if err := ParseSubnetList(strings.NewReader(line(ports)), "opensm-subnet.lst", func(l SubnetLink) error { got = l; return nil }); err != nil || got.A.NumPorts != want {
			t.Errorf("Ports:%s: NumPorts %d, %v, want %d", ports, got.A.NumPorts, err, want)
		}
	}
}

// TestParseSMLogSkipsOverlongLines checks that ParseSMLog never fails on
// content: a line over 1 MiB (a NUL-filled tail after a crash, binary
// garbage) is skipped and the lines around it are still read.
func TestParseSMLogSkipsOverlongLines(t *testing.T) {
	engine := "Nov 21 23:50:53 123456 [7F] 0x02 -> osm_ucast_mgr_process: minhop tables configured on all switches\n"
	for _, tc := range []struct{ what, in, want string }{
		{"at EOF without newline", engine + strings.Repeat("\x00", 2<<20), "minhop"},
		{"before a later line", engine + strings.Repeat("x", 3<<20) + "\n" + strings.Replace(engine, "minhop", "ftree", 1), "ftree"},
		{"first, ending at EOF", strings.Repeat("y", maxLine+1) + "\n", ""},
	} {
		s, err := ParseSMLog(strings.NewReader(tc.in), "osm.log")
		if err != nil || s.Engine != tc.want {
			t.Errorf("%s: ParseSMLog = engine %q, %v, want %q", tc.what, s.Engine, err, tc.want)
		}
	}
	// Other parsers still refuse over-long lines.
	err := ParseLFTs(strings.NewReader(strings.Repeat("x", 2<<20)), "x", LFTHandler{})
	if !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), "line longer") {
		t.Errorf("ParseLFTs with a 2 MiB line: %v", err)
	}
}

// TestParseGUID2LIDRangeIsPowerOfTwo checks that a guid2lid LID range
// holds 2^LMC LIDs (LMC <= 7) starting at a multiple of 2^LMC; any other
// range is a ParseError naming file and line, not rounded to an LMC.
func TestParseGUID2LIDRangeIsPowerOfTwo(t *testing.T) {
	for _, r := range []string{"0x0010 0x0012", "0x0011 0x0012", "0x0012 0x0015", "0x0100 0x01ff", "0x0001 0x0005"} {
		in := "# guid2lid\n0x0002c90400000011 " + r + "\n"
		err := ParseGUID2LID(strings.NewReader(in), "guid2lid", func(GUIDLID) error { return nil })
		var pe *ParseError
		if !errors.As(err, &pe) || pe.File != "guid2lid" || pe.Line != 2 {
			t.Errorf("range %s: err %v, want a ParseError at guid2lid:2", r, err)
		}
	}
	for _, r := range []string{"0x0011 0x0011", "0x0010 0x0011", "0x0014 0x0017", "0x0080 0x00ff", "0xbfff 0xbfff"} {
		in := "0x0002c90400000011 " + r + "\n"
		if err := ParseGUID2LID(strings.NewReader(in), "guid2lid", func(GUIDLID) error { return nil }); err != nil {
			t.Errorf("range %s: %v", r, err)
		}
	}
}

// TestParseLFTsHeaderRangeDoesNotDriveMemory checks that a table's memory
// follows the entries read, not the LID range its header claims: an
// 84-byte "Unicast lids [0-49151] ...: / 1 lids dumped" pair used to
// allocate 48 KiB before a single entry was read, so 1000 of them (an
// 84 KB corrupt dump) cost ~49 MB and a few MB of them several GB. With
// MaxLID (the loader's bound from the topology) a table holds no entry
// above it, whatever LIDs the entries name.
func TestParseLFTsHeaderRangeDoesNotDriveMemory(t *testing.T) {
	for _, tc := range []struct {
		name   string
		entry  string // one entry per switch
		maxLID uint16
		limit  func(in int) uint64
	}{
		{"headers only", "", 0, func(in int) uint64 { return uint64(64*in + 4<<20) }},
		{"an entry for LID 0xBFFF, MaxLID 64", "0xbfff 001\n", 64, func(in int) uint64 { return uint64(64*in + 4<<20) }},
	} {
		var sb strings.Builder
		for i := 0; i < 1000; i++ {
			fmt.Fprintf(&sb, "Unicast lids [0-49151] of switch Lid 1 guid 0x%016x ('s'):\n%s1 lids dumped\n", i+1, tc.entry)
		}
		in := sb.String()
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		var kept []*LFT
		err := ParseLFTs(strings.NewReader(in), "opensm-lfts.dump", LFTHandler{MaxLID: tc.maxLID, Switch: func(l *LFT) error {
			kept = append(kept, l)
			return nil
		}})
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatal(err)
		}
		if alloc, limit := after.TotalAlloc-before.TotalAlloc, tc.limit(len(in)); alloc > limit {
			t.Errorf("%s: parsing %d bytes (%d switches) allocated %d bytes (%.0fx the input), want at most %d",
				tc.name, len(in), len(kept), alloc, float64(alloc)/float64(len(in)), limit)
		}
		for _, l := range kept {
			if len(l.Ports) != 0 || (tc.entry != "" && l.Entries != 1) {
				t.Fatalf("%s: switch %#x: %d LIDs stored, %d entries", tc.name, l.GUID, len(l.Ports), l.Entries)
			}
		}
	}
	// entries in LID order grow a table to the header's range, no further
	var sb strings.Builder
	sb.WriteString("Unicast lids [0-1000] of switch Lid 1 guid 0x1 ('s'):\n")
	for lid := 1; lid <= 1000; lid++ {
		fmt.Fprintf(&sb, "0x%04x 001\n", lid)
	}
	sb.WriteString("1001 lids dumped\n")
	var l *LFT
	if err := ParseLFTs(strings.NewReader(sb.String()), "x", LFTHandler{Switch: func(x *LFT) error { l = x; return nil }}); err != nil {
		t.Fatal(err)
	}
	if len(l.Ports) != 1001 || cap(l.Ports) != 1001 || l.Ports[0] != NoPort || l.Ports[1000] != 1 {
		t.Errorf("table of %d LIDs, capacity %d, want 1001", len(l.Ports), cap(l.Ports))
	}
}
