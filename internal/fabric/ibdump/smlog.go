package ibdump

import (
	"io"
	"strings"
)

// SMLog is what an OpenSM log (osm.log) or its console output (opensm.out)
// says about routing.
type SMLog struct {
	// Requested lists the engines named on the command line or in the
	// config ("Activate 'ftree' routing engine(s)"), in order.
	Requested []string
	// Engine is the engine that really configured the switches, from the
	// last "osm_ucast_mgr_process: <engine> tables configured" line.
	Engine string
	// NotFatTree is set when ftree rejected the topology (ERR AB0D) and
	// OpenSM fell back to another engine.
	NotFatTree bool
	// Errors holds the "ERR xxxx:" lines (at most 100).
	Errors []string
}

// ParseSMLog reads osm.log or opensm.out. It never fails on content:
// lines longer than 1 MiB (binary garbage, a NUL-filled tail) are skipped.
func ParseSMLog(r io.Reader, name string) (SMLog, error) {
	var s SMLog
	lr := newLineReader(r, name)
	lr.skipLong = true
	for {
		line, err := lr.next()
		if err == io.EOF {
			return s, nil
		}
		if err != nil {
			return s, err
		}
		if i := index(line, "Activate '"); i >= 0 {
			rest := line[i+len("Activate '"):]
			if j := index(rest, "'"); j > 0 {
				for _, e := range strings.Split(string(rest[:j]), ",") {
					if e = strings.TrimSpace(e); e != "" {
						s.Requested = append(s.Requested, e)
					}
				}
			}
		}
		if i := index(line, "osm_ucast_mgr_process: "); i >= 0 {
			rest := line[i+len("osm_ucast_mgr_process: "):]
			if j := index(rest, " tables configured"); j > 0 {
				s.Engine = string(rest[:j])
			}
		}
		if index(line, "ERR AB0D") >= 0 || index(line, "topology is not a fat-tree") >= 0 {
			s.NotFatTree = true
		}
		if i := index(line, "ERR "); i >= 0 && len(s.Errors) < 100 {
			s.Errors = append(s.Errors, clip(trimSpace(line[i:])))
		}
	}
}
