package report

import (
	"errors"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot/plotter"

	"github.com/slipstream-io/slipstream/internal/loader"
	"github.com/slipstream-io/slipstream/internal/sysstat"
)

func readResults(t *testing.T, names ...string) []*loader.Result {
	t.Helper()
	var rs []*loader.Result
	for _, n := range names {
		r, err := loader.ReadResult(filepath.Join("testdata", n))
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	return rs
}

// checkPNG decodes a chart and checks it is a sane, non-blank picture
// that contains the given colour (a plotted line or bar).
func checkPNG(t *testing.T, path string, want ...[3]uint8) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() < 5<<10 || fi.Size() > 2<<20 {
		t.Errorf("%s: %d bytes", path, fi.Size())
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	b := img.Bounds()
	if b.Dx() < 600 || b.Dy() < 300 || b.Dx() > 4000 || b.Dy() > 3000 {
		t.Errorf("%s: %dx%d", path, b.Dx(), b.Dy())
	}
	nonWhite := 0
	found := make([]bool, len(want))
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r < 0xf000 || g < 0xf000 || bl < 0xf000 {
				nonWhite++
			}
			for i, c := range want {
				if uint8(r>>8) == c[0] && uint8(g>>8) == c[1] && uint8(bl>>8) == c[2] {
					found[i] = true
				}
			}
		}
	}
	frac := float64(nonWhite) / float64(b.Dx()*b.Dy())
	if frac < 0.01 || frac > 0.6 {
		t.Errorf("%s: %.1f%% of pixels drawn", path, 100*frac)
	}
	for i, ok := range found {
		if !ok {
			t.Errorf("%s: colour %v of series %d not drawn", path, want[i], i)
		}
	}
}

func rgb(i int) [3]uint8 {
	c := palette[i%len(palette)]
	return [3]uint8{c.R, c.G, c.B}
}

func TestRenderStoredResults(t *testing.T) {
	rs := readResults(t, "cold.json", "warm.json", "put4k.json")
	dir := t.TempDir()
	sections, err := RenderSections(rs, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(sections) != 4 || sections[0].Title != "Comparison" || sections[1].Title != "cold GET" {
		t.Fatalf("sections %+v", sections)
	}
	// Each result has node stats (disk, NIC, counters): all seven charts.
	wantPer := []string{"throughput", "requests", "latency", "disk-throughput", "disk-util", "nic-throughput", "counters"}
	for i, s := range sections[1:] {
		var got []string
		for _, c := range s.Charts {
			got = append(got, strings.TrimPrefix(c.File, fileBase(s.Title, i, map[string]bool{})+"-"))
		}
		if strings.Join(got, ",") != strings.Join(wantPer, ".png,")+".png" {
			t.Errorf("%s charts = %v", s.Title, got)
		}
	}
	html, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	page := string(html)
	n := 0
	for _, s := range sections {
		for _, c := range s.Charts {
			n++
			checkPNG(t, filepath.Join(dir, c.File), rgb(0))
			if !strings.Contains(page, `href="`+c.File+`"`) {
				t.Errorf("index.html does not link %s", c.File)
			}
		}
	}
	if n < 25 {
		t.Errorf("%d charts", n)
	}
	if got := strings.Count(page, `src="data:image/png;base64,`); got != n {
		t.Errorf("index.html embeds %d images, want %d", got, n)
	}
	for _, want := range []string{"<table>", "cold GET", "warm GET", "PUT 4KiB", "128.0 KiB", "<h2>Comparison</h2>"} {
		if !strings.Contains(page, want) {
			t.Errorf("index.html lacks %q", want)
		}
	}
	// Two-series charts really draw the second series too.
	checkPNG(t, filepath.Join(dir, "01-cold-get-throughput.png"), rgb(0), rgb(1))
	checkPNG(t, filepath.Join(dir, "compare-latency.png"), rgb(0), rgb(1), rgb(2), rgb(3))
}

func TestRenderWithoutNodeStats(t *testing.T) {
	rs := readResults(t, "warm.json")
	rs[0].Nodes = nil
	dir := t.TempDir()
	sections, err := RenderSections(rs, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(sections) != 1 {
		t.Fatalf("%d sections for one result", len(sections))
	}
	var files []string
	for _, c := range sections[0].Charts {
		files = append(files, c.File)
	}
	if strings.Join(files, ",") != "01-warm-get-throughput.png,01-warm-get-requests.png,01-warm-get-latency.png" {
		t.Fatalf("charts %v", files)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 4 {
		t.Fatalf("%d files in output, want 3 charts and index.html", len(entries))
	}
}

func TestRenderErrors(t *testing.T) {
	if err := Render(nil, t.TempDir()); !errors.Is(err, ErrNoResults) {
		t.Fatalf("err = %v", err)
	}
	if err := RenderFiles([]string{"testdata/missing.json"}, t.TempDir()); err == nil {
		t.Fatal("missing file rendered")
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"version": 99}`), 0o644)
	if err := RenderFiles([]string{bad}, t.TempDir()); !errors.Is(err, loader.ErrResult) {
		t.Fatalf("err = %v, want ErrResult", err)
	}
}

func TestNiceTicks(t *testing.T) {
	tests := []struct {
		min, max float64
		labels   string
	}{
		{0, 10, "0,1,2,3,4,5,6,7,8,9,10"},
		{0, 5.1, "0,1,2,3,4,5"},
		{0, 4.9, "0,0.5,1,1.5,2,2.5,3,3.5,4,4.5"},
		{0, 100, "0,10,20,30,40,50,60,70,80,90,100"},
		{0, 2.4, "0,0.25,0.5,0.75,1,1.25,1.5,1.75,2,2.25"},
		{0, 1250, "0,200,400,600,800,1000,1200"},
	}
	for _, tc := range tests {
		var labels []string
		for _, tk := range (niceTicks{n: 10}).Ticks(tc.min, tc.max) {
			if tk.Label != "" {
				labels = append(labels, tk.Label)
			}
		}
		if got := strings.Join(labels, ","); got != tc.labels {
			t.Errorf("ticks(%v, %v) = %s, want %s", tc.min, tc.max, got, tc.labels)
		}
	}
}

func TestManyLinesWithoutLegend(t *testing.T) {
	var ss []series
	for i := 0; i < 40; i++ {
		ss = append(ss, series{name: "disk", xy: plotterXYs(float64(i))})
	}
	p, err := linePlot("all disks", "s", "MiB/s", ss, axes{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p.Title.Text, "[40 lines]") {
		t.Fatalf("title %q", p.Title.Text)
	}
	path := filepath.Join(t.TempDir(), "many.png")
	if err := save(p, path); err != nil {
		t.Fatal(err)
	}
	checkPNG(t, path, rgb(0), rgb(5))
}

func plotterXYs(level float64) plotter.XYs {
	return plotter.XYs{{X: 0, Y: level}, {X: 1, Y: level + 1}, {X: 2, Y: level}}
}

func TestBarChart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bars.png")
	err := BarChart(path, "IOPS by write size", "IOPS", []string{"4k", "32k", "256k"}, []Bars{
		{Name: "copies=1", Values: []float64{9000, 4000, 700}},
		{Name: "copies=2", Values: []float64{7000, 2900, 450}},
	})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Size() < 5000 {
		t.Fatalf("chart missing or too small: %v", err)
	}
	if err := BarChart(filepath.Join(t.TempDir(), "x.png"), "bad", "y", []string{"a"}, []Bars{{Name: "n", Values: nil}}); err == nil {
		t.Fatal("a series with no values for its categories was accepted")
	}
}

// A partial result (interrupted or failed run) is marked "partial" where
// the report lists runs: its description and its rows in the table.
func TestPartialRunMarkedInReport(t *testing.T) {
	r := readResults(t, "warm.json")[0]
	if strings.Contains(describe(r), "partial") {
		t.Fatalf("complete run described as partial: %s", describe(r))
	}
	r.Partial, r.Error = true, "context canceled"
	if d := describe(r); !strings.Contains(d, "partial (context canceled)") {
		t.Errorf("description %q does not mark the partial run", d)
	}
	rows := tableRows([]*loader.Result{r})
	if len(rows) == 0 {
		t.Fatal("no rows")
	}
	for _, row := range rows {
		if !strings.HasSuffix(row.Label, "(partial)") {
			t.Errorf("row label %q does not mark the partial run", row.Label)
		}
	}
}

// TestCounterSeriesLeavesOutS3Counters: the node counters charted are the
// tier's; the nodes' own S3 request and byte counters (which the live page
// shows) would only repeat the load generator's figures on one axis.
func TestCounterSeriesLeavesOutS3Counters(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	snap := func(s int, warm, gets float64) sysstat.Snapshot {
		return sysstat.Snapshot{Node: "n1", Time: t0.Add(time.Duration(s) * time.Second),
			Counters: map[string]float64{"warm_hits": warm, "s3_get_requests": gets}}
	}
	r := &loader.Result{Start: t0, Nodes: []loader.NodeStats{{Samples: []sysstat.Snapshot{snap(0, 0, 0), snap(1, 5, 9), snap(2, 12, 20)}}}}
	var names []string
	for _, s := range counterSeries(r) {
		names = append(names, s.name)
	}
	if len(names) != 1 || names[0] != "warm_hits" {
		t.Fatalf("counter series %v, want [warm_hits]", names)
	}
}
