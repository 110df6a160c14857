package loader

import (
	"context"
	"errors"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/slipstream-io/slipstream/internal/sysstat"
	"github.com/slipstream-io/slipstream/internal/testbin"
)

const (
	testAccess = "loadtestkey"
	testSecret = "loadtestsecret"
)

// versitygw finds the versitygw binary that scripts/setup.sh installs.
// startS3 starts a real S3 server (versitygw over a temp directory) on a
// free loopback port and returns its endpoint; it is stopped by PID at the
// end of the test.
func startS3(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts an S3 server")
	}
	bin := testbin.Tool(t, "versitygw")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	cmd := exec.Command(bin, "--access", testAccess, "--secret", testSecret, "--port", addr, "posix", dir)
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start versitygw: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("versitygw did not listen on %s: %s", addr, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "http://" + addr
}

func baseConfig(endpoint, label string) Config {
	return Config{Endpoint: endpoint, AccessKey: testAccess, SecretKey: testSecret, Bucket: "load",
		CreateBucket: true, Workers: 4, Label: label, Seed: 42}
}

func listKeys(t *testing.T, cfg Config, prefix string) []string {
	t.Helper()
	cl, err := newClients(cfg.Defaults()).For(cfg.Bucket, "")
	if err != nil {
		t.Fatal(err)
	}
	out, err := cl.ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(cfg.Bucket), Prefix: aws.String(prefix)})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range out.Contents {
		keys = append(keys, aws.ToString(o.Key))
	}
	return keys
}

func checkSeriesSums(t *testing.T, p Phase) {
	t.Helper()
	var ops, bytes, errs int64
	for _, s := range p.Series {
		ops += s.Ops
		bytes += s.Bytes
		errs += s.Errors
	}
	if ops != p.Total.Count || bytes != p.Total.Bytes || errs != p.Total.Errors {
		t.Errorf("%s: series sums ops %d bytes %d errors %d, totals %d %d %d", p.Name, ops, bytes, errs, p.Total.Count, p.Total.Bytes, p.Total.Errors)
	}
}

// TestRunAgainstS3 runs every workload for a few seconds against a real S3
// server.
func TestRunAgainstS3(t *testing.T) {
	t.Setenv("AWS_CA_BUNDLE", "")
	os.Unsetenv("AWS_CA_BUNDLE")
	ep := startS3(t)
	ctx := context.Background()
	stats := httptest.NewServer(sysstat.Handler("test-node", []string{t.TempDir()}, func() map[string]float64 { return map[string]float64{"hits": 1} }))
	defer stats.Close()

	t.Run("fill and two GET epochs", func(t *testing.T) {
		cfg := baseConfig(ep, "epochs")
		cfg.Prefix, cfg.FillCount, cfg.MinSize, cfg.Epochs = "ep/", 40, 64<<10, 2
		cfg.StatsURLs = []string{stats.URL + sysstat.Path}
		cfg.StatsInterval = 200 * time.Millisecond
		res, err := Run(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if res.Fill == nil || res.Fill.Ops["PUT"].Count != 40 || res.Fill.Total.Errors != 0 {
			t.Fatalf("fill = %+v", res.Fill)
		}
		get := res.Main.Ops["GET"]
		if get.Count != 80 || get.Errors != 0 || get.Bytes != 80*64<<10 || res.Main.Epochs != 2 {
			t.Fatalf("GET summary %+v epochs %d errors %v", get, res.Main.Epochs, res.Main.Errors)
		}
		if get.TTFB == nil || get.TTFB.P50 <= 0 || get.TTFB.P50 > get.Latency.Max {
			t.Fatalf("ttfb %+v", get.TTFB)
		}
		if get.Latency.P50 <= 0 || get.Latency.P99 < get.Latency.P50 || get.Latency.Max < get.Latency.P99 {
			t.Fatalf("latency %+v", get.Latency)
		}
		checkSeriesSums(t, res.Main)
		checkSeriesSums(t, *res.Fill)
		if len(res.Nodes) != 1 || len(res.Nodes[0].Samples) < 2 || res.Nodes[0].Samples[0].Node != "test-node" {
			t.Fatalf("node stats %+v", res.Nodes)
		}
		if len(listKeys(t, cfg, "ep/")) != 40 {
			t.Fatal("dataset not in the bucket")
		}

		// Duration without epochs keeps cycling over the dataset; MaxOps
		// stops at an exact count.
		c := baseConfig(ep, "cycle")
		c.Prefix, c.Duration = "ep/", time.Second
		r, err := Run(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if n := r.Main.Ops["GET"].Count; n <= 40 || r.Main.Epochs < 1 || r.Main.Seconds < 1 || r.Main.Seconds > 3 {
			t.Fatalf("1 s of GETs: %d requests, %d epochs, %.2f s", n, r.Main.Epochs, r.Main.Seconds)
		}
		c.Duration, c.MaxOps = time.Minute, 25
		if r, err = Run(ctx, c); err != nil || r.Main.Ops["GET"].Count != 25 {
			t.Fatalf("max ops 25: %v, %+v", err, r.Main.Ops)
		}

		// A second run without fill lists the dataset and reads it again;
		// two loaders split it.
		for id := 0; id < 2; id++ {
			c := baseConfig(ep, "split")
			c.Prefix, c.Epochs, c.LoaderID, c.LoaderCount = "ep/", 1, id, 2
			r, err := Run(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			if r.Params.Objects != 20 || r.Main.Ops["GET"].Count != 20 {
				t.Fatalf("loader %d: %d objects, %d GETs", id, r.Params.Objects, r.Main.Ops["GET"].Count)
			}
		}
	})

	t.Run("PUT for a duration with cleanup", func(t *testing.T) {
		cfg := baseConfig(ep, "put")
		cfg.Prefix, cfg.PutPercent, cfg.MinSize, cfg.MaxSize = "put/", 100, 1<<10, 32<<10
		cfg.Duration, cfg.Cleanup = 2*time.Second, true
		res, err := Run(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		put := res.Main.Ops["PUT"]
		if put.Count < 10 || put.Errors != 0 || res.Main.Seconds < 2 || res.Main.Seconds > 5 {
			t.Fatalf("PUT %+v in %.1fs", put, res.Main.Seconds)
		}
		if avg := put.Bytes / put.Count; avg < 1<<10 || avg > 32<<10 {
			t.Fatalf("average PUT size %d outside 1K..32K", avg)
		}
		if res.Cleanup == nil || res.Cleanup.Deleted != int(put.Count) || res.Cleanup.Errors != 0 {
			t.Fatalf("cleanup %+v after %d PUTs", res.Cleanup, put.Count)
		}
		if keys := listKeys(t, cfg, "put/"); len(keys) != 0 {
			t.Fatalf("%d objects left after cleanup", len(keys))
		}
	})

	t.Run("mixed with rate limit", func(t *testing.T) {
		cfg := baseConfig(ep, "mixed")
		cfg.Prefix, cfg.FillCount, cfg.MinSize, cfg.PutPercent = "mix/", 20, 16<<10, 30
		cfg.Duration, cfg.RateLimit, cfg.Cleanup = 2*time.Second, 100, true
		res, err := Run(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		get, put := res.Main.Ops["GET"], res.Main.Ops["PUT"]
		n := get.Count + put.Count
		if n < 150 || n > 230 {
			t.Fatalf("%d requests in 2 s at 100/s", n)
		}
		if frac := float64(put.Count) / float64(n); frac < 0.15 || frac > 0.45 {
			t.Fatalf("PUT share %.2f, want about 0.30", frac)
		}
		if res.Cleanup.Deleted != 20+int(put.Count) {
			t.Fatalf("cleanup deleted %d, want %d", res.Cleanup.Deleted, 20+put.Count)
		}
		if keys := listKeys(t, cfg, "mix/"); len(keys) != 0 {
			t.Fatalf("%d objects left after cleanup", len(keys))
		}
		checkSeriesSums(t, res.Main)
	})

	t.Run("errors by kind", func(t *testing.T) {
		cfg := baseConfig(ep, "missing")
		cfg.Bucket, cfg.CreateBucket, cfg.Epochs = "no-such-bucket", false, 1
		_, err := Run(ctx, cfg)
		if err == nil || !strings.Contains(err.Error(), "NoSuchBucket") {
			t.Fatalf("err = %v, want NoSuchBucket", err)
		}
		cfg = baseConfig(ep, "empty")
		cfg.Prefix, cfg.Epochs = "nothing-here/", 1
		if _, err := Run(ctx, cfg); !errors.Is(err, ErrNoDataset) {
			t.Fatalf("err = %v, want ErrNoDataset", err)
		}
	})
}
