// Package demo runs Slipstream's main job end to end on one machine, like
// the three tests of a fast-tier benchmark at small scale: a local cluster
// in front of a slowed-down local stand-in for a remote bucket; an epoch
// read directly from the remote (the baseline), a cold epoch through the
// cluster (filling it), warm epochs (served from the cluster's drives),
// two epochs over a dataset larger than the cache, and one more epoch over
// the first dataset to show what that scan left of it. It prints the
// comparison table and writes an HTML report with plots.
package demo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/slipstream-io/slipstream/internal/config"
	"github.com/slipstream-io/slipstream/internal/loader"
	"github.com/slipstream-io/slipstream/internal/localcluster"
	"github.com/slipstream-io/slipstream/internal/remotesim"
	"github.com/slipstream-io/slipstream/internal/report"
	"github.com/slipstream-io/slipstream/internal/store/evict"
	"github.com/slipstream-io/slipstream/internal/sysstat"
)

// Config sizes the demo. Zero fields take the defaults in brackets.
type Config struct {
	Binary  string // the slipstream binary to start nodes with
	WorkDir string // cluster and remote data; removed at the end
	Report  string // where the report goes [./slipstream-report]
	Out     io.Writer

	Objects    int           // objects in the dataset that fits the cache [128: half of it, see defaults]
	ObjectSize int64         // [1 MiB]
	BigFactor  int           // the large dataset is this many times the cache [2]
	CacheBytes int64         // cluster cache size in total [256 MiB]
	RemoteRate int64         // remote link, bytes/s [64 MiB/s]
	Latency    time.Duration // remote time to first byte [25ms]
	Workers    int           // loader workers [8]
	Nodes      int           // [3]
	Policy     string        // eviction policy, s3fifo or lru [s3fifo]
	Keep       bool          // keep WorkDir
}

func (c *Config) defaults() {
	if c.Report == "" {
		c.Report = "slipstream-report"
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	// The dataset that fits takes half the cache, in objects small enough
	// to be many: HRW spreads objects over the mountpaths unevenly when
	// there are few of them, and a mountpath past its high watermark
	// evicts, which would make the warm epoch partly cold (48 objects of
	// 4 MiB, three quarters of the cache, left a quarter of the warm reads
	// cold).
	if c.Objects == 0 {
		c.Objects = 128
	}
	if c.ObjectSize == 0 {
		c.ObjectSize = 1 << 20
	}
	if c.Policy == "" {
		c.Policy = "s3fifo"
	}
	if c.BigFactor == 0 {
		c.BigFactor = 2
	}
	if c.CacheBytes == 0 {
		c.CacheBytes = 256 << 20
	}
	if c.RemoteRate == 0 {
		c.RemoteRate = 64 << 20
	}
	if c.Latency == 0 {
		c.Latency = 25 * time.Millisecond
	}
	if c.Workers == 0 {
		c.Workers = 8
	}
	if c.Nodes == 0 {
		c.Nodes = 3
	}
}

const (
	remoteBucket = "remote"
	mountpaths   = 2
)

// Run runs the demo and returns the results in the order they ran.
func Run(ctx context.Context, cfg Config) ([]*loader.Result, error) {
	cfg.defaults()
	if _, err := evict.New(cfg.Policy); err != nil {
		return nil, err
	}
	say := func(format string, args ...any) { fmt.Fprintf(cfg.Out, format+"\n", args...) }
	if cfg.WorkDir == "" {
		d, err := os.MkdirTemp("", "slipstream-demo")
		if err != nil {
			return nil, err
		}
		cfg.WorkDir = d
	}
	if !cfg.Keep {
		defer os.RemoveAll(cfg.WorkDir)
	}

	say("starting the remote stand-in: a real S3 server behind a %s/s link with %v to first byte",
		loader.HumanBytes(float64(cfg.RemoteRate)), cfg.Latency)
	rem, err := remotesim.Start(ctx, remotesim.Config{Dir: filepath.Join(cfg.WorkDir, "remote"), Rate: cfg.RemoteRate, Latency: cfg.Latency})
	if err != nil {
		return nil, err
	}
	defer rem.Stop()
	if err := rem.CreateBucket(remoteBucket); err != nil {
		return nil, err
	}
	bigObjects := int(cfg.CacheBytes/cfg.ObjectSize) * cfg.BigFactor
	say("writing the datasets into the remote: %d x %s (fits the cache) and %d x %s (%dx the cache)",
		cfg.Objects, loader.HumanBytes(float64(cfg.ObjectSize)), bigObjects, loader.HumanBytes(float64(cfg.ObjectSize)), cfg.BigFactor)
	if err := fillRemote(ctx, rem, "fits/", cfg.Objects, cfg.ObjectSize); err != nil {
		return nil, err
	}
	if err := fillRemote(ctx, rem, "big/", bigObjects, cfg.ObjectSize); err != nil {
		return nil, err
	}

	say("starting a %d-node cluster (%d mountpaths each, %s of cache in total)", cfg.Nodes, mountpaths, loader.HumanBytes(float64(cfg.CacheBytes)))
	net := "127.0"
	port, err := localcluster.FreeBasePort(net, cfg.Nodes, 2)
	if err != nil {
		return nil, err
	}
	cl, err := localcluster.Start(ctx, localcluster.Spec{
		Binary: cfg.Binary, DataDir: filepath.Join(cfg.WorkDir, "cluster"), Nodes: cfg.Nodes, Mountpaths: mountpaths,
		BasePort: port, Net: net, MaxBytes: cfg.CacheBytes / int64(cfg.Nodes*mountpaths),
		ExtraConfig: func(_ int, n *config.Node) { n.Space.Policy = cfg.Policy },
	})
	if err != nil {
		return nil, err
	}
	defer cl.Stop()
	for _, b := range []struct{ name, prefix string }{{"dataset", "fits/"}, {"bigset", "big/"}} {
		if err := createCacheBucket(ctx, cl, rem, b.name, b.prefix); err != nil {
			return nil, err
		}
	}
	var stats []string
	for i := range cl.Configs {
		stats = append(stats, cl.IntraURL(i)+sysstat.Path)
	}

	base := loader.Config{
		Region: "us-east-1", Workers: cfg.Workers, Epochs: 1, MinSize: cfg.ObjectSize, MaxSize: cfg.ObjectSize, Seed: 1,
	}
	runs := []struct {
		label, note          string
		endpoint, bucket, pf string
		ak, sk               string
		epochs               int
		stats                bool
	}{
		{"direct from backend", "one epoch read straight from the remote: the baseline", rem.Endpoint, remoteBucket, "fits/obj-", rem.AccessKey, rem.SecretKey, 1, false},
		{"cold", "first epoch through the cluster: every object is fetched and kept", cl.Endpoint(0), "dataset", "obj-", cl.Spec.AccessKey, cl.Spec.SecretKey, 1, true},
		{"warm", "four more epochs: served from the cluster's drives", cl.Endpoint(0), "dataset", "obj-", cl.Spec.AccessKey, cl.Spec.SecretKey, 4, true},
		{"larger than cache", fmt.Sprintf("two epochs over a dataset %dx the cache (%s eviction)", cfg.BigFactor, policyName(cfg.Policy)), cl.Endpoint(0), "bigset", "obj-", cl.Spec.AccessKey, cl.Spec.SecretKey, 2, true},
		{"warm after the scan", "one more epoch over the first dataset: what the larger one left of it", cl.Endpoint(0), "dataset", "obj-", cl.Spec.AccessKey, cl.Spec.SecretKey, 1, true},
	}
	var results []*loader.Result
	for _, r := range runs {
		say("running %q: %s", r.label, r.note)
		c := base
		c.Endpoint, c.Bucket, c.Prefix, c.AccessKey, c.SecretKey, c.Label, c.Epochs = r.endpoint, r.bucket, r.pf, r.ak, r.sk, r.label, r.epochs
		if r.stats {
			c.StatsURLs = stats
		}
		res, err := loader.Run(ctx, c)
		if err != nil {
			return results, fmt.Errorf("run %q: %w", r.label, err)
		}
		results = append(results, res)
	}

	say("")
	if err := loader.PrintSummary(cfg.Out, results...); err != nil {
		return results, err
	}
	say("")
	for _, r := range results {
		warm, cold := r.CounterDelta("warm_hits"), r.CounterDelta("cold_hits")
		if len(r.Nodes) > 0 && warm+cold > 0 {
			say("%21s  %3.0f%% of GETs served from the cluster's drives (%.0f), %.0f fetched from the remote",
				r.Label, 100*warm/(warm+cold), warm, cold)
		}
	}
	if err := os.MkdirAll(cfg.Report, 0o755); err != nil {
		return results, err
	}
	for _, r := range results {
		if err := r.WriteJSON(filepath.Join(cfg.Report, fileName(r.Label)+".json")); err != nil {
			return results, err
		}
	}
	if err := report.Render(results, cfg.Report); err != nil {
		return results, err
	}
	abs, _ := filepath.Abs(filepath.Join(cfg.Report, "index.html"))
	say("\nreport: %s", abs)
	return results, nil
}

func policyName(p string) string {
	if p == "s3fifo" {
		return "S3-FIFO"
	}
	return strings.ToUpper(p)
}

func fileName(label string) string {
	out := []rune{}
	for _, r := range label {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			out = append(out, r)
		default:
			out = append(out, '-')
		}
	}
	return string(out)
}

// fillRemote writes n objects of size bytes under prefix straight into the
// remote server (not through the slow link), 8 at a time.
func fillRemote(ctx context.Context, rem *remotesim.Remote, prefix string, n int, size int64) error {
	cl := s3.New(s3.Options{
		BaseEndpoint: aws.String(rem.DirectEndpoint), Region: "us-east-1", UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(rem.AccessKey, rem.SecretKey, ""),
	})
	body := make([]byte, size)
	rand.New(rand.NewSource(int64(size))).Read(body)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		next = make(chan int)
	)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				b := append([]byte(fmt.Sprintf("%08d", i)), body[8:]...) // distinct objects
				_, err := cl.PutObject(ctx, &s3.PutObjectInput{
					Bucket: aws.String(remoteBucket), Key: aws.String(fmt.Sprintf("%sobj-%05d", prefix, i)),
					Body: bytes.NewReader(b), ContentLength: aws.Int64(size),
				})
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("demo: filling the remote: %w (and %d more)", errs[0], len(errs)-1)
	}
	return nil
}

// createCacheBucket makes a cache bucket over the remote prefix with the
// admin command, as a user would.
func createCacheBucket(ctx context.Context, cl *localcluster.Cluster, rem *remotesim.Remote, name, prefix string) error {
	_, err := cl.Admin(ctx, 0, "bucket", "create", name, "--mode", "cache", "--backend", "s3",
		"--endpoint", rem.Endpoint, "--remote-bucket", remoteBucket, "--prefix", prefix,
		"--access-key", rem.AccessKey, "--secret-key", rem.SecretKey)
	return err
}
