package client_test

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/localcluster"
	"github.com/slipstream-io/slipstream/internal/testbin"
)

var binary string

// TestMain builds the slipstream binary once: the tests run a real cluster
// of node processes on loopback.
func TestMain(m *testing.M) {
	os.Unsetenv("AWS_CA_BUNDLE") // plain HTTP on loopback
	flag.Parse()
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
		os.Exit(m.Run()) // fuzzing needs no cluster
	}
	dir, err := os.MkdirTemp("", "slipstream-client-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if binary, err = testbin.Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// startCluster starts three nodes with two loopback addresses each on
// 127.60.x.y (a range no other test uses) and stops them when the test ends.
func startCluster(t *testing.T) *localcluster.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: skipping the multi-process cluster")
	}
	spec := localcluster.Spec{Binary: binary, DataDir: t.TempDir(), Nodes: 3, Addrs: 2, Net: "127.60"}
	port, err := localcluster.FreeBasePort(spec.Net, spec.Nodes, spec.Addrs)
	if err != nil {
		t.Fatal(err)
	}
	spec.BasePort = port
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := localcluster.Start(ctx, spec)
	if err != nil {
		dumpLogs(t, spec.DataDir)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpLogs(t, spec.DataDir)
		}
		c.Stop()
	})
	return c
}

func dumpLogs(t *testing.T, dir string) {
	logs, _ := filepath.Glob(filepath.Join(dir, "logs", "*.log"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		if len(b) > 8000 {
			b = b[len(b)-8000:]
		}
		t.Logf("=== %s\n%s", filepath.Base(l), b)
	}
}

// listenerBytes reads, from a node's public metrics, the bytes each of its
// listening addresses has sent.
func listenerBytes(t *testing.T, c *localcluster.Cluster, i int) map[string]float64 {
	t.Helper()
	resp, err := http.Get(c.Endpoint(i) + "/_slipstream/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	const name = `slipstream_net_server_sent_bytes_total{addr="`
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok {
			continue
		}
		addr, val, ok := strings.Cut(rest, `"} `)
		if !ok {
			t.Fatalf("metrics line %q", line)
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[addr] = v
	}
	if len(out) == 0 {
		t.Fatalf("node %d exports no per-address byte counters", i+1)
	}
	return out
}
