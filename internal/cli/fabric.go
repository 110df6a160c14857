package cli

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/slipstream-io/slipstream/internal/fabric"
	"github.com/slipstream-io/slipstream/internal/fabric/heatmap"
	"github.com/slipstream-io/slipstream/internal/fabric/hostlist"
)

const fabricUsage = `usage: slipstream fabric <command> [flags] SOURCE...

SOURCE is a directory of OpenSM dumps (opensm-lfts.dump, opensm-subnet.lst,
guid2lid, ... each optionally .gz) or dump files: a comma-separated list, or
(for commands that take only SOURCE) several file arguments.

commands:
  info   SOURCE                 switches, hosts, LIDs, routing engine
  hosts  SOURCE                 host names (table, or --format hostlist)
  route  SOURCE A B             the hops of every route A->B and B->A
  loads  SOURCE                 link loads and route weights (--png FILE: heat map)
  select SOURCE -k N            N hosts whose routes overlap least, vs random
  diff   OLD NEW                routes, cables, loads and engine that changed
  watch  DIR                    report changes whenever OpenSM rewrites its dumps
  check  SOURCE                 cross-check routes against opensm.fdbs,
                                opensm-lid-matrix.dump and dump_fts output

Every command takes --json for machine-readable output.`

func fabricCommand() Command {
	return Command{
		Summary: "InfiniBand route analysis over OpenSM dumps",
		Run: func(ctx context.Context, env Env) error {
			if len(env.Args) == 0 || env.Args[0] == "-h" || env.Args[0] == "--help" || env.Args[0] == "help" {
				fmt.Fprintln(env.Stderr, fabricUsage)
				if len(env.Args) == 0 {
					return usagef("missing fabric command")
				}
				return nil
			}
			sub := map[string]func(context.Context, Env, []string) error{
				"info": fabricInfo, "hosts": fabricHosts, "route": fabricRoute, "loads": fabricLoads,
				"select": fabricSelect, "diff": fabricDiff, "watch": fabricWatch, "check": fabricCheck,
			}
			fn, ok := sub[env.Args[0]]
			if !ok {
				fmt.Fprintln(env.Stderr, fabricUsage)
				return usagef("unknown fabric command %q", env.Args[0])
			}
			return fn(ctx, env, env.Args[1:])
		},
	}
}

// fabricFlags is a flag set whose flags may come before or after the
// positional arguments.
type fabricFlags struct {
	*flag.FlagSet
	json   bool
	format string
}

func newFabricFlags(env Env, name, args string) *fabricFlags {
	fs := flag.NewFlagSet("fabric "+name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	f := &fabricFlags{FlagSet: fs}
	fs.BoolVar(&f.json, "json", false, "machine-readable JSON output")
	fs.Usage = func() {
		fmt.Fprintf(env.Stderr, "usage: slipstream fabric %s [flags] %s\n", name, args)
		fs.PrintDefaults()
	}
	return f
}

// parse accepts flags anywhere and returns the positional arguments.
func (f *fabricFlags) parse(args []string, npos int) ([]string, error) {
	var pos []string
	for {
		if err := f.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usagef("%v", err)
		}
		args = f.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	if npos >= 0 && len(pos) != npos {
		f.Usage()
		return nil, usagef("want %d arguments, got %d", npos, len(pos))
	}
	if f.json {
		f.format = "json"
	}
	return pos, nil
}

// parseSource is parse for commands that take one SOURCE: a directory, a
// comma-separated list of files, or several file arguments (joined).
func (f *fabricFlags) parseSource(args []string) ([]string, error) {
	pos, err := f.parse(args, -1)
	if err != nil {
		return nil, err
	}
	if len(pos) == 0 {
		f.Usage()
		return nil, usagef("missing SOURCE (a dump directory or files)")
	}
	return []string{strings.Join(pos, ",")}, nil
}

func sourcePaths(src string) []string {
	var out []string
	for _, p := range strings.Split(src, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func loadFabric(ctx context.Context, src string) (*fabric.Model, error) {
	return fabric.LoadPaths(ctx, sourcePaths(src))
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func fabricInfo(ctx context.Context, env Env, args []string) error {
	f := newFabricFlags(env, "info", "SOURCE")
	pos, err := f.parseSource(args)
	if err != nil {
		return err
	}
	m, err := loadFabric(ctx, pos[0])
	if err != nil {
		return err
	}
	s := m.Summary()
	if f.json {
		return writeJSON(env.Stdout, s)
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 2, 2, ' ', 0)
	fmt.Fprintf(tw, "switches\t%d\n", s.Switches)
	fmt.Fprintf(tw, "HCAs\t%d\n", s.CAs)
	fmt.Fprintf(tw, "hosts\t%d (%d with several ports)\n", s.Hosts, s.MultiPort)
	fmt.Fprintf(tw, "endpoints\t%d\n", s.Endpoints)
	fmt.Fprintf(tw, "LIDs\t%d (max LMC %d)\n", s.LIDs, s.MaxLMC)
	fmt.Fprintf(tw, "cables\t%d\n", s.Cables)
	fmt.Fprintf(tw, "engine\t%s\n", engineText(s.Engine))
	for _, p := range s.Files {
		fmt.Fprintf(tw, "file\t%s\n", p)
	}
	return tw.Flush()
}

func engineText(e fabric.EngineInfo) string {
	if e.Used == "" && len(e.Requested) == 0 {
		return "unknown (no osm.log/opensm.out)"
	}
	t := e.Used
	if t == "" {
		t = "?"
	}
	if len(e.Requested) > 0 {
		t += " (requested " + strings.Join(e.Requested, ",") + ")"
	}
	if e.Fallback {
		t += " FALLBACK"
		switch {
		case e.NotFatTree:
			t += ": ftree found no fat tree"
		case len(e.Failed) > 0:
			t += ": " + strings.Join(e.Failed, ",") + " failed"
		}
	}
	return t
}

func fabricHosts(ctx context.Context, env Env, args []string) error {
	f := newFabricFlags(env, "hosts", "SOURCE")
	f.StringVar(&f.format, "format", "table", "table, hostlist or json")
	pos, err := f.parseSource(args)
	if err != nil {
		return err
	}
	m, err := loadFabric(ctx, pos[0])
	if err != nil {
		return err
	}
	type hostOut struct {
		Name      string   `json:"name"`
		Endpoints []string `json:"endpoints"`
		LIDs      []uint16 `json:"lids"`
	}
	var hs []hostOut
	for _, h := range m.Hosts {
		ho := hostOut{Name: h.Name}
		for _, e := range h.Endpoints {
			ho.Endpoints = append(ho.Endpoints, m.EndpointName(e))
			ho.LIDs = append(ho.LIDs, m.Ports[m.Endpoints[e].Port].LID)
		}
		hs = append(hs, ho)
	}
	switch f.format {
	case "json":
		return writeJSON(env.Stdout, hs)
	case "hostlist":
		fmt.Fprintln(env.Stdout, hostlist.Compress(m.HostNames()))
		return nil
	case "table":
		tw := tabwriter.NewWriter(env.Stdout, 0, 2, 2, ' ', 0)
		fmt.Fprintln(tw, "HOST\tENDPOINTS\tLIDS")
		for _, h := range hs {
			var lids []string
			for _, l := range h.LIDs {
				lids = append(lids, strconv.Itoa(int(l)))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", h.Name, strings.Join(h.Endpoints, ","), strings.Join(lids, ","))
		}
		return tw.Flush()
	}
	return usagef("unknown format %q", f.format)
}

func fabricRoute(ctx context.Context, env Env, args []string) error {
	f := newFabricFlags(env, "route", "SOURCE A B")
	oneway := f.Bool("oneway", false, "only A->B")
	pos, err := f.parse(args, 3)
	if err != nil {
		return err
	}
	m, err := loadFabric(ctx, pos[0])
	if err != nil {
		return err
	}
	an, err := m.Analyze(ctx)
	if err != nil {
		return err
	}
	routes, err := m.Routes(pos[1], pos[2], an)
	if err != nil {
		return err
	}
	if len(routes) == 0 {
		// every endpoint of A is the endpoint B names: no fabric route
		if f.json {
			return writeJSON(env.Stdout, []fabric.Route{})
		}
		fmt.Fprintf(env.Stdout, "%s and %s are the same endpoint: the route is local (no fabric link)\n", pos[1], pos[2])
		return nil
	}
	if !*oneway {
		back, err := m.Routes(pos[2], pos[1], an)
		if err != nil {
			return err
		}
		routes = append(routes, back...)
	}
	if f.json {
		return writeJSON(env.Stdout, routes)
	}
	for i, r := range routes {
		if i > 0 {
			fmt.Fprintln(env.Stdout)
		}
		fmt.Fprintf(env.Stdout, "%s (LID %d) -> %s (LID %d): %d links, weight %d", r.Src, r.SrcLID, r.Dst, r.DstLID, len(r.Hops), r.Weight)
		if r.Broken != "" {
			fmt.Fprintf(env.Stdout, ", BROKEN: %s", r.Broken)
		}
		fmt.Fprintln(env.Stdout)
		tw := tabwriter.NewWriter(env.Stdout, 0, 2, 2, ' ', 0)
		fmt.Fprintln(tw, "  #\tFROM\tPORT\tTO\tPORT\tLOAD")
		for j, h := range r.Hops {
			fmt.Fprintf(tw, "  %d\t%s\t%d\t%s\t%d\t%d\n", j+1, h.From.Desc, h.From.Port, h.To.Desc, h.To.Port, h.Load)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

type loadsOut struct {
	Summary     fabric.Summary    `json:"summary"`
	Routes      int64             `json:"routes"`
	Broken      int64             `json:"broken"`
	WeightMin   int64             `json:"weight_min"`
	WeightMean  float64           `json:"weight_mean"`
	WeightMax   int64             `json:"weight_max"`
	HopCount    map[string]int64  `json:"routes_by_links"`
	Links       []fabric.LinkLoad `json:"links"`
	Heaviest    []routeOut        `json:"heaviest_routes"`
	TotalLinks  int               `json:"total_link_directions"`
	ElapsedSecs float64           `json:"elapsed_seconds"`
}

type routeOut struct {
	Src    string `json:"src"`
	Dst    string `json:"dst"`
	DLID   uint16 `json:"dst_lid"`
	Links  int    `json:"links"`
	Weight int64  `json:"weight"`
}

func fabricLoads(ctx context.Context, env Env, args []string) error {
	f := newFabricFlags(env, "loads", "SOURCE")
	f.StringVar(&f.format, "format", "table", "table, csv or json")
	top := f.Int("top", 20, "links and routes to list (0 = all links)")
	kind := f.String("kind", "", "only links of this kind: switch, up or down")
	png := f.String("png", "", "also write a heat map of the link loads to this PNG file")
	pos, err := f.parseSource(args)
	if err != nil {
		return err
	}
	switch *kind {
	case "", "switch", "up", "down":
	default:
		f.Usage()
		return usagef("--kind %q: want switch, up or down", *kind)
	}
	start := time.Now()
	m, err := loadFabric(ctx, pos[0])
	if err != nil {
		return err
	}
	an, err := m.Analyze(ctx)
	if err != nil {
		return err
	}
	out := loadsOut{Summary: m.Summary(), Routes: an.Routes, Broken: an.Broken, WeightMin: an.WeightMin,
		WeightMean: an.MeanWeight(), WeightMax: an.WeightMax, HopCount: map[string]int64{},
		ElapsedSecs: time.Since(start).Seconds()}
	for n, c := range an.HopCount {
		if c > 0 {
			out.HopCount[strconv.Itoa(n)] = c
		}
	}
	links := an.Links(m)
	out.TotalLinks = len(links)
	if *kind != "" {
		var ls []fabric.LinkLoad
		for _, l := range links {
			if l.Kind == *kind {
				ls = append(ls, l)
			}
		}
		links = ls
	}
	if *top > 0 && len(links) > *top {
		links = links[:*top]
	}
	out.Links = links
	for _, r := range an.Heaviest {
		if *top > 0 && len(out.Heaviest) >= *top {
			break
		}
		out.Heaviest = append(out.Heaviest, routeOut{m.EndpointName(r.Src), m.EndpointName(r.Dst), r.DLID, r.Links, r.Weight})
	}
	if *png != "" {
		pf, err := os.Create(*png)
		if err != nil {
			return err
		}
		if err := heatmap.Write(pf, m, an, filepath.Base(strings.TrimRight(pos[0], "/"))); err != nil {
			pf.Close()
			return err
		}
		if err := pf.Close(); err != nil {
			return err
		}
	}
	switch f.format {
	case "json":
		return writeJSON(env.Stdout, out)
	case "csv":
		cw := csv.NewWriter(env.Stdout)
		cw.Write([]string{"from_guid", "from_port", "from_desc", "to_guid", "to_port", "to_desc", "kind", "load"})
		for _, l := range links {
			cw.Write([]string{l.From.GUID, strconv.Itoa(l.From.Port), l.From.Desc, l.To.GUID, strconv.Itoa(l.To.Port), l.To.Desc, l.Kind, strconv.FormatInt(l.Load, 10)})
		}
		cw.Flush()
		return cw.Error()
	case "table":
	default:
		return usagef("unknown format %q", f.format)
	}
	fmt.Fprintf(env.Stdout, "%d routes (%d broken) between %d endpoints of %d hosts, %d switches; engine %s\n",
		an.Routes, an.Broken, out.Summary.Endpoints, out.Summary.Hosts, out.Summary.Switches, engineText(m.Engine))
	fmt.Fprintf(env.Stdout, "route weight (sum of link loads): min %d, mean %.1f, max %d; links per route:", an.WeightMin, an.MeanWeight(), an.WeightMax)
	for n, c := range an.HopCount {
		if c > 0 {
			fmt.Fprintf(env.Stdout, " %d:%d", n, c)
		}
	}
	fmt.Fprintf(env.Stdout, "\n\nbusiest link directions (%d shown of %d):\n", len(links), out.TotalLinks)
	tw := tabwriter.NewWriter(env.Stdout, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "FROM\tPORT\tTO\tPORT\tKIND\tROUTES")
	for _, l := range links {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%d\n", l.From.Desc, l.From.Port, l.To.Desc, l.To.Port, l.Kind, l.Load)
	}
	tw.Flush()
	fmt.Fprintf(env.Stdout, "\nheaviest routes:\n")
	tw = tabwriter.NewWriter(env.Stdout, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "SRC\tDST\tDLID\tLINKS\tWEIGHT")
	for _, r := range out.Heaviest {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\n", r.Src, r.Dst, r.DLID, r.Links, r.Weight)
	}
	return tw.Flush()
}

func fabricSelect(ctx context.Context, env Env, args []string) error {
	f := newFabricFlags(env, "select", "SOURCE -k N")
	f.StringVar(&f.format, "format", "table", "table, hostlist, csv or json")
	k := f.Int("k", 0, "number of hosts to pick")
	cands := f.String("candidates", "", "hostlist to choose from (default: all hosts)")
	targets := f.String("targets", "", "hostlist of fixed peers (e.g. storage): score routes chosen<->targets")
	trials := f.Int("random", 100, "random choices to compare with (0: none)")
	seed := f.Uint64("seed", 1, "seed of the random comparison")
	pos, err := f.parseSource(args)
	if err != nil {
		return err
	}
	if *k <= 0 {
		return usagef("-k must be positive")
	}
	if *trials < 0 {
		return usagef("--random must not be negative")
	}
	req := fabric.SelectRequest{K: *k, RandomTrials: *trials, Seed: *seed}
	if *trials == 0 {
		req.RandomTrials = -1 // SelectWith reads 0 as its default
	}
	if req.Candidates, err = hostlist.Expand(*cands); err != nil {
		return usagef("--candidates: %v", err)
	}
	if req.Targets, err = hostlist.Expand(*targets); err != nil {
		return usagef("--targets: %v", err)
	}
	m, err := loadFabric(ctx, pos[0])
	if err != nil {
		return err
	}
	sel, err := m.SelectWith(ctx, req)
	if err != nil {
		return err
	}
	hl := hostlist.Compress(sel.Hosts)
	if sel.Score.Broken > 0 {
		fmt.Fprintf(env.Stderr, "warning: %d of the %d routes of the selection are broken (the LFTs do not deliver them)\n", sel.Score.Broken, sel.Score.Routes)
	}
	switch f.format {
	case "json":
		return writeJSON(env.Stdout, struct {
			*fabric.Selection
			Hostlist string `json:"hostlist"`
		}{sel, hl})
	case "hostlist":
		fmt.Fprintln(env.Stdout, hl)
		return nil
	case "csv":
		cw := csv.NewWriter(env.Stdout)
		cw.Write([]string{"host"})
		for _, h := range sel.Hosts {
			cw.Write([]string{h})
		}
		cw.Flush()
		return cw.Error()
	case "table":
	default:
		return usagef("unknown format %q", f.format)
	}
	fmt.Fprintf(env.Stdout, "selected %d of %d candidates: %s\n", len(sel.Hosts), sel.Searched, hl)
	if len(sel.Targets) > 0 {
		fmt.Fprintf(env.Stdout, "scored against targets: %s\n", hostlist.Compress(sel.Targets))
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "\tROUTES\tBROKEN\tSHARED PAIRS\tMAX ON ONE LINK\tWEIGHT")
	fmt.Fprintf(tw, "selected\t%d\t%d\t%d\t%d\t%d\n", sel.Score.Routes, sel.Score.Broken, sel.Score.SharedPairs, sel.Score.MaxShare, sel.Score.Weight)
	if sel.Random.Trials > 0 {
		fmt.Fprintf(tw, "random (mean of %d)\t%d\t\t%.1f\t%.1f\t%.0f\n", sel.Random.Trials, sel.Score.Routes, sel.Random.MeanSharedPairs, sel.Random.MeanMaxShare, sel.Random.MeanWeight)
		fmt.Fprintf(tw, "random (best)\t\t\t%d\t\t\n", sel.Random.MinSharedPairs)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if sel.Random.Trials > 0 {
		fmt.Fprintf(env.Stdout, "%.0f%% of random choices share as few link pairs or fewer\n", 100*sel.Random.BetterOrEqual)
	}
	return nil
}

func fabricDiff(ctx context.Context, env Env, args []string) error {
	f := newFabricFlags(env, "diff", "OLD NEW")
	top := f.Int("top", 20, "load changes to list (0 = all)")
	noLoads := f.Bool("no-loads", false, "skip the link load comparison")
	pos, err := f.parse(args, 2)
	if err != nil {
		return err
	}
	old, err := loadFabric(ctx, pos[0])
	if err != nil {
		return err
	}
	cur, err := loadFabric(ctx, pos[1])
	if err != nil {
		return err
	}
	d, err := fabric.Compare(ctx, old, cur, fabric.DiffOptions{Loads: !*noLoads, TopLoads: topLoads(*top)})
	if err != nil {
		return err
	}
	if f.json {
		return writeJSON(env.Stdout, d)
	}
	return printDiff(env.Stdout, d)
}

// topLoads maps a --top flag (0 or negative: all, as for fabric loads) to
// fabric.DiffOptions.TopLoads (where 0 is the default of 50, negative all).
func topLoads(top int) int {
	if top <= 0 {
		return -1
	}
	return top
}

func printDiff(w io.Writer, d *fabric.Diff) error {
	pct := 0.0
	if d.Routes > 0 {
		pct = 100 * float64(d.Changed) / float64(d.Routes)
	}
	fmt.Fprintf(w, "routes changed: %d of %d (%.1f%%); broken before %d, after %d\n", d.Changed, d.Routes, pct, d.OldBroken, d.NewBroken)
	fmt.Fprintf(w, "engine: %s -> %s\n", engineText(d.OldEngine), engineText(d.NewEngine))
	if d.NewEngine.Fallback && !d.OldEngine.Fallback {
		fmt.Fprintf(w, "WARNING: OpenSM fell back from %s to %s\n", strings.Join(d.NewEngine.Requested, ","), d.NewEngine.Used)
	}
	for _, c := range d.CablesDown {
		fmt.Fprintf(w, "cable down: %s[%d] <-> %s[%d]\n", c.A.Desc, c.A.Port, c.B.Desc, c.B.Port)
	}
	for _, c := range d.CablesUp {
		fmt.Fprintf(w, "cable up:   %s[%d] <-> %s[%d]\n", c.A.Desc, c.A.Port, c.B.Desc, c.B.Port)
	}
	for _, e := range d.EndpointsGone {
		fmt.Fprintf(w, "endpoint gone:  %s\n", e)
	}
	for _, e := range d.EndpointsAdded {
		fmt.Fprintf(w, "endpoint added: %s\n", e)
	}
	if len(d.LoadChanges) > 0 {
		fmt.Fprintln(w, "\nlink load changes (largest first):")
		tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
		fmt.Fprintln(tw, "FROM\tPORT\tTO\tPORT\tOLD\tNEW")
		for _, c := range d.LoadChanges {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d\n", c.From.Desc, c.From.Port, c.To.Desc, c.To.Port, c.Old, c.New)
		}
		return tw.Flush()
	}
	return nil
}

func fabricWatch(ctx context.Context, env Env, args []string) error {
	f := newFabricFlags(env, "watch", "DIR")
	interval := f.Duration("interval", 2*time.Second, "how often to poll the dump files")
	count := f.Int("count", 0, "stop after this many changes (0 = run until interrupted)")
	timeout := f.Duration("timeout", 0, "stop after this long (0 = no limit)")
	top := f.Int("top", 10, "load changes to list per change (0 = all)")
	pos, err := f.parse(args, 1)
	if err != nil {
		return err
	}
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	changes := 0
	enc := json.NewEncoder(env.Stdout)
	return fabric.Watch(ctx, pos[0], fabric.WatchOptions{Interval: *interval, Diff: fabric.DiffOptions{Loads: true, TopLoads: topLoads(*top)}},
		func(ev fabric.WatchEvent) error {
			if f.json {
				type evOut struct {
					Time    time.Time       `json:"time"`
					Summary *fabric.Summary `json:"summary,omitempty"`
					Diff    *fabric.Diff    `json:"diff,omitempty"`
					Error   string          `json:"error,omitempty"`
				}
				o := evOut{Time: ev.Time, Diff: ev.Diff}
				if ev.Model != nil {
					s := ev.Model.Summary()
					o.Summary = &s
				}
				if ev.Err != nil {
					o.Error = ev.Err.Error()
				}
				if err := enc.Encode(o); err != nil {
					return err
				}
			} else {
				ts := ev.Time.Format(time.RFC3339)
				switch {
				case ev.Err != nil:
					fmt.Fprintf(env.Stdout, "%s dumps unreadable (keeping the previous state): %v\n", ts, ev.Err)
				case ev.Diff == nil:
					s := ev.Model.Summary()
					fmt.Fprintf(env.Stdout, "%s loaded %s: %d switches, %d hosts, engine %s\n", ts, pos[0], s.Switches, s.Hosts, engineText(s.Engine))
				default:
					fmt.Fprintf(env.Stdout, "%s dumps rewritten:\n", ts)
					if err := printDiff(env.Stdout, ev.Diff); err != nil {
						return err
					}
				}
			}
			if ev.Diff != nil || ev.Err != nil {
				changes++
				if *count > 0 && changes >= *count {
					return fabric.ErrStopWatch
				}
			}
			return nil
		})
}

func fabricCheck(ctx context.Context, env Env, args []string) error {
	f := newFabricFlags(env, "check", "SOURCE")
	pos, err := f.parseSource(args)
	if err != nil {
		return err
	}
	paths := sourcePaths(pos[0])
	var fs fabric.Files
	if st, err := os.Stat(paths[0]); err == nil && st.IsDir() && len(paths) == 1 {
		fs, err = fabric.FindFiles(paths[0])
		if err != nil {
			return err
		}
	} else if fs, err = fabric.ClassifyFiles(paths); err != nil {
		return err
	}
	m, err := fabric.LoadFiles(ctx, fs)
	if err != nil {
		return err
	}
	res, err := m.Check(ctx, fs)
	if err != nil {
		return err
	}
	if f.json {
		if err := writeJSON(env.Stdout, res); err != nil {
			return err
		}
	} else {
		if len(res) == 0 {
			fmt.Fprintln(env.Stdout, "nothing to check against (no opensm.fdbs, opensm-lid-matrix.dump or dump_fts output)")
		}
		for _, r := range res {
			fmt.Fprintf(env.Stdout, "%s: %d entries checked, %d mismatches\n", r.File, r.Checked, r.Mismatches)
			for _, e := range r.Examples {
				fmt.Fprintf(env.Stdout, "  %s\n", e)
			}
		}
	}
	for _, r := range res {
		if r.Mismatches > 0 {
			return fmt.Errorf("%d mismatches in %s", r.Mismatches, r.File)
		}
	}
	return nil
}
