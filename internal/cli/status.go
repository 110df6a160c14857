package cli

import (
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/netx"
	"github.com/slipstream-io/slipstream/internal/node"
	"github.com/slipstream-io/slipstream/internal/tier"
)

// statusRow is one node of `admin status`: its entry in the map and what
// it answered.
type statusRow struct {
	id  string
	ni  cluster.NodeInfo
	st  node.Status
	err error
}

// oldBacklog is the age at which a write not yet in the backend is worth
// an operator's look: destaging normally takes seconds.
const oldBacklog = time.Minute

// attention lists what needs an operator's eye across the nodes: nodes
// down or not answering, failed drives, write-back work that does not
// drain, damaged journals, intra-cluster paths down to nodes that are up,
// copies a job could not repair or place, and volume mirrors behind (as
// the volume's writer counts them, if it answered).
func attention(rows []statusRow, m *cluster.Map, now time.Time) []string {
	var out []string
	// owner finds the node of an intra address; writers are the volumes
	// whose writer answered (the others' counts of a stale mirror's chunks
	// are every chunk).
	owner, writers := map[string]statusRow{}, map[string]bool{}
	for _, r := range rows {
		for _, a := range r.ni.IntraAddrs {
			owner[a] = r
			if _, taken := owner[hostOf(a)]; !taken {
				owner[hostOf(a)] = r
			}
		}
		for name, v := range r.st.Extra.Volumes {
			writers[name] = writers[name] || v.Writer && r.err == nil
		}
	}
	add := func(id, format string, args ...any) { out = append(out, id+": "+fmt.Sprintf(format, args...)) }
	if answered := slices.DeleteFunc(slices.Clone(rows), func(r statusRow) bool { return r.err != nil }); len(answered) > 0 &&
		!slices.ContainsFunc(answered, func(r statusRow) bool { return r.st.Leader != "" }) {
		out = append(out, "cluster: no node that answered knows a raft leader: the map cannot change (no node is marked down, no bucket or volume created or claimed) until more than half of the voters are up")
	}
	for _, r := range rows {
		switch {
		case r.ni.State == cluster.StateDown:
			add(r.id, "%s", downNote(r.id, rows, m))
			continue
		case r.err != nil:
			add(r.id, "did not answer (see below)")
			continue
		}
		for _, mp := range r.st.Mountpaths {
			if mp.Failed {
				add(r.id, "drive %s FAILED: it takes no new writes; replace it", mp.Path)
			}
		}
		x := r.st.Extra
		if d := x.Destage; d.Objects > 0 && (d.Oldest >= oldBacklog || d.LastError != "") {
			msg := fmt.Sprintf("%s not in the backend, the oldest %s old", plural(d.Objects, "write"), d.Oldest.Round(time.Second))
			if d.LastError != "" {
				msg += "; last upload error: " + d.LastError
			}
			add(r.id, "%s", msg)
		}
		if x.Destage.JournalCutRegions > 0 {
			add(r.id, "the write-back journal was damaged: %s cut out at start, kept in %s", plural(x.Destage.JournalCutRegions, "region"), x.Destage.JournalCutFile)
		}
		for _, p := range x.Interfaces.Paths {
			if msg := pathTrouble(p, owner, now); msg != "" {
				add(r.id, "%s", msg)
			}
		}
		if l := x.Scrub.Last; l != nil && l.Unrepaired > 0 {
			add(r.id, "the last scrub found %s it could not repair", plural(l.Unrepaired, "damaged copy", "damaged copies"))
		}
		if l := x.Rebalance.Last; l != nil && l.Failed > 0 {
			add(r.id, "the last rebalance pass could not place %s", plural(l.Failed, "copy", "copies"))
		}
		for _, name := range slices.Sorted(maps.Keys(x.Volumes)) {
			if s := volumeTrouble(x.Volumes[name]); s != "" && (x.Volumes[name].Writer || !writers[name]) {
				add(r.id, "volume %s: %s", name, s)
			}
		}
	}
	return out
}

// downNote says how long node id has been down and when the other nodes
// make new copies of its objects, as the node that has seen it down the
// longest counts (a node that restarted since counts from its start).
func downNote(id string, rows []statusRow, m *cluster.Map) string {
	var d node.DownNode
	seen := false
	for _, r := range rows {
		if x, ok := r.st.Extra.Down[id]; ok && r.err == nil && x.For >= d.For {
			d, seen = x, true
		}
	}
	if !seen {
		return "down"
	}
	msg := fmt.Sprintf("down for %s", d.For.Round(time.Second))
	switch {
	case d.After <= 0:
		msg += "; its objects get no new copies elsewhere (rebalance.down_after is off)"
	case d.For < d.After:
		msg += fmt.Sprintf("; the other nodes make new copies of its objects in %s (rebalance.down_after), or at once after admin node rm %s", (d.After - d.For).Round(time.Second), id)
	default:
		msg += fmt.Sprintf("; the other nodes have made new copies of its objects (admin status --detail shows the rebalance); admin node rm %s removes it for good", id)
	}
	for _, name := range m.VolumeNames() {
		if v, _ := m.Volume(name); len(v.Nodes) == 0 || slices.Contains(v.Nodes, id) {
			msg += "; its volume chunks are re-placed only after admin node rm"
			break
		}
	}
	return msg
}

// pathTrouble describes an intra-cluster path that is down to a node that
// is up ("" for one that is up, or leads to a node that is down: that one
// is down too). owner finds the node of an address.
func pathTrouble(p netx.PairStats, owner map[string]statusRow, now time.Time) string {
	to, ok := owner[p.Remote]
	if !ok {
		to, ok = owner[hostOf(p.Remote)]
	}
	if p.State == netx.StateUp || ok && to.ni.State != cluster.StateUp {
		return ""
	}
	what := p.Remote
	if ok {
		what = to.id + " (" + p.Remote + ")"
	}
	msg := fmt.Sprintf("intra-cluster path from %s to %s %s", localAddr(p.Local), what, p.State)
	if !p.Since.IsZero() {
		msg += fmt.Sprintf(" for %s", now.Sub(p.Since).Round(time.Second))
	}
	if p.LastError != "" {
		msg += ": " + p.LastError
	}
	return msg
}

// volumeAttention lists the volumes with chunks that cannot be read:
// those whose every copy is on nodes that are not up, and those lost.
func volumeAttention(vols []node.VolumeInfo) []string {
	var out []string
	for _, v := range vols {
		if v.Unavailable > 0 {
			out = append(out, fmt.Sprintf("volume %s: %s with no copy on a node that is up (volume info %s)", v.Name, plural(int(v.Unavailable), "chunk"), v.Name))
		}
		if len(v.Lost) > 0 {
			out = append(out, fmt.Sprintf("volume %s: %s LOST (volume info %s)", v.Name, plural(len(v.Lost), "chunk"), v.Name))
		}
	}
	return out
}

// hostOf is the host part of an address (the address if it has no port).
func hostOf(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// backlogTotal sums the write-back backlog of the nodes that answered.
func backlogTotal(rows []statusRow) tier.Backlog {
	var t tier.Backlog
	for _, r := range rows {
		if r.err != nil {
			continue
		}
		d := r.st.Extra.Destage
		t.Objects += d.Objects
		t.Bytes += d.Bytes
		t.Oldest = max(t.Oldest, d.Oldest)
	}
	return t
}

// volumeTrouble says which mirrors of an open volume are down or behind,
// or "" if none is.
func volumeTrouble(v node.VolumeState) string {
	var parts []string
	if len(v.Down) > 0 {
		parts = append(parts, "mirrors down: "+strings.Join(v.Down, ", "))
	}
	var stale []string
	for _, id := range slices.Sorted(maps.Keys(v.Stale)) {
		if n := v.Stale[id]; n > 0 {
			stale = append(stale, fmt.Sprintf("%d on %s", n, id))
		}
	}
	if len(stale) > 0 {
		parts = append(parts, "chunks to resynchronise: "+strings.Join(stale, ", "))
	}
	return strings.Join(parts, "; ")
}

// nodeCells returns a row's first columns: its ID, state, voter flag and
// public addresses.
func nodeCells(r statusRow) string {
	state := string(r.ni.State)
	if r.ni.Draining {
		state += ",draining"
	}
	public := strings.Join(r.ni.PublicAddrs, ",")
	if public == "" {
		public = "-"
	}
	return fmt.Sprintf("%s\t%s\t%v\t%s", r.id, state, r.ni.Voter, public)
}

// writeNodesTable writes one row per node: its drives (and how many have
// failed), the used share of its fullest drive's file system and its
// objects.
func writeNodesTable(w io.Writer, rows []statusRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tVOTER\tPUBLIC\tDRIVES\tFULLEST\tOBJECTS")
	for _, r := range rows {
		if r.err != nil || len(r.st.Mountpaths) == 0 {
			drives := "-"
			if r.err != nil {
				drives = "(did not answer)"
			}
			fmt.Fprintf(tw, "%s\t%s\t-\t-\n", nodeCells(r), drives)
			continue
		}
		failed, objects, fullest := 0, int64(0), -1.0
		for _, mp := range r.st.Mountpaths {
			if mp.Failed {
				failed++
			}
			objects += mp.Objects
			if mp.Capacity > 0 {
				fullest = max(fullest, float64(mp.Used)/float64(mp.Capacity))
			}
		}
		drives := strconv.Itoa(len(r.st.Mountpaths))
		if failed > 0 {
			drives += fmt.Sprintf(", %d FAILED", failed)
		}
		full := "-"
		if fullest >= 0 {
			full = fmt.Sprintf("%.0f%%", 100*fullest)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", nodeCells(r), drives, full, objects)
	}
	return tw.Flush()
}

// writeDrivesTable writes one row per node and mountpath, with what
// USED and CAPACITY are above it.
func writeDrivesTable(w io.Writer, rows []statusRow) error {
	fmt.Fprintln(w, spaceNote)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tVOTER\tPUBLIC\tMOUNTPATH\tUSED\tCAPACITY\tOBJECTS")
	for _, r := range rows {
		if r.err != nil || len(r.st.Mountpaths) == 0 {
			mp := "-"
			if r.err != nil {
				mp = "(did not answer, see below)"
			}
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\n", nodeCells(r), mp)
			continue
		}
		for i, mp := range r.st.Mountpaths {
			path := mp.Path
			if mp.Failed {
				path += " (FAILED: no new writes)"
			}
			if i == 0 {
				fmt.Fprintf(tw, "%s\t", nodeCells(r))
			} else {
				fmt.Fprint(tw, "\t\t\t\t")
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", path, humanBytes(mp.Used), humanBytes(mp.Capacity), mp.Objects)
		}
	}
	return tw.Flush()
}

// writeSections writes, under a node's heading, what it reports besides
// its mountpaths: destage backlog, listeners, intra-cluster paths,
// rebalance and scrub passes and open volumes.
func writeSections(w io.Writer, r statusRow, now time.Time) {
	x := r.st.Extra
	head := r.id
	if r.st.Leader == r.id {
		head += " (leader)"
	}
	fmt.Fprintf(w, "\n%s, map version %d:\n", head, r.st.MapVersion)
	section := func(label string, lines ...string) {
		for i, l := range lines {
			if i > 0 {
				label = ""
			}
			fmt.Fprintf(w, "  %-11s %s\n", label, l)
		}
	}
	section("destage", destageLines(x.Destage)...)
	section("listening", listenerLines(r.ni, x.Interfaces.Listeners)...)
	section("intra paths", pathLines(x.Interfaces.PeerTransport)...)
	section("rebalance", passLine(x.Rebalance, rebalanceLine, now))
	section("scrub", passLine(x.Scrub, scrubLine, now))
	var vols []string
	for _, name := range slices.Sorted(maps.Keys(x.Volumes)) {
		v := x.Volumes[name]
		s := volumeTrouble(v)
		if s == "" {
			s = "every mirror up to date"
		}
		if v.Copying > 0 {
			s += fmt.Sprintf("; %s left to copy to new owners", plural(v.Copying, "chunk copy", "chunk copies"))
		}
		if v.Forwarded > 0 || v.Applied > 0 {
			s += fmt.Sprintf("; writes forwarded to the writer %d, applied for other nodes' clients %d", v.Forwarded, v.Applied)
		}
		vols = append(vols, name+": "+s)
	}
	if len(vols) == 0 {
		vols = []string{"none open here"}
	}
	section("volumes", vols...)
}

func destageLines(d tier.Backlog) []string {
	first := "nothing waiting for the backend"
	if d.Objects > 0 {
		first = fmt.Sprintf("%s not in the backend yet (%s), the oldest %s old, %d being uploaded",
			plural(d.Objects, "write"), humanBytes(d.Bytes), d.Oldest.Round(time.Millisecond), d.Running)
	}
	lines := []string{first}
	if d.ReplicaObjects > 0 || d.Notices > 0 {
		lines = append(lines, fmt.Sprintf("%s held for other owners (%s); %s to replica holders waiting to be sent again",
			plural(d.ReplicaObjects, "replica"), humanBytes(d.ReplicaBytes), plural(d.Notices, "notice")))
	}
	done := fmt.Sprintf("%d destaged since start, %s", d.Destaged, plural(int(d.Failures), "failed attempt"))
	if d.LastError != "" {
		done += ", the last error: " + d.LastError
	}
	lines = append(lines, done+"; journal "+humanBytes(d.JournalBytes))
	if d.JournalCutRegions > 0 {
		lines = append(lines, fmt.Sprintf("journal cut at start: %s in %s, kept in %s",
			humanBytes(d.JournalCutBytes), plural(d.JournalCutRegions, "damaged region"), d.JournalCutFile))
	}
	return lines
}

// listenerLines describe each listening address: whether it is one of the
// node's intra-cluster or public (S3) addresses, its connections and bytes.
func listenerLines(ni cluster.NodeInfo, ls []netx.ListenerStats) []string {
	width := 0
	for _, l := range ls {
		width = max(width, len(l.Addr))
	}
	out := make([]string, 0, len(ls))
	for _, l := range ls {
		kind := ""
		switch {
		case slices.Contains(ni.IntraAddrs, l.Addr):
			kind = "intra"
		case slices.Contains(ni.PublicAddrs, l.Addr):
			kind = "public"
		}
		out = append(out, fmt.Sprintf("%-*s  %-6s  %d accepted, %d open, %s received, %s sent",
			width, l.Addr, kind, l.Accepted, l.Open, humanBytes(int64(l.BytesRecv)), humanBytes(int64(l.BytesSent))))
	}
	if len(out) == 0 {
		out = []string{"-"}
	}
	return out
}

// pathLines describe the node's intra-cluster paths, per local address.
func pathLines(ps []netx.IfaceStats) []string {
	width := 0
	for _, p := range ps {
		width = max(width, len(localAddr(p.Local)))
	}
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		paths := fmt.Sprintf("%d of %d paths up", p.PairsUp, p.PairsUp+p.PairsDown)
		if p.PairsUp+p.PairsDown == 0 {
			paths = "no path used yet"
		}
		out = append(out, fmt.Sprintf("from %-*s  %-8s  %s, %d requests (%d in flight, %d retried, %d failed), %s sent, %s received",
			width, localAddr(p.Local), p.State, paths, p.Requests, p.InFlight, p.Retries, p.Errors,
			humanBytes(int64(p.BytesSent)), humanBytes(int64(p.BytesRecv))))
	}
	if len(out) == 0 {
		out = []string{"-"}
	}
	return out
}

// localAddr names a transport's local address ("" is unbound).
func localAddr(a string) string {
	if a == "" {
		return "any address"
	}
	return a
}

// passLine describes a node's passes of a background job: running or
// not, and the last finished pass with how long ago it ended.
func passLine[P any](s node.PassStatus[P], describe func(P) string, now time.Time) string {
	var parts []string
	if s.Running {
		parts = append(parts, "a pass is running")
	}
	switch {
	case s.Last != nil:
		parts = append(parts, fmt.Sprintf("%s since start, the last ended %s ago: %s",
			plural(s.Passes, "pass", "passes"), now.Sub(s.LastDone).Round(time.Second), describe(*s.Last)))
	case !s.Running:
		parts = append(parts, "no pass since start")
	}
	return strings.Join(parts, "; ")
}

func rebalanceLine(p node.RebalanceProgress) string {
	return fmt.Sprintf("%s scanned, %d sent (%s), %d dropped, %d left for later, %d failed",
		plural(p.Scanned, "copy", "copies"), p.Sent, humanBytes(p.Bytes), p.Dropped, p.Skipped, p.Failed)
}

func scrubLine(p node.ScrubProgress) string {
	return fmt.Sprintf("%s checked (%s), %d corrupt, %d repaired, %d not repaired",
		plural(p.Checked, "copy", "copies"), humanBytes(p.Bytes), p.Corrupt, p.Repaired, p.Unrepaired)
}
