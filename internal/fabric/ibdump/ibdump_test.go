package ibdump

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const samples = "../testdata/samples"

const lftSample = `Unicast lids [0-3] of switch Lid 2 guid 0x0002c90300000100 ('leaf001'):
0x0001 001 # Channel Adapter portguid 0x0002c90400000011: 'node0001 mlx5_0'
0x0002 000 # Switch portguid 0x0002c90300000100: 'leaf001'
0x0003 005 # Switch portguid 0x0002c90300000200: 'leaf002'
3 lids dumped
Unicast lids [0x0-0x3] of switch DR path slid 0; dlid 0; 0,1,5 guid 0x0002c90300000200 (leaf002):
  Lid  Out   Destination
       Port     Info 
0x0001 005 : (Channel Adapter portguid 0x0002c90400000011: 'node0001 mlx5_0')
0x0003 000 : (Switch portguid 0x0002c90300000200: 'leaf002')
2 valid lids dumped 
`

func TestParseLFTs(t *testing.T) {
	var sws []*LFT
	var dests []Dest
	err := ParseLFTs(strings.NewReader(lftSample), "x", LFTHandler{
		Switch: func(l *LFT) error { sws = append(sws, l); return nil },
		Dest:   func(d Dest) error { dests = append(dests, d); return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(sws) != 2 {
		t.Fatalf("got %d switches", len(sws))
	}
	for _, tc := range []struct {
		sw      int
		guid    uint64
		lid     uint16
		desc    string
		ports   []uint8
		entries int
		line    int
	}{
		{0, 0x0002c90300000100, 2, "leaf001", []uint8{NoPort, 1, 0, 5}, 3, 1},
		{1, 0x0002c90300000200, 0, "leaf002", []uint8{NoPort, 5, NoPort, 0}, 2, 6},
	} {
		s := sws[tc.sw]
		if s.GUID != tc.guid || s.LID != tc.lid || s.Desc != tc.desc || s.Entries != tc.entries || s.Line != tc.line {
			t.Errorf("switch %d = %+v", tc.sw, s)
		}
		if string(s.Ports) != string(tc.ports) {
			t.Errorf("switch %d ports = %v, want %v", tc.sw, s.Ports, tc.ports)
		}
	}
	if len(dests) != 3 || dests[0].Desc != "node0001 mlx5_0" || dests[0].PortGUID != 0x0002c90400000011 ||
		dests[0].Type != "Channel Adapter" || dests[2].Desc != "leaf002" {
		t.Errorf("dests = %+v", dests)
	}
}

func TestParseErrorsNameFileAndLine(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		parse    func(r io.Reader, name string) error
		line     int
	}{
		{"lft-entry-first", "0x0001 001\n", parseLFT, 1},
		{"lft-bad-port", "Unicast lids [0-3] of switch Lid 2 guid 0x1 ('a'):\n0x0001 1x1\n", parseLFT, 2},
		{"lft-big-lid", "Unicast lids [0-3] of switch Lid 2 guid 0x1 ('a'):\n0x0001 001\n0xC000 001\n", parseLFT, 3},
		{"lft-port-256", "Unicast lids [0-3] of switch Lid 2 guid 0x1 ('a'):\n\n0x0001 256\n", parseLFT, 3},
		{"lft-junk", "Unicast lids [0-3] of switch Lid 2 guid 0x1 ('a'):\nhello\n", parseLFT, 2},
		{"lft-no-guid", "Unicast lids [0-3] of switch Lid 2 ('a'):\n", parseLFT, 1},
		{"subnet-no-brace", "SW Ports:06\n", func(r io.Reader, n string) error {
			return ParseSubnetList(r, n, func(SubnetLink) error { return nil })
		}, 1},
		// LIDs above the unicast range (0xBFFF)
		{"subnet-multicast-lid", "\n{ SW Ports:06 SystemGUID:01 NodeGUID:01 PortGUID:01 VenID:0 DevID:0 Rev:0 {s} LID:0002 PN:01 } " +
			"{ CA Ports:01 SystemGUID:02 NodeGUID:02 PortGUID:03 VenID:0 DevID:0 Rev:0 {h} LID:C000 PN:01 }\n", func(r io.Reader, n string) error {
			return ParseSubnetList(r, n, func(SubnetLink) error { return nil })
		}, 2},
		{"ibnd-switch-lid", "Switch\t6 \"S-01\"\t\t# \"s\" base port 0 lid 49152 lmc 0\n", func(r io.Reader, n string) error {
			return ParseIBNetDiscover(r, n, func(*Node) error { return nil })
		}, 1},
		{"ibnd-ca-lid", "Ca\t1 \"H-02\"\t\t# \"h\"\n[1](3) \t\"S-01\"[1]\t\t# lid 65535 lmc 0 \"s\" lid 2 4xSDR\n", func(r io.Reader, n string) error {
			return ParseIBNetDiscover(r, n, func(*Node) error { return nil })
		}, 2},
		{"guid2lid-range", "0x1 0x1 0x1\n\n0x2 0x5 0x3\n", func(r io.Reader, n string) error {
			return ParseGUID2LID(r, n, func(GUIDLID) error { return nil })
		}, 3},
		{"neighbors-port", "0x1:1 0x2:1\n0x1:x 0x2:1\n", func(r io.Reader, n string) error {
			return ParseNeighbors(r, n, func(Neighbor) error { return nil })
		}, 2},
		{"ibnd-port-first", "[1] \"S-01\"[2]\n", func(r io.Reader, n string) error {
			return ParseIBNetDiscover(r, n, func(*Node) error { return nil })
		}, 1},
		{"fdbs-bad", "dump_ucast_routes: Switch 0x1\n0x0001 : 001 : 01 : maybe\n", func(r io.Reader, n string) error {
			return ParseFDBs(r, n, func(*FDBSwitch) error { return nil })
		}, 2},
		{"matrix-bad", "Switch: guid 0x1\n0x0002: 00 zz\n", func(r io.Reader, n string) error {
			return ParseLIDMatrix(r, n, func(*LIDMatrixSwitch) error { return nil })
		}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.parse(strings.NewReader(tc.in), "dump.txt")
			var pe *ParseError
			if !errors.As(err, &pe) || !errors.Is(err, ErrSyntax) {
				t.Fatalf("err = %v, want a *ParseError", err)
			}
			if pe.File != "dump.txt" || pe.Line != tc.line {
				t.Errorf("error at %s:%d, want dump.txt:%d (%v)", pe.File, pe.Line, tc.line, err)
			}
			if !strings.HasPrefix(err.Error(), "dump.txt:") {
				t.Errorf("message %q does not start with the file name", err)
			}
		})
	}
}

func parseLFT(r io.Reader, name string) error {
	return ParseLFTs(r, name, LFTHandler{Switch: func(*LFT) error { return nil }})
}

func TestParseSubnetList(t *testing.T) {
	line := `{ SW Ports:24 SystemGUID:0002c90300000100 NodeGUID:0002c90300000100 PortGUID:0002c90300000100 VenID:000000 DevID:0000 Rev:000000A1 {leaf {001}} LID:0002 PN:10 } { CA-SM Ports:01 SystemGUID:0002c90400000010 NodeGUID:0002c90400000010 PortGUID:0002c90400000011 VenID:00000000 DevID:0000 Rev:000000A1 {node0001 mlx5_0} LID:00A1 PN:01 } PHY=4x LOG=ACT SPD=2.5` + "\n"
	var got []SubnetLink
	if err := ParseSubnetList(strings.NewReader(line), "s", func(l SubnetLink) error { got = append(got, l); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("got %d links", len(got))
	}
	l := got[0]
	if l.A.Type != "SW" || !l.A.IsSwitch() || l.A.NumPorts != 0x24 || l.A.Port != 16 || l.A.Desc != "leaf {001}" || l.A.LID != 2 {
		t.Errorf("A = %+v", l.A)
	}
	if l.B.Type != "CA-SM" || l.B.IsSwitch() || l.B.PortGUID != 0x0002c90400000011 || l.B.LID != 0xa1 || l.B.Port != 1 || l.B.Desc != "node0001 mlx5_0" {
		t.Errorf("B = %+v", l.B)
	}
	if l.Phy != "4x" || l.State != "ACT" || l.Speed != "2.5" {
		t.Errorf("link = %+v", l)
	}
}

func TestParseIBNetDiscover(t *testing.T) {
	in := `#
# Topology file
vendid=0x0
switchguid=0x2c90300000400(2c90300000400)
Switch	6 "S-0002c90300000400"		# "leaf004" base port 0 lid 5 lmc 0
[1]	"H-0002c904000000d0"[1](2c904000000d1) 		# "stor001 mlx5_0" lid 20 4xSDR
[5]	"S-0002c90300000500"[4]		# "spine001" lid 6 4xSDR

caguid=0x2c90400000080
Ca	2 "H-0002c90400000080"		# "node0008 mlx5_0"
[1](2c90400000081) 	"S-0002c90300000300"[4]		# lid 21 lmc 1 "leaf003" lid 4 4xSDR
`
	var ns []*Node
	if err := ParseIBNetDiscover(strings.NewReader(in), "i", func(n *Node) error { ns = append(ns, n); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(ns) != 2 {
		t.Fatalf("got %d nodes", len(ns))
	}
	sw, ca := ns[0], ns[1]
	if sw.Type != "Switch" || sw.GUID != 0x2c90300000400 || sw.Desc != "leaf004" || sw.LID != 5 || sw.NumPorts != 6 || len(sw.Ports) != 2 {
		t.Errorf("switch = %+v", sw)
	}
	if p := sw.Ports[0]; p.Port != 1 || p.RemoteGUID != 0x2c904000000d0 || p.RemotePort != 1 || p.RemotePortGUID != 0x2c904000000d1 || p.RemoteDesc != "stor001 mlx5_0" {
		t.Errorf("switch port = %+v", p)
	}
	if ca.Type != "Ca" || ca.GUID != 0x2c90400000080 || ca.Desc != "node0008 mlx5_0" || len(ca.Ports) != 1 {
		t.Errorf("ca = %+v", ca)
	}
	if p := ca.Ports[0]; p.PortGUID != 0x2c90400000081 || p.LID != 21 || p.LMC != 1 || p.RemoteGUID != 0x2c90300000300 || p.RemotePort != 4 || p.RemoteDesc != "leaf003" {
		t.Errorf("ca port = %+v", p)
	}
}

func TestParseSmallFiles(t *testing.T) {
	var gl []GUIDLID
	if err := ParseGUID2LID(strings.NewReader("0x0002c90300000600 0x0007 0x0007\n\n0x0002c90400000081 0x0010 0x0013\n"), "g",
		func(g GUIDLID) error { gl = append(gl, g); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(gl) != 2 || gl[1].GUID != 0x0002c90400000081 || gl[1].Min != 0x10 || gl[1].Max != 0x13 || gl[1].Line != 3 {
		t.Errorf("guid2lid = %+v", gl)
	}
	var nb []Neighbor
	if err := ParseNeighbors(strings.NewReader("0x0002c904000000d1:1 0x0002c90300000400:17\n"), "n",
		func(n Neighbor) error { nb = append(nb, n); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(nb) != 1 || nb[0].GUID != 0x0002c904000000d1 || nb[0].Port != 1 || nb[0].RemoteGUID != 0x0002c90300000400 || nb[0].RemotePort != 17 {
		t.Errorf("neighbors = %+v", nb)
	}
	var fd []*FDBSwitch
	if err := ParseFDBs(strings.NewReader("dump_ucast_routes: Switch 0x0002c90300000100\nLID    : Port : Hops : Optimal\n0x0001 : 001  : 01   : yes\n0x0002 : 006  : 03   : no\n0x0003 : UNREACHABLE\n"), "f",
		func(s *FDBSwitch) error { fd = append(fd, s); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(fd) != 1 || len(fd[0].Entries) != 3 || fd[0].Entries[1] != (FDBEntry{LID: 2, Port: 6, Hops: 3, Reachable: true}) || fd[0].Entries[2].Reachable {
		t.Errorf("fdbs = %+v", fd[0])
	}
	var lm []*LIDMatrixSwitch
	if err := ParseLIDMatrix(strings.NewReader("Switch: guid 0x0002c90300000100\n0x0002: 00 ff 02 # portguid 0x0002c90300000100\n"), "m",
		func(s *LIDMatrixSwitch) error { lm = append(lm, s); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(lm) != 1 || lm[0].Rows[0].LID != 2 || string(lm[0].Rows[0].Hops) != string([]uint8{0, 0xff, 2}) || lm[0].Rows[0].PortGUID != 0x0002c90300000100 {
		t.Errorf("lid matrix = %+v", lm[0])
	}
}

// smLogLines are osm.log lines of one SM start and its sweeps (the log
// prefix shortened).
const (
	smStart    = "Nov 21 23:50:58 640897 [B3823740] 0x80 -> OpenSM 3.3.23\n"
	smNotFT    = "Nov 21 23:50:58 673957 [B081C6C0] 0x01 -> fabric_validate_topology: ERR AB0D: Fabric topology hasn't been identified as FatTree\n"
	smFTFailed = "Nov 21 23:50:58 673963 [B081C6C0] 0x01 -> ucast_mgr_route: ftree: cannot build lid matrices\n"
	smMinhop   = "Nov 21 23:50:58 674043 [B081C6C0] 0x02 -> osm_ucast_mgr_process: minhop tables configured on all switches\n"
	smFtree    = "Nov 21 23:51:58 674043 [B081C6C0] 0x02 -> osm_ucast_mgr_process: ftree tables configured on all switches\n"
	smOut      = "-------------------------------------------------\nOpenSM 3.3.23\nCommand Line Arguments:\n Activate '%s' routing engine(s)\n" +
		"-------------------------------------------------\nOpenSM 3.3.23\n"
)

// TestParseSMLog: the requested engines come from the last SM start, the
// engine used, the engines that failed before it and the fat-tree verdict
// from the last sweep that configured the switches (a later successful
// ftree sweep clears an earlier fallback); an unfinished sweep counts only
// when no sweep finished.
func TestParseSMLog(t *testing.T) {
	for _, tc := range []struct {
		name       string // a sample file (dir/file) or a test case
		text       string
		requested  string
		used       string
		failed     string
		notFatTree bool
	}{
		{"ft3-k4-h16/ftree/after/osm.log", "", "", "minhop", "ftree", true},
		{"ft3-k4-h16/ftree/after/opensm.out", "", "ftree", "", "", false},
		{"ft3-k4-h16/ftree/before/osm.log", "", "", "ftree", "", false},
		{"ft2-h16/minhop/before/osm.log", "", "", "minhop", "", false},
		{"restarts: the last Activate line", fmt.Sprintf(smOut, "ftree") + fmt.Sprintf(smOut, "updn,minhop"), "updn,minhop", "", "", false},
		{"fallback, then ftree routes", smStart + smNotFT + smFTFailed + smMinhop + smFtree, "", "ftree", "", false},
		{"ftree, then a fallback", smStart + smFtree + smNotFT + smFTFailed + smMinhop, "", "minhop", "ftree", true},
		{"fallback, then a restart that routes with ftree", smStart + smNotFT + smFTFailed + smMinhop + smStart + smFtree, "", "ftree", "", false},
		{"unfinished sweep after a finished one", smStart + smMinhop + smNotFT + smFTFailed, "", "minhop", "", false},
		{"only an unfinished sweep", smStart + smNotFT + smFTFailed, "", "", "ftree", true},
		{"unfinished sweep discarded by a restart", smStart + smMinhop + smNotFT + smFTFailed + smStart, "", "minhop", "", false},
	} {
		var r io.Reader = strings.NewReader(tc.text)
		if tc.text == "" {
			f, err := os.Open(filepath.Join(samples, tc.name))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			r = f
		}
		l, err := ParseSMLog(r, "osm.log")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(l.Requested, ",") != tc.requested || l.Engine != tc.used || strings.Join(l.Failed, ",") != tc.failed || l.NotFatTree != tc.notFatTree {
			t.Errorf("%s: %+v, want requested %q used %q failed %q not fat tree %v", tc.name, l, tc.requested, tc.used, tc.failed, tc.notFatTree)
		}
	}
}

// TestSamplesParse runs every parser over every sample file it applies to.
func TestSamplesParse(t *testing.T) {
	parsers := map[string]func(io.Reader, string) (int, error){
		"opensm-lfts.dump": func(r io.Reader, n string) (int, error) {
			c := 0
			return c, ParseLFTs(r, n, LFTHandler{Switch: func(*LFT) error { c++; return nil }})
		},
		"dump_fts.out": func(r io.Reader, n string) (int, error) {
			c := 0
			err := ParseLFTs(r, n, LFTHandler{Switch: func(*LFT) error { c++; return nil }})
			return c, err
		},
		"opensm-subnet.lst": func(r io.Reader, n string) (int, error) {
			c := 0
			return c, ParseSubnetList(r, n, func(SubnetLink) error { c++; return nil })
		},
		"ibnetdiscover.out": func(r io.Reader, n string) (int, error) {
			c := 0
			return c, ParseIBNetDiscover(r, n, func(*Node) error { c++; return nil })
		},
		"guid2lid": func(r io.Reader, n string) (int, error) {
			c := 0
			return c, ParseGUID2LID(r, n, func(GUIDLID) error { c++; return nil })
		},
		"neighbors": func(r io.Reader, n string) (int, error) {
			c := 0
			return c, ParseNeighbors(r, n, func(Neighbor) error { c++; return nil })
		},
		"opensm.fdbs": func(r io.Reader, n string) (int, error) {
			c := 0
			return c, ParseFDBs(r, n, func(*FDBSwitch) error { c++; return nil })
		},
		"opensm-lid-matrix.dump": func(r io.Reader, n string) (int, error) {
			c := 0
			return c, ParseLIDMatrix(r, n, func(*LIDMatrixSwitch) error { c++; return nil })
		},
	}
	n := 0
	err := filepath.Walk(samples, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		parse := parsers[strings.TrimSuffix(info.Name(), ".gz")]
		if parse == nil {
			return nil
		}
		r, err := Open(p)
		if err != nil {
			return err
		}
		defer r.Close()
		c, err := parse(r, p)
		if err != nil {
			t.Errorf("%v", err)
		}
		if c == 0 {
			t.Errorf("%s: no records", p)
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 60 {
		t.Errorf("parsed only %d sample files", n)
	}
}

// --- fuzz: no input may crash or hang a parser ---

func seedFuzz(f *testing.F, name string, extra ...string) {
	for _, s := range extra {
		f.Add([]byte(s))
	}
	p := filepath.Join(samples, "ft2-h16/minhop/before", name)
	if b, err := os.ReadFile(p); err == nil {
		if len(b) > 4096 {
			b = b[:4096]
		}
		f.Add(b)
	}
}

func FuzzParseLFTs(f *testing.F) {
	seedFuzz(f, "opensm-lfts.dump", lftSample)
	seedFuzz(f, "dump_fts.out")
	f.Fuzz(func(t *testing.T, b []byte) {
		// tables never exceed the unicast range, nor MaxLID when set
		for _, maxLID := range []int{0, 20} {
			bound := MaxUnicastLID + 1
			if maxLID > 0 {
				bound = maxLID + 1
			}
			_ = ParseLFTs(strings.NewReader(string(b)), "f", LFTHandler{
				MaxLID: uint16(maxLID),
				Switch: func(l *LFT) error {
					if len(l.Ports) > bound || cap(l.Ports) > bound {
						t.Fatalf("MaxLID %d: table of %d entries (capacity %d)", maxLID, len(l.Ports), cap(l.Ports))
					}
					return nil
				},
				Dest: func(Dest) error { return nil },
			})
		}
	})
}

func FuzzParseSubnetList(f *testing.F) {
	seedFuzz(f, "opensm-subnet.lst")
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = ParseSubnetList(strings.NewReader(string(b)), "f", func(SubnetLink) error { return nil })
	})
}

func FuzzParseIBNetDiscover(f *testing.F) {
	seedFuzz(f, "ibnetdiscover.out")
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = ParseIBNetDiscover(strings.NewReader(string(b)), "f", func(*Node) error { return nil })
	})
}

func FuzzParseGUID2LID(f *testing.F) {
	seedFuzz(f, "guid2lid")
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = ParseGUID2LID(strings.NewReader(string(b)), "f", func(g GUIDLID) error {
			if g.Max < g.Min {
				t.Fatalf("bad range accepted: %+v", g)
			}
			return nil
		})
	})
}

func FuzzParseNeighbors(f *testing.F) {
	seedFuzz(f, "neighbors")
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = ParseNeighbors(strings.NewReader(string(b)), "f", func(Neighbor) error { return nil })
	})
}

func FuzzParseFDBs(f *testing.F) {
	seedFuzz(f, "opensm.fdbs", "dump_ucast_routes: Switch 0x1\n0x0003 : UNREACHABLE\n")
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = ParseFDBs(strings.NewReader(string(b)), "f", func(*FDBSwitch) error { return nil })
	})
}

func FuzzParseLIDMatrix(f *testing.F) {
	seedFuzz(f, "opensm-lid-matrix.dump")
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = ParseLIDMatrix(strings.NewReader(string(b)), "f", func(*LIDMatrixSwitch) error { return nil })
	})
}

func FuzzParseSMLog(f *testing.F) {
	seedFuzz(f, "osm.log")
	seedFuzz(f, "opensm.out")
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := ParseSMLog(strings.NewReader(string(b)), "f"); err != nil {
			t.Fatalf("ParseSMLog failed on content: %v", err)
		}
	})
}

func TestOpenGzip(t *testing.T) {
	dir := t.TempDir()
	// more than the read-ahead buffers hold
	var want strings.Builder
	for i := 0; want.Len() < 5*asyncBufSize+123; i++ {
		want.WriteString("0x0001 001 # line " + strings.Repeat("x", i%50) + "\n")
	}
	p := filepath.Join(dir, "d.gz")
	f, _ := os.Create(p)
	zw := gzip.NewWriter(f)
	zw.Write([]byte(want.String()))
	zw.Close()
	f.Close()
	r, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	if err != nil || string(got) != want.String() {
		t.Fatalf("read %d bytes (%v), want %d", len(got), err, want.Len())
	}
	r.Close()
	// closing early stops the reader
	r, _ = Open(p)
	r.Read(make([]byte, 10))
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	// a truncated file is an error, not a short read
	b, _ := os.ReadFile(p)
	os.WriteFile(p, b[:len(b)/2], 0o644)
	r, _ = Open(p)
	if _, err := io.ReadAll(r); err == nil {
		t.Error("truncated gzip read without error")
	}
	r.Close()
}
