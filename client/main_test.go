package client_test

import (
	"bufio"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

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
	return testbin.StartCluster(t, localcluster.Spec{Binary: binary, Nodes: 3, Addrs: 2, Net: "127.60"})
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
