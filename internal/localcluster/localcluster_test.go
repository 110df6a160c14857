package localcluster

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/config"
)

// fakeBinary writes a script that stands in for the slipstream binary.
func fakeBinary(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "slipstream")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// Start over a taken address (another cluster on the same ports) fails
// before starting anything, naming the address.
func TestStartRefusesTakenAddress(t *testing.T) {
	base, err := FreeBasePort("127.0", 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.1.1:"+strconv.Itoa(base+100))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	marker := filepath.Join(t.TempDir(), "ran")
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Start(ctx, Spec{Binary: fakeBinary(t, "touch "+marker+"; sleep 30"), DataDir: dir, Nodes: 1, Addrs: 1, BasePort: base})
	if c != nil {
		c.Stop()
	}
	if !errors.Is(err, ErrPortInUse) || !strings.Contains(err.Error(), ln.Addr().String()) {
		t.Fatalf("Start = %v, want ErrPortInUse naming %s", err, ln.Addr())
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("a node process was started although its address is taken")
	}
}

// A node process that exits while the cluster starts fails Start at once
// with its last log line and the log's path, instead of waiting for (or
// being fooled by) whatever answers on its address.
func TestStartFailsWhenNodeExits(t *testing.T) {
	base, err := FreeBasePort("127.0", 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	bin := fakeBinary(t, `echo "slipstream node: listen tcp 127.0.1.1:9100: bind: address already in use" >&2; exit 1`)
	c, err := Start(ctx, Spec{Binary: bin, DataDir: dir, Nodes: 1, Addrs: 1, BasePort: base})
	if c != nil {
		c.Stop()
	}
	if !errors.Is(err, ErrNodeExited) {
		t.Fatalf("Start = %v, want ErrNodeExited", err)
	}
	for _, want := range []string{"address already in use", filepath.Join(dir, "logs", "node1.log")} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Start took %s to notice the exit", d)
	}
}

// checkOwn tells this cluster's node from another one answering on its
// address.
func TestCheckOwn(t *testing.T) {
	var answer struct {
		Node       string
		Mountpaths []struct{ Path string }
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Slipstream-Secret") != "s" {
			http.Error(w, "cluster secret required", http.StatusForbidden)
			return
		}
		_ = json.NewEncoder(w).Encode(answer)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	c := &Cluster{Spec: Spec{DataDir: "/data/A", LogDir: "/data/A/logs"}, Configs: []config.Node{{
		ID: "node1", Secret: "s", Intra: []string{addr}, Mountpaths: []string{"/data/A/node1/mp1", "/data/A/node1/mp2"},
	}}}
	answer.Node = "node1"
	answer.Mountpaths = []struct{ Path string }{{"/data/B/node1/mp1"}, {"/data/B/node1/mp2"}}
	if err := c.checkOwn(context.Background(), 0); !errors.Is(err, ErrNotOurs) {
		t.Errorf("another cluster's node1: %v, want ErrNotOurs", err)
	}
	answer.Mountpaths = []struct{ Path string }{{"/data/A/node1/mp1"}, {"/data/A/node1/mp2"}}
	if err := c.checkOwn(context.Background(), 0); err != nil {
		t.Errorf("own node: %v", err)
	}
	c.Configs[0].Secret = "other"
	if err := c.checkOwn(context.Background(), 0); !errors.Is(err, ErrNotOurs) {
		t.Errorf("node refusing the secret: %v, want ErrNotOurs", err)
	}
}
