package multihome

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/slipstream-io/slipstream/internal/config"
	"github.com/slipstream-io/slipstream/internal/testbin"
	"github.com/slipstream-io/slipstream/testbed"
)

// Ports every storage node uses on each of its addresses.
const (
	publicPort = "9000"
	intraPort  = "9100"
	raftPort   = "9200"
	nbdPort    = "10809"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// slipstreamBinary builds cmd/slipstream once per test binary.
func slipstreamBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "slipstream-multihome-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath, buildErr = testbin.Build(dir)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// bedCluster is a testbed with one slipstream node per storage host.
type bedCluster struct {
	bed   *testbed.Bed
	dir   string
	procs []*exec.Cmd
	logs  []string
}

// options of startCluster.
type options struct {
	clients int
	rate    string
}

// startCluster builds the testbed, starts a node in every storage
// namespace (public and intra addresses on both NICs, raft on the first;
// n1 bootstraps, the others join through it) and removes everything when
// the test ends, failed or not.
func startCluster(t *testing.T, o options) *bedCluster {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: skipping the network-namespace testbed")
	}
	if err := testbed.Available(); err != nil {
		t.Skipf("network-namespace testbed not available here: %v", err)
	}
	bin := slipstreamBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bed, err := testbed.Up(ctx, testbed.Options{Nodes: 3, Clients: o.clients, Rate: o.rate})
	if err != nil {
		t.Fatal(err)
	}
	c := &bedCluster{bed: bed, dir: t.TempDir()}
	t.Cleanup(func() {
		c.stop()
		if t.Failed() {
			c.dumpLogs(t)
		}
		if err := bed.Down(context.Background()); err != nil {
			t.Error(err)
		}
	})
	seed := "http://" + net.JoinHostPort(bed.Role("storage")[0].Addrs[0], intraPort)
	for i, h := range bed.Role("storage") {
		cfg := config.Node{
			ID:         h.Name,
			DataDir:    filepath.Join(c.dir, h.Name, "state"),
			Mountpaths: []string{filepath.Join(c.dir, h.Name, "mp1")},
			Raft:       net.JoinHostPort(h.Addrs[0], raftPort),
			Bootstrap:  i == 0,
			Secret:     "multihome-secret",
			S3:         config.S3{Credentials: []config.Credential{{AccessKey: accessKey, SecretKey: secretKey}}},
		}
		for _, a := range h.Addrs {
			cfg.Public = append(cfg.Public, net.JoinHostPort(a, publicPort))
			cfg.Intra = append(cfg.Intra, net.JoinHostPort(a, intraPort))
			cfg.NBD = append(cfg.NBD, net.JoinHostPort(a, nbdPort))
		}
		if i > 0 {
			cfg.Seeds = []string{seed}
		}
		cfg.SetDefaults()
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		b, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(c.dir, h.Name+".yaml")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		logPath := filepath.Join(c.dir, h.Name+".log")
		logf, err := os.Create(logPath)
		if err != nil {
			t.Fatal(err)
		}
		// `ip netns exec` execs the binary in place: the PID is the node's.
		cmd := exec.Command("ip", "netns", "exec", h.Netns, bin, "node", "--config", path)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			logf.Close()
			t.Fatal(err)
		}
		logf.Close()
		c.procs = append(c.procs, cmd)
		c.logs = append(c.logs, logPath)
		if i == 0 { // the others join through n1
			if err := bed.WaitTCP(ctx, h, net.JoinHostPort(h.Addrs[0], intraPort), 30*time.Second); err != nil {
				t.Fatal(err)
			}
		}
	}
	return c
}

// stop terminates the node processes by PID (SIGTERM, SIGKILL after 10s).
func (c *bedCluster) stop() {
	var wg sync.WaitGroup
	for _, cmd := range c.procs {
		wg.Add(1)
		go func(cmd *exec.Cmd) {
			defer wg.Done()
			_ = cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		}(cmd)
	}
	wg.Wait()
	c.procs = nil
}

func (c *bedCluster) dumpLogs(t *testing.T) {
	for _, l := range c.logs {
		b, _ := os.ReadFile(l)
		if len(b) > 6000 {
			b = b[len(b)-6000:]
		}
		t.Logf("=== %s\n%s", filepath.Base(l), b)
	}
}

// seeds are the intra base URLs of every storage host's addresses.
func (c *bedCluster) seeds() string {
	var out []string
	for _, h := range c.bed.Role("storage") {
		for _, a := range h.Addrs {
			out = append(out, "http://"+net.JoinHostPort(a, intraPort))
		}
	}
	return strings.Join(out, ",")
}

// helper is a re-executed test binary inside a client namespace.
type helper struct {
	cmd *exec.Cmd
	out *bufio.Scanner
}

// startHelper runs TestHelper in host's namespace with the given role and
// MH_* settings; it is stopped by PID when the test ends.
func (c *bedCluster) startHelper(t *testing.T, host testbed.Host, role string, local []string, env ...string) *helper {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", host.Netns, self, "-test.run=^TestHelper$", "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), roleEnv+"="+role, "MH_SEEDS="+c.seeds(), "MH_NODES=3",
		"MH_LOCAL="+strings.Join(local, ","))
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{cmd: cmd, out: bufio.NewScanner(stdout)}
	h.out.Buffer(make([]byte, 4<<20), 4<<20)
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return h
}

// expect reads stdout lines until one starts with prefix and returns it.
func (h *helper) expect(t *testing.T, prefix string) string {
	t.Helper()
	var other []string // a failing helper's messages
	for h.out.Scan() {
		line := h.out.Text()
		if strings.HasPrefix(line, prefix) {
			return line
		}
		if len(other) < 50 {
			other = append(other, line)
		}
	}
	_ = h.cmd.Wait()
	t.Fatalf("helper ended without a %q line: %v (%v):\n%s", prefix, h.out.Err(), h.cmd.ProcessState, strings.Join(other, "\n"))
	return ""
}

// result reads the helper's JSON line into v and waits for it to exit.
func (h *helper) result(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(h.expect(t, "{")), v); err != nil {
		t.Fatal(err)
	}
	for h.out.Scan() { // drain
	}
	if err := h.cmd.Wait(); err != nil {
		t.Fatalf("helper: %v", err)
	}
}

// fill creates n objects of size bytes from the first client host.
func (c *bedCluster) fill(t *testing.T, n, size int) fillResult {
	t.Helper()
	cl := c.bed.Role("client")[0]
	h := c.startHelper(t, cl, "fill", cl.Addrs, fmt.Sprintf("MH_OBJECTS=%d", n), fmt.Sprintf("MH_SIZE=%d", size))
	var res fillResult
	h.result(t, &res)
	return res
}

// load runs a GET load from each client host (all at once) over its first
// nics NICs (with one, only to the nodes' addresses on that NIC's subnet)
// and returns their results; at, if not nil, is called when every load has started.
func (c *bedCluster) load(t *testing.T, clients []testbed.Host, nics int, keys []string, only string, workers, secs int, at func(time.Time)) []loadResult {
	t.Helper()
	var hs []*helper
	for _, cl := range clients {
		same := "0"
		if nics == 1 {
			same = "1"
		}
		hs = append(hs, c.startHelper(t, cl, "load", cl.Addrs[:nics],
			"MH_KEYS="+strings.Join(keys, ","), "MH_ONLY="+only, "MH_SAME_SUBNET="+same,
			fmt.Sprintf("MH_WORKERS=%d", workers), fmt.Sprintf("MH_SECONDS=%d", secs)))
	}
	for _, h := range hs {
		h.expect(t, "started")
	}
	if at != nil {
		at(time.Now())
	}
	out := make([]loadResult, len(hs))
	for i, h := range hs {
		h.result(t, &out[i])
	}
	return out
}

// counters snapshots the per-NIC byte counters of every host.
func (c *bedCluster) counters(t *testing.T) map[string]map[string]testbed.Counters {
	t.Helper()
	out := map[string]map[string]testbed.Counters{}
	for _, h := range c.bed.Hosts {
		m, err := c.bed.Counters(context.Background(), h)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = m
	}
	return out
}

func mbit(bytes int64, secs float64) float64 { return float64(bytes) * 8 / secs / 1e6 }

// rate returns the mean Mbit/s of a per-tick series over the ticks that
// end in (from, to] seconds.
func rate(series []int64, tickMS int, from, to float64) float64 {
	tick := float64(tickMS) / 1000
	var sum int64
	n := 0
	for i, b := range series {
		if at := float64(i+1) * tick; at > from && at <= to {
			sum += b
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return mbit(sum, float64(n)*tick)
}
