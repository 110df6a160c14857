package fabric

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// benchDirs: the 1024-host sample, plus generated fabrics named by
// FABRIC_BENCH_DIR (scripts/fabric/bench.sh sets it to a directory holding
// h4096/, h8192/ and their gzipped copies h4096-gz/, h8192-gz/).
func benchDirs(b *testing.B) map[string]string {
	dirs := map[string]string{"h1024": filepath.Join(samples, "ft3-k16-h1024/ftree")}
	if d := os.Getenv("FABRIC_BENCH_DIR"); d != "" {
		for _, n := range []string{"h4096", "h4096-gz", "h8192", "h8192-gz"} {
			if _, err := os.Stat(filepath.Join(d, n)); err == nil {
				dirs[n] = filepath.Join(d, n)
			}
		}
	}
	return dirs
}

// BenchmarkFullAnalysis: parse the dumps and compute every route's links,
// loads and weights in both directions.
func BenchmarkFullAnalysis(b *testing.B) {
	for _, name := range sortedKeys(benchDirs(b)) {
		dir := benchDirs(b)[name]
		b.Run(name, func(b *testing.B) {
			var routes int64
			for i := 0; i < b.N; i++ {
				m, err := Load(context.Background(), dir)
				if err != nil {
					b.Fatal(err)
				}
				a, err := m.Analyze(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				routes = a.Routes
			}
			b.ReportMetric(float64(routes), "routes")
		})
	}
}

// BenchmarkTreesVsWalk compares the per-destination trees with the
// straightforward method (walk every route through the LFTs, twice: once
// for loads, once for weights) on the same loaded model, and reports the
// speed-up measured in this run.
func BenchmarkTreesVsWalk(b *testing.B) {
	m, err := Load(context.Background(), filepath.Join(samples, "ft3-k16-h1024/ftree"))
	if err != nil {
		b.Fatal(err)
	}
	var treeNs, walkNs float64
	b.Run("trees", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := m.AnalyzeWith(context.Background(), AnalyzeOptions{Workers: 1}); err != nil {
				b.Fatal(err)
			}
		}
		treeNs = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	})
	b.Run("walk", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			walkEveryPair(m)
		}
		walkNs = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	})
	if treeNs > 0 {
		fmt.Printf("1024 hosts, one core: trees %.0f ms, walking every route %.0f ms: %.1fx faster\n", treeNs/1e6, walkNs/1e6, walkNs/treeNs)
	}
}

// walkEveryPair is the straightforward analysis, without storing routes.
func walkEveryPair(m *Model) (load []int64, weightSum int64) {
	load = make([]int64, len(m.Ports))
	var buf []int32
	each := func(fn func(links []int32)) {
		for s := range m.Endpoints {
			for _, dep := range m.Endpoints {
				if m.Endpoints[s].Host == dep.Host {
					continue
				}
				p := m.Ports[dep.Port]
				for i := 0; i < 1<<p.LMC; i++ {
					var ok bool
					buf, ok = m.RouteLinks(int32(s), p.LID+uint16(i), buf[:0])
					if ok {
						fn(buf)
					}
				}
			}
		}
	}
	each(func(links []int32) {
		for _, l := range links {
			load[l]++
		}
	})
	each(func(links []int32) {
		for _, l := range links {
			weightSum += load[l]
		}
	})
	return load, weightSum
}

func TestWalkEveryPairAgrees(t *testing.T) {
	m := load(t, "ft3-k8-h128/ftree/before")
	a := analyze(t, m)
	l, w := walkEveryPair(m)
	if w != a.WeightSum {
		t.Errorf("walk weight sum %d, trees %d", w, a.WeightSum)
	}
	for p := range l {
		if l[p] != a.Load[p] {
			t.Fatalf("port %d: walk %d, trees %d", p, l[p], a.Load[p])
		}
	}
}
