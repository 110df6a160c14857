// Package testbin builds the slipstream binary for tests and benchmarks
// that run real node processes, starts local clusters of them, and finds
// the tools scripts/setup.sh installs.
package testbin

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/localcluster"
)

// Build compiles cmd/slipstream of this module into dir and returns the
// binary's path.
func Build(dir string) (string, error) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	bin := filepath.Join(dir, "slipstream")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/slipstream")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building slipstream: %v: %s", err, out)
	}
	return bin, nil
}

// Tool returns the path of a tool scripts/setup.sh installs (versitygw,
// promtool): from PATH, else from $(go env GOPATH)/bin. It fails the test
// when neither has it.
func Tool(t testing.TB, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	gopath := os.Getenv("GOPATH")
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		gopath = strings.TrimSpace(string(out))
	}
	p := filepath.Join(gopath, "bin", name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s not found (PATH, %s): run scripts/setup.sh", name, p)
	}
	return p
}

// StartCluster starts spec as a local cluster of real node processes on a
// free port range, waits until it is ready, and stops it when the test
// ends. On failure the tail of every node's log goes into the test log.
func StartCluster(t testing.TB, spec localcluster.Spec) *localcluster.Cluster {
	t.Helper()
	if spec.DataDir == "" {
		spec.DataDir = t.TempDir()
	}
	if spec.Nodes == 0 {
		spec.Nodes = 3
	}
	if spec.Addrs == 0 {
		spec.Addrs = 2
	}
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
		c.Stop()
		if t.Failed() {
			dumpLogs(t, spec.DataDir)
		}
	})
	return c
}

func dumpLogs(t testing.TB, dataDir string) {
	logs, _ := filepath.Glob(filepath.Join(dataDir, "logs", "*.log"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		if len(b) > 8000 {
			b = b[len(b)-8000:]
		}
		t.Logf("--- %s (tail)\n%s", filepath.Base(l), b)
	}
}
