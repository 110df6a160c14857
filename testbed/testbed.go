// Package testbed builds and removes, from Go, the network-namespace
// testbed that up.sh and down.sh describe (the scripts are embedded, so the
// package works from any directory): storage, client and backend hosts as
// namespaces with two shaped veth NICs on two bridges. It needs root and
// iproute2; Available says whether this machine can run it.
package testbed

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

//go:embed up.sh down.sh
var scripts embed.FS

// ErrUnavailable is returned by Available (wrapped with the reason) when
// the testbed cannot be built here.
var ErrUnavailable = errors.New("testbed: unavailable")

// Options size and shape a testbed. Zero values take up.sh's defaults
// (2 storage hosts, 1 client, 1gbit per NIC); Prefix defaults to a new
// random one.
type Options struct {
	Prefix      string
	Nodes       int
	Clients     int
	Rate        string // per NIC, tc syntax ("1gbit"); "0" = unshaped
	Burst       string // tbf burst ("256kb")
	Latency     string // tbf latency ("20ms")
	BackendRate string // non-empty: add the backend host "be" at this rate
}

// NIC is one interface of a host.
type NIC struct {
	Dev       string `json:"dev"`        // name inside the host's namespace (eth1, eth2)
	Addr      string `json:"addr"`       // its IPv4 address
	Subnet    string `json:"subnet"`     // 10.77.K.0/24
	Bridge    string `json:"bridge"`     // bridge in the switch namespace
	SwitchDev string `json:"switch_dev"` // the veth peer in the switch namespace
	Rate      string `json:"rate"`
}

// Host is one namespace.
type Host struct {
	Name  string   `json:"name"` // n1.., c1.., be
	Role  string   `json:"role"` // storage, client, backend
	Netns string   `json:"netns"`
	Addrs []string `json:"addrs"`
	NICs  []NIC    `json:"nics"`
}

// Bed is a running testbed.
type Bed struct {
	Prefix  string   `json:"prefix"`
	Switch  string   `json:"switch"`
	Rate    string   `json:"rate"`
	Subnets []string `json:"subnets"`
	Hosts   []Host   `json:"hosts"`

	dir string // the scripts
}

// Available reports (with ErrUnavailable) why the testbed cannot be built
// here: not root, or no working `ip netns`/`tc`.
func Available() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: needs root (running as uid %d)", ErrUnavailable, os.Geteuid())
	}
	for _, tool := range []string{"ip", "tc", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%w: %s not found (install iproute2)", ErrUnavailable, tool)
		}
	}
	if out, err := exec.Command("ip", "netns", "list").CombinedOutput(); err != nil {
		return fmt.Errorf("%w: ip netns list: %v: %s", ErrUnavailable, err, out)
	}
	return nil
}

// NewPrefix returns a fresh random prefix for namespace names.
func NewPrefix() string {
	b := make([]byte, 4)
	rand.Read(b)
	return "sstb" + hex.EncodeToString(b)
}

// Up builds a testbed. On failure nothing of it is left behind.
func Up(ctx context.Context, o Options) (*Bed, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	if o.Prefix == "" {
		o.Prefix = NewPrefix()
	}
	dir, err := os.MkdirTemp("", "testbed-")
	if err != nil {
		return nil, err
	}
	for _, name := range []string{"up.sh", "down.sh"} {
		b, err := scripts.ReadFile(name)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name), b, 0o755)
		}
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	b := &Bed{Prefix: o.Prefix, dir: dir}
	args := []string{filepath.Join(dir, "up.sh"), "--prefix", o.Prefix, "--json", filepath.Join(dir, "bed.json")}
	add := func(flag, v string) {
		if v != "" {
			args = append(args, flag, v)
		}
	}
	if o.Nodes > 0 {
		add("--nodes", strconv.Itoa(o.Nodes))
	}
	if o.Clients > 0 {
		add("--clients", strconv.Itoa(o.Clients))
	}
	add("--rate", o.Rate)
	add("--burst", o.Burst)
	add("--latency", o.Latency)
	add("--backend-rate", o.BackendRate)
	cmd := exec.CommandContext(ctx, "bash", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		b.Down(context.Background())
		return nil, fmt.Errorf("testbed: up.sh: %v: %s", err, stderr.Bytes())
	}
	js, err := os.ReadFile(filepath.Join(dir, "bed.json"))
	if err == nil {
		err = json.Unmarshal(js, b)
	}
	if err != nil {
		b.Down(context.Background())
		return nil, fmt.Errorf("testbed: description: %w", err)
	}
	return b, nil
}

// Down removes every namespace of the testbed (and stops what still runs
// in them). It is safe to call more than once.
func (b *Bed) Down(ctx context.Context) error {
	if b.dir == "" {
		return nil
	}
	out, err := exec.CommandContext(ctx, "bash", filepath.Join(b.dir, "down.sh"), b.Prefix).CombinedOutput()
	if err != nil {
		return fmt.Errorf("testbed: down.sh: %v: %s", err, out)
	}
	os.RemoveAll(b.dir)
	b.dir = ""
	return nil
}

// Host returns the host of that name (n1, c1, be).
func (b *Bed) Host(name string) (Host, error) {
	for _, h := range b.Hosts {
		if h.Name == name {
			return h, nil
		}
	}
	return Host{}, fmt.Errorf("testbed: no host %q", name)
}

// Role returns the hosts of a role (storage, client, backend) in order.
func (b *Bed) Role(role string) []Host {
	var out []Host
	for _, h := range b.Hosts {
		if h.Role == role {
			out = append(out, h)
		}
	}
	return out
}

// Command returns a command that runs inside a host's namespace.
func (b *Bed) Command(ctx context.Context, host Host, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", host.Netns, name}, args...)...)
}

// SetLink takes a host's NIC down or up at the switch end, like pulling
// and plugging its cable: the host's own configuration stays as it is.
func (b *Bed) SetLink(ctx context.Context, host Host, dev string, up bool) error {
	for _, n := range host.NICs {
		if n.Dev != dev {
			continue
		}
		state := "down"
		if up {
			state = "up"
		}
		out, err := exec.CommandContext(ctx, "ip", "-n", b.Switch, "link", "set", n.SwitchDev, state).CombinedOutput()
		if err != nil {
			return fmt.Errorf("testbed: link %s %s: %v: %s", n.SwitchDev, state, err, out)
		}
		return nil
	}
	return fmt.Errorf("testbed: host %s has no NIC %s", host.Name, dev)
}

// Counters are the byte counters of one NIC.
type Counters struct {
	TxBytes, RxBytes uint64
}

// Counters reads the byte counters of every NIC of a host from
// /sys/class/net inside its namespace.
func (b *Bed) Counters(ctx context.Context, host Host) (map[string]Counters, error) {
	script := `for n in ` + devList(host) + `; do d=/sys/class/net/$n/statistics; echo $n $(cat $d/tx_bytes) $(cat $d/rx_bytes); done`
	out, err := b.Command(ctx, host, "sh", "-c", script).Output()
	if err != nil {
		return nil, fmt.Errorf("testbed: counters of %s: %w", host.Name, err)
	}
	m := map[string]Counters{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			return nil, fmt.Errorf("testbed: counters of %s: bad line %q", host.Name, sc.Text())
		}
		tx, err1 := strconv.ParseUint(f[1], 10, 64)
		rx, err2 := strconv.ParseUint(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("testbed: counters of %s: bad line %q", host.Name, sc.Text())
		}
		m[f[0]] = Counters{TxBytes: tx, RxBytes: rx}
	}
	return m, nil
}

func devList(h Host) string {
	var d []string
	for _, n := range h.NICs {
		d = append(d, n.Dev)
	}
	return strings.Join(d, " ")
}

// WaitTCP waits until addr accepts TCP connections from inside host.
func (b *Bed) WaitTCP(ctx context.Context, host Host, addr string, limit time.Duration) error {
	hostPart, port, ok := strings.Cut(addr, ":")
	if !ok {
		return fmt.Errorf("testbed: bad address %q", addr)
	}
	deadline := time.Now().Add(limit)
	for {
		err := b.Command(ctx, host, "bash", "-c", "exec 3<>/dev/tcp/"+hostPart+"/"+port).Run()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("testbed: %s not reachable from %s: %v", addr, host.Name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
