package multihome

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Benchmark shape, per the issue: 3 storage hosts, 3 client hosts, 1 Gbit/s
// per NIC (MH_BENCH_RATE overrides, in Mbit/s).
const (
	benchNodes    = 3
	benchClients  = 3
	benchObjects  = 48
	benchObjSize  = 4 << 20
	benchWorkers  = 12 // per client host
	benchSeconds  = 10
	benchWarmup   = 2.0 // seconds left out of the figures (connections, TCP ramp)
	benchRateMbit = 1000
)

// phase is one measured configuration.
type phase struct {
	name   string
	nics   int
	mbit   float64 // aggregate payload throughput
	line   float64 // shaped line rate of the NICs in use (storage side)
	series []float64
	tickS  float64
	errors int64
	reqs   int64
	perNIC map[string][2]float64 // storage host -> MB sent by eth1, eth2
}

// TestBenchMultihoming measures warm GET aggregate throughput from three
// client hosts to three storage hosts through the smart client, first with
// one NIC per host in use (every host sends and receives on eth1 only: the
// clients bind eth1 and reach the nodes' eth1 addresses), then with both,
// in one run on one cluster, and writes docs/bench-multihoming.md with a
// plot. Run with SLIPSTREAM_BENCH=1 as root.
func TestBenchMultihoming(t *testing.T) {
	if os.Getenv("SLIPSTREAM_BENCH") != "1" {
		t.Skip("benchmark: set SLIPSTREAM_BENCH=1")
	}
	rateMbit := float64(benchRateMbit)
	if v := os.Getenv("MH_BENCH_RATE"); v != "" {
		if _, err := fmt.Sscan(v, &rateMbit); err != nil {
			t.Fatalf("MH_BENCH_RATE=%q: %v", v, err)
		}
	}
	c := startCluster(t, options{clients: benchClients, rate: fmt.Sprintf("%gmbit", rateMbit)})
	fill := c.fill(t, benchObjects, benchObjSize)
	t.Logf("filled %d objects of %d MiB; owners %v", len(fill.Keys), benchObjSize>>20, fill.Owners)

	var phases []phase
	for _, nics := range []int{1, 2} {
		before := c.counters(t)
		res := c.load(t, c.bed.Role("client"), nics, fill.Keys, "", benchWorkers, benchSeconds, nil)
		after := c.counters(t)
		p := phase{name: fmt.Sprintf("%d NIC per host", nics), nics: nics, line: float64(nics*benchNodes) * rateMbit,
			tickS: float64(res[0].TickMS) / 1000, perNIC: map[string][2]float64{}}
		if nics == 2 {
			p.name = "2 NICs per host"
		}
		n := len(res[0].Series)
		for _, r := range res {
			n = min(n, len(r.Series))
			p.mbit += rate(r.Series, r.TickMS, benchWarmup, float64(benchSeconds)-0.25)
			p.errors += r.Errors
			p.reqs += r.Requests
		}
		for i := 0; i < n; i++ {
			var sum int64
			for _, r := range res {
				sum += r.Series[i]
			}
			p.series = append(p.series, mbit(sum, p.tickS))
		}
		for _, h := range c.bed.Role("storage") {
			var v [2]float64
			for k, dev := range []string{"eth1", "eth2"} {
				v[k] = float64(after[h.Name][dev].TxBytes-before[h.Name][dev].TxBytes) / 1e6
			}
			p.perNIC[h.Name] = v
		}
		t.Logf("%s: %.0f Mbit/s aggregate (%.2f of the %.0f Mbit/s line rate), %d GETs, %d errors; storage NICs sent (MB): %v",
			p.name, p.mbit, p.mbit/p.line, p.line, p.reqs, p.errors, p.perNIC)
		if p.errors != 0 {
			t.Errorf("%s: %d client-visible errors", p.name, p.errors)
		}
		phases = append(phases, p)
	}
	ratio := phases[1].mbit / phases[0].mbit
	t.Logf("two NICs / one NIC = %.2f (goal >= 1.9); two NICs / line rate = %.2f (goal >= 0.9)", ratio, phases[1].mbit/phases[1].line)
	if err := writeBenchDoc(phases, rateMbit, ratio); err != nil {
		t.Fatal(err)
	}
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func writeBenchDoc(phases []phase, rateMbit, ratio float64) error {
	root := repoRoot()
	img := filepath.Join("img", "bench-multihoming.png")
	if err := os.MkdirAll(filepath.Join(root, "docs", "img"), 0o755); err != nil {
		return err
	}
	if err := plotPhases(filepath.Join(root, "docs", img), phases); err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "<!-- written by test/multihome TestBenchMultihoming on %s -->\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "# Multihoming: one NIC per host vs two\n\n")
	fmt.Fprintf(&b, "Warm GET aggregate throughput, %d storage hosts (one `slipstream node` each, public and intra addresses on both NICs), "+
		"%d client hosts (the smart Go client in `client/`, %d concurrent GETs each, %d MiB objects, %d objects, one copy), "+
		"every NIC shaped to %g Mbit/s in both directions (tbf on both ends of its veth). Hosts are network namespaces on one "+
		"2-core machine: the node processes, the clients and the kernel's shaping and bridging share those two cores. "+
		"%d s per configuration, the first %.0f s left out; both configurations measured in one run on one cluster.\n\n",
		benchNodes, benchClients, benchWorkers, benchObjSize>>20, benchObjects, rateMbit, benchSeconds, benchWarmup)
	b.WriteString("\"1 NIC per host\": the clients bind only their eth1 address and use only address pairs within one subnet " +
		"(client.Config.PairFilter), so they reach only the nodes' eth1 addresses and every host sends and receives on one NIC " +
		"(the table's per-NIC bytes show eth2 idle). \"2 NICs per host\": the clients bind both.\n\n")
	b.WriteString("| configuration | aggregate Mbit/s | shaped line rate (storage side) | ratio to line rate | GETs | errors | MB sent by each storage NIC (eth1/eth2) |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, p := range phases {
		var nics []string
		for _, h := range []string{"n1", "n2", "n3"} {
			v := p.perNIC[h]
			nics = append(nics, fmt.Sprintf("%s %.0f/%.0f", h, v[0], v[1]))
		}
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.2f | %d | %d | %s |\n", p.name, p.mbit, p.line, p.mbit/p.line, p.reqs, p.errors, strings.Join(nics, ", "))
	}
	fmt.Fprintf(&b, "\n**Two NICs / one NIC: %.2f** (goal ≥ 1.9). **Two NICs / shaped line rate: %.2f** (goal ≥ 0.9). "+
		"Throughput is object payload; the line rate counts every byte on the wire, so TCP/IP and HTTP headers alone "+
		"keep the payload a few percent below it (one iperf3 stream reached 0.93 of a 1 Gbit/s tbf here).\n\n", ratio, phases[1].mbit/phases[1].line)
	fmt.Fprintf(&b, "![aggregate throughput over time](%s)\n\n", img)
	b.WriteString("Run: `sudo SLIPSTREAM_BENCH=1 go test -count=1 -timeout 10m -run TestBenchMultihoming -v ./test/multihome` " +
		"(`MH_BENCH_RATE=<Mbit/s>` changes the per-NIC rate).\n")
	return os.WriteFile(filepath.Join(root, "docs", "bench-multihoming.md"), []byte(b.String()), 0o644)
}

func plotPhases(path string, phases []phase) error {
	p := plot.New()
	p.Title.Text = "Warm GET, 3 storage hosts, 3 client hosts: aggregate throughput"
	p.X.Label.Text = "seconds into the run"
	p.Y.Label.Text = "Mbit/s (payload)"
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	colors := []color.RGBA{{0x1f, 0x77, 0xb4, 0xff}, {0xff, 0x7f, 0x0e, 0xff}}
	var ymax float64
	for i, ph := range phases {
		xy := make(plotter.XYs, len(ph.series))
		for k, v := range ph.series {
			xy[k].X, xy[k].Y = float64(k+1)*ph.tickS, v
			ymax = max(ymax, v)
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return err
		}
		l.Color, l.Width = colors[i%len(colors)], vg.Points(2)
		p.Add(l)
		p.Legend.Add(ph.name, l)
		ref, err := plotter.NewLine(plotter.XYs{{X: 0, Y: ph.line}, {X: float64(benchSeconds), Y: ph.line}})
		if err != nil {
			return err
		}
		ref.Color, ref.Dashes = colors[i%len(colors)], []vg.Length{vg.Points(6), vg.Points(4)}
		p.Add(ref)
		p.Legend.Add(fmt.Sprintf("line rate, %s", ph.name), ref)
		ymax = max(ymax, ph.line)
	}
	p.Y.Min, p.Y.Max = 0, ymax*1.15
	p.X.Min, p.X.Max = 0, float64(benchSeconds)
	p.Legend.Left = true
	return p.Save(10*vg.Inch, 4.5*vg.Inch, path)
}
