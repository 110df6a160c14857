// Command gen regenerates the stored sample results in ../ by running the
// loader against a real S3 server (versitygw) behind a small caching proxy
// that delays the first GET of each object (a cold read) and counts cold
// and warm hits, with a sysstat endpoint sampled once a second:
//
//	go run ./internal/report/testdata/gen -versitygw $(go env GOPATH)/bin/versitygw
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slipstream-io/slipstream/internal/loader"
	"github.com/slipstream-io/slipstream/internal/sysstat"
)

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func main() {
	bin := flag.String("versitygw", "versitygw", "versitygw binary")
	out := flag.String("o", "internal/report/testdata", "output directory")
	flag.Parse()
	dir, err := os.MkdirTemp("", "gen-s3-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	s3Addr := freeAddr()
	cmd := exec.Command(*bin, "--access", "k", "--secret", "s", "--port", s3Addr, "posix", dir)
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	for i := 0; ; i++ {
		if c, err := net.Dial("tcp", s3Addr); err == nil {
			c.Close()
			break
		}
		if i > 100 {
			log.Fatal("versitygw did not start")
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The caching proxy: GETs of objects not seen before are cold.
	target, _ := url.Parse("http://" + s3Addr)
	rp := httputil.NewSingleHostReverseProxy(target)
	var seen sync.Map
	var cold, warm atomic.Int64
	proxy := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Query().Get("list-type") == "" && strings.Count(strings.Trim(r.URL.Path, "/"), "/") >= 1 {
			if _, ok := seen.LoadOrStore(r.URL.Path, true); ok {
				warm.Add(1)
			} else {
				cold.Add(1)
				time.Sleep(30 * time.Millisecond)
			}
		}
		rp.ServeHTTP(w, r)
	})
	pAddr, sAddr := freeAddr(), freeAddr()
	go func() { log.Fatal(http.ListenAndServe(pAddr, proxy)) }()
	counters := func() map[string]float64 {
		return map[string]float64{"cold_hits": float64(cold.Load()), "warm_hits": float64(warm.Load())}
	}
	go func() { log.Fatal(http.ListenAndServe(sAddr, sysstat.Handler("node-1", []string{dir}, counters))) }()
	time.Sleep(200 * time.Millisecond)

	base := loader.Config{Endpoint: "http://" + pAddr, AccessKey: "k", SecretKey: "s", Bucket: "sample",
		CreateBucket: true, Workers: 4, Seed: 7, StatsURLs: []string{"http://" + sAddr + sysstat.Path}}
	runs := []struct {
		file string
		mod  func(*loader.Config)
	}{
		{"cold.json", func(c *loader.Config) {
			c.Label, c.Prefix, c.FillCount, c.MinSize, c.Epochs = "cold GET", "ds/", 600, 128<<10, 1
		}},
		{"warm.json", func(c *loader.Config) {
			c.Label, c.Prefix, c.MinSize, c.Duration = "warm GET", "ds/", 128<<10, 5*time.Second
		}},
		{"put4k.json", func(c *loader.Config) {
			c.Label, c.Prefix, c.PutPercent, c.MinSize, c.Duration, c.Cleanup = "PUT 4KiB", "put/", 100, 4<<10, 4*time.Second, true
		}},
	}
	var results []*loader.Result
	for _, r := range runs {
		cfg := base
		r.mod(&cfg)
		res, err := loader.Run(context.Background(), cfg)
		if err != nil {
			log.Fatal(err)
		}
		res.Params.Endpoint = "http://127.0.0.1:PORT" // no ephemeral ports in stored files
		res.Params.StatsURLs = []string{"http://127.0.0.1:PORT" + sysstat.Path}
		for i := range res.Nodes {
			res.Nodes[i].URL = res.Params.StatsURLs[0]
			for j := range res.Nodes[i].Samples {
				for k := range res.Nodes[i].Samples[j].Disks {
					res.Nodes[i].Samples[j].Disks[k].Dirs = []string{"/data/mp1"}
				}
			}
		}
		if err := res.WriteJSON(filepath.Join(*out, r.file)); err != nil {
			log.Fatal(err)
		}
		results = append(results, res)
	}
	if err := loader.PrintTable(os.Stdout, results...); err != nil {
		log.Fatal(err)
	}
	fmt.Println("cold hits", cold.Load(), "warm hits", warm.Load())
}
