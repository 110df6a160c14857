// Package config is the typed configuration of one Slipstream node: loading
// from YAML, defaults and validation with errors that name the bad field.
// There are no globals: a Node value is built once and handed to
// node.New.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/slipstream-io/slipstream/internal/store/evict"
)

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("config: invalid")

// Node is the configuration of one node.
type Node struct {
	// ID names the node in the cluster map; it must stay the same across
	// restarts (placement hashes it).
	ID string `yaml:"id"`
	// DataDir holds the node's own state: raft log and snapshots, journals.
	DataDir string `yaml:"data_dir"`
	// Mountpaths are the directories, one per drive, that hold objects.
	Mountpaths []string `yaml:"mountpaths"`
	// Public are the host:port addresses S3 clients use, one per interface.
	Public []string `yaml:"public"`
	// Intra are the host:port addresses of intra-cluster HTTP traffic
	// (forwarding, replication, metadata), one per interface.
	Intra []string `yaml:"intra"`
	// Raft is the host:port of the consensus transport.
	Raft string `yaml:"raft"`
	// NBD are host:port addresses where the node exports block volumes
	// over NBD; NBDSocket is an optional Unix socket path for the same.
	NBD       []string `yaml:"nbd"`
	NBDSocket string   `yaml:"nbd_socket"`
	// NBDTLS makes TLS mandatory on the NBD addresses (not the socket).
	NBDTLS NBDTLS `yaml:"nbd_tls"`
	// Seeds are intra-cluster base URLs of nodes to join through.
	Seeds []string `yaml:"seeds"`
	// Bootstrap makes this node found a new cluster if it has no state.
	Bootstrap bool `yaml:"bootstrap"`
	// Voters is the number of raft voters (default 3).
	Voters int `yaml:"voters"`
	// Secret authenticates intra-cluster requests between nodes.
	Secret string `yaml:"cluster_secret"`
	// IntraTLS encrypts the intra-cluster HTTP (object and chunk traffic,
	// admin API) with TLS 1.3 and admits only peers that prove the
	// cluster secret, as raft's port always does. Every node of a
	// cluster must set it alike.
	IntraTLS bool `yaml:"intra_tls"`
	// IntraTLSMigrate, with IntraTLS, also accepts plain intra-cluster
	// connections and falls back to plain ones towards nodes without
	// intra_tls: for turning intra_tls on (or off) one node at a time.
	IntraTLSMigrate bool `yaml:"intra_tls_migrate"`

	S3    S3    `yaml:"s3"`
	TLS   TLS   `yaml:"tls"`
	Space Space `yaml:"space"`
	Tier  Tier  `yaml:"tier"`
	// Rebalance moves copies to the nodes HRW places them on.
	Rebalance Rebalance `yaml:"rebalance"`
	// Scrub reads the copies back and repairs damaged ones.
	Scrub Scrub `yaml:"scrub"`
	// DefaultCopies is the copies property of buckets created through S3.
	DefaultCopies int `yaml:"default_copies"`
}

// S3 configures the S3 API.
type S3 struct {
	Region      string       `yaml:"region"`
	Credentials []Credential `yaml:"credentials"`
	// Domains enable virtual-hosted-style requests: bucket.<domain>.
	Domains []string `yaml:"domains"`
}

// Credential is one access key pair.
type Credential struct {
	AccessKey string `yaml:"access_key"`
	SecretKey string `yaml:"secret_key"`
}

// TLS enables HTTPS on the public addresses when both files are set.
type TLS struct {
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
}

// Enabled reports whether TLS is configured.
func (t TLS) Enabled() bool { return t.Cert != "" && t.Key != "" }

// NBDTLS makes clients of the NBD addresses start TLS before anything
// else; with ClientCA, only clients presenting a certificate that
// authority signed are served (slipstream volume certs writes all three).
type NBDTLS struct {
	Cert     string `yaml:"cert"`
	Key      string `yaml:"key"`
	ClientCA string `yaml:"client_ca"`
}

// Enabled reports whether NBD over TLS is configured.
func (t NBDTLS) Enabled() bool { return t.Cert != "" && t.Key != "" }

// Space configures space management on the mountpaths.
type Space struct {
	HighWatermark float64 `yaml:"high_watermark"` // percent
	LowWatermark  float64 `yaml:"low_watermark"`  // percent
	Policy        string  `yaml:"policy"`         // lru | s3fifo
	// MaxBytes caps the bytes stored per mountpath (0: the filesystem's size).
	MaxBytes int64 `yaml:"max_bytes_per_mountpath"`
}

// Tier configures the fast tier over remote backends.
type Tier struct {
	// DirtyCap bounds the bytes written back but not yet destaged; a PUT
	// that does not fit waits up to DirtyWait, then fails with SlowDown.
	DirtyCap  int64         `yaml:"dirty_cap"`
	DirtyWait time.Duration `yaml:"dirty_wait"`
	// DestageWorkers bounds concurrent uploads to the backend.
	DestageWorkers int `yaml:"destage_workers"`
	// ParallelThreshold and PartSize govern parallel range fills of large
	// cold objects.
	ParallelThreshold int64 `yaml:"parallel_threshold"`
	PartSize          int64 `yaml:"part_size"`
	// FetchConcurrency is the number of range requests in flight per fill.
	FetchConcurrency int `yaml:"fetch_concurrency"`
	// TTL is the default validation period of warm copies (validate=ttl).
	TTL time.Duration `yaml:"ttl"`
}

// Rebalance configures the background passes that move copies to the
// nodes HRW places them on after the set of nodes changes.
type Rebalance struct {
	// Off turns the automatic passes off (`slipstream admin rebalance`
	// still runs one).
	Off bool `yaml:"off"`
	// DownAfter is how long a node may be down before its copies are made
	// again on other nodes (default 10m; negative: never).
	DownAfter time.Duration `yaml:"down_after"`
	// Settle is how long a change of the node set must last before a pass
	// starts (default 10s).
	Settle time.Duration `yaml:"settle"`
	// Parallel bounds the copies placed at once by a node (default 4).
	Parallel int `yaml:"parallel"`
	// Rate bounds the bytes a node sends per second in a pass (default
	// 256 MiB/s), so that moving copies leaves room for client traffic.
	Rate int64 `yaml:"rate"`
}

// Scrub configures the background passes that read every copy back and
// check it against its checksum.
type Scrub struct {
	// Interval is the time between passes (default 168h; negative: no
	// automatic passes, `slipstream admin scrub` still runs one).
	Interval time.Duration `yaml:"interval"`
	// Rate bounds the bytes read per second by a pass (default 64 MiB/s).
	Rate int64 `yaml:"rate"`
}

// Load reads, defaults and validates a YAML config file. Unknown fields are
// errors, so a typo does not silently fall back to a default.
func Load(path string) (Node, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Node{}, fmt.Errorf("config: %w", err)
	}
	return Parse(b, path)
}

// Parse decodes YAML config text; name is used in error messages.
func Parse(b []byte, name string) (Node, error) {
	var n Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&n); err != nil {
		return Node{}, fmt.Errorf("%w: %s: %v", ErrInvalid, name, err)
	}
	n.SetDefaults()
	if err := n.Validate(); err != nil {
		return Node{}, fmt.Errorf("%s: %w", name, err)
	}
	return n, nil
}

// SetDefaults fills the zero fields with their defaults.
func (n *Node) SetDefaults() {
	if n.Voters == 0 {
		n.Voters = 3
	}
	if n.DefaultCopies == 0 {
		n.DefaultCopies = 1
	}
	if n.S3.Region == "" {
		n.S3.Region = "us-east-1"
	}
	if n.Space.HighWatermark == 0 {
		n.Space.HighWatermark = 90
	}
	if n.Space.LowWatermark == 0 {
		n.Space.LowWatermark = 80
	}
	if n.Space.Policy == "" {
		n.Space.Policy = "s3fifo"
	}
	if n.Tier.DirtyCap == 0 {
		n.Tier.DirtyCap = 4 << 30
	}
	if n.Tier.DirtyWait == 0 {
		n.Tier.DirtyWait = 10 * time.Second
	}
	if n.Tier.DestageWorkers == 0 {
		n.Tier.DestageWorkers = 8
	}
	if n.Tier.ParallelThreshold == 0 {
		n.Tier.ParallelThreshold = 32 << 20
	}
	if n.Tier.PartSize == 0 {
		n.Tier.PartSize = 8 << 20
	}
	if n.Tier.FetchConcurrency == 0 {
		n.Tier.FetchConcurrency = 4
	}
	if n.Tier.TTL == 0 {
		n.Tier.TTL = time.Minute
	}
	if n.Rebalance.DownAfter == 0 {
		n.Rebalance.DownAfter = 10 * time.Minute
	}
	if n.Rebalance.Settle == 0 {
		n.Rebalance.Settle = 10 * time.Second
	}
	if n.Rebalance.Parallel == 0 {
		n.Rebalance.Parallel = 4
	}
	if n.Rebalance.Rate == 0 {
		n.Rebalance.Rate = 256 << 20
	}
	if n.Scrub.Interval == 0 {
		n.Scrub.Interval = 7 * 24 * time.Hour
	}
	if n.Scrub.Rate == 0 {
		n.Scrub.Rate = 64 << 20
	}
}

// Validate checks every field and names the first bad one.
func (n *Node) Validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalid, field, fmt.Sprintf(format, args...))
	}
	if n.ID == "" || strings.ContainsAny(n.ID, "/ \t\n") {
		return bad("id", "must be a non-empty name without spaces or '/' (got %q)", n.ID)
	}
	if n.DataDir == "" {
		return bad("data_dir", "is required")
	}
	if len(n.Mountpaths) == 0 {
		return bad("mountpaths", "at least one directory is required")
	}
	seen := map[string]bool{}
	for i, m := range n.Mountpaths {
		if m == "" || seen[m] {
			return bad(fmt.Sprintf("mountpaths[%d]", i), "empty or duplicate path %q", m)
		}
		seen[m] = true
	}
	if len(n.Public) == 0 {
		return bad("public", "at least one host:port is required")
	}
	if len(n.Intra) == 0 {
		return bad("intra", "at least one host:port is required")
	}
	for field, list := range map[string][]string{"public": n.Public, "intra": n.Intra, "raft": {n.Raft}, "nbd": n.NBD} {
		for i, a := range list {
			if err := checkHostPort(a); err != nil {
				return bad(fmt.Sprintf("%s[%d]", field, i), "%v", err)
			}
		}
	}
	if n.Secret == "" {
		// Without it, the peer and admin endpoints on the intra addresses
		// would take requests from anyone who can reach them.
		return bad("cluster_secret", "required: the same secret on every node guards peer and admin traffic")
	}
	if !n.Bootstrap && len(n.Seeds) == 0 {
		return bad("seeds", "a node that does not bootstrap needs at least one seed")
	}
	if n.Voters < 1 {
		return bad("voters", "must be at least 1 (got %d)", n.Voters)
	}
	if n.DefaultCopies < 1 {
		return bad("default_copies", "must be at least 1 (got %d)", n.DefaultCopies)
	}
	for i, c := range n.S3.Credentials {
		if c.AccessKey == "" || c.SecretKey == "" {
			return bad(fmt.Sprintf("s3.credentials[%d]", i), "access_key and secret_key are both required")
		}
	}
	if (n.TLS.Cert == "") != (n.TLS.Key == "") {
		return bad("tls", "cert and key must be given together")
	}
	if (n.NBDTLS.Cert == "") != (n.NBDTLS.Key == "") {
		return bad("nbd_tls", "cert and key must be given together")
	}
	if n.NBDTLS.ClientCA != "" && !n.NBDTLS.Enabled() {
		return bad("nbd_tls.client_ca", "needs cert and key")
	}
	if n.IntraTLSMigrate && !n.IntraTLS {
		return bad("intra_tls_migrate", "needs intra_tls: true")
	}
	if n.Space.LowWatermark <= 0 || n.Space.HighWatermark > 100 || n.Space.LowWatermark >= n.Space.HighWatermark {
		return bad("space", "need 0 < low_watermark < high_watermark <= 100 (got %v, %v)", n.Space.LowWatermark, n.Space.HighWatermark)
	}
	if names := evict.Names(); !slices.Contains(names, n.Space.Policy) {
		return bad("space.policy", "must be %s (got %q)", strings.Join(names, " or "), n.Space.Policy)
	}
	if n.Space.MaxBytes < 0 {
		return bad("space.max_bytes_per_mountpath", "must not be negative")
	}
	if n.Tier.PartSize < 1<<20 || n.Tier.FetchConcurrency < 1 || n.Tier.DestageWorkers < 1 {
		return bad("tier", "part_size must be >= 1MiB, fetch_concurrency and destage_workers >= 1")
	}
	if n.Rebalance.Settle < 0 || n.Rebalance.Parallel < 0 || n.Rebalance.Rate < 0 {
		return bad("rebalance", "settle, parallel and rate must not be negative (got %v, %d, %d)", n.Rebalance.Settle, n.Rebalance.Parallel, n.Rebalance.Rate)
	}
	if n.Scrub.Rate < 0 {
		return bad("scrub.rate", "must not be negative (got %d)", n.Scrub.Rate)
	}
	return nil
}

func checkHostPort(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return err
	}
	if host == "" {
		return fmt.Errorf("%q listens on all interfaces; give an explicit address", a)
	}
	if port == "" {
		return fmt.Errorf("%q has no port", a)
	}
	return nil
}
