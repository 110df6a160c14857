package ibdump

import (
	"io"
)

// FDBEntry is one row of opensm.fdbs: the port a switch uses for a LID, the
// hop count through that port and whether it is a minimal route.
type FDBEntry struct {
	LID       uint16
	Port      int // 255 when unreachable
	Hops      int
	Optimal   bool
	Reachable bool
}

// FDBSwitch is one switch block of opensm.fdbs.
type FDBSwitch struct {
	GUID    uint64
	Entries []FDBEntry
	Line    int
}

// ParseFDBs streams opensm.fdbs ("dump_ucast_routes: Switch 0x..." blocks).
func ParseFDBs(r io.Reader, name string, fn func(*FDBSwitch) error) error {
	lr := newLineReader(r, name)
	sw := block[FDBSwitch]{emit: fn}
	err := lr.each(func(line []byte) error {
		t := trimSpace(line)
		switch {
		case len(t) == 0 || hasPrefix(t, "LID"):
		case hasPrefix(t, "dump_ucast_routes: Switch "):
			if err := sw.done(); err != nil {
				return err
			}
			g, _, ok := parseHex(t[len("dump_ucast_routes: Switch "):])
			if !ok {
				return lr.errf("bad switch GUID")
			}
			sw.cur = &FDBSwitch{GUID: g, Line: lr.line}
		case hasPrefix(t, "0x"):
			if sw.cur == nil {
				return lr.errf("entry before a switch header")
			}
			e, msg := parseFDBEntry(t)
			if msg != "" {
				return lr.errf("%s in %q", msg, clip(t))
			}
			sw.cur.Entries = append(sw.cur.Entries, e)
		default:
			return lr.errf("unexpected line %q", clip(t))
		}
		return nil
	})
	if err != nil {
		return err
	}
	return sw.done()
}

// parseFDBEntry: "0x0001 : 001  : 01   : yes" or "0x0005 : UNREACHABLE".
func parseFDBEntry(t []byte) (FDBEntry, string) {
	var e FDBEntry
	lid, b, ok := parseHex(t)
	if !ok || lid > 0xFFFF {
		return e, "bad LID"
	}
	e.LID = uint16(lid)
	f := splitColon(b)
	if len(f) == 2 && hasPrefix(f[1], "UNREACHABLE") {
		e.Port, e.Hops = 255, 255
		return e, ""
	}
	if len(f) != 4 {
		return e, "expected 'LID : Port : Hops : Optimal'"
	}
	port, rest, ok := parseDec(f[1])
	if !ok || len(rest) != 0 || port > 255 {
		return e, "bad port"
	}
	hops, rest, ok := parseDec(f[2])
	if !ok || len(rest) != 0 {
		return e, "bad hop count"
	}
	e.Port, e.Hops, e.Reachable = port, hops, true
	switch string(f[3]) {
	case "yes":
		e.Optimal = true
	case "no":
	default:
		return e, "bad optimal flag"
	}
	return e, ""
}

func splitColon(b []byte) [][]byte {
	var out [][]byte
	for {
		i := index(b, ":")
		if i < 0 {
			return append(out, trimSpace(b))
		}
		out = append(out, trimSpace(b[:i]))
		b = b[i+1:]
	}
}

// LIDMatrixRow is the hop count from a switch to one LID through each of
// its ports (index = port number; 0xFF = no path).
type LIDMatrixRow struct {
	LID      uint16
	Hops     []uint8
	PortGUID uint64
}

// LIDMatrixSwitch is one "Switch: guid 0x..." block of opensm-lid-matrix.dump.
type LIDMatrixSwitch struct {
	GUID uint64
	Rows []LIDMatrixRow
	Line int
}

// ParseLIDMatrix streams opensm-lid-matrix.dump.
func ParseLIDMatrix(r io.Reader, name string, fn func(*LIDMatrixSwitch) error) error {
	lr := newLineReader(r, name)
	sw := block[LIDMatrixSwitch]{emit: fn}
	err := lr.each(func(line []byte) error {
		t := trimSpace(line)
		switch {
		case len(t) == 0:
		case hasPrefix(t, "Switch: guid "):
			if err := sw.done(); err != nil {
				return err
			}
			g, _, ok := parseHex(t[len("Switch: guid "):])
			if !ok {
				return lr.errf("bad switch GUID")
			}
			sw.cur = &LIDMatrixSwitch{GUID: g, Line: lr.line}
		case hasPrefix(t, "0x"):
			if sw.cur == nil {
				return lr.errf("row before a switch header")
			}
			lid, b, ok := parseHex(t)
			if !ok || lid > 0xFFFF || len(b) == 0 || b[0] != ':' {
				return lr.errf("bad LID in %q", clip(t))
			}
			row := LIDMatrixRow{LID: uint16(lid)}
			b = b[1:]
			if k := index(b, "#"); k >= 0 {
				if j := index(b[k:], "portguid "); j >= 0 {
					row.PortGUID, _, _ = parseHex(b[k+j+len("portguid "):])
				}
				b = b[:k]
			}
			for _, f := range fields(b) {
				h, rest, ok := parseHex(f)
				if !ok || len(rest) != 0 || h > 255 || len(row.Hops) >= 256 {
					return lr.errf("bad hop count %q", clip(f))
				}
				row.Hops = append(row.Hops, uint8(h))
			}
			sw.cur.Rows = append(sw.cur.Rows, row)
		default:
			return lr.errf("unexpected line %q", clip(t))
		}
		return nil
	})
	if err != nil {
		return err
	}
	return sw.done()
}
