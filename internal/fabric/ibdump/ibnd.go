package ibdump

import (
	"fmt"
	"io"
)

// Node is one record of ibnetdiscover output (a switch, CA or router with
// its connected ports).
type Node struct {
	Type     string // "Switch", "Ca" or "Rt"
	NumPorts int
	GUID     uint64 // node GUID
	PortGUID uint64 // switch port 0 GUID (from "switchguid=0x..(..)"), 0 otherwise
	ID       string // node id, e.g. S-0002c90300000400
	Desc     string
	LID      uint16 // switch base LID ("base port 0 lid N lmc M")
	LMC      int
	Ports    []NodePort
	Line     int
}

// NodePort is one connected port of a Node.
type NodePort struct {
	Port           int
	PortGUID       uint64 // CA port GUID ("[1](guid)"), 0 on switches
	LID            uint16 // CA port LID (from the comment), 0 when not given
	LMC            int
	RemoteID       string
	RemoteGUID     uint64 // node GUID of the peer (from its id)
	RemotePort     int
	RemotePortGUID uint64 // peer CA port GUID, 0 when not given
	RemoteDesc     string
	Line           int
}

// ParseIBNetDiscover streams ibnetdiscover output (also the ibsim net file
// syntax). fn gets each node after its last port line.
func ParseIBNetDiscover(r io.Reader, name string, fn func(*Node) error) error {
	lr := newLineReader(r, name)
	node := block[Node]{emit: fn}
	var pendGUID, pendPortGUID uint64
	err := lr.each(func(line []byte) error {
		t := trimSpace(line)
		switch {
		case len(t) == 0 || t[0] == '#':
		case hasPrefix(t, "vendid=") || hasPrefix(t, "devid=") || hasPrefix(t, "sysimgguid="):
			return node.done()
		case hasPrefix(t, "switchguid=") || hasPrefix(t, "caguid=") || hasPrefix(t, "rtguid="):
			if err := node.done(); err != nil {
				return err
			}
			v := t[index(t, "=")+1:]
			g, rest, ok := parseHex(v)
			if !ok {
				return lr.errf("bad GUID in %q", clip(t))
			}
			pendGUID, pendPortGUID = g, 0
			if len(rest) > 0 && rest[0] == '(' {
				pg, rest2, ok := parseHex(rest[1:])
				if !ok || len(rest2) == 0 || rest2[0] != ')' {
					return lr.errf("bad port GUID in %q", clip(t))
				}
				pendPortGUID = pg
			}
		case hasPrefix(t, "Switch") || hasPrefix(t, "Ca") || hasPrefix(t, "Hca") || hasPrefix(t, "Rt"):
			if err := node.done(); err != nil {
				return err
			}
			n, msg := parseNodeHeader(t)
			if msg != "" {
				return lr.errf("%s in %q", msg, clip(t))
			}
			n.Line = lr.line
			if n.GUID == 0 {
				n.GUID = pendGUID
			}
			n.PortGUID = pendPortGUID
			pendGUID, pendPortGUID = 0, 0
			node.cur = n
		case t[0] == '[':
			if node.cur == nil {
				return lr.errf("port line before a node header")
			}
			p, msg := parsePortLine(t)
			if msg != "" {
				return lr.errf("%s in %q", msg, clip(t))
			}
			p.Line = lr.line
			node.cur.Ports = append(node.cur.Ports, p)
		default:
			return lr.errf("unexpected line %q", clip(t))
		}
		return nil
	})
	if err != nil {
		return err
	}
	return node.done()
}

// parseNodeHeader: Switch	6 "S-0002c90300000400"		# "leaf004" base port 0 lid 5 lmc 0
func parseNodeHeader(t []byte) (*Node, string) {
	n := &Node{}
	i := 0
	for i < len(t) && !isSpace(t[i]) {
		i++
	}
	n.Type = string(t[:i])
	if n.Type == "Hca" {
		n.Type = "Ca"
	}
	b := skipSpace(t[i:])
	np, b, ok := parseDec(b)
	if !ok || np > 255 {
		return nil, "bad port count"
	}
	n.NumPorts = np
	id, b, ok := quoted(skipSpace(b))
	if !ok {
		return nil, "bad node id"
	}
	n.ID = id
	n.GUID = guidFromID(id)
	b = skipSpace(b)
	if len(b) > 0 && b[0] == '#' {
		b = skipSpace(b[1:])
		if d, rest, ok := quoted(b); ok {
			n.Desc = d
			b = rest
		}
		if j := index(b, " lid "); j >= 0 {
			lid, rest, ok := parseDec(b[j+5:])
			if ok && lid > MaxUnicastLID {
				return nil, fmt.Sprintf("LID %d above the unicast range (%d)", lid, MaxUnicastLID)
			}
			if ok {
				n.LID = uint16(lid)
				if k := index(rest, "lmc "); k >= 0 {
					if lmc, _, ok := parseDec(rest[k+4:]); ok && lmc <= 7 {
						n.LMC = lmc
					}
				}
			}
		}
	}
	return n, ""
}

// parsePortLine parses a switch or CA port line:
//
//	[1]	"H-0002c904000000d0"[1](2c904000000d1) 		# "stor001 mlx5_0" lid 20 4xSDR
//	[1](2c90400000081) 	"S-0002c90300000300"[4]		# lid 21 lmc 0 "leaf003" lid 4 4xSDR
func parsePortLine(t []byte) (NodePort, string) {
	var p NodePort
	port, b, ok := parseDec(t[1:])
	if !ok || port > 255 || len(b) == 0 || b[0] != ']' {
		return p, "bad port number"
	}
	p.Port = port
	b = b[1:]
	if len(b) > 0 && b[0] == '(' {
		g, rest, ok := parseHex(b[1:])
		if !ok || len(rest) == 0 || rest[0] != ')' {
			return p, "bad port GUID"
		}
		p.PortGUID = g
		b = rest[1:]
	}
	id, b, ok := quoted(skipSpace(b))
	if !ok {
		return p, "bad remote id"
	}
	p.RemoteID = id
	p.RemoteGUID = guidFromID(id)
	if len(b) == 0 || b[0] != '[' {
		return p, "missing remote port"
	}
	rp, b, ok := parseDec(b[1:])
	if !ok || rp > 255 || len(b) == 0 || b[0] != ']' {
		return p, "bad remote port"
	}
	p.RemotePort = rp
	b = b[1:]
	if len(b) > 0 && b[0] == '(' {
		g, rest, ok := parseHex(b[1:])
		if !ok || len(rest) == 0 || rest[0] != ')' {
			return p, "bad remote port GUID"
		}
		p.RemotePortGUID = g
		b = rest[1:]
	}
	b = skipSpace(b)
	if len(b) > 0 && b[0] == '#' {
		b = skipSpace(b[1:])
		// CA port lines carry their own "lid N lmc M" before the peer's description.
		if hasPrefix(b, "lid ") {
			lid, rest, ok := parseDec(b[4:])
			if ok && lid > MaxUnicastLID {
				return p, fmt.Sprintf("LID %d above the unicast range (%d)", lid, MaxUnicastLID)
			}
			if ok {
				p.LID = uint16(lid)
				rest = skipSpace(rest)
				if hasPrefix(rest, "lmc ") {
					if lmc, r2, ok := parseDec(rest[4:]); ok && lmc <= 7 {
						p.LMC = lmc
						rest = r2
					}
				}
				b = skipSpace(rest)
			}
		}
		if d, _, ok := quoted(b); ok {
			p.RemoteDesc = d
		}
	}
	return p, ""
}

// quoted reads a "..." string at the start of b.
func quoted(b []byte) (string, []byte, bool) {
	if len(b) == 0 || b[0] != '"' {
		return "", b, false
	}
	j := index(b[1:], `"`)
	if j < 0 {
		return "", b, false
	}
	return string(b[1 : 1+j]), b[j+2:], true
}

// guidFromID extracts the GUID of node ids like "S-0002c90300000400" or
// "H-0002c90400000010"; 0 when the id has another form.
func guidFromID(id string) uint64 {
	if len(id) < 3 || id[1] != '-' {
		return 0
	}
	g, rest, ok := parseHex([]byte(id[2:]))
	if !ok || len(rest) != 0 {
		return 0
	}
	return g
}
