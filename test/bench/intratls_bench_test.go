package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/loader"
	"github.com/slipstream-io/slipstream/internal/localcluster"
	"github.com/slipstream-io/slipstream/internal/testbin"
)

// TestIntraTLSCost measures what intra_tls costs: two 3-node clusters,
// alike but for intra_tls, take the same loads through node1's S3
// endpoint, alternately, in one run. node1 forwards the requests of the
// keys it does not own to their owners over the intra-cluster network,
// and owners send their second copies over it.
func TestIntraTLSCost(t *testing.T) {
	if os.Getenv("SLIPSTREAM_BENCH") == "" {
		t.Skip("set SLIPSTREAM_BENCH=1 (make bench) to run benchmarks")
	}
	os.Unsetenv("AWS_CA_BUNDLE")
	ctx := context.Background()
	bin := buildBinary(t)
	dir := t.TempDir()
	clusters := map[bool]*localcluster.Cluster{}
	for i, tls := range []bool{false, true} {
		c := testbin.StartCluster(t, localcluster.Spec{Binary: bin, DataDir: filepath.Join(dir, fmt.Sprint(i)), Net: fmt.Sprintf("127.%d", 61+i), IntraTLS: tls})
		defer c.Stop()
		adminCmd(t, bin, c, "bucket", "create", "two", "--copies", "2")
		adminCmd(t, bin, c, "bucket", "create", "one", "--copies", "1")
		clusters[tls] = c
	}
	const size = 10 << 20
	base := func(c *localcluster.Cluster, bucket string) loader.Config {
		return loader.Config{Endpoint: c.Endpoint(0), Region: "us-east-1", AccessKey: c.Spec.AccessKey, SecretKey: c.Spec.SecretKey,
			Bucket: bucket, MinSize: size, MaxSize: size}
	}
	// The GET dataset: 30 objects, 2/3 of them owned by other nodes.
	for _, c := range clusters {
		cfg := base(c, "one")
		cfg.Prefix, cfg.FillCount, cfg.Workers, cfg.MaxOps, cfg.Seed = "g/", 30, 4, 1, 1
		if _, err := loader.Run(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	loads := []struct {
		label  string
		config func(c *localcluster.Cluster, round int) loader.Config
	}{
		{"PUT 10 MiB, copies=2, 2 workers", func(c *localcluster.Cluster, round int) loader.Config {
			cfg := base(c, "two")
			cfg.Prefix, cfg.Workers, cfg.PutPercent, cfg.Duration, cfg.MaxOps, cfg.Cleanup, cfg.Seed = fmt.Sprintf("p%d/", round), 2, 100, 4*time.Second, 150, true, int64(round+1)
			return cfg
		}},
		{"GET 10 MiB, 4 workers", func(c *localcluster.Cluster, round int) loader.Config {
			cfg := base(c, "one")
			cfg.Prefix, cfg.Workers, cfg.Duration, cfg.Seed = "g/", 4, 4*time.Second, int64(round+1)
			return cfg
		}},
	}
	var md strings.Builder
	fmt.Fprintf(&md, "<!-- written by test/bench TestIntraTLSCost on %s -->\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	md.WriteString("Two 3-node local clusters, alike but for `intra_tls`, take the same loads through node1's S3 endpoint, alternately, 3 rounds of 4 s each, median shown. node1 forwards the requests for the two thirds of the keys it does not own to their owners over the intra-cluster network, and owners send their second copies over it. Node CPU is the three node processes' CPU time per MiB moved.\n\n")
	md.WriteString("| load | intra-cluster | MiB/s | p50 | p99 | node CPU ms/MiB | TLS / plain |\n|---|---|---:|---:|---:|---:|---:|\n")
	for _, l := range loads {
		runs := map[bool][]writeRun{}
		for round := 0; round < 3; round++ {
			for _, tls := range []bool{false, true} {
				c := clusters[tls]
				cpu0 := nodesCPU(t, c)
				res, err := loader.Run(ctx, l.config(c, round))
				if err != nil {
					t.Fatal(err)
				}
				if res.Main.Total.Errors > 0 {
					t.Errorf("%s (intra_tls %v): %d errors", l.label, tls, res.Main.Total.Errors)
				}
				mib := float64(res.Main.Total.Bytes) / (1 << 20)
				runs[tls] = append(runs[tls], writeRun{mibps: mibps(res), p50: res.Main.Total.Latency.P50,
					p99: res.Main.Total.Latency.P99, cpuPerMiB: float64((nodesCPU(t, c) - cpu0).Milliseconds()) / mib})
			}
		}
		med := map[bool]writeRun{}
		for tls, rs := range runs {
			med[tls] = medianRun(rs)
		}
		for _, tls := range []bool{false, true} {
			r := med[tls]
			name, ratio := "plain HTTP", "1.00"
			if tls {
				name, ratio = "`intra_tls`", fmt.Sprintf("**%.2f**", r.mibps/med[false].mibps)
			}
			line := fmt.Sprintf("| %s | %s | %.1f | %.1f ms | %.1f ms | %.1f | %s |", l.label, name, r.mibps, r.p50, r.p99, r.cpuPerMiB, ratio)
			fmt.Println(line)
			md.WriteString(line + "\n")
		}
	}
	writeDoc(t, "bench-intra-tls.md", md.String())
}
