package fabric

import (
	"context"
	"fmt"
	"io"

	"github.com/slipstream-io/slipstream/internal/fabric/ibdump"
)

// CheckResult tells how well the model agrees with an independent OpenSM
// output.
type CheckResult struct {
	File       string   `json:"file"`
	Checked    int      `json:"checked"`
	Mismatches int      `json:"mismatches"`
	Examples   []string `json:"examples,omitempty"`
}

func (c *CheckResult) fail(format string, args ...any) {
	c.Mismatches++
	if len(c.Examples) < 10 {
		c.Examples = append(c.Examples, fmt.Sprintf(format, args...))
	}
}

// switchHops follows the LFTs from switch ordinal s to dlid and returns the
// number of links crossed (0 when dlid is s itself).
func (m *Model) switchHops(s int32, dlid uint16) (int, bool) {
	if int(dlid) >= len(m.lidPort) || m.lidPort[dlid] < 0 {
		return 0, false
	}
	dst := m.lidPort[dlid]
	cur := s
	for hops := 0; hops <= len(m.Switches)+1; hops++ {
		n := m.Nodes[m.Switches[cur]]
		t := m.lft[cur]
		if int(dlid) >= len(t) || t[dlid] == ibdump.NoPort {
			return 0, false
		}
		out := int(t[dlid])
		if out == 0 {
			return hops, dst == n.portBase
		}
		if out > n.NumPorts {
			return 0, false
		}
		peer := m.Ports[n.portBase+int32(out)].Peer
		if peer < 0 {
			return 0, false
		}
		if peer == dst {
			return hops + 1, true
		}
		pn := m.Nodes[m.Ports[peer].Node]
		if pn.Kind != KindSwitch {
			return 0, false
		}
		cur = pn.sw
	}
	return 0, false
}

func (m *Model) switchByGUID(g uint64) (int32, bool) {
	ni, ok := m.nodeByGUID[g]
	if !ok || m.Nodes[ni].Kind != KindSwitch {
		return 0, false
	}
	return m.Nodes[ni].sw, true
}

// CheckFDBs compares the model with opensm.fdbs: every entry's port must be
// the LFT's, and the hop count OpenSM reports must be the number of links
// the model's route from that switch crosses.
func (m *Model) CheckFDBs(r io.Reader, name string) (CheckResult, error) {
	res := CheckResult{File: name}
	err := ibdump.ParseFDBs(r, name, func(f *ibdump.FDBSwitch) error {
		s, ok := m.switchByGUID(f.GUID)
		if !ok {
			res.fail("%s:%d: switch %s not in the model", name, f.Line, fmtGUID(f.GUID))
			return nil
		}
		for _, e := range f.Entries {
			if !e.Reachable {
				continue
			}
			res.Checked++
			t := m.lft[s]
			if int(e.LID) >= len(t) || int(t[e.LID]) != e.Port {
				res.fail("switch %s LID %#x: fdbs port %d, LFT differs", m.Nodes[m.Switches[s]].Desc, e.LID, e.Port)
				continue
			}
			h, ok := m.switchHops(s, e.LID)
			if !ok || h != e.Hops {
				res.fail("switch %s LID %#x: fdbs %d hops, route crosses %d (ok=%v)", m.Nodes[m.Switches[s]].Desc, e.LID, e.Hops, h, ok)
			}
		}
		return nil
	})
	return res, err
}

// CheckLIDMatrix compares the model with opensm-lid-matrix.dump: for every
// switch and LID, the hop count the matrix gives for the port the LFT uses
// must equal the links the model's route crosses.
func (m *Model) CheckLIDMatrix(r io.Reader, name string) (CheckResult, error) {
	res := CheckResult{File: name}
	err := ibdump.ParseLIDMatrix(r, name, func(ls *ibdump.LIDMatrixSwitch) error {
		s, ok := m.switchByGUID(ls.GUID)
		if !ok {
			res.fail("%s:%d: switch %s not in the model", name, ls.Line, fmtGUID(ls.GUID))
			return nil
		}
		t := m.lft[s]
		for _, row := range ls.Rows {
			if int(row.LID) >= len(t) || t[row.LID] == ibdump.NoPort {
				continue
			}
			res.Checked++
			port := int(t[row.LID])
			if port >= len(row.Hops) {
				res.fail("switch %s LID %#x: LFT port %d beyond the matrix row", m.Nodes[m.Switches[s]].Desc, row.LID, port)
				continue
			}
			h, ok := m.switchHops(s, row.LID)
			if !ok || h != int(row.Hops[port]) {
				res.fail("switch %s LID %#x: matrix %d hops via port %d, route crosses %d", m.Nodes[m.Switches[s]].Desc, row.LID, row.Hops[port], port, h)
			}
		}
		return nil
	})
	return res, err
}

// CheckLFTFile compares the model's LFTs with another LFT dump (for example
// dump_fts output taken from the switches against OpenSM's own dump).
func (m *Model) CheckLFTFile(r io.Reader, name string) (CheckResult, error) {
	res := CheckResult{File: name}
	err := ibdump.ParseLFTs(r, name, ibdump.LFTHandler{Switch: func(l *ibdump.LFT) error {
		s, ok := m.switchByGUID(l.GUID)
		if !ok {
			res.fail("%s:%d: switch %s not in the model", name, l.Line, fmtGUID(l.GUID))
			return nil
		}
		t := m.lft[s]
		for lid := 1; lid < max(len(t), len(l.Ports)); lid++ {
			a, b := uint8(ibdump.NoPort), uint8(ibdump.NoPort)
			if lid < len(t) {
				a = t[lid]
			}
			if lid < len(l.Ports) {
				b = l.Ports[lid]
			}
			if a == ibdump.NoPort && b == ibdump.NoPort {
				continue
			}
			res.Checked++
			if a != b {
				res.fail("switch %s LID %#x: port %d here, %d in %s", m.Nodes[m.Switches[s]].Desc, lid, a, b, name)
			}
		}
		return nil
	}})
	return res, err
}

// Check runs every cross-check for which fs has a file (opensm.fdbs,
// opensm-lid-matrix.dump, and dump_fts output when the model was read from
// opensm-lfts.dump).
func (m *Model) Check(ctx context.Context, fs Files) ([]CheckResult, error) {
	var out []CheckResult
	run := func(k string, fn func(io.Reader, string) (CheckResult, error)) error {
		p := fs[k]
		if p == "" {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		return withFile(p, func(r io.Reader, name string) error {
			c, err := fn(r, name)
			if err != nil {
				return err
			}
			out = append(out, c)
			return nil
		})
	}
	if err := run(FileFDBs, m.CheckFDBs); err != nil {
		return nil, err
	}
	if err := run(FileLIDMatrix, m.CheckLIDMatrix); err != nil {
		return nil, err
	}
	if fs[FileLFTs] != "" {
		if err := run(FileDumpFTS, m.CheckLFTFile); err != nil {
			return nil, err
		}
	}
	return out, nil
}
