package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/loader"
	"github.com/slipstream-io/slipstream/internal/localcluster"
	"github.com/slipstream-io/slipstream/internal/node"
	"github.com/slipstream-io/slipstream/internal/remotesim"
	"github.com/slipstream-io/slipstream/internal/report"
	"github.com/slipstream-io/slipstream/internal/sysstat"
	"github.com/slipstream-io/slipstream/internal/testbin"
)

func benchEnv(t *testing.T, net string, rate int64, latency time.Duration) (*localcluster.Cluster, *remotesim.Remote, string) {
	return benchEnvIn(t, net, rate, latency, "")
}

// benchEnvIn starts a remote and a cluster with all their data under root
// ("" = the test's temporary directory, on the machine's disk).
func benchEnvIn(t *testing.T, net string, rate int64, latency time.Duration, root string) (*localcluster.Cluster, *remotesim.Remote, string) {
	t.Helper()
	if os.Getenv("SLIPSTREAM_BENCH") == "" {
		t.Skip("set SLIPSTREAM_BENCH=1 (make bench) to run benchmarks")
	}
	os.Unsetenv("AWS_CA_BUNDLE")
	ctx := context.Background()
	bin := buildBinary(t)
	dir := t.TempDir()
	if root != "" {
		d, err := os.MkdirTemp(root, "slipstream-bench")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		dir = d
	}
	rem, err := remotesim.Start(ctx, remotesim.Config{Dir: filepath.Join(dir, "remote"), Rate: rate, Latency: latency})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rem.Stop)
	if err := rem.CreateBucket("remote"); err != nil {
		t.Fatal(err)
	}
	c := testbin.StartCluster(t, localcluster.Spec{Binary: bin, DataDir: filepath.Join(dir, "cluster"), Net: net})
	return c, rem, bin
}

func adminCmd(t *testing.T, bin string, c *localcluster.Cluster, args ...string) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"admin"}, args...)...)
	cmd.Env = append(os.Environ(), "SLIPSTREAM_NODE="+c.IntraURL(0), "SLIPSTREAM_SECRET=local-cluster-secret")
	if c.Spec.IntraTLS {
		cmd.Env = append(cmd.Env, "SLIPSTREAM_INTRA_TLS=1")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("admin %v: %v\n%s", args, err, out)
	}
}

func tierBucket(t *testing.T, bin string, c *localcluster.Cluster, rem *remotesim.Remote, name, mode string, extra ...string) {
	adminCmd(t, bin, c, append([]string{"bucket", "create", name, "--mode", mode, "--backend", "s3", "--endpoint", rem.Endpoint,
		"--remote-bucket", "remote", "--prefix", name + "/", "--access-key", rem.AccessKey, "--secret-key", rem.SecretKey}, extra...)...)
}

func writeDoc(t *testing.T, name, text string) {
	_, file, _, _ := runtime.Caller(0)
	out := filepath.Join(filepath.Dir(file), "..", "..", "docs", name)
	if err := os.WriteFile(out, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mibps(r *loader.Result) float64 { return r.Main.Total.BytesPerSec / (1 << 20) }

// TestColdWarmVsDirect reads a dataset of 10 MiB objects in one epoch
// straight from the remote (through its slow link), then a cold epoch and
// a warm epoch through the cluster, in one run.
func TestColdWarmVsDirect(t *testing.T) {
	const rate = 160 << 20
	c, rem, bin := benchEnv(t, "127.51", rate, 20*time.Millisecond)
	ctx := context.Background()
	tierBucket(t, bin, c, rem, "coldwarm", "cache")
	base := loader.Config{Region: "us-east-1", Workers: 8, MinSize: 10 << 20, MaxSize: 10 << 20, Epochs: 1, Seed: 1}
	fill := base
	fill.Endpoint, fill.AccessKey, fill.SecretKey = rem.DirectEndpoint, rem.AccessKey, rem.SecretKey
	fill.Bucket, fill.Prefix, fill.FillCount, fill.MaxOps, fill.Epochs, fill.Label = "remote", "coldwarm/ds-", 40, 1, 0, "fill"
	if _, err := loader.Run(ctx, fill); err != nil {
		t.Fatal(err)
	}
	var results []*loader.Result
	for _, r := range []struct{ label, ep, bucket, prefix, ak, sk string }{
		{"direct from backend", rem.Endpoint, "remote", "coldwarm/ds-", rem.AccessKey, rem.SecretKey},
		{"cold", c.Endpoint(0), "coldwarm", "ds-", c.Spec.AccessKey, c.Spec.SecretKey},
		{"warm", c.Endpoint(0), "coldwarm", "ds-", c.Spec.AccessKey, c.Spec.SecretKey},
	} {
		cfg := base
		cfg.Endpoint, cfg.Bucket, cfg.Prefix, cfg.AccessKey, cfg.SecretKey, cfg.Label = r.ep, r.bucket, r.prefix, r.ak, r.sk, r.label
		res, err := loader.Run(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if res.Main.Total.Errors > 0 {
			t.Errorf("%s: %d errors", r.label, res.Main.Total.Errors)
		}
		results = append(results, res)
	}
	direct, cold, warm := results[0], results[1], results[2]
	var md strings.Builder
	fmt.Fprintf(&md, "| run | MiB/s | p50 | p99 | ratio |\n|---|---|---|---|---|\n")
	fmt.Fprintf(&md, "| direct from backend (%d MiB/s link, 20 ms) | %.1f | %.0f ms | %.0f ms | 1.00 |\n", rate>>20, mibps(direct), direct.Main.Total.Latency.P50, direct.Main.Total.Latency.P99)
	fmt.Fprintf(&md, "| cold epoch through the cluster | %.1f | %.0f ms | %.0f ms | **%.2f** of direct (goal ≥ 0.95) |\n", mibps(cold), cold.Main.Total.Latency.P50, cold.Main.Total.Latency.P99, mibps(cold)/mibps(direct))
	fmt.Fprintf(&md, "| warm epoch | %.1f | %.0f ms | %.0f ms | **%.1f×** cold |\n", mibps(warm), warm.Main.Total.Latency.P50, warm.Main.Total.Latency.P99, mibps(warm)/mibps(cold))
	fmt.Print(md.String())
	writeDoc(t, "bench-tier-read.md", fmt.Sprintf("<!-- written by test/bench TestColdWarmVsDirect on %s -->\n"+
		"40 objects of 10 MiB, 8 workers, one epoch each (every object once, random order); 3-node local cluster; "+
		"the remote is versitygw behind a %d MiB/s, 20 ms link; all on one %d-core machine.\n\n%s",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), rate>>20, runtime.NumCPU(), md.String()))
	if err := report.Render(results, filepath.Join(t.TempDir(), "r")); err != nil {
		t.Fatal(err)
	}
}

// TestWritePaths measures PUT throughput of every write path with one
// client of 2 workers (the PernixData set-up: one workload, two workers)
// and of 8 workers (enough to keep both cores busy): 3 rounds, the paths
// interleaved in each round, the median reported, with the CPU time the
// node processes spent per MiB (until the write-back backlog was empty).
func TestWritePaths(t *testing.T) {
	var md strings.Builder
	writePaths(t, "127.52", "", &md)
	writeDoc(t, "bench-tier-write.md", fmt.Sprintf("<!-- written by test/bench TestWritePaths on %s -->\n"+
		"PUT for up to %s per run, 3 rounds with the paths interleaved, median run shown; a copies=2 / copies=1 ratio is the median "+
		"of the ratios measured within one round, with their range in parentheses; 3-node local cluster on loopback "+
		"with its drives on the machine's one disk, remote versitygw without a rate limit; all on one %d-core machine. "+
		"\"node CPU\" is the CPU time of the three node processes per MiB acknowledged, destaging included.\n\n%s",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), writeRunTime, runtime.NumCPU(), md.String()))
}

// TestWritePathsInMemory runs the write paths again with every drive (and
// the remote) on tmpfs: a second copy then shares no disk with the first,
// as on separate hosts, while the CPU is still shared. The gap between
// this table's copies=2 / copies=1 and the one on disk is what the one
// shared disk costs the second copy.
func TestWritePathsInMemory(t *testing.T) {
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Fatalf("no /dev/shm: %v", err)
	}
	var md strings.Builder
	writePaths(t, "127.53", "/dev/shm", &md)
	writeDoc(t, "bench-tier-write-mem.md", fmt.Sprintf("<!-- written by test/bench TestWritePathsInMemory on %s -->\n"+
		"The same runs with every node's drives and the remote on tmpfs (/dev/shm): no copy waits for a disk, "+
		"the %d cores are still shared by the client, the three nodes and the remote.\n\n%s",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), md.String()))
}

const writeRunTime = 4 * time.Second

type writeRun struct {
	mibps, p50, p99, cpuPerMiB float64
	iops                       float64 // fio runs
}

// ratioRange is the median of per-round ratios, bold, with their range:
// on this shared machine a load's throughput moves between rounds by more
// than the ratios being measured, so ratios are taken within a round.
func ratioRange(rs []float64) string {
	rs = slices.Clone(rs)
	sort.Float64s(rs)
	return fmt.Sprintf("**%.2f** (%.2f–%.2f)", rs[len(rs)/2], rs[0], rs[len(rs)-1])
}

// medianRun is the run of rs with the median throughput.
func medianRun(rs []writeRun) writeRun {
	rs = slices.Clone(rs)
	sort.Slice(rs, func(i, j int) bool { return rs[i].mibps < rs[j].mibps })
	return rs[len(rs)/2]
}

func writePaths(t *testing.T, net, root string, md *strings.Builder) {
	c, rem, bin := benchEnvIn(t, net, 0, 0, root)
	defer c.Stop()
	ctx := context.Background()
	tierBucket(t, bin, c, rem, "wbone", "writeback", "--copies", "1")
	tierBucket(t, bin, c, rem, "wbtwo", "writeback", "--copies", "2")
	tierBucket(t, bin, c, rem, "wthrough", "cache")
	adminCmd(t, bin, c, "bucket", "create", "localone", "--copies", "1")
	adminCmd(t, bin, c, "bucket", "create", "localtwo", "--copies", "2")
	paths := []struct{ label, bucket string }{
		{"write-back, copies=1 (WB+0)", "wbone"}, {"write-back, copies=2 (WB+1)", "wbtwo"}, {"write-through", "wthrough"},
		{"local bucket, copies=1", "localone"}, {"local bucket, copies=2", "localtwo"},
	}
	fmt.Fprintf(md, "| object size | workers | write path | MiB/s | p50 | p99 | node CPU ms/MiB | ratio |\n|---|---:|---|---:|---:|---:|---:|---|\n")
	for _, sz := range []struct {
		size   int64
		maxOps int64
	}{{10 << 20, 150}, {256 << 10, 1500}} {
		for _, workers := range []int{2, 8} {
			runs := map[string][]writeRun{}
			for round := 0; round < 3; round++ {
				for _, p := range paths {
					cfg := loader.Config{
						Endpoint: c.Endpoint(0), Region: "us-east-1", AccessKey: c.Spec.AccessKey, SecretKey: c.Spec.SecretKey,
						Bucket: p.bucket, Prefix: fmt.Sprintf("p%d-%d-", sz.size, workers), Workers: workers, PutPercent: 100,
						MinSize: sz.size, MaxSize: sz.size, Duration: writeRunTime, MaxOps: sz.maxOps, Cleanup: true, Label: p.label, Seed: int64(round + 1),
					}
					cpu0 := nodesCPU(t, c)
					res, err := loader.Run(ctx, cfg)
					if err != nil {
						t.Fatal(err)
					}
					// The next run must not pay for this one's background uploads.
					waitDestaged(t, c)
					if res.Main.Total.Errors > 0 {
						t.Errorf("%s: %d errors", p.label, res.Main.Total.Errors)
					}
					mib := float64(res.Main.Total.Bytes) / (1 << 20)
					runs[p.bucket] = append(runs[p.bucket], writeRun{mibps: mibps(res), p50: res.Main.Total.Latency.P50,
						p99: res.Main.Total.Latency.P99, cpuPerMiB: float64((nodesCPU(t, c) - cpu0).Milliseconds()) / mib})
				}
			}
			// perRound is ratioRange of a / b measured in the same round.
			perRound := func(a, b string) string {
				var rs []float64
				for i := range min(len(runs[a]), len(runs[b])) {
					rs = append(rs, runs[a][i].mibps/runs[b][i].mibps)
				}
				return ratioRange(rs)
			}
			med := map[string]writeRun{}
			for b, rs := range runs {
				med[b] = medianRun(rs)
			}
			for _, p := range paths {
				r := med[p.bucket]
				ratio := ""
				switch p.bucket {
				case "wbone", "localone":
					ratio = "1.00"
				case "wbtwo":
					ratio = perRound("wbtwo", "wbone") + " of copies=1 (goal ≥ 0.9)"
				case "wthrough":
					ratio = fmt.Sprintf("write-back copies=1 is %.1f× write-through", med["wbone"].mibps/r.mibps)
				case "localtwo":
					ratio = perRound("localtwo", "localone") + " of copies=1"
				}
				line := fmt.Sprintf("| %s | %d | %s | %.1f | %.1f ms | %.1f ms | %.1f | %s |", loader.HumanBytes(float64(sz.size)), workers, p.label,
					r.mibps, r.p50, r.p99, r.cpuPerMiB, ratio)
				fmt.Println(line)
				md.WriteString(line + "\n")
			}
		}
	}
}

// nodesCPU is the CPU time the cluster's node processes have used.
func nodesCPU(t *testing.T, c *localcluster.Cluster) time.Duration {
	t.Helper()
	var sum time.Duration
	for i := range c.Configs {
		d, err := sysstat.ProcessCPU(c.PID(i))
		if err != nil {
			t.Fatal(err)
		}
		sum += d
	}
	return sum
}

// waitDestaged waits until no node has write-back work left.
func waitDestaged(t *testing.T, c *localcluster.Cluster) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		left := 0.0
		for i := range c.Configs {
			resp, err := http.Get(c.Endpoint(i) + node.StatsPath)
			if err != nil {
				t.Fatal(err)
			}
			var snap sysstat.Snapshot
			err = json.NewDecoder(resp.Body).Decode(&snap)
			resp.Body.Close()
			if err != nil {
				t.Fatalf("stats of node %d: %v", i, err)
			}
			left += snap.Counters["destage_backlog_objects"]
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%.0f write-back operations still not destaged", left)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
