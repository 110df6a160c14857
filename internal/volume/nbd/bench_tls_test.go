package nbd_test

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/volume/nbd"
)

// TestBenchTLS measures what NBD over TLS costs: the same real client
// against the same in-memory export, served by one server in plain TCP and
// by one that requires TLS, runs interleaved (3 rounds, median shown):
// nbdcopy reading the whole export with 4 connections (throughput), and
// with 4 KiB requests, 32 in flight, on one connection (requests per
// second; qemu-img bench cannot take TLS credentials). It runs with
// SLIPSTREAM_BENCH set (make bench) and writes its table to BENCH_OUT if
// set.
func TestBenchTLS(t *testing.T) {
	if os.Getenv("SLIPSTREAM_BENCH") == "" {
		t.Skip("set SLIPSTREAM_BENCH=1 (make bench) to run the TLS benchmark")
	}
	needTool(t, "nbdcopy")
	needTool(t, "qemu-img")
	const size = 512 << 20
	mem := newMem(size)
	rand.Read(mem.b)
	dir := tlsDir(t)
	plain := serveTCP(t, nbd.Map{"m": mem})
	secure, _ := serveTLS(t, dir, nbd.Map{"m": mem})

	// copyRun reads the whole export with nbdcopy into null: and returns
	// MiB/s; small makes it 4 KiB requests, 32 in flight, on one connection.
	copyRun := func(uri string, small bool) float64 {
		args := []string{"--connections=4", "--no-extents"}
		if small {
			args = []string{"--connections=1", "--threads=1", "--request-size=4096", "--requests=32", "--no-extents"}
		}
		start := time.Now()
		run(t, "nbdcopy", append(args, uri, "null:")...)
		return float64(size) / (1 << 20) / time.Since(start).Seconds()
	}
	uris := []string{"nbd://" + plain + "/m", "nbds://" + secure + "/m?tls-certificates=" + dir}
	var big, small [2][]float64 // [plain, TLS]
	for round := 0; round < 3; round++ {
		for i, u := range uris {
			big[i] = append(big[i], copyRun(u, false))
			small[i] = append(small[i], copyRun(u, true))
		}
	}
	median := func(v []float64) float64 {
		s := slices.Clone(v)
		slices.Sort(s)
		return s[len(s)/2]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "<!-- written by internal/volume/nbd TestBenchTLS on %s -->\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	b.WriteString("One in-memory export of 512 MiB served by our NBD server twice on loopback, plain and with TLS required (TLS 1.3, ECDSA P-256 certificates from `slipstream volume certs`, client certificate verified); the clients run on the same 2 cores. 3 rounds interleaved, median shown.\n\n")
	b.WriteString("| client | workload | plain | TLS | TLS / plain |\n|---|---|---:|---:|---:|\n")
	fmt.Fprintf(&b, "| nbdcopy, 4 connections, its default requests | read the whole export | %.0f MiB/s | %.0f MiB/s | **%.2f** |\n", median(big[0]), median(big[1]), median(big[1])/median(big[0]))
	fmt.Fprintf(&b, "| nbdcopy, 1 connection, 4 KiB requests, 32 in flight | read the whole export | %.0f req/s | %.0f req/s | **%.2f** |\n", median(small[0])*256, median(small[1])*256, median(small[1])/median(small[0]))
	t.Log("\n" + b.String())
	if out := os.Getenv("BENCH_OUT"); out != "" {
		if err := os.WriteFile(filepath.Clean(out), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
