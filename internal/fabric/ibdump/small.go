package ibdump

import (
	"io"
)

// GUIDLID is one entry of OpenSM's guid2lid cache file: a port GUID and the
// LID range assigned to it (Max-Min+1 = 2^LMC).
type GUIDLID struct {
	GUID     uint64
	Min, Max uint16
	Line     int
}

// ParseGUID2LID streams a guid2lid file ("0x<guid> 0x<min> 0x<max>" lines).
func ParseGUID2LID(r io.Reader, name string, fn func(GUIDLID) error) error {
	lr := newLineReader(r, name)
	return lr.each(func(line []byte) error {
		f := fields(line)
		if len(f) == 0 || f[0][0] == '#' {
			return nil
		}
		if len(f) != 3 {
			return lr.errf("expected '0x<guid> 0x<min lid> 0x<max lid>', got %q", clip(line))
		}
		var vals [3]uint64
		for i := range f {
			v, rest, ok := parseHex(f[i])
			if !ok || len(rest) != 0 {
				return lr.errf("bad number %q", clip(f[i]))
			}
			vals[i] = v
		}
		if vals[1] > MaxUnicastLID || vals[2] > MaxUnicastLID || vals[2] < vals[1] {
			return lr.errf("bad LID range %#x-%#x", vals[1], vals[2])
		}
		// A port with LMC l owns 2^l LIDs (l <= 7) starting at a
		// multiple of 2^l.
		if n := vals[2] - vals[1] + 1; n > 128 || n&(n-1) != 0 || vals[1]&(n-1) != 0 {
			return lr.errf("bad LID range %#x-%#x: %d LIDs from %#x, want 2^LMC (LMC <= 7) LIDs starting at a multiple of 2^LMC", vals[1], vals[2], n, vals[1])
		}
		return fn(GUIDLID{GUID: vals[0], Min: uint16(vals[1]), Max: uint16(vals[2]), Line: lr.line})
	})
}

// Neighbor is one line of OpenSM's neighbors cache file: a link end
// (switch node GUID or CA port GUID, port number) and its peer.
type Neighbor struct {
	GUID       uint64
	Port       int
	RemoteGUID uint64
	RemotePort int
	Line       int
}

// ParseNeighbors streams a neighbors file ("0x<guid>:<port> 0x<guid>:<port>").
func ParseNeighbors(r io.Reader, name string, fn func(Neighbor) error) error {
	lr := newLineReader(r, name)
	return lr.each(func(line []byte) error {
		f := fields(line)
		if len(f) == 0 || f[0][0] == '#' {
			return nil
		}
		if len(f) != 2 {
			return lr.errf("expected '0x<guid>:<port> 0x<guid>:<port>', got %q", clip(line))
		}
		var n Neighbor
		n.Line = lr.line
		for i, p := range []*struct {
			g *uint64
			n *int
		}{{&n.GUID, &n.Port}, {&n.RemoteGUID, &n.RemotePort}} {
			g, rest, ok := parseHex(f[i])
			if !ok || len(rest) < 2 || rest[0] != ':' {
				return lr.errf("bad link end %q", clip(f[i]))
			}
			port, rest, ok := parseDec(rest[1:])
			if !ok || len(rest) != 0 || port > 255 {
				return lr.errf("bad port in %q", clip(f[i]))
			}
			*p.g, *p.n = g, port
		}
		return fn(n)
	})
}
