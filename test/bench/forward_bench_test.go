package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/loader"
	"github.com/slipstream-io/slipstream/internal/localcluster"
	"github.com/slipstream-io/slipstream/internal/testbin"
)

// TestVolumeForwardCost measures what a write through a node that does
// not hold a volume's claim costs: it is forwarded to the holder. Two fio
// clients write one copies=2 volume at once (disjoint halves). In one
// set-up both connect to node1, the holder; in the other, the second
// client connects to node2, which forwards its writes to node1. The
// set-ups alternate, 3 rounds; the second client's figures are compared.
func TestVolumeForwardCost(t *testing.T) {
	if os.Getenv("SLIPSTREAM_BENCH") == "" {
		t.Skip("set SLIPSTREAM_BENCH=1 (make bench) to run benchmarks")
	}
	if _, err := exec.LookPath("fio"); err != nil {
		t.Fatal("fio is not installed; run scripts/setup.sh")
	}
	bin := buildBinary(t)
	c := testbin.StartCluster(t, localcluster.Spec{Binary: bin, DataDir: filepath.Join(t.TempDir(), "cluster"), Net: "127.71"})
	defer c.Stop()
	vol := exec.Command(bin, "volume", "create", "fw", "--size", "512MiB", "--copies", "2")
	vol.Env = append(os.Environ(), "SLIPSTREAM_NODE="+c.IntraURL(0), "SLIPSTREAM_SECRET=local-cluster-secret")
	if out, err := vol.CombinedOutput(); err != nil {
		t.Fatalf("volume create: %v\n%s", err, out)
	}
	uri := func(node int) string { return fmt.Sprintf("nbd://%s/fw", c.Configs[node].NBD[0]) }
	const half = 256 << 20
	fio := func(node int, offset int64, runtime int, args ...string) *loader.Result {
		cmd := exec.Command("fio", append([]string{"--name=w", "--ioengine=nbd", "--uri=" + uri(node),
			fmt.Sprintf("--offset=%d", offset), fmt.Sprintf("--size=%d", half), "--output-format=json",
			"--percentile_list=50:99", "--time_based", fmt.Sprintf("--runtime=%d", runtime)}, args...)...)
		cmd.Dir = t.TempDir()
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("fio %v: %v\n%s", cmd.Args, err, out)
		}
		rs, err := loader.ParseFio(out, "fio")
		if err != nil || len(rs) != 1 || rs[0].Main.Total.Errors > 0 {
			t.Fatalf("fio through node%d: %v %v", node+1, rs, err)
		}
		return rs[0]
	}
	// Fill both halves through node1 so that the runs overwrite data.
	fio(0, 0, 60, "--rw=write", "--bs=1m", "--time_based=0")
	fio(0, half, 60, "--rw=write", "--bs=1m", "--time_based=0")

	jobs := []struct {
		label string
		args  []string
	}{
		{"4 KiB random writes, 16 in flight", []string{"--rw=randwrite", "--bs=4k", "--iodepth=16"}},
		{"1 MiB writes, 4 in flight", []string{"--rw=write", "--bs=1m", "--iodepth=4"}},
	}
	setups := []struct {
		label  string
		second int // node of the second client
	}{{"both clients through node1 (the holder)", 0}, {"second client through node2 (forwarded)", 1}}
	var md strings.Builder
	fmt.Fprintf(&md, "<!-- written by test/bench TestVolumeForwardCost on %s -->\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	md.WriteString("A 3-node local cluster, one copies=2 volume; two fio clients (nbd engine) write its two halves at once for 5 s. In one set-up both connect to node1, which holds the volume's claim; in the other the second client connects to node2, which forwards its writes to node1. The set-ups alternate, 3 rounds, median shown; the ratio is the median of the rounds' own ratios of the second client's IOPS, with their range. All on one 2-core machine.\n\n")
	md.WriteString("| load | set-up | client 1 IOPS | client 2 IOPS | client 2 MiB/s | client 2 p50 | client 2 p99 | client 2 forwarded / through the holder |\n|---|---|---:|---:|---:|---:|---:|---|\n")
	for _, j := range jobs {
		first, second := map[int][]writeRun{}, map[int][]writeRun{}
		for round := 0; round < 3; round++ {
			for si, s := range setups {
				var r1, r2 *loader.Result
				var wg sync.WaitGroup
				wg.Go(func() { r1 = fio(0, 0, 5, j.args...) })
				wg.Go(func() { r2 = fio(s.second, half, 5, j.args...) })
				wg.Wait()
				conv := func(r *loader.Result) writeRun {
					tot := r.Main.Total
					return writeRun{iops: tot.OpsPerSec, mibps: tot.BytesPerSec / (1 << 20), p50: tot.Latency.P50, p99: tot.Latency.P99}
				}
				first[si] = append(first[si], conv(r1))
				second[si] = append(second[si], conv(r2))
			}
		}
		var ratios []float64
		for i := range second[1] {
			ratios = append(ratios, second[1][i].iops/second[0][i].iops)
		}
		for si, s := range setups {
			r1, r2 := medianRun(first[si]), medianRun(second[si]) // one block size: by MiB/s is by IOPS
			ratio := "1.00"
			if si == 1 {
				ratio = ratioRange(ratios)
			}
			line := fmt.Sprintf("| %s | %s | %.0f | %.0f | %.1f | %.2f ms | %.2f ms | %s |", j.label, s.label, r1.iops, r2.iops, r2.mibps, r2.p50, r2.p99, ratio)
			fmt.Println(line)
			md.WriteString(line + "\n")
		}
	}
	writeDoc(t, "bench-volume-forward.md", md.String())
}
