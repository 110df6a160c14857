package ibdump

import (
	"io"
	"strings"
)

// SMLog is what an OpenSM log (osm.log) or its console output (opensm.out)
// says about routing. A log spans SM restarts and many sweeps; SMLog
// describes the last ones: the engines of the last start and the state of
// the last sweep that configured the switches.
type SMLog struct {
	// Requested lists the engines named on the command line or in the
	// config ("Activate 'ftree' routing engine(s)") by the last start
	// that named any, in order.
	Requested []string
	// Engine is the engine that really configured the switches, from the
	// last "osm_ucast_mgr_process: <engine> tables configured" line.
	Engine string
	// Failed lists the engines that failed in the sweep that Engine
	// completed, before Engine configured the tables ("ucast_mgr_route:
	// <engine>: cannot build lid matrices"), in order. When no sweep
	// completed, the failures of the last, unfinished one.
	Failed []string
	// NotFatTree is set when ftree rejected the topology (ERR AB0D) in that
	// same sweep: a later sweep in which ftree succeeded clears it.
	NotFatTree bool
	// Errors holds the "ERR xxxx:" lines (at most 100).
	Errors []string
}

// ParseSMLog reads osm.log or opensm.out. It never fails on content:
// lines longer than 1 MiB (binary garbage, a NUL-filled tail) are skipped.
//
// The state of a sweep (failing engines, ERR AB0D) is collected until the
// line saying which engine configured the tables, and then replaces that of
// the previous sweep. The start of an SM ("OpenSM 3.3.23") discards an
// unfinished sweep, and its first "Activate" line replaces Requested.
func ParseSMLog(r io.Reader, name string) (SMLog, error) {
	var s SMLog
	lr := newLineReader(r, name)
	lr.skipLong = true
	// the sweep in progress
	var failed []string
	notFatTree := false
	// newStart: the next Activate line belongs to a new SM start
	newStart := true
	err := lr.each(func(line []byte) error {
		if isSMStart(line) {
			newStart = true
			failed, notFatTree = nil, false
			return nil
		}
		if i := index(line, "Activate '"); i >= 0 {
			rest := line[i+len("Activate '"):]
			if j := index(rest, "'"); j > 0 {
				if newStart {
					s.Requested, newStart = nil, false
				}
				for _, e := range strings.Split(string(rest[:j]), ",") {
					if e = strings.TrimSpace(e); e != "" {
						s.Requested = append(s.Requested, e)
					}
				}
			}
		}
		if i := index(line, "ucast_mgr_route: "); i >= 0 {
			rest := line[i+len("ucast_mgr_route: "):]
			if j := index(rest, ": cannot "); j > 0 {
				failed = appendNew(failed, string(rest[:j]))
			}
		}
		if i := index(line, "osm_ucast_mgr_process: "); i >= 0 {
			rest := line[i+len("osm_ucast_mgr_process: "):]
			if j := index(rest, " tables configured"); j > 0 {
				s.Engine = string(rest[:j])
				s.Failed, s.NotFatTree = failed, notFatTree
				failed, notFatTree = nil, false
			}
		}
		if index(line, "ERR AB0D") >= 0 || index(line, "topology is not a fat-tree") >= 0 {
			notFatTree = true
		}
		if i := index(line, "ERR "); i >= 0 && len(s.Errors) < 100 {
			s.Errors = append(s.Errors, clip(trimSpace(line[i:])))
		}
		return nil
	})
	if err != nil {
		return s, err
	}
	if s.Engine == "" {
		s.Failed, s.NotFatTree = failed, notFatTree
	}
	return s, nil
}

// isSMStart reports whether a log line is OpenSM's banner at startup:
// "OpenSM 3.3.23" alone (opensm.out) or after the log prefix
// ("Nov 21 23:50:58 640897 [B3823740] 0x80 -> OpenSM 3.3.23").
func isSMStart(line []byte) bool {
	t := trimSpace(line)
	if i := index(t, "-> OpenSM "); i >= 0 {
		t = t[i+len("-> "):]
	}
	return hasPrefix(t, "OpenSM ") && len(t) > len("OpenSM ") && t[len("OpenSM ")] >= '0' && t[len("OpenSM ")] <= '9'
}

// appendNew appends s to l unless l holds it already.
func appendNew(l []string, s string) []string {
	for _, x := range l {
		if x == s {
			return l
		}
	}
	return append(l, s)
}
