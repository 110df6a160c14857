package report

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/slipstream-io/slipstream/internal/loader"
	"github.com/slipstream-io/slipstream/internal/sysstat"
)

const mib = 1 << 20

// Chart sizes.
const (
	chartW = 10 * vg.Inch
	chartH = 4.5 * vg.Inch
)

// palette is a set of distinct, print-friendly colours (Tableau 10).
var palette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, {0xff, 0x7f, 0x0e, 0xff}, {0x2c, 0xa0, 0x2c, 0xff}, {0xd6, 0x27, 0x28, 0xff},
	{0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff}, {0xe3, 0x77, 0xc2, 0xff}, {0x7f, 0x7f, 0x7f, 0xff},
	{0xbc, 0xbd, 0x22, 0xff}, {0x17, 0xbe, 0xcf, 0xff},
}

func colorOf(i int) color.Color { return palette[i%len(palette)] }

// series is one named line.
type series struct {
	name   string
	xy     plotter.XYs
	dashed bool
}

// newPlot makes a plot with the house style: title, axis labels, grid,
// legend on top.
func newPlot(title, xlabel, ylabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = 14
	p.Title.Padding = vg.Points(6)
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	p.X.Label.TextStyle.Font.Size = 12
	p.Y.Label.TextStyle.Font.Size = 12
	p.X.Tick.Label.Font.Size = 11
	p.Y.Tick.Label.Font.Size = 11
	p.Legend.Top = true
	p.Legend.TextStyle.Font.Size = 11
	p.Legend.Padding = vg.Points(2)
	p.X.Tick.Marker = niceTicks{n: 10}
	p.Y.Tick.Marker = niceTicks{n: 6}
	p.Add(plotter.NewGrid())
	return p
}

// maxLegend is the most lines a chart labels; beyond it (all disks of a
// large cluster) the lines are drawn without a legend.
const maxLegend = 16

// axes fixes parts of a line plot's axes; zero values mean automatic.
type axes struct {
	xmin, xmax float64 // both zero: fit the data
	ymax       float64 // the Y axis reaches at least this
	logY       bool    // logarithmic Y axis (non-positive values dropped)
}

// linePlot draws lines on a Y axis from zero (or, on a log axis, from the
// smallest value). It returns nil when there is nothing to draw.
func linePlot(title, xlabel, ylabel string, ss []series, ax axes) (*plot.Plot, error) {
	p := newPlot(title, xlabel, ylabel)
	top, bottom := 0.0, math.Inf(1)
	n := 0
	for i, s := range ss {
		xy := s.xy
		if ax.logY {
			xy = positive(xy)
		}
		if len(xy) == 0 {
			continue
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return nil, fmt.Errorf("report: %s: %w", title, err)
		}
		l.Color = colorOf(i)
		l.Width = vg.Points(1.8)
		if s.dashed {
			l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		p.Add(l)
		if len(xy) < 3 {
			// Too few points for a line to show: mark them.
			pts, err := plotter.NewScatter(xy)
			if err != nil {
				return nil, fmt.Errorf("report: %s: %w", title, err)
			}
			pts.Color = l.Color
			p.Add(pts)
		}
		if len(ss) <= maxLegend {
			p.Legend.Add(s.name, l)
		}
		for _, pt := range xy {
			top = math.Max(top, pt.Y)
			bottom = math.Min(bottom, pt.Y)
		}
		n++
	}
	if n == 0 {
		return nil, nil
	}
	if len(ss) > maxLegend {
		p.Title.Text += fmt.Sprintf(" [%d lines]", n)
	}
	if ax.xmax > ax.xmin {
		p.X.Min, p.X.Max = ax.xmin, ax.xmax
	}
	if top <= 0 {
		top = 1
	}
	if ax.ymax > 0 {
		top = math.Max(top, ax.ymax)
	}
	if ax.logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = logTicks{}
		p.Y.Min, p.Y.Max = bottom/1.3, top*1.3
		return p, nil
	}
	p.Y.Min, p.Y.Max = 0, top*1.05
	return p, nil
}

func positive(xy plotter.XYs) plotter.XYs {
	var out plotter.XYs
	for _, pt := range xy {
		if pt.Y > 0 {
			out = append(out, pt)
		}
	}
	return out
}

// logTicks labels 1, 2 and 5 times each power of ten.
type logTicks struct{}

func (logTicks) Ticks(min, max float64) []plot.Tick {
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(min)); e <= math.Ceil(math.Log10(max)); e++ {
		for _, m := range []float64{1, 2, 3, 4, 5, 6, 7, 8, 9} {
			v := m * math.Pow(10, e)
			if v < min || v > max {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				t.Label = strconv.FormatFloat(v, 'g', -1, 64)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// save renders p as a PNG with its legend to the right of the plot area,
// so the legend never covers data.
func save(p *plot.Plot, path string) error {
	leg := p.Legend
	p.Legend = plot.NewLegend()
	img := vgimg.New(chartW, chartH)
	dc := draw.New(img)
	var lw vg.Length
	if r := leg.Rectangle(dc); r.Max.X > r.Min.X {
		lw = r.Max.X - r.Min.X + vg.Points(14)
	}
	p.Draw(draw.Crop(dc, 0, -lw, 0, 0))
	if lw > 0 {
		leg.Top, leg.Left = true, false
		leg.Draw(draw.Crop(dc, chartW-lw+vg.Points(8), 0, 0, -vg.Points(30)))
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("report: save %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("report: save %s: %w", path, err)
	}
	return nil
}

// niceTicks places about n major ticks at round values (1, 2, 2.5 or 5
// times a power of ten).
type niceTicks struct{ n int }

func (t niceTicks) Ticks(min, max float64) []plot.Tick {
	if !(max > min) || math.IsInf(max-min, 0) {
		return plot.DefaultTicks{}.Ticks(min, max)
	}
	raw := (max - min) / float64(t.n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag * 10
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var ticks []plot.Tick
	prec := max0(-int(math.Floor(math.Log10(step))))
	if p := math.Pow(10, float64(prec)); math.Abs(step*p-math.Round(step*p)) > 1e-9 {
		prec++
	}
	for v := math.Ceil(min/step) * step; v <= max+step*1e-9; v += step {
		p := math.Pow(10, float64(prec))
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(math.Round(v*p)/p, 'f', -1, 64)})
		if h := v + step/2; h < max {
			ticks = append(ticks, plot.Tick{Value: h})
		}
	}
	return ticks
}

func max0(v int) int {
	if v < 0 {
		return 0
	}
	return v
}

// offset returns how many seconds after the run's start t is.
func offset(r *loader.Result, ph *loader.Phase) float64 {
	return ph.Start.Sub(r.Start).Seconds()
}

// minPlotDur is the shortest series bucket that is plotted: the last,
// partial second of a phase holds a handful of requests whose rate would
// be noise.
const minPlotDur = 0.5

// plotted returns the seconds of ph worth plotting.
func plotted(ph *loader.Phase) []loader.Second {
	var out []loader.Second
	for _, s := range ph.Series {
		if s.Dur >= minPlotDur || len(ph.Series) == 1 {
			out = append(out, s)
		}
	}
	return out
}

// mid is the middle of a series second, shifted into run time.
func mid(off float64, s loader.Second) float64 { return off + s.T + s.Dur/2 }

func throughputSeries(r *loader.Result) []series {
	var ss []series
	add := func(ph *loader.Phase, prefix string, dashed bool) {
		if ph == nil || len(ph.Series) == 0 {
			return
		}
		off := offset(r, ph)
		var get, put plotter.XYs
		for _, s := range plotted(ph) {
			if s.Dur <= 0 {
				continue
			}
			get = append(get, plotter.XY{X: mid(off, s), Y: float64(s.ReadBytes) / s.Dur / mib})
			put = append(put, plotter.XY{X: mid(off, s), Y: float64(s.WriteBytes) / s.Dur / mib})
		}
		// S3 loads have GET and PUT, fio results read and write.
		for _, op := range []struct {
			name string
			xy   plotter.XYs
		}{{"GET", get}, {"read", get}, {"PUT", put}, {"write", put}} {
			if _, ok := ph.Ops[op.name]; ok {
				ss = append(ss, series{name: prefix + op.name, xy: op.xy, dashed: dashed})
			}
		}
	}
	add(r.Fill, "fill ", true)
	add(&r.Main, "", false)
	return ss
}

func opsSeries(r *loader.Result) []series {
	var ss []series
	for _, ph := range []*loader.Phase{r.Fill, &r.Main} {
		if ph == nil || len(ph.Series) == 0 {
			continue
		}
		off := offset(r, ph)
		var xy plotter.XYs
		for _, s := range plotted(ph) {
			if s.Dur > 0 {
				xy = append(xy, plotter.XY{X: mid(off, s), Y: float64(s.Ops) / s.Dur})
			}
		}
		ss = append(ss, series{name: fmt.Sprintf("%s (%s)", ph.Name, strings.Join(sortedKeys(ph.Ops), "+")), xy: xy, dashed: ph.Name == "fill"})
	}
	return ss
}

func latencySeries(r *loader.Result) []series {
	ph := &r.Main
	off := offset(r, ph)
	pick := []struct {
		name string
		f    func(loader.Second) float64
	}{
		{"p50", func(s loader.Second) float64 { return s.P50 }},
		{"p90", func(s loader.Second) float64 { return s.P90 }},
		{"p99", func(s loader.Second) float64 { return s.P99 }},
		{"p99.9", func(s loader.Second) float64 { return s.P999 }},
		{"max", func(s loader.Second) float64 { return s.Max }},
	}
	var ss []series
	for _, pk := range pick {
		var xy plotter.XYs
		for _, s := range plotted(ph) {
			if s.Ops > 0 {
				xy = append(xy, plotter.XY{X: mid(off, s), Y: pk.f(s)})
			}
		}
		ss = append(ss, series{name: pk.name, xy: xy, dashed: pk.name == "max"})
	}
	if hasTTFB(ph) {
		var xy plotter.XYs
		for _, s := range plotted(ph) {
			if s.Ops > 0 && s.TTFBP50 > 0 {
				xy = append(xy, plotter.XY{X: mid(off, s), Y: s.TTFBP50})
			}
		}
		ss = append(ss, series{name: "TTFB p50", xy: xy, dashed: true})
	}
	return ss
}

func hasTTFB(ph *loader.Phase) bool {
	for _, s := range plotted(ph) {
		if s.TTFBP50 > 0 {
			return true
		}
	}
	return false
}

// nodeRates returns each node's rates with times in run seconds.
type nodeRate struct {
	node string
	x    float64
	rate sysstat.Rate
}

func nodeRates(r *loader.Result) map[string][]nodeRate {
	out := map[string][]nodeRate{}
	for i, n := range r.Nodes {
		name := fmt.Sprintf("node%d", i+1)
		if len(n.Samples) > 0 && n.Samples[0].Node != "" {
			name = n.Samples[0].Node
		}
		for _, rt := range n.Rates() {
			x := rt.Time.Sub(r.Start).Seconds() - rt.Interval/2
			out[name] = append(out[name], nodeRate{node: name, x: x, rate: rt})
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// diskSeries returns per-disk throughput (read and write) and utilisation.
func diskSeries(r *loader.Result) (tput, util []series) {
	nr := nodeRates(r)
	multi := len(nr) > 1
	for _, node := range sortedKeys(nr) {
		type acc struct {
			rd, wr, ut plotter.XYs
			dirs       int
		}
		disks := map[string]*acc{}
		for _, p := range nr[node] {
			for _, d := range p.rate.Disks {
				a := disks[d.Device]
				if a == nil {
					a = &acc{}
					disks[d.Device] = a
				}
				a.rd = append(a.rd, plotter.XY{X: p.x, Y: d.ReadBps / mib})
				a.wr = append(a.wr, plotter.XY{X: p.x, Y: d.WriteBps / mib})
				a.ut = append(a.ut, plotter.XY{X: p.x, Y: d.UtilPct})
				a.dirs = len(d.Dirs)
			}
		}
		for _, dev := range sortedKeys(disks) {
			name := dev
			if multi {
				name = node + "/" + dev
			}
			a := disks[dev]
			if a.dirs > 1 {
				name += fmt.Sprintf(" (%d mountpaths)", a.dirs)
			}
			tput = append(tput, series{name: name + " read", xy: a.rd}, series{name: name + " write", xy: a.wr, dashed: true})
			util = append(util, series{name: name, xy: a.ut})
		}
	}
	return tput, util
}

// nicSeries returns per-NIC receive and transmit throughput, leaving out
// interfaces that carried nothing.
func nicSeries(r *loader.Result) []series {
	nr := nodeRates(r)
	multi := len(nr) > 1
	var ss []series
	for _, node := range sortedKeys(nr) {
		type acc struct {
			rx, tx plotter.XYs
			sum    float64
		}
		nics := map[string]*acc{}
		for _, p := range nr[node] {
			for _, n := range p.rate.NICs {
				a := nics[n.Name]
				if a == nil {
					a = &acc{}
					nics[n.Name] = a
				}
				a.rx = append(a.rx, plotter.XY{X: p.x, Y: n.RxBps / mib})
				a.tx = append(a.tx, plotter.XY{X: p.x, Y: n.TxBps / mib})
				a.sum += n.RxBps + n.TxBps
			}
		}
		for _, name := range sortedKeys(nics) {
			a := nics[name]
			if a.sum < 1024 { // idle: less than 1 KiB/s in total
				continue
			}
			label := name
			if multi {
				label = node + "/" + name
			}
			ss = append(ss, series{name: label + " rx", xy: a.rx}, series{name: label + " tx", xy: a.tx, dashed: true})
		}
	}
	return ss
}

// counterSeries returns the per-second rate of each node counter, except
// the nodes' own S3 request and byte counters (s3_*): the load generator's
// own figures chart those, per client request.
func counterSeries(r *loader.Result) []series {
	nr := nodeRates(r)
	multi := len(nr) > 1
	var ss []series
	for _, node := range sortedKeys(nr) {
		byName := map[string]plotter.XYs{}
		for _, p := range nr[node] {
			for k, v := range p.rate.Counters {
				if strings.HasPrefix(k, "s3_") {
					continue
				}
				byName[k] = append(byName[k], plotter.XY{X: p.x, Y: v})
			}
		}
		for _, k := range sortedKeys(byName) {
			label := k
			if multi {
				label = node + "/" + k
			}
			ss = append(ss, series{name: label, xy: byName[k]})
		}
	}
	return ss
}

// barGroup is one set of bars (one colour), one value per result.
type barGroup struct {
	name   string
	values []float64
}

// barPlot draws grouped bars: one group of bars per label.
func barPlot(title, ylabel string, labels []string, groups []barGroup) (*plot.Plot, error) {
	p := newPlot(title, "", ylabel)
	p.X.Tick.Label.Font.Size = 12
	p.X.Tick.Marker = plot.DefaultTicks{}
	n := len(groups)
	w := vg.Points(math.Min(60, 360/float64(max(1, n*len(labels)))))
	top := 0.0
	for i, g := range groups {
		b, err := plotter.NewBarChart(plotter.Values(g.values), w)
		if err != nil {
			return nil, fmt.Errorf("report: %s: %w", title, err)
		}
		b.Color = colorOf(i)
		b.LineStyle.Width = 0
		b.Offset = vg.Length(float64(i)-float64(n-1)/2) * w
		p.Add(b)
		if n > 1 {
			p.Legend.Add(g.name, b)
		}
		for _, v := range g.values {
			top = math.Max(top, v)
		}
		lbl, err := valueLabels(g.values, b.Offset)
		if err != nil {
			return nil, fmt.Errorf("report: %s: %w", title, err)
		}
		p.Add(lbl)
	}
	p.NominalX(labels...)
	p.Y.Min = 0
	if top <= 0 {
		top = 1
	}
	p.Y.Max = top * 1.12
	p.X.Min, p.X.Max = -0.5, float64(len(labels))-0.5
	return p, nil
}

// valueLabels writes each bar's value above it.
func valueLabels(values []float64, off vg.Length) (*plotter.Labels, error) {
	xys := make(plotter.XYs, len(values))
	texts := make([]string, len(values))
	for i, v := range values {
		xys[i] = plotter.XY{X: float64(i), Y: v}
		texts[i] = formatValue(v)
	}
	l, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: texts})
	if err != nil {
		return nil, err
	}
	for i := range l.TextStyle {
		l.TextStyle[i].XAlign = draw.XCenter
		l.TextStyle[i].YAlign = draw.YBottom
		l.TextStyle[i].Font.Size = 9
	}
	l.Offset = vg.Point{X: off, Y: vg.Points(2)}
	return l, nil
}

func formatValue(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}
