// Package bench holds the benchmarks that compare Slipstream against the
// hardware limit measured in the same run. They start the real binary as a
// local cluster; set SLIPSTREAM_BENCH=1 to run them (make bench does).
package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/localcluster"
	"github.com/slipstream-io/slipstream/internal/placement"
	"github.com/slipstream-io/slipstream/internal/testbin"
)

// result of one GET run.
type result struct {
	size     int64
	ops      int64
	bytes    int64
	elapsed  time.Duration
	p50, p99 time.Duration
	errs     int64
}

func (r result) gibps() float64 { return float64(r.bytes) / r.elapsed.Seconds() / (1 << 30) }
func (r result) opsps() float64 { return float64(r.ops) / r.elapsed.Seconds() }

// runGets has workers GET random URLs for d and measures every request
// from send to last byte.
func runGets(ctx context.Context, hc *http.Client, urls []string, size int64, workers int, d time.Duration) result {
	h := hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3)
	var mu sync.Mutex
	var ops, nbytes, errs atomic.Int64
	deadline := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(w)))
			buf := make([]byte, 256<<10)
			local := hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3)
			for i := 0; i < 1_000_000 && time.Now().Before(deadline); i++ { // bounded
				u := urls[rng.Intn(len(urls))]
				t0 := time.Now()
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
				resp, err := hc.Do(req)
				if err != nil {
					errs.Add(1)
					continue
				}
				n, err := io.CopyBuffer(io.Discard, resp.Body, buf)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK || n != size {
					errs.Add(1)
					continue
				}
				_ = local.RecordValue(time.Since(t0).Microseconds())
				ops.Add(1)
				nbytes.Add(n)
			}
			mu.Lock()
			h.Merge(local)
			mu.Unlock()
		}(w)
	}
	wg.Wait()
	return result{
		size: size, ops: ops.Load(), bytes: nbytes.Load(), elapsed: time.Since(start), errs: errs.Load(),
		p50: time.Duration(h.ValueAtQuantile(50)) * time.Microsecond,
		p99: time.Duration(h.ValueAtQuantile(99)) * time.Microsecond,
	}
}

func buildBinary(t *testing.T) string {
	t.Helper()
	bin, err := testbin.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func newHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: 64, MaxIdleConns: 256, DisableCompression: true, ReadBufferSize: 256 << 10,
	}}
}

// TestWarmGetVsServeContent measures warm GETs of 10 MiB, 1 MiB and 64 KiB
// objects through the S3 API of a 3-node local cluster, and in the same run
// a plain net/http ServeContent server over the very same object files: the
// limit of an HTTP object server on this machine. It prints the ratios and
// writes them to docs/bench-core.md.
func TestWarmGetVsServeContent(t *testing.T) {
	if os.Getenv("SLIPSTREAM_BENCH") == "" {
		t.Skip("set SLIPSTREAM_BENCH=1 (make bench) to run benchmarks")
	}
	os.Unsetenv("AWS_CA_BUNDLE")
	ctx := context.Background()
	c := testbin.StartCluster(t, localcluster.Spec{Binary: buildBinary(t), Net: "127.50"})
	cl := s3.New(s3.Options{
		BaseEndpoint: aws.String(c.Endpoint(0)), Region: "us-east-1", UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(c.Spec.AccessKey, c.Spec.SecretKey, ""),
	})
	if _, err := cl.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("bench")}); err != nil {
		t.Fatal(err)
	}
	m := fetchMap(t, c.IntraURL(0))
	dur := 4 * time.Second
	if s := os.Getenv("BENCH_SECONDS"); s != "" {
		if d, err := time.ParseDuration(s + "s"); err == nil {
			dur = d
		}
	}
	sizes := []struct {
		size  int64
		count int
		label string
	}{{10 << 20, 24, "10 MiB"}, {1 << 20, 128, "1 MiB"}, {64 << 10, 512, "64 KiB"}}
	var md strings.Builder
	fmt.Fprintf(&md, "| object size | path | GiB/s | ops/s | p50 | p99 | errors | ratio to limit |\n|---|---|---|---|---|---|---|---|\n")
	for _, sz := range sizes {
		body := make([]byte, sz.size)
		rand.New(rand.NewSource(sz.size)).Read(body)
		var viaGateway, direct []string
		for i := 0; i < sz.count; i++ {
			key := fmt.Sprintf("%d/obj-%04d", sz.size, i)
			if _, err := cl.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bench"), Key: aws.String(key), Body: bytes.NewReader(body)}); err != nil {
				t.Fatal(err)
			}
			owner := placement.Order(m.NodeIDs(), placement.ObjectName("bench", key))[0]
			for _, ep := range []string{c.Endpoints()[rand.Intn(len(c.Endpoints()))], "http://" + m.Nodes[owner].PublicAddrs[i%2]} {
				pc := s3.NewPresignClient(s3.New(s3.Options{
					BaseEndpoint: aws.String(ep), Region: "us-east-1", UsePathStyle: true,
					Credentials: credentials.NewStaticCredentialsProvider(c.Spec.AccessKey, c.Spec.SecretKey, ""),
				}))
				req, err := pc.PresignGetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bench"), Key: aws.String(key)}, s3.WithPresignExpires(time.Hour))
				if err != nil {
					t.Fatal(err)
				}
				if len(viaGateway) == i {
					viaGateway = append(viaGateway, req.URL)
				} else {
					direct = append(direct, req.URL)
				}
			}
		}
		// The limit: ServeContent over the same files on disk.
		limitURLs, stop := serveFiles(t, c, sz.size)
		hc := newHTTPClient()
		runGets(ctx, hc, direct, sz.size, 8, time.Second) // warm the page cache and connections
		lim := runGets(ctx, hc, limitURLs, sz.size, 8, dur)
		dir := runGets(ctx, hc, direct, sz.size, 8, dur)
		gw := runGets(ctx, hc, viaGateway, sz.size, 8, dur)
		stop()
		for _, r := range []struct {
			name string
			r    result
		}{{"limit: http.ServeContent", lim}, {"S3 GET to the owner", dir}, {"S3 GET to any node", gw}} {
			line := fmt.Sprintf("| %s | %s | %.2f | %.0f | %v | %v | %d | %.2f |", sz.label, r.name, r.r.gibps(), r.r.opsps(),
				r.r.p50.Round(10*time.Microsecond), r.r.p99.Round(10*time.Microsecond), r.r.errs, r.r.gibps()/lim.gibps())
			fmt.Println(line)
			md.WriteString(line + "\n")
			if r.r.errs > 0 {
				t.Errorf("%s %s: %d errors", sz.label, r.name, r.r.errs)
			}
		}
	}
	_, file, _, _ := runtime.Caller(0)
	out := filepath.Join(filepath.Dir(file), "..", "..", "docs", "bench-core.md")
	text := fmt.Sprintf("<!-- written by test/bench TestWarmGetVsServeContent on %s -->\n"+
		"Warm GET, 8 concurrent clients, 3-node local cluster on loopback, %v per run, all on one %d-core machine (clients, nodes and the limit server share it).\n\n%s",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), dur, runtime.NumCPU(), md.String())
	if err := os.WriteFile(out, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func fetchMap(t *testing.T, intra string) *cluster.Map {
	t.Helper()
	resp, err := http.Get(intra + "/cluster/map")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m cluster.Map
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	return &m
}

// serveFiles serves every object file of the given size found on the
// cluster's mountpaths with http.ServeContent (sendfile) on loopback.
func serveFiles(t *testing.T, c *localcluster.Cluster, size int64) ([]string, func()) {
	t.Helper()
	var files []string
	for _, cfg := range c.Configs {
		for _, mp := range cfg.Mountpaths {
			_ = filepath.Walk(filepath.Join(mp, "obj"), func(p string, fi os.FileInfo, err error) error {
				if err == nil && fi.Mode().IsRegular() && fi.Size() == size {
					files = append(files, p)
				}
				return nil
			})
		}
	}
	sort.Strings(files)
	if len(files) == 0 {
		t.Fatalf("no object files of %d bytes found", size)
	}
	ln, err := net.Listen("tcp", "127.50.9.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var i int
		fmt.Sscanf(r.URL.Path, "/%d", &i)
		if i < 0 || i >= len(files) {
			http.NotFound(w, r)
			return
		}
		f, err := os.Open(files[i])
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		defer f.Close()
		fi, _ := f.Stat()
		http.ServeContent(w, r, "", fi.ModTime(), f)
	})}
	go srv.Serve(ln)
	urls := make([]string, len(files))
	for i := range files {
		urls[i] = fmt.Sprintf("http://%s/%d", ln.Addr(), i)
	}
	return urls, func() { srv.Close() }
}
