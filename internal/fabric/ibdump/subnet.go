package ibdump

import (
	"fmt"
	"io"
)

// LinkEnd is one side of a link in opensm-subnet.lst.
type LinkEnd struct {
	Type       string // "SW", "CA", "CA-SM", "SW-SM", "RT", ...
	NumPorts   int
	SystemGUID uint64
	NodeGUID   uint64
	PortGUID   uint64
	Desc       string
	LID        uint16
	Port       int
}

// IsSwitch reports whether the end is on a switch.
func (e LinkEnd) IsSwitch() bool { return e.Type == "SW" || e.Type == "SW-SM" }

// SubnetLink is one line of opensm-subnet.lst: a link seen from end A.
// Every cable appears twice, once from each side.
type SubnetLink struct {
	A, B  LinkEnd
	Phy   string // "4x"
	State string // "ACT"
	Speed string // "2.5"
	Line  int
}

// ParseSubnetList streams opensm-subnet.lst.
func ParseSubnetList(r io.Reader, name string, fn func(l SubnetLink) error) error {
	lr := newLineReader(r, name)
	return lr.each(func(line []byte) error {
		t := trimSpace(line)
		if len(t) == 0 {
			return nil
		}
		var l SubnetLink
		l.Line = lr.line
		rest, msg := parseLinkEnd(t, &l.A)
		if msg == "" {
			rest, msg = parseLinkEnd(skipSpace(rest), &l.B)
		}
		if msg != "" {
			return lr.errf("%s in %q", msg, clip(t))
		}
		for _, f := range fields(rest) {
			switch {
			case hasPrefix(f, "PHY="):
				l.Phy = string(f[4:])
			case hasPrefix(f, "LOG="):
				l.State = string(f[4:])
			case hasPrefix(f, "SPD="):
				l.Speed = string(f[4:])
			default:
				return lr.errf("unexpected field %q", clip(f))
			}
		}
		return fn(l)
	})
}

// parseLinkEnd parses "{ SW Ports:06 SystemGUID:... NodeGUID:... PortGUID:...
// VenID:... DevID:... Rev:... {desc} LID:0002 PN:01 }".
func parseLinkEnd(b []byte, e *LinkEnd) ([]byte, string) {
	if !hasPrefix(b, "{ ") {
		return b, "expected '{'"
	}
	b = b[2:]
	i := index(b, " ")
	if i <= 0 {
		return b, "missing node type"
	}
	e.Type = string(b[:i])
	b = skipSpace(b[i:])
	for len(b) > 0 && b[0] != '{' {
		j := index(b, ":")
		if j <= 0 {
			return b, "expected key:value"
		}
		key := string(b[:j])
		var v uint64
		var ok bool
		v, b, ok = parseHex(b[j+1:])
		if !ok {
			return b, "bad value for " + key
		}
		switch key {
		case "Ports":
			// A node has at most 254 ports; the model allocates one
			// Port per port number and stores numbers as uint8.
			if v > 255 {
				return b, "bad value for Ports (more than 255)"
			}
			e.NumPorts = int(v)
		case "SystemGUID":
			e.SystemGUID = v
		case "NodeGUID":
			e.NodeGUID = v
		case "PortGUID":
			e.PortGUID = v
		case "VenID", "DevID", "Rev":
		default:
			return b, "unknown key " + key
		}
		b = skipSpace(b)
	}
	if len(b) == 0 {
		return b, "missing {description}"
	}
	// The description may itself contain braces: it ends at the last "} LID:"
	// before the closing "} " of this end.
	j := index(b, "} LID:")
	if j < 0 {
		return b, "missing LID"
	}
	e.Desc = string(b[1:j])
	b = b[j+len("} LID:"):]
	lid, b, ok := parseHex(b)
	if !ok {
		return b, "bad LID"
	}
	if lid > MaxUnicastLID {
		return b, fmt.Sprintf("LID %#x above the unicast range (%#x)", lid, MaxUnicastLID)
	}
	e.LID = uint16(lid)
	b = skipSpace(b)
	if !hasPrefix(b, "PN:") {
		return b, "missing PN"
	}
	pn, b, ok := parseHex(b[3:])
	if !ok || pn > 255 {
		return b, "bad PN"
	}
	e.Port = int(pn)
	b = skipSpace(b)
	if len(b) == 0 || b[0] != '}' {
		return b, "expected '}'"
	}
	return b[1:], ""
}

// fields splits on spaces and tabs.
func fields(b []byte) [][]byte {
	var out [][]byte
	for {
		b = skipSpace(b)
		if len(b) == 0 {
			return out
		}
		i := 0
		for i < len(b) && !isSpace(b[i]) {
			i++
		}
		out = append(out, b[:i])
		b = b[i:]
	}
}
