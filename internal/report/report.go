// Package report renders load results (loader.Result) into PNG charts and a
// self-contained HTML page: throughput, request rate and latency
// percentiles over time, per-disk throughput and utilisation, per-NIC
// throughput and node counters from the stats samples, and comparison charts
// across several results (cold vs warm, one NIC vs two, object sizes...).
package report

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"

	"github.com/slipstream-io/slipstream/internal/loader"
)

// ErrNoResults reports a call without results.
var ErrNoResults = errors.New("report: no results")

// Chart is one rendered image.
type Chart struct {
	File  string // file name inside the output directory
	Title string
}

// Section groups the charts of one result, or the comparison charts.
type Section struct {
	Title  string
	Note   string
	Charts []Chart
}

// Render writes one set of charts per result, comparison charts when there
// are several, and index.html into dir (created if needed). It returns the
// charts it wrote via the page; the page embeds every image (base64) and
// links to the PNG files next to it.
func Render(results []*loader.Result, dir string) error {
	_, err := RenderSections(results, dir)
	return err
}

// RenderFiles reads result files (of load, or fio's JSON output) and
// renders them into dir.
func RenderFiles(paths []string, dir string) error {
	var rs []*loader.Result
	for _, p := range paths {
		r, err := loader.ReadResults(p)
		if err != nil {
			return err
		}
		rs = append(rs, r...)
	}
	return Render(rs, dir)
}

// RenderSections is Render returning the sections it wrote.
func RenderSections(results []*loader.Result, dir string) ([]Section, error) {
	if len(results) == 0 {
		return nil, ErrNoResults
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	var sections []Section
	used := map[string]bool{}
	if len(results) > 1 {
		s, err := compareSection(results, dir)
		if err != nil {
			return nil, err
		}
		sections = append(sections, s)
	}
	for i, r := range results {
		base := fileBase(r.Label, i, used)
		s, err := resultSection(r, base, dir)
		if err != nil {
			return nil, err
		}
		sections = append(sections, s)
	}
	if err := writeIndex(results, sections, dir); err != nil {
		return nil, err
	}
	return sections, nil
}

func fileBase(label string, i int, used map[string]bool) string {
	b := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		case r >= 'A' && r <= 'Z':
			return r + ('a' - 'A')
		}
		return '-'
	}, label)
	if b == "" {
		b = "run"
	}
	b = fmt.Sprintf("%02d-%s", i+1, b)
	for used[b] {
		b += "x"
	}
	used[b] = true
	return b
}

type chartFn struct {
	suffix, title string
	make          func() (*plot.Plot, error)
}

func writeCharts(dir, base string, fns []chartFn) ([]Chart, error) {
	var out []Chart
	for _, f := range fns {
		p, err := f.make()
		if err != nil {
			return nil, err
		}
		if p == nil {
			continue // nothing to draw (no node stats, no counters...)
		}
		name := base + "-" + f.suffix + ".png"
		if err := save(p, filepath.Join(dir, name)); err != nil {
			return nil, err
		}
		out = append(out, Chart{File: name, Title: f.title})
	}
	return out, nil
}

func describe(r *loader.Result) string {
	pp := r.Params
	if strings.HasPrefix(pp.Workload, "fio ") { // loader.ParseFio
		return fmt.Sprintf("%s, %s blocks, %d jobs", pp.Workload, pp.SizeRange(), pp.Workers)
	}
	s := fmt.Sprintf("%s, %s objects, %d workers", pp.Workload, pp.SizeRange(), pp.Workers)
	if pp.Objects > 0 {
		s += fmt.Sprintf(", dataset %d objects", pp.Objects)
	}
	if r.Main.Epochs > 0 {
		s += fmt.Sprintf(", %d epoch(s)", r.Main.Epochs)
	}
	if r.Main.Unsent > 0 {
		s += fmt.Sprintf(", %d paced requests unsent", r.Main.Unsent)
	}
	if r.Partial {
		s += ", partial (" + r.Error + ")"
	}
	return s
}

func resultSection(r *loader.Result, base, dir string) (Section, error) {
	d := describe(r)
	xl := "time since start of run (s)"
	ax := axes{xmin: 0, xmax: r.End.Sub(r.Start).Seconds()}
	lat := latencySeries(r)
	latAx := ax
	latAx.logY = spread(lat) > 30
	tput, util := diskSeries(r)
	fns := []chartFn{
		{"throughput", "Throughput", func() (*plot.Plot, error) {
			return linePlot(fmt.Sprintf("%s: throughput (%s)", r.Label, d), xl, "MiB/s", throughputSeries(r), ax)
		}},
		{"requests", "Requests per second", func() (*plot.Plot, error) {
			return linePlot(fmt.Sprintf("%s: requests per second", r.Label), xl, "requests/s", opsSeries(r), ax)
		}},
		{"latency", "Latency percentiles", func() (*plot.Plot, error) {
			return linePlot(fmt.Sprintf("%s: latency percentiles per second", r.Label), xl, latencyLabel(latAx), lat, latAx)
		}},
		{"disk-throughput", "Per-disk throughput", func() (*plot.Plot, error) {
			return linePlot(fmt.Sprintf("%s: per-disk throughput (/proc/diskstats)", r.Label), xl, "MiB/s", tput, ax)
		}},
		{"disk-util", "Per-disk utilisation", func() (*plot.Plot, error) {
			return linePlot(fmt.Sprintf("%s: per-disk utilisation (time with I/O in flight)", r.Label), xl, "utilisation (%)", util, axes{xmin: ax.xmin, xmax: ax.xmax, ymax: 100})
		}},
		{"nic-throughput", "Per-NIC throughput", func() (*plot.Plot, error) {
			return linePlot(fmt.Sprintf("%s: per-NIC throughput", r.Label), xl, "MiB/s", nicSeries(r), ax)
		}},
		{"counters", "Node counters", func() (*plot.Plot, error) {
			return linePlot(fmt.Sprintf("%s: node counters", r.Label), xl, "events/s", counterSeries(r), ax)
		}},
	}
	charts, err := writeCharts(dir, base, fns)
	if err != nil {
		return Section{}, err
	}
	note := d
	if r.Fill != nil {
		note += fmt.Sprintf("; fill phase (dashed) took %.1f s, main phase starts at %.1f s", r.Fill.Seconds, offset(r, &r.Main))
	}
	return Section{Title: r.Label, Note: note, Charts: charts}, nil
}

// longest is the duration of the longest main phase.
func longest(rs []*loader.Result) float64 {
	m := 0.0
	for _, r := range rs {
		m = math.Max(m, r.Main.Seconds)
	}
	return m
}

// spread is the ratio of the largest to the smallest positive value.
func spread(ss []series) float64 {
	lo, hi := math.Inf(1), 0.0
	for _, s := range ss {
		for _, pt := range s.xy {
			if pt.Y > 0 {
				lo, hi = math.Min(lo, pt.Y), math.Max(hi, pt.Y)
			}
		}
	}
	if hi == 0 {
		return 1
	}
	return hi / lo
}

func latencyLabel(ax axes) string {
	if ax.logY {
		return "latency (ms, log scale)"
	}
	return "latency (ms)"
}

func compareSection(rs []*loader.Result, dir string) (Section, error) {
	labels := make([]string, len(rs))
	var mbps, ops, avg, p50, p99, p999 []float64
	for i, r := range rs {
		labels[i] = r.Label
		t := r.Main.Total
		mbps = append(mbps, t.BytesPerSec/mib)
		ops = append(ops, t.OpsPerSec)
		avg = append(avg, t.Latency.Mean)
		p50 = append(p50, t.Latency.P50)
		p99 = append(p99, t.Latency.P99)
		p999 = append(p999, t.Latency.P999)
	}
	fns := []chartFn{
		{"throughput", "Throughput", func() (*plot.Plot, error) {
			return barPlot("Average throughput of the main phase", "MiB/s", labels, []barGroup{{"MiB/s", mbps}})
		}},
		{"requests", "Requests per second", func() (*plot.Plot, error) {
			return barPlot("Average requests per second of the main phase", "requests/s", labels, []barGroup{{"requests/s", ops}})
		}},
		{"latency", "Latency", func() (*plot.Plot, error) {
			return barPlot("Latency of the main phase", "latency (ms)", labels,
				[]barGroup{{"mean", avg}, {"p50", p50}, {"p99", p99}, {"p99.9", p999}})
		}},
		{"timeline", "Throughput over time", func() (*plot.Plot, error) {
			var ss []series
			for _, r := range rs {
				var xy plotter.XYs
				for _, s := range plotted(&r.Main) {
					if s.Dur > 0 {
						xy = append(xy, plotter.XY{X: s.T + s.Dur/2, Y: s.BytesPerSec / mib})
					}
				}
				ss = append(ss, series{name: r.Label, xy: xy})
			}
			return linePlot("Throughput over time, main phases overlaid", "time since start of main phase (s)", "MiB/s", ss, axes{xmin: 0, xmax: longest(rs)})
		}},
		{"disk-util", "Disk utilisation", func() (*plot.Plot, error) {
			u := make([]float64, len(rs))
			sampled := false
			for i, r := range rs {
				u[i], sampled = meanUtil(r), sampled || len(r.Nodes) > 0
			}
			if !sampled {
				return nil, nil
			}
			return barPlot("Mean disk utilisation during the main phase", "utilisation (%)", labels, []barGroup{{"util", u}})
		}},
	}
	charts, err := writeCharts(dir, "compare", fns)
	if err != nil {
		return Section{}, err
	}
	return Section{Title: "Comparison", Note: fmt.Sprintf("%d runs: %s", len(rs), strings.Join(labels, ", ")), Charts: charts}, nil
}

// meanUtil is the mean utilisation over all disks and samples that fall in
// the main phase.
func meanUtil(r *loader.Result) float64 {
	var sum float64
	var n int
	for _, ns := range r.Nodes {
		for _, rt := range ns.Rates() {
			if rt.Time.Before(r.Main.Start) || rt.Time.Add(-time.Duration(rt.Interval*float64(time.Second))).After(r.Main.End) {
				continue
			}
			for _, d := range rt.Disks {
				sum += d.UtilPct
				n++
			}
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

func embed(dir, file string) (template.URL, error) {
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return "", fmt.Errorf("report: %w", err)
	}
	return template.URL("data:image/png;base64," + base64.StdEncoding.EncodeToString(b)), nil
}

type row struct {
	Label, Phase, Op, Size                             string
	Workers                                            int
	Secs, OpsPerSec                                    string
	Count, Errors                                      int64
	Throughput, Mean, P50, P90, P99, P999, Max, TTFB50 string
}

// runLabel is the label of r in tables, marked when the run is partial.
func runLabel(r *loader.Result) string {
	if r.Partial {
		return r.Label + " (partial)"
	}
	return r.Label
}

func tableRows(rs []*loader.Result) []row {
	var rows []row
	f := func(v float64) string { return fmt.Sprintf("%.2f", v) }
	for _, r := range rs {
		for _, ph := range []*loader.Phase{r.Fill, &r.Main} {
			if ph == nil {
				continue
			}
			for _, op := range sortedKeys(ph.Ops) {
				s := ph.Ops[op]
				ttfb := "-"
				if s.TTFB != nil {
					ttfb = f(s.TTFB.P50)
				}
				rows = append(rows, row{Label: runLabel(r), Phase: ph.Name, Op: op, Size: r.Params.SizeRange(), Workers: r.Params.Workers,
					Secs: fmt.Sprintf("%.1f", ph.Seconds), Count: s.Count, Errors: s.Errors, OpsPerSec: fmt.Sprintf("%.1f", s.OpsPerSec),
					Throughput: loader.HumanBytes(s.BytesPerSec) + "/s", Mean: f(s.Latency.Mean), P50: f(s.Latency.P50),
					P90: f(s.Latency.P90), P99: f(s.Latency.P99), P999: f(s.Latency.P999), Max: f(s.Latency.Max), TTFB50: ttfb})
			}
		}
	}
	return rows
}

type pageChart struct {
	Chart
	Data template.URL
}

type pageSection struct {
	Title, Note string
	Charts      []pageChart
}

func writeIndex(rs []*loader.Result, sections []Section, dir string) error {
	var ps []pageSection
	for _, s := range sections {
		p := pageSection{Title: s.Title, Note: s.Note}
		for _, c := range s.Charts {
			data, err := embed(dir, c.File)
			if err != nil {
				return err
			}
			p.Charts = append(p.Charts, pageChart{Chart: c, Data: data})
		}
		ps = append(ps, p)
	}
	var buf bytes.Buffer
	err := pageTmpl.Execute(&buf, map[string]any{
		"Rows":      tableRows(rs),
		"Sections":  ps,
		"Generated": time.Now().UTC().Format(time.RFC3339),
		"Hosts":     hosts(rs),
	})
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "index.html"), buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

func hosts(rs []*loader.Result) string {
	seen := map[string]bool{}
	var out []string
	for _, r := range rs {
		if h := r.Params.Endpoint; h != "" && !seen[h] {
			seen[h] = true
			out = append(out, h)
		}
	}
	return strings.Join(out, ", ")
}

var pageTmpl = template.Must(template.New("index").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>Slipstream load report</title>
<style>
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em;color:#222;max-width:1100px}
table{border-collapse:collapse;font-size:13px;margin:1em 0}
th,td{border:1px solid #ccc;padding:3px 7px;text-align:right}
th{background:#f2f2f2}
td.l{text-align:left}
img{max-width:100%;border:1px solid #eee;margin:6px 0}
figure{margin:0 0 1.2em 0}
figcaption{font-size:13px;color:#555}
.note{color:#555}
</style></head><body>
<h1>Slipstream load report</h1>
<p class="note">Endpoints: {{.Hosts}}. Generated {{.Generated}}. Latencies in milliseconds; throughput in binary units.</p>
<h2>Summary</h2>
<table>
<tr><th>run</th><th>phase</th><th>op</th><th>size</th><th>workers</th><th>secs</th><th>requests</th><th>req/s</th><th>throughput</th><th>mean</th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>max</th><th>TTFB p50</th><th>errors</th></tr>
{{range .Rows}}<tr><td class="l">{{.Label}}</td><td class="l">{{.Phase}}</td><td class="l">{{.Op}}</td><td>{{.Size}}</td><td>{{.Workers}}</td><td>{{.Secs}}</td><td>{{.Count}}</td><td>{{.OpsPerSec}}</td><td>{{.Throughput}}</td><td>{{.Mean}}</td><td>{{.P50}}</td><td>{{.P90}}</td><td>{{.P99}}</td><td>{{.P999}}</td><td>{{.Max}}</td><td>{{.TTFB50}}</td><td>{{.Errors}}</td></tr>
{{end}}</table>
{{range .Sections}}<h2>{{.Title}}</h2>
<p class="note">{{.Note}}</p>
{{range .Charts}}<figure><a href="{{.File}}"><img src="{{.Data}}" alt="{{.Title}}" title="{{.File}}"></a><figcaption>{{.Title}} (<a href="{{.File}}">{{.File}}</a>)</figcaption></figure>
{{end}}{{end}}
</body></html>
`))
