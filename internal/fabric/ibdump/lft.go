package ibdump

import (
	"fmt"
	"io"
)

// LFT is one switch's linear forwarding table, from opensm-lfts.dump or from
// dump_fts/ibroute output (the parser accepts both).
type LFT struct {
	GUID uint64 // switch node GUID
	LID  uint16 // switch LID when the header names it (opensm-lfts.dump), else 0
	Desc string // node description from the header
	// Ports[lid] is the output port for destination lid (0 = the switch
	// itself), NoPort where the table has no entry. len(Ports) is one more
	// than the highest LID of any stored entry (0 for a table without
	// entries): the table grows as entries arrive, so its memory follows
	// the file's contents, not the LID range the header claims.
	Ports []uint8
	Line  int // line of the header
	// Entries counts the entry lines read for this switch.
	Entries int
}

// Dest describes a destination LID as the comment of an LFT entry names it.
type Dest struct {
	LID      uint16
	Type     string // "Channel Adapter", "Switch", "Router", ...
	PortGUID uint64
	Desc     string
}

// LFTHandler receives parsed switches. Switch gets ownership of lft.Ports.
// Dest, when non-nil, is called once per LID, the first time an entry
// comment describes it.
type LFTHandler struct {
	Switch func(lft *LFT) error
	Dest   func(d Dest) error
	// MaxLID, when non-zero, bounds the tables: entries for higher LIDs
	// are counted in LFT.Entries (and described to Dest) but not stored,
	// so a caller that knows the fabric's highest LID bounds the memory of
	// every table by it.
	MaxLID uint16
}

// ParseLFTs streams an opensm-lfts.dump or dump_fts/ibroute output from r;
// name is used in errors. A file that ends inside a switch's table (before
// its "N lids dumped" footer) is truncated: a *ParseError.
func ParseLFTs(r io.Reader, name string, h LFTHandler) error {
	lr := newLineReader(r, name)
	// top is the highest LID of the current header's range (at most
	// MaxLID): the tables grow by doubling, but never past the range while
	// entries stay in it, and never past hard
	var top int
	hard := MaxUnicastLID
	if h.MaxLID != 0 {
		hard = min(hard, int(h.MaxLID))
	}
	var seen []bool
	sw := block[LFT]{emit: func(l *LFT) error {
		if h.Switch != nil {
			return h.Switch(l)
		}
		return nil
	}}
	err := lr.each(func(line []byte) error {
		if len(line) >= 2 && line[0] == '0' && line[1] == 'x' {
			// Entry: "0x0001 001 # comment" or "0x0001 005 : (comment)".
			cur := sw.cur
			if cur == nil {
				return lr.errf("LFT entry before a switch header")
			}
			lid, rest, ok := parseHex(line)
			if !ok || lid > MaxUnicastLID {
				return lr.errf("bad LID in LFT entry %q", clip(line))
			}
			rest = skipSpace(rest)
			port, rest2, ok := parseDec(rest)
			if !ok || port > 255 {
				return lr.errf("bad port in LFT entry %q", clip(line))
			}
			if len(rest2) > 0 && !isSpace(rest2[0]) {
				return lr.errf("bad port in LFT entry %q", clip(line))
			}
			if int(lid) <= hard {
				if int(lid) >= len(cur.Ports) {
					cur.Ports = growPorts(cur.Ports, int(lid)+1, top+1, hard+1)
				}
				cur.Ports[lid] = uint8(port)
			}
			cur.Entries++
			if h.Dest != nil {
				if int(lid) >= len(seen) {
					seen = growBools(seen, int(lid)+1)
				}
				if !seen[lid] {
					seen[lid] = true
					if d, ok := parseDestComment(rest2); ok {
						d.LID = uint16(lid)
						if err := h.Dest(d); err != nil {
							return err
						}
					}
				}
			}
			return nil
		}
		t := trimSpace(line)
		switch {
		case len(t) == 0:
		case hasPrefix(t, "Unicast lids ["):
			if err := sw.done(); err != nil {
				return err
			}
			l, hi, msg := parseLFTHeader(t)
			if msg != "" {
				return lr.errf("%s in %q", msg, clip(t))
			}
			l.Line = lr.line
			sw.cur, top = l, min(hi, hard)
		case endsWith(t, "lids dumped"):
			if sw.cur == nil {
				return lr.errf("footer without a switch header")
			}
			// OpenSM counts the LIDs of the range here, including the
			// ones it omitted, so the number is not checked against the entries.
			if _, _, ok := parseDec(t); !ok {
				return lr.errf("bad footer %q", clip(t))
			}
			if err := sw.done(); err != nil {
				return err
			}
		case hasPrefix(t, "Lid") || hasPrefix(t, "Port"):
			// dump_fts column titles.
		default:
			return lr.errf("unexpected line %q", clip(t))
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Both formats end every switch's table with a footer; a table still
	// open at EOF means the dump was cut short (its last entry may even be
	// cut mid-line, "0x0003 00").
	if cur := sw.cur; cur != nil {
		return &ParseError{File: lr.name, Line: lr.line, Msg: fmt.Sprintf("file ends inside switch %s's table (header at line %d): truncated", lftName(cur), cur.Line)}
	}
	return nil
}

// lftName names a switch in errors: its GUID and description.
func lftName(l *LFT) string {
	if l.Desc != "" {
		return fmt.Sprintf("0x%016x (%s)", l.GUID, l.Desc)
	}
	return fmt.Sprintf("0x%016x", l.GUID)
}

// parseLFTHeader parses
//
//	Unicast lids [0-22] of switch Lid 2 guid 0x0002c90300000100 ('leaf001'):
//	Unicast lids [0x0-0x16] of switch DR path slid 0; dlid 0; 0,1,5 guid 0x0002c90300000400 (leaf004):
//
// and returns the switch (with no table yet) and the top of the LID range
// (at most MaxUnicastLID).
func parseLFTHeader(t []byte) (*LFT, int, string) {
	b := t[len("Unicast lids ["):]
	_, b, ok := parseNum(b)
	if !ok || len(b) == 0 || b[0] != '-' {
		return nil, 0, "bad LID range"
	}
	top, b, ok := parseNum(b[1:])
	if !ok || len(b) == 0 || b[0] != ']' {
		return nil, 0, "bad LID range"
	}
	top = min(top, MaxUnicastLID)
	sw := &LFT{}
	if i := index(b, " Lid "); i >= 0 {
		lid, _, ok := parseDec(b[i+5:])
		if !ok || lid > MaxUnicastLID {
			return nil, 0, "bad switch LID"
		}
		sw.LID = uint16(lid)
	}
	i := index(b, "guid 0x")
	if i < 0 {
		return nil, 0, "no switch GUID"
	}
	guid, rest, ok := parseHex(b[i+5:])
	if !ok {
		return nil, 0, "bad switch GUID"
	}
	sw.GUID = guid
	rest = skipSpace(rest)
	if len(rest) > 0 && rest[0] == '(' {
		j := lastIndex(rest, ")")
		if j < 1 {
			return nil, 0, "unterminated description"
		}
		d := rest[1:j]
		if len(d) >= 2 && d[0] == '\'' && d[len(d)-1] == '\'' {
			d = d[1 : len(d)-1]
		}
		sw.Desc = string(d)
	}
	return sw, int(top), ""
}

// parseDestComment parses " # Channel Adapter portguid 0x...: 'desc'" or
// " : (Switch portguid 0x...: 'leaf001')".
func parseDestComment(b []byte) (Dest, bool) {
	b = skipSpace(b)
	switch {
	case hasPrefix(b, "# "):
		b = b[2:]
	case hasPrefix(b, ": ("):
		b = b[3:]
		if len(b) > 0 && b[len(b)-1] == ')' {
			b = b[:len(b)-1]
		}
	default:
		return Dest{}, false
	}
	i := index(b, " portguid ")
	if i < 0 {
		return Dest{}, false
	}
	d := Dest{Type: string(b[:i])}
	g, rest, ok := parseHex(b[i+len(" portguid "):])
	if !ok {
		return Dest{}, false
	}
	d.PortGUID = g
	if q := index(rest, "'"); q >= 0 {
		if e := lastIndex(rest, "'"); e > q {
			d.Desc = string(rest[q+1 : e])
		}
	}
	return d, true
}

// growPorts extends a table to length n (at most hard), the new entries
// NoPort. The capacity doubles (so entries arriving in LID order cost
// amortised constant time), but stays within soft (the header's range)
// when n does, and within hard.
func growPorts(p []uint8, n, soft, hard int) []uint8 {
	if n <= len(p) {
		return p
	}
	if n > cap(p) {
		c := max(2*cap(p), 64)
		if n <= soft {
			c = min(c, soft)
		}
		np := make([]uint8, len(p), max(min(c, hard), n))
		copy(np, p)
		p = np
	}
	old := len(p)
	p = p[:n]
	for i := old; i < n; i++ {
		p[i] = NoPort
	}
	return p
}

// growBools extends p to length n (at least), doubling its capacity.
func growBools(p []bool, n int) []bool {
	if n <= len(p) {
		return p
	}
	if n > cap(p) {
		np := make([]bool, len(p), max(2*cap(p), n, 64))
		copy(np, p)
		p = np
	}
	return p[:n]
}

func endsWith(b []byte, s string) bool {
	return len(b) >= len(s) && string(b[len(b)-len(s):]) == s
}

// clip shortens a line for an error message.
func clip(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "..."
	}
	return string(b)
}
