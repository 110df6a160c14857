// Package localcluster starts a Slipstream cluster on this machine: one
// process per node (the slipstream binary's `node` subcommand), each with
// several mountpath directories and several loopback addresses, all data
// under one directory. It is the embedded default behind `slipstream up`
// and `slipstream demo`, and the harness of the end-to-end tests, which
// kill and restart nodes through it.
package localcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/config"
	"github.com/slipstream-io/slipstream/internal/peer"
	"github.com/slipstream-io/slipstream/internal/seclink"
)

// ErrNotReady is returned when the cluster does not become ready in time.
var ErrNotReady = errors.New("localcluster: cluster not ready")

// ErrPortInUse is returned by Start when an address a node would listen on
// is taken (by another cluster, say): nothing is started.
var ErrPortInUse = errors.New("localcluster: address already in use")

// ErrNodeExited is returned when a node process exits while the cluster
// starts or while WaitReady waits for it.
var ErrNodeExited = errors.New("localcluster: node exited")

// ErrNotOurs is returned by Start when a node address answers but not as
// the node this cluster started (another cluster answers there).
var ErrNotOurs = errors.New("localcluster: another node answers")

// Spec describes the cluster to start.
type Spec struct {
	Binary  string // path of the slipstream binary
	DataDir string // everything goes under here
	Nodes   int    // default 3
	// Initial is the number of nodes Start starts (the first ones; default
	// all): StartNode adds the others later, as nodes joining the cluster.
	Initial    int
	Mountpaths int // per node, default 2
	Addrs      int // loopback addresses per node, default 2
	// BasePort: node i listens on BasePort (S3), BasePort+100 (intra) on
	// each of its addresses, BasePort+200 (raft) and BasePort+300 (NBD) on
	// its first. Default 9000.
	BasePort int
	// Net is the first two octets of the loopback addresses, default "127.0";
	// node i's address k is <Net>.<k+1>.<i+1>.
	Net       string
	AccessKey string // default "slipstream"
	SecretKey string // default "slipstream-secret"
	Copies    int    // default copies of buckets created through S3
	MaxBytes  int64  // per mountpath, 0 = unlimited
	LogDir    string // node logs; default DataDir/logs
	// IntraTLS sets intra_tls on every node (see config.Node.IntraTLS).
	IntraTLS    bool
	ExtraConfig func(i int, n *config.Node)
}

func (s *Spec) defaults() {
	if s.Nodes == 0 {
		s.Nodes = 3
	}
	if s.Initial == 0 || s.Initial > s.Nodes {
		s.Initial = s.Nodes
	}
	if s.Mountpaths == 0 {
		s.Mountpaths = 2
	}
	if s.Addrs == 0 {
		s.Addrs = 2
	}
	if s.BasePort == 0 {
		s.BasePort = 9000
	}
	if s.Net == "" {
		s.Net = "127.0"
	}
	if s.AccessKey == "" {
		s.AccessKey = "slipstream"
	}
	if s.SecretKey == "" {
		s.SecretKey = "slipstream-secret"
	}
	if s.Copies == 0 {
		s.Copies = 1
	}
	if s.LogDir == "" {
		s.LogDir = filepath.Join(s.DataDir, "logs")
	}
}

// Cluster is a running local cluster.
type Cluster struct {
	Spec    Spec
	Configs []config.Node
	hc      atomic.Pointer[http.Client] // to the nodes' intra addresses
	mu      sync.Mutex
	procs   []*exec.Cmd
	exited  []chan struct{}
}

// Start writes one config per node and starts every node process. It waits
// until every node answers its health check and the cluster map lists all
// of them up.
func Start(ctx context.Context, spec Spec) (*Cluster, error) {
	spec.defaults()
	if spec.Binary == "" || spec.DataDir == "" {
		return nil, fmt.Errorf("localcluster: Binary and DataDir are required")
	}
	c := &Cluster{Spec: spec}
	c.hc.Store(intraClient(spec.IntraTLS, false))
	if err := os.MkdirAll(spec.LogDir, 0o755); err != nil {
		return nil, err
	}
	for i := 0; i < spec.Nodes; i++ {
		cfg := c.nodeConfig(i)
		c.Configs = append(c.Configs, cfg)
		b, err := yaml.Marshal(cfg)
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(c.configPath(i), b, 0o600); err != nil {
			return nil, err
		}
	}
	c.procs = make([]*exec.Cmd, spec.Nodes)
	c.exited = make([]chan struct{}, spec.Nodes)
	// A node that cannot listen exits at once, but the health checks below
	// would reach whatever else listens there: refuse to start over a
	// running cluster.
	if err := c.checkAddrsFree(); err != nil {
		return nil, err
	}
	// The first node bootstraps; the others join through it.
	for i := 0; i < spec.Initial; i++ {
		if err := c.StartNode(i); err != nil {
			c.Stop()
			return nil, err
		}
		if i == 0 {
			if err := c.waitHealthy(ctx, 0); err != nil {
				c.Stop()
				return nil, err
			}
		}
	}
	if err := c.WaitReady(ctx, spec.Initial); err != nil {
		c.Stop()
		return nil, err
	}
	// The nodes that answered must be the processes started here, still
	// running.
	for i := 0; i < spec.Initial; i++ {
		if err := c.exitErr(i); err != nil {
			c.Stop()
			return nil, err
		}
		if err := c.checkOwn(ctx, i); err != nil {
			c.Stop()
			return nil, err
		}
	}
	return c, nil
}

// listenAddrs lists every address node i listens on, with what for.
func (c *Cluster) listenAddrs(i int) [][2]string {
	cfg := c.Configs[i]
	var out [][2]string
	for _, a := range cfg.Public {
		out = append(out, [2]string{a, "S3"})
	}
	for _, a := range cfg.Intra {
		out = append(out, [2]string{a, "intra-cluster"})
	}
	if cfg.Raft != "" {
		out = append(out, [2]string{cfg.Raft, "raft"})
	}
	for _, a := range cfg.NBD {
		out = append(out, [2]string{a, "NBD"})
	}
	return out
}

// checkAddrsFree reports the first address a node would listen on that is
// taken.
func (c *Cluster) checkAddrsFree() error {
	for i := range c.Configs {
		for _, a := range c.listenAddrs(i) {
			ln, err := net.Listen("tcp", a[0])
			if errors.Is(err, syscall.EADDRINUSE) {
				return fmt.Errorf("%w: %s (node%d's %s address)", ErrPortInUse, a[0], i+1, a[1])
			}
			if err != nil {
				return fmt.Errorf("localcluster: cannot listen on %s (node%d's %s address): %w", a[0], i+1, a[1], err)
			}
			ln.Close()
		}
	}
	return nil
}

// exitErr returns an ErrNodeExited error if node i was started and its
// process has exited since, nil otherwise.
func (c *Cluster) exitErr(i int) error {
	c.mu.Lock()
	cmd, done := c.procs[i], c.exited[i]
	c.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-done:
	default:
		return nil
	}
	msg := logTail(c.logPath(i))
	if msg == "" {
		msg = "no output"
	}
	return fmt.Errorf("%w: node%d (%s): %s (log: %s)", ErrNodeExited, i+1, cmd.ProcessState, msg, c.logPath(i))
}

// logTail returns the last line of a node log, trimmed.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// checkOwn checks that node i's intra-cluster address is served by the
// node this cluster configured (its ID and its mountpaths), not by another
// cluster's node on the same address.
func (c *Cluster) checkOwn(ctx context.Context, i int) error {
	cfg := c.Configs[i]
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.IntraURL(i)+"/admin/v1/status", nil)
	if err != nil {
		return err
	}
	req.Header.Set(peer.SecretHeader, cfg.Secret)
	resp, err := c.IntraClient().Do(req)
	if err != nil {
		return fmt.Errorf("%w: node%d at %s: %v (log: %s)", ErrNotOurs, i+1, c.IntraURL(i), err, c.logPath(i))
	}
	defer resp.Body.Close()
	var st struct {
		Node       string
		Mountpaths []struct{ Path string }
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: node%d at %s answers %s to this cluster's secret (log: %s)", ErrNotOurs, i+1, c.IntraURL(i), resp.Status, c.logPath(i))
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&st); err != nil {
		return fmt.Errorf("%w: node%d at %s: %v", ErrNotOurs, i+1, c.IntraURL(i), err)
	}
	want := map[string]bool{}
	for _, p := range cfg.Mountpaths {
		want[absPath(p)] = true
	}
	for _, mp := range st.Mountpaths {
		if st.Node == cfg.ID && want[absPath(mp.Path)] {
			return nil
		}
	}
	var paths []string
	for _, mp := range st.Mountpaths {
		paths = append(paths, mp.Path)
	}
	return fmt.Errorf("%w: %s answers as %s with mountpaths %v, not as this cluster's node%d under %s (log: %s)",
		ErrNotOurs, c.IntraURL(i), st.Node, paths, i+1, c.Spec.DataDir, c.logPath(i))
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return filepath.Clean(p)
}

// localSecret is the cluster secret of every local cluster (the admin
// CLI's default).
const localSecret = "local-cluster-secret"

// intraClient is an HTTP client for intra addresses: plain, over secure
// links, or over secure links where the node has them (migrating).
func intraClient(secure, migrating bool) *http.Client {
	if !secure {
		return &http.Client{}
	}
	link, err := seclink.New(localSecret, "intra")
	if err != nil { // the secret is a constant: not reached
		panic(err)
	}
	dial := (&net.Dialer{Timeout: 3 * time.Second}).DialContext
	if migrating {
		return &http.Client{Transport: &http.Transport{Proxy: nil, DialContext: link.MigratingDialer(dial)}}
	}
	return &http.Client{Transport: &http.Transport{Proxy: nil, DialContext: link.Dialer(dial)}}
}

// Reconfigure changes the configuration of node i, which must be stopped,
// for its next StartNode (a rolling change of the cluster, say). Once any
// node runs intra_tls, the cluster's own requests use secure links where a
// node accepts them.
func (c *Cluster) Reconfigure(i int, edit func(n *config.Node)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.procs[i] != nil {
		return fmt.Errorf("localcluster: node %d is running", i+1)
	}
	cfg := c.Configs[i]
	edit(&cfg)
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("localcluster: node %d: %w", i+1, err)
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	if err := os.WriteFile(c.configPath(i), b, 0o600); err != nil {
		return err
	}
	c.Configs[i] = cfg
	for _, n := range c.Configs {
		if n.IntraTLS {
			c.hc.Store(intraClient(true, true))
			break
		}
	}
	return nil
}

// IntraClient is an HTTP client for the nodes' intra-cluster addresses
// (over the secure link when the cluster runs intra_tls); requests still
// need the secret header where the endpoint asks for it.
func (c *Cluster) IntraClient() *http.Client {
	if hc := c.hc.Load(); hc != nil {
		return hc
	}
	return http.DefaultClient
}

// Admin runs `slipstream admin ARGS` of the cluster's binary against node
// i, as an operator would, and returns its combined output.
func (c *Cluster) Admin(ctx context.Context, i int, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, c.Spec.Binary, append([]string{"admin"}, args...)...)
	cmd.Env = append(os.Environ(), "SLIPSTREAM_NODE="+c.IntraURL(i), "SLIPSTREAM_SECRET="+localSecret)
	if c.Configs[i].IntraTLS {
		cmd.Env = append(cmd.Env, "SLIPSTREAM_INTRA_TLS=1")
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("localcluster: slipstream admin %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return out, nil
}

func (c *Cluster) addr(i, k, port int) string {
	return fmt.Sprintf("%s.%d.%d:%d", c.Spec.Net, k+1, i+1, port)
}

func (c *Cluster) nodeConfig(i int) config.Node {
	s := c.Spec
	dir := filepath.Join(s.DataDir, fmt.Sprintf("node%d", i+1))
	n := config.Node{
		ID:            fmt.Sprintf("node%d", i+1),
		DataDir:       filepath.Join(dir, "state"),
		Raft:          c.addr(i, 0, s.BasePort+200),
		NBD:           []string{c.addr(i, 0, s.BasePort+300)},
		NBDSocket:     filepath.Join(dir, "nbd.sock"),
		Bootstrap:     i == 0,
		Secret:        localSecret,
		IntraTLS:      s.IntraTLS,
		DefaultCopies: s.Copies,
		S3:            config.S3{Credentials: []config.Credential{{AccessKey: s.AccessKey, SecretKey: s.SecretKey}}},
	}
	n.Space.MaxBytes = s.MaxBytes
	for m := 0; m < s.Mountpaths; m++ {
		n.Mountpaths = append(n.Mountpaths, filepath.Join(dir, fmt.Sprintf("mp%d", m+1)))
	}
	for k := 0; k < s.Addrs; k++ {
		n.Public = append(n.Public, c.addr(i, k, s.BasePort))
		n.Intra = append(n.Intra, c.addr(i, k, s.BasePort+100))
	}
	if i > 0 {
		n.Seeds = []string{"http://" + c.addr(0, 0, s.BasePort+100)}
	}
	n.SetDefaults()
	if s.ExtraConfig != nil {
		s.ExtraConfig(i, &n)
	}
	return n
}

func (c *Cluster) configPath(i int) string {
	return filepath.Join(c.Spec.DataDir, fmt.Sprintf("node%d.yaml", i+1))
}

// Endpoint is the S3 endpoint of node i's first public address.
func (c *Cluster) Endpoint(i int) string { return "http://" + c.Configs[i].Public[0] }

// Endpoints lists every public address of every node as URLs.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, cfg := range c.Configs {
		for _, a := range cfg.Public {
			out = append(out, "http://"+a)
		}
	}
	return out
}

// IntraURL is node i's first intra-cluster base URL.
func (c *Cluster) IntraURL(i int) string { return "http://" + c.Configs[i].Intra[0] }

// StartNode starts (or restarts) node i's process. Its output is appended
// to LogDir/nodeN.log.
func (c *Cluster) StartNode(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.procs[i] != nil {
		return fmt.Errorf("localcluster: node %d is running", i+1)
	}
	logf, err := os.OpenFile(filepath.Join(c.Spec.LogDir, fmt.Sprintf("node%d.log", i+1)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.Spec.Binary, "node", "--config", c.configPath(i))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("localcluster: starting node %d: %w", i+1, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	c.procs[i], c.exited[i] = cmd, done
	return nil
}

// Kill sends SIGKILL to node i and waits for it to exit.
func (c *Cluster) Kill(i int) { _ = c.signal(i, syscall.SIGKILL, 0) }

// StopNode sends SIGTERM to node i and waits (up to 20 s, then SIGKILL).
// It reports whether the node stopped cleanly: nil if it exited by itself
// with status 0, else how it ended.
func (c *Cluster) StopNode(i int) error { return c.signal(i, syscall.SIGTERM, 20*time.Second) }

func (c *Cluster) signal(i int, sig syscall.Signal, grace time.Duration) error {
	c.mu.Lock()
	cmd, done := c.procs[i], c.exited[i]
	c.procs[i] = nil
	c.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(sig)
	if grace > 0 {
		select {
		case <-done:
			if code := cmd.ProcessState.ExitCode(); code != 0 {
				return fmt.Errorf("localcluster: node %d exited with %s", i+1, cmd.ProcessState)
			}
			return nil
		case <-time.After(grace):
			_ = cmd.Process.Kill()
			<-done
			return fmt.Errorf("localcluster: node %d did not stop within %s of %s; killed", i+1, grace, sig)
		}
	}
	<-done
	return nil
}

// PID returns node i's process ID, 0 if it is not running.
func (c *Cluster) PID(i int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.procs[i] == nil {
		return 0
	}
	return c.procs[i].Process.Pid
}

// Stop stops every node (SIGTERM, then SIGKILL after a grace period).
func (c *Cluster) Stop() {
	var wg sync.WaitGroup
	for i := range c.procs {
		wg.Add(1)
		go func(i int) { defer wg.Done(); _ = c.StopNode(i) }(i)
	}
	wg.Wait()
}

func (c *Cluster) waitHealthy(ctx context.Context, i int) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	url := c.IntraURL(i) + "/health"
	for {
		if err := c.exitErr(i); err != nil {
			return err
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := c.IntraClient().Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: node %d not healthy: %v (see %s)", ErrNotReady, i+1, err, c.logPath(i))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Cluster) logPath(i int) string {
	return filepath.Join(c.Spec.LogDir, fmt.Sprintf("node%d.log", i+1))
}

// WaitReady waits until every running node answers its health check, the
// cluster map seen by every running node lists want nodes up (a node
// restarted quickly can still be up in the map before it listens again; a
// node that just restarted serves an empty map until the leader reaches it
// and it applies the latest entries) and as many voters as the nodes ask
// for, up to want (new members join as non-voters and are promoted by the
// leader moments later), and every running node names the leader.
func (c *Cluster) WaitReady(ctx context.Context, want int) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	for i := range c.Configs {
		if c.PID(i) != 0 {
			if err := c.waitHealthy(ctx, i); err != nil {
				return err
			}
		}
	}
	var last string
	for {
		for i := range c.Configs {
			if err := c.exitErr(i); err != nil {
				return err
			}
		}
		last = ""
		for i := range c.Configs {
			if c.PID(i) == 0 {
				continue
			}
			up, voters, err := c.upCount(ctx, i)
			if err != nil || up < want || voters < min(want, c.Configs[i].Voters) {
				last = fmt.Sprintf("node%d sees %d up, %d voters (%v)", i+1, up, voters, err)
				break
			}
		}
		if last == "" {
			if lost := c.leaderless(ctx); lost >= 0 {
				last = fmt.Sprintf("node%d names no leader yet", lost+1)
			}
		}
		if last == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %s", ErrNotReady, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// leaderless returns the first running node that names no raft leader in
// its cluster health, or -1.
func (c *Cluster) leaderless(ctx context.Context) int {
	for i := range c.Configs {
		if c.PID(i) == 0 {
			continue
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.IntraURL(i)+cluster.PathHealth, nil)
		resp, err := c.IntraClient().Do(req)
		if err != nil {
			return i
		}
		var h cluster.Health
		err = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&h)
		resp.Body.Close()
		if err != nil || h.Leader == "" {
			return i
		}
	}
	return -1
}

// upCount returns how many nodes are up and how many are voters in node
// i's map.
func (c *Cluster) upCount(ctx context.Context, i int) (up, voters int, err error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.IntraURL(i)+"/cluster/map", nil)
	resp, err := c.IntraClient().Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	var m cluster.Map
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&m); err != nil {
		return 0, 0, err
	}
	for _, n := range m.Nodes {
		if n.Voter {
			voters++
		}
	}
	return len(m.UpNodeIDs()), voters, nil
}

// FreeBasePort finds a base port such that every port the cluster needs is
// free on the given loopback net (for tests that run in parallel).
func FreeBasePort(netPrefix string, nodes, addrs int) (int, error) {
	for try := 0; try < 50; try++ {
		ln, err := net.Listen("tcp", netPrefix+".1.1:0")
		if err != nil {
			return 0, err
		}
		base := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if base > 65535-400 {
			continue
		}
		if portsFree(netPrefix, base, nodes, addrs) {
			return base, nil
		}
	}
	return 0, errors.New("localcluster: no free port range found")
}

func portsFree(netPrefix string, base, nodes, addrs int) bool {
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for i := 0; i < nodes; i++ {
		for k := 0; k < addrs; k++ {
			for _, off := range []int{0, 100, 200, 300} {
				ln, err := net.Listen("tcp", fmt.Sprintf("%s.%d.%d:%d", netPrefix, k+1, i+1, base+off))
				if err != nil {
					return false
				}
				lns = append(lns, ln)
			}
		}
	}
	return true
}
