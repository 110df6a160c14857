// Package client is Slipstream's smart Go client. It reads the cluster map
// from the nodes' intra-cluster addresses and keeps it fresh with a long
// poll, computes placement itself (the same HRW order the nodes use) and
// sends every object request straight to the object's owner, spreading its
// connections over all of the owner's public addresses and over all of the
// client host's own interfaces (through internal/netx: one bound transport
// per local address, least-loaded pairs, failover and resumed GETs).
//
// It offers the cluster in three shapes: an *s3.Client (AWS SDK for Go v2)
// whose object requests go to their owners, an *http.Client whose requests
// to any address of a node use all of that node's addresses, and a Router
// for the load generator (internal/loader).
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/netx"
	"github.com/slipstream-io/slipstream/internal/placement"
)

// Sentinel errors.
var (
	// ErrNoSeeds is returned by New without seeds.
	ErrNoSeeds = errors.New("client: no seeds")
	// ErrNoMap is returned by New when no seed answered with a cluster map.
	ErrNoMap = errors.New("client: no cluster map")
	// ErrNoNodes is returned when the cluster map lists no node with a
	// public address.
	ErrNoNodes = errors.New("client: no nodes in the cluster map")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("client: closed")
)

// healthPath is the node's health endpoint on its public addresses (the
// node package's PublicHealthPath); the transport probes it to take an
// address pair back in after a failure.
const healthPath = "/_slipstream/health"

// Config configures a Client.
type Config struct {
	// Seeds are intra-cluster base URLs ("http://10.77.1.11:9100") or
	// host:port addresses of nodes to fetch the cluster map from, or the
	// URLs of nodes' public maps ("http://10.0.0.2:9000/_slipstream/map",
	// cluster.PublicMapPath), which need no access to the intra network:
	// a cluster with intra_tls answers only nodes there. A node's S3
	// address ("http://10.0.0.2:9000") is read at its public map. Once
	// the map is known, every node's public map and intra addresses are
	// tried too.
	Seeds []string
	// LocalAddrs are this host's own addresses to send from, one per
	// interface; empty: one unbound interface.
	LocalAddrs []string
	// AccessKey and SecretKey sign the S3 client's requests (empty:
	// anonymous). Region defaults to "us-east-1".
	AccessKey, SecretKey, Region string
	// PairFilter, if set, decides which (local IP, remote host:port) pairs
	// may carry requests (see netx.Config.PairFilter); by default a node
	// address in the subnet of some local interfaces is reached only from
	// those, other addresses from every interface.
	PairFilter func(local, remote string) bool
	// TLS, if set, makes requests to public addresses use HTTPS.
	TLS *tls.Config
	// MapClient fetches the cluster map (default: a plain HTTP client).
	MapClient *http.Client
	// FailAfter is how long a silent interface pair may stall before it is
	// taken out (netx default 1s).
	FailAfter time.Duration
	// MaxIdleConnsPerHost per local interface (netx default 64).
	MaxIdleConnsPerHost int
	// Log receives map changes and interface failures (default: discarded).
	Log *slog.Logger
}

// NodeInfo is one node of the cluster as the client sees it.
type NodeInfo struct {
	ID          string
	PublicAddrs []string // host:port, one per interface
	IntraAddrs  []string
	State       string // "up", "down" or "maintenance"
}

// Client follows the cluster map and routes requests to owners. It is safe
// for concurrent use.
type Client struct {
	cfg     Config
	log     *slog.Logger
	scheme  string
	tr      *netx.Transport
	hc      *http.Client
	mapHC   *http.Client
	rr      atomic.Uint64
	changes chan struct{} // closed and replaced on every map change

	mu sync.RWMutex
	m  *cluster.Map
	id []string // node IDs, sorted
	// suspects are nodes a request could not reach, passed over as
	// owners until the time given: the cluster map shows a dead node down
	// only after the leader's probes missed it for a while (2 s).
	suspects map[string]time.Time

	s3once sync.Once
	s3c    *s3.Client

	cancel context.CancelFunc
	done   chan struct{}
	closed atomic.Bool
}

// New fetches the cluster map from the first seed that answers (bounded by
// ctx), builds the multihomed transport and starts following the map in
// the background until Close.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if len(cfg.Seeds) == 0 {
		return nil, ErrNoSeeds
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	mapHC := cfg.MapClient
	if mapHC == nil {
		mapHC = &http.Client{Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 3 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 2,
			IdleConnTimeout:     90 * time.Second,
			TLSClientConfig:     cfg.TLS, // for public maps over HTTPS
		}}
	}
	scheme := "http"
	if cfg.TLS != nil {
		scheme = "https"
	}
	cfg.Seeds = slices.Clone(cfg.Seeds) // firstMap resolves S3 addresses to their public maps
	c := &Client{cfg: cfg, log: cfg.Log, scheme: scheme, mapHC: mapHC, changes: make(chan struct{}), done: make(chan struct{})}
	m, err := firstMap(ctx, mapHC, c.cfg.Seeds, firstMapWait)
	if err != nil {
		return nil, err
	}
	c.setMap(m)
	tr, err := netx.NewTransport(netx.Config{
		LocalAddrs:          cfg.LocalAddrs,
		Scheme:              scheme,
		TLS:                 cfg.TLS,
		ProbePath:           healthPath,
		PairFilter:          cfg.PairFilter,
		FailAfter:           cfg.FailAfter,
		MaxIdleConnsPerHost: cfg.MaxIdleConnsPerHost,
		Log:                 cfg.Log,
	})
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	c.tr = tr
	c.hc = &http.Client{Transport: &suspecting{c: c}}
	c.mu.Lock()
	c.setPeersLocked()
	c.mu.Unlock()
	wctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go c.follow(wctx)
	return c, nil
}

// firstMapWait bounds how long New waits for a seed whose map lists no node
// with a public address to learn the cluster's map.
const firstMapWait = 30 * time.Second

// firstMap returns the map of the first seed that answers with one that
// lists a node with a public address. A node that has just restarted
// answers with the map it had before it hears from the cluster's leader,
// which can be empty: such a seed is asked again for a newer map, until one
// is usable, ctx ends or wait passes. If no seed answers at all, firstMap
// fails at once with ErrNoMap; if the seeds that answered never give a
// usable map, with ErrNoNodes. A seed that is a node's S3 address (which
// answers the intra map path as S3 does) is asked at its public map
// instead, and replaced in seeds by that URL.
func firstMap(ctx context.Context, hc *http.Client, seeds []string, wait time.Duration) (*cluster.Map, error) {
	deadline := time.Now().Add(wait)
	seen := make(map[string]uint64, len(seeds)) // version of each answering seed's unusable map
	for round := 0; ; round++ {
		var errs []error
		for i, s := range seeds {
			after, answered := seen[s]
			if round > 0 && !answered {
				continue
			}
			var m *cluster.Map
			var err error
			if answered {
				// Long poll: back as soon as the seed's map changes, or
				// with the same map after a second.
				m, err = cluster.FetchMap(ctx, hc, s, max(after, 1), time.Second)
			} else {
				m, err = cluster.FetchMap(ctx, hc, s, 0, 0)
				if pub := cluster.BaseURL(s) + cluster.PublicMapPath; errors.Is(err, cluster.ErrNotMapEndpoint) && !strings.HasSuffix(s, cluster.PublicMapPath) {
					pm, perr := cluster.FetchMap(ctx, hc, pub, 0, 0)
					if perr == nil {
						m, err, s = pm, nil, pub
						seeds[i] = pub
					} else {
						err = fmt.Errorf("%w; nor at %s: %w", err, pub, perr)
					}
				}
			}
			if err == nil && usable(m) {
				return m, nil
			}
			if err == nil {
				seen[s] = m.Version
				err = fmt.Errorf("%w: %s answers with map version %d", ErrNoNodes, s, m.Version)
			} else {
				delete(seen, s)
			}
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
		}
		switch {
		case len(seen) == 0:
			return nil, fmt.Errorf("%w: %w", ErrNoMap, errors.Join(errs...))
		case ctx.Err() != nil || time.Now().After(deadline):
			return nil, errors.Join(errs...)
		}
	}
}

// usable reports whether m lists a node with a public address.
func usable(m *cluster.Map) bool {
	for _, n := range m.Nodes {
		if len(n.PublicAddrs) > 0 {
			return true
		}
	}
	return false
}

// Close stops following the map and closes idle connections.
func (c *Client) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	c.cancel()
	<-c.done
	return c.tr.Close()
}

func (c *Client) currentMap() *cluster.Map {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.m
}

// setMap installs m if it is newer than the current map.
func (c *Client) setMap(m *cluster.Map) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m != nil && m.Version <= c.m.Version {
		return false
	}
	c.m, c.id = m, m.NodeIDs()
	if c.tr != nil {
		c.setPeersLocked()
	}
	close(c.changes)
	c.changes = make(chan struct{})
	return true
}

func (c *Client) setPeersLocked() {
	peers := make([]netx.Peer, 0, len(c.id))
	for _, id := range c.id {
		n := c.m.Nodes[id]
		if len(n.PublicAddrs) > 0 {
			peers = append(peers, netx.Peer{ID: id, Addrs: slices.Clone(n.PublicAddrs)})
		}
	}
	c.tr.SetPeers(peers)
}

// follow long-polls the map from the seeds and every known node's intra
// addresses in turn, moving on when one fails.
func (c *Client) follow(ctx context.Context) {
	defer close(c.done)
	i := 0
	delay := 50 * time.Millisecond
	for ctx.Err() == nil {
		urls := c.mapURLs()
		m := c.currentMap()
		fctx, cancel := context.WithTimeout(ctx, 40*time.Second) // a dead peer must not hold the poll
		got, err := cluster.FetchMap(fctx, c.mapHC, urls[i%len(urls)], max(m.Version, 1), 30*time.Second)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			i++
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
			delay = min(2*delay, 2*time.Second)
			continue
		}
		delay = 50 * time.Millisecond
		if c.setMap(got) {
			c.log.Info("client: cluster map changed", "version", got.Version, "nodes", len(got.Nodes))
		}
	}
}

// mapURLs lists where the map can be fetched: the seeds first, then every
// node's public map and intra addresses.
func (c *Client) mapURLs() []string {
	out := slices.Clone(c.cfg.Seeds)
	c.mu.RLock()
	for _, id := range c.id {
		for _, a := range c.m.Nodes[id].PublicAddrs {
			if u := c.scheme + "://" + a + cluster.PublicMapPath; !slices.Contains(out, u) {
				out = append(out, u)
			}
		}
		for _, a := range c.m.Nodes[id].IntraAddrs {
			if u := cluster.BaseURL(a); !slices.Contains(out, u) && !slices.Contains(out, a) {
				out = append(out, u)
			}
		}
	}
	c.mu.RUnlock()
	return out
}

// MapVersion is the version of the cluster map the client routes by.
func (c *Client) MapVersion() uint64 { return c.currentMap().Version }

// WaitMap waits until the client's map is at least version v.
func (c *Client) WaitMap(ctx context.Context, v uint64) error {
	for {
		c.mu.RLock()
		cur, ch := c.m.Version, c.changes
		c.mu.RUnlock()
		if cur >= v {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("client: waiting for map version %d (have %d): %w", v, cur, ctx.Err())
		}
	}
}

func info(n cluster.NodeInfo) NodeInfo {
	return NodeInfo{ID: n.ID, PublicAddrs: slices.Clone(n.PublicAddrs), IntraAddrs: slices.Clone(n.IntraAddrs), State: string(n.State)}
}

// Nodes returns every node of the current map, sorted by ID.
func (c *Client) Nodes() []NodeInfo {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]NodeInfo, 0, len(c.id))
	for _, id := range c.id {
		out = append(out, info(c.m.Nodes[id]))
	}
	return out
}

// Owner returns the node that serves bucket/key: the first node in the HRW
// order over every member that takes new copies, up and not draining (the
// order the nodes themselves use); else the first that is up (a draining
// node still serves), else the first in that order. The zero NodeInfo means
// the map has no nodes.
func (c *Client) Owner(bucket, key string) NodeInfo {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n, _ := c.ownerLocked(bucket, key)
	return info(n)
}

// ownerLocked returns the first node in bucket/key's placement order that
// takes copies, else the first that is up (a request there is forwarded or
// served from the other copies), passing over suspects, else the first
// with a public address.
func (c *Client) ownerLocked(bucket, key string) (cluster.NodeInfo, bool) {
	order := placement.Order(c.id, placement.ObjectName(bucket, key))
	for pass := 0; pass < 3; pass++ {
		for _, id := range order {
			n := c.m.Nodes[id]
			if len(n.PublicAddrs) == 0 {
				continue
			}
			switch {
			case pass == 0 && n.Places() && !c.suspectLocked(id),
				pass == 1 && n.State == cluster.StateUp && !c.suspectLocked(id),
				pass == 2:
				return n, true
			}
		}
	}
	return cluster.NodeInfo{}, false
}

// suspectFor is how long a node a request could not reach is passed over.
const suspectFor = 5 * time.Second

// suspect passes over node id as an owner for suspectFor.
func (c *Client) suspect(id string) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, until := range c.suspects {
		if now.After(until) {
			delete(c.suspects, k)
		}
	}
	if c.suspects == nil {
		c.suspects = map[string]time.Time{}
	}
	c.suspects[id] = now.Add(suspectFor)
}

func (c *Client) suspectLocked(id string) bool {
	if len(c.suspects) == 0 {
		return false
	}
	until, ok := c.suspects[id]
	return ok && time.Now().Before(until)
}

// anyLocked returns an up node with a public address, round-robin.
func (c *Client) anyLocked() (cluster.NodeInfo, bool) {
	n := len(c.id)
	start := int(c.rr.Add(1) % uint64(max(n, 1)))
	var fallback *cluster.NodeInfo
	for i := 0; i < n; i++ {
		nd := c.m.Nodes[c.id[(start+i)%n]]
		if len(nd.PublicAddrs) == 0 {
			continue
		}
		if nd.State == cluster.StateUp && !c.suspectLocked(nd.ID) {
			return nd, true
		}
		if fallback == nil {
			fallback = &nd
		}
	}
	if fallback != nil {
		return *fallback, true
	}
	return cluster.NodeInfo{}, false
}

// hostFor returns the host:port that names the node serving bucket/key
// (any node when key is empty): its first public address, which the
// transport maps to all of its addresses; and the node's ID.
func (c *Client) hostFor(bucket, key string) (host, id string, err error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var n cluster.NodeInfo
	var ok bool
	if bucket != "" && key != "" {
		n, ok = c.ownerLocked(bucket, key)
	} else {
		n, ok = c.anyLocked()
	}
	if !ok {
		return "", "", ErrNoNodes
	}
	hp, _, err := netx.ParseAddr(n.PublicAddrs[0])
	if err != nil {
		return "", "", fmt.Errorf("client: node %s: %w", n.ID, err)
	}
	return hp, n.ID, nil
}

// Transport returns the multihomed round tripper: a request to a node ID or
// to any one of a node's public addresses goes over all of that node's
// public addresses and all local interfaces, the least-loaded pair first;
// idempotent requests are retried on another pair and GET bodies resume
// from another pair when a connection breaks.
func (c *Client) Transport() http.RoundTripper { return c.tr }

// HTTPClient returns an *http.Client over Transport. It does not reroute
// requests: the URL's host picks the node. A node none of whose addresses
// a request could reach is passed over as an owner for a while (Router,
// S3), as after a failed request of the S3 client.
func (c *Client) HTTPClient() *http.Client { return c.hc }

// suspecting is HTTPClient's transport: Transport, and a node it cannot
// reach becomes a suspect.
type suspecting struct{ c *Client }

func (s *suspecting) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := s.c.tr.RoundTrip(req)
	if err != nil && errors.Is(err, netx.ErrUnreachable) && req.Context().Err() == nil {
		if id := s.c.nodeOf(req.URL.Host); id != "" {
			s.c.suspect(id)
		}
	}
	return resp, err
}

// nodeOf returns the ID of the node that host (a node ID or one of its
// public addresses) names, or "".
func (c *Client) nodeOf(host string) string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, id := range c.id {
		if id == host {
			return id
		}
		for _, a := range c.m.Nodes[id].PublicAddrs {
			if hp, _, err := netx.ParseAddr(a); err == nil && hp == host {
				return id
			}
		}
	}
	return ""
}

// Stats returns the byte, request, error and retry counters of every local
// interface the client sends from.
func (c *Client) Stats() []netx.IfaceStats { return c.tr.Stats() }

// Pairs returns the state and counters of every (local, remote) pair.
func (c *Client) Pairs() []netx.PairStats { return c.tr.Pairs() }

// S3 returns an S3 client (path-style) whose object requests go straight to
// the owner of each object; bucket-level requests go to any node that is
// up. It is built once and shared.
func (c *Client) S3() *s3.Client {
	c.s3once.Do(func() {
		base := c.scheme + "://slipstream"
		if hp, _, err := c.hostFor("", ""); err == nil {
			base = c.scheme + "://" + hp
		}
		opts := s3.Options{
			BaseEndpoint:               aws.String(base),
			Region:                     c.cfg.Region,
			UsePathStyle:               true,
			HTTPClient:                 &http.Client{Transport: &ownerTransport{c: c}},
			RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
			ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
		}
		if c.cfg.AccessKey != "" {
			opts.Credentials = credentials.NewStaticCredentialsProvider(c.cfg.AccessKey, c.cfg.SecretKey, "")
		} else {
			opts.Credentials = aws.AnonymousCredentials{}
		}
		c.s3c = s3.New(opts)
	})
	return c.s3c
}

// ownerTransport sends each path-style S3 request to the owner of its
// object (any up node for bucket-level requests). The Host header keeps the
// host the request was signed for, so signatures stay valid. A node that
// cannot be reached is passed over for a while (the map shows it down
// only later), and a request that may be sent again goes at once to the
// next node, which forwards it or serves it from the object's other
// copies.
type ownerTransport struct{ c *Client }

var _ http.RoundTripper = (*ownerTransport)(nil)

func (o *ownerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if o.c.closed.Load() {
		return nil, ErrClosed
	}
	bucket, key := SplitPath(req.URL.Path)
	host, id, err := o.c.hostFor(bucket, key)
	if err != nil {
		return nil, err
	}
	resp, err := o.c.tr.RoundTrip(o.to(req, host, nil))
	if err == nil || !errors.Is(err, netx.ErrUnreachable) || req.Context().Err() != nil {
		return resp, err
	}
	o.c.suspect(id)
	next, nextID, herr := o.c.hostFor(bucket, key)
	if herr != nil || nextID == id || !netx.Replayable(req) {
		return nil, err
	}
	var body io.ReadCloser
	if req.Body != nil && req.Body != http.NoBody {
		if body, herr = req.GetBody(); herr != nil {
			return nil, err
		}
	}
	return o.c.tr.RoundTrip(o.to(req, next, body))
}

// to returns a copy of req sent to host, with body if not nil.
func (o *ownerTransport) to(req *http.Request, host string, body io.ReadCloser) *http.Request {
	r := req.Clone(req.Context())
	if r.Host == "" {
		r.Host = req.URL.Host
	}
	r.URL.Host = host
	if body != nil {
		r.Body = body
	}
	return r
}

// SplitPath splits a path-style S3 request path ("/bucket/some/key") into
// bucket and key; either may be empty.
func SplitPath(p string) (bucket, key string) {
	p = strings.TrimPrefix(p, "/")
	bucket, key, _ = strings.Cut(p, "/")
	return bucket, key
}
