package netx

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

var (
	// ErrPairDown marks a request aborted because its (local, remote) pair
	// was taken out (its link stalled and a probe confirmed it).
	ErrPairDown = errors.New("netx: interface pair down")
	// ErrUnreachable wraps every error of Do and RoundTrip that comes from
	// the network (dial, reset, stall) rather than from the caller's context.
	ErrUnreachable = errors.New("netx: peer unreachable")
	// ErrClosed is returned by a closed Transport.
	ErrClosed = errors.New("netx: transport closed")
	// ErrPlainPeer, from Config.Secure, means the peer does not speak the
	// secured protocol and may be reached in plain (a cluster migrating).
	ErrPlainPeer = errors.New("netx: peer speaks plain")
)

// State is the health of a pair or of a local interface.
type State int

// States. An interface is Degraded when some but not all of its pairs are down.
const (
	StateUp State = iota
	StateDegraded
	StateDown
)

func (s State) String() string {
	switch s {
	case StateUp:
		return "up"
	case StateDegraded:
		return "degraded"
	case StateDown:
		return "down"
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// MarshalText makes State readable in JSON.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText parses what MarshalText writes.
func (s *State) UnmarshalText(b []byte) error {
	for _, v := range []State{StateUp, StateDegraded, StateDown} {
		if v.String() == string(b) {
			*s = v
			return nil
		}
	}
	return fmt.Errorf("%w: state %q", ErrBadAddr, b)
}

// Peer is a node as the transport sees it: an identity and every address
// it serves on, each "host:port" or a base URL ("https://host:port") whose
// scheme then overrides the transport's.
type Peer struct {
	ID    string   `json:"id"`
	Addrs []string `json:"addrs"`
}

// Config configures a Transport. The zero value works: one unbound local
// interface, plain HTTP, TCP-connect probes.
type Config struct {
	// LocalAddrs are the source IP addresses to send from, one per
	// interface ("10.77.1.2"; a ":port" suffix is ignored, so listen
	// addresses can be passed as they are). Each must be an address of
	// one of this host's interfaces, any 127/8 address or the unspecified
	// address; an IPv6 link-local one needs its zone ("fe80::1%eth0").
	// Empty: one unbound interface.
	LocalAddrs []string
	// Scheme of requests made by Do: "http" (default) or "https".
	Scheme string
	// TLS is the client TLS config for https.
	TLS *tls.Config
	// Secure, if set, wraps every connection dialed (data and probes)
	// before HTTP runs over it, e.g. seclink's Client. Bytes are counted
	// on the wire, below it. When it fails with ErrPlainPeer, the dialer
	// connects again and uses that connection unwrapped.
	Secure func(ctx context.Context, c net.Conn) (net.Conn, error)
	// ProbePath is a health URL path (e.g. "/healthz") probed on every
	// pair that is down or idle. Empty: probes only open a TCP connection.
	ProbePath string
	// ProbeInterval is how often a down or idle pair is probed (default 500ms).
	ProbeInterval time.Duration
	// FailAfter bounds a dial and a probe, and is the stall window: when a
	// probe of a pair fails, every request in flight on it whose own
	// connection has moved no byte for this long while the request waited
	// on the network is aborted (and retried elsewhere when safe), and the
	// pair is taken out. Requests that keep moving bytes, however slowly,
	// and quiet requests on a pair whose probes succeed are never aborted
	// (default 1s).
	FailAfter time.Duration
	// RecoverAfter is the hysteresis of a pair that went down: it carries
	// new requests again (is preferred by the picker) only after this many
	// consecutive successful probes, each started after the previous one
	// answered, so a flapping path is not readmitted by one lucky probe.
	// A failed probe or a failed request starts the count again. Default 2;
	// 1 readmits a pair on its first successful probe.
	RecoverAfter int
	// MaxAttempts bounds the tries of one replayable request (default 3).
	MaxAttempts int
	// MaxIdleConnsPerHost bounds the idle connections kept per pair (local
	// interface, remote address) (default 64).
	MaxIdleConnsPerHost int
	// ResponseHeaderTimeout, if not zero, bounds the wait for response headers.
	ResponseHeaderTimeout time.Duration
	// PairFilter, if set, decides which (local IP, remote host:port) pairs
	// may be used. By default a remote address in the subnet of some local
	// interfaces is reached only from those; others from every interface.
	PairFilter func(local, remote string) bool
	// PairTTL drops the state of pairs unused for this long (default 5m):
	// no request had them among its candidates. A pair that is down is
	// still used while requests to its peer pass it over, so it is not
	// forgotten (and re-created up) while its address stays dead.
	PairTTL time.Duration
	// Log receives state changes (default: discarded).
	Log *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Scheme == "" {
		c.Scheme = "http"
	}
	if c.ProbeInterval <= 0 {
		c.ProbeInterval = 500 * time.Millisecond
	}
	if c.FailAfter <= 0 {
		c.FailAfter = time.Second
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 3
	}
	if c.RecoverAfter <= 0 {
		c.RecoverAfter = 2
	}
	if c.MaxIdleConnsPerHost <= 0 {
		c.MaxIdleConnsPerHost = 64
	}
	if c.PairTTL <= 0 {
		c.PairTTL = 5 * time.Minute
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
}

// Transport sends HTTP requests to multihomed peers over every usable
// (local interface, remote address) pair. It is safe for concurrent use.
type Transport struct {
	cfg    Config
	log    *slog.Logger
	locals []*iface

	mu      sync.Mutex
	pairs   map[string]*pair
	remotes map[string]*endpoint
	lists   map[string][]*pair // peer address list -> usable pairs
	peers   map[string]Peer    // by ID and by every address

	kick   chan *pair // pairs to probe at once (see fail)
	closed atomic.Bool
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

var _ http.RoundTripper = (*Transport)(nil)

// iface is one local interface and its bound dialer.
type iface struct {
	addr   string // "" = unbound
	ip     net.IP
	subnet *net.IPNet
	dialer *net.Dialer

	c                         ifaceCounters
	requests, errors, retries atomic.Uint64
	inflight                  atomic.Int64
}

type endpoint struct {
	addr     string // host:port
	scheme   string // from a URL-form address; "" = the request's
	inflight atomic.Int64
	rr       atomic.Uint64 // round-robin of the picks among pair lists that start here (see pick)
}

// ParseAddr splits a peer address, either "host:port" or a base URL
// ("https://host:port"), into host:port and scheme ("" for the first form).
func ParseAddr(a string) (hostport, scheme string, err error) {
	if !strings.Contains(a, "://") {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return "", "", fmt.Errorf("%w: %q: %v", ErrBadAddr, a, err)
		}
		return a, "", nil
	}
	u, err := url.Parse(a)
	if err != nil {
		return "", "", fmt.Errorf("%w: %q: %v", ErrBadAddr, a, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") ||
		u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", "", fmt.Errorf("%w: %q is not an http(s) base URL", ErrBadAddr, a)
	}
	if _, _, err := net.SplitHostPort(u.Host); err != nil {
		return "", "", fmt.Errorf("%w: %q: %v", ErrBadAddr, a, err)
	}
	return u.Host, u.Scheme, nil
}

// pair is one (local interface, remote address) pair. It has its own
// connection pools (rt for requests, probeRT for probes), so the idle
// connections of a pair can be closed when it goes down without touching
// the other pairs of its interface.
type pair struct {
	key     string
	loc     *iface
	rem     *endpoint
	rt      *http.Transport
	probeRT *http.Transport

	c                ifaceCounters
	inflight         atomic.Int64
	requests, errors atomic.Uint64
	lastProgress     atomic.Int64 // unix ns of the last byte moved
	lastUsed         atomic.Int64 // unix ns of the last request started
	wanted           atomic.Int64 // unix ns a request last had it among its candidates (PairTTL)
	down             atomic.Bool

	mu        sync.Mutex
	flights   map[*flight]struct{}
	since     time.Time
	lastErr   string
	probing   int // probes under way
	lastProbe time.Time
	// okProbes counts the consecutive successful probes of a pair that is
	// down (see Config.RecoverAfter); verdictAt is when the last probe
	// result that counted arrived, or when the pair last went down: a
	// probe started before it is stale and its result is ignored.
	okProbes  int
	verdictAt time.Time
}

// flight is one request in flight on a pair. Stall detection is per
// flight: a flight is quiet for as long as neither its own connection has
// moved a byte nor its caller has started a read, counted from its start,
// and it is stuck when it has been quiet for FailAfter while it waits on
// the network (in RoundTrip, or with its caller blocked in a body read).
type flight struct {
	cancel    context.CancelCauseFunc
	start     int64                     // unix ns; set before the flight is published
	mark      atomic.Int64              // unix ns the caller last entered a body read
	conn      atomic.Pointer[countConn] // its connection, once it has one
	reading   atomic.Int32              // body reads under way
	delivered atomic.Bool               // the response was handed to the caller
}

// quiet returns how long the flight has moved nothing as of now (unix ns).
func (f *flight) quiet(now int64) time.Duration {
	last := max(f.start, f.mark.Load())
	if c := f.conn.Load(); c != nil {
		last = max(last, c.last.Load())
	}
	return time.Duration(now - last)
}

// waiting reports whether the flight waits on the network: its response
// has not arrived yet, or its caller is blocked reading the body. A body
// the caller does not read is not stalled, however long it sits.
func (f *flight) waiting() bool {
	return !f.delivered.Load() || f.reading.Load() > 0
}

// quietest returns the longest quiet time of p's waiting flights. Caller
// holds p.mu.
func (p *pair) quietest(now int64) time.Duration {
	var q time.Duration
	for f := range p.flights {
		if f.waiting() {
			q = max(q, f.quiet(now))
		}
	}
	return q
}

// stuck returns p's flights that waited on the network with nothing moving
// on their own connection for at least window. Caller holds p.mu.
func (p *pair) stuck(now int64, window time.Duration) []*flight {
	var out []*flight
	for f := range p.flights {
		if f.waiting() && f.quiet(now) >= window {
			out = append(out, f)
		}
	}
	return out
}

// connOf returns the countConn under c (a TLS connection wraps it).
func connOf(c net.Conn) *countConn {
	for i := 0; i < 4 && c != nil; i++ {
		switch x := c.(type) {
		case *countConn:
			return x
		case interface{ NetConn() net.Conn }:
			c = x.NetConn()
		default:
			return nil
		}
	}
	return nil
}

// NewTransport builds a Transport and starts its probe loop; Close stops it.
func NewTransport(cfg Config) (*Transport, error) {
	cfg.setDefaults()
	if cfg.Scheme != "http" && cfg.Scheme != "https" {
		return nil, fmt.Errorf("%w: scheme %q", ErrBadAddr, cfg.Scheme)
	}
	t := &Transport{
		cfg:     cfg,
		log:     cfg.Log,
		pairs:   map[string]*pair{},
		remotes: map[string]*endpoint{},
		lists:   map[string][]*pair{},
		peers:   map[string]Peer{},
		kick:    make(chan *pair, 64),
	}
	addrs := cfg.LocalAddrs
	if len(addrs) == 0 {
		addrs = []string{""}
	}
	nets := localNets()
	seen := map[string]bool{}
	for _, a := range addrs {
		loc, err := t.newIface(a, nets)
		if err != nil {
			return nil, err
		}
		if seen[loc.addr] {
			return nil, fmt.Errorf("%w: local address %q listed twice", ErrBadAddr, a)
		}
		seen[loc.addr] = true
		t.locals = append(t.locals, loc)
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	t.wg.Add(1)
	go t.loop()
	return t, nil
}

func localNets() []*net.IPNet {
	var out []*net.IPNet
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			out = append(out, n)
		}
	}
	return out
}

// zoneNets returns the addresses of the interface that an IPv6 zone (a
// name or an index) names.
func zoneNets(zone string) ([]*net.IPNet, error) {
	ifc, err := net.InterfaceByName(zone)
	if err != nil {
		i, aerr := strconv.Atoi(zone)
		if aerr != nil {
			return nil, err
		}
		if ifc, err = net.InterfaceByIndex(i); err != nil {
			return nil, err
		}
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return nil, err
	}
	var out []*net.IPNet
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			out = append(out, n)
		}
	}
	return out, nil
}

func (t *Transport) newIface(a string, nets []*net.IPNet) (*iface, error) {
	loc := &iface{}
	host := a
	if h, _, err := net.SplitHostPort(a); err == nil {
		host = h
	}
	d := &net.Dialer{Timeout: t.cfg.FailAfter, KeepAlive: 15 * time.Second}
	if host != "" {
		na, err := netip.ParseAddr(host)
		if err != nil {
			return nil, fmt.Errorf("%w: local address %q is not an IP", ErrBadAddr, a)
		}
		ip, zone := net.IP(na.WithZone("").AsSlice()), na.Zone()
		loc.ip, loc.addr = ip, ip.String()
		if zone != "" { // an IPv6 link-local address: "fe80::1%eth0"
			loc.addr += "%" + zone
			if nets, err = zoneNets(zone); err != nil {
				return nil, fmt.Errorf("%w: local address %q: %v", ErrBadAddr, a, err)
			}
		} else if ip.To4() == nil && ip.IsLinkLocalUnicast() {
			return nil, fmt.Errorf("%w: link-local local address %q needs a zone (%%interface)", ErrBadAddr, a)
		}
		d.LocalAddr = &net.TCPAddr{IP: ip, Zone: zone}
		onIface := false
		for _, n := range nets { // the interface's own subnet first
			if n.IP.Equal(ip) {
				loc.subnet = &net.IPNet{IP: n.IP.Mask(n.Mask), Mask: n.Mask}
				onIface = true
			}
		}
		// A source address must be one of this host's: the unspecified
		// address, an interface's own address or any of 127/8 (which can
		// always be bound). If the interfaces cannot be listed, trust it.
		if !onIface && len(nets) > 0 && !ip.IsUnspecified() && !isLoopback4(ip) {
			return nil, fmt.Errorf("%w: local address %q is on no interface of this host", ErrBadAddr, a)
		}
		if loc.subnet == nil {
			for _, n := range nets { // e.g. 127.0.0.5 inside lo's 127.0.0.0/8
				if n.Contains(ip) {
					loc.subnet = &net.IPNet{IP: n.IP.Mask(n.Mask), Mask: n.Mask}
					break
				}
			}
		}
	}
	loc.dialer = d
	return loc, nil
}

// newRoundTrippers gives p its own connection pools, dialing from its
// local interface. Bytes of data connections are progress on the pair and
// on the connection; those of probe connections are counted but are not
// progress (a probe must not hide a stall).
func (t *Transport) newRoundTrippers(p *pair) {
	loc := p.loc
	dialer := func(progress bool) func(ctx context.Context, network, addr string) (net.Conn, error) {
		dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := loc.dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			cc := newCountConn(c, &loc.c, nil, nil)
			cc.b = &p.c
			if progress {
				cc.progress = &p.lastProgress
			}
			return cc, nil
		}
		if t.cfg.Secure == nil {
			return dial
		}
		return func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			if sc, err := t.cfg.Secure(ctx, c); !errors.Is(err, ErrPlainPeer) {
				return sc, err
			}
			return dial(ctx, network, addr)
		}
	}
	p.rt = &http.Transport{
		DialContext:           dialer(true),
		TLSClientConfig:       t.cfg.TLS,
		MaxIdleConns:          0,
		MaxIdleConnsPerHost:   t.cfg.MaxIdleConnsPerHost,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: t.cfg.ResponseHeaderTimeout,
		DisableCompression:    true,
		WriteBufferSize:       64 << 10,
		ReadBufferSize:        64 << 10,
	}
	p.probeRT = &http.Transport{
		DialContext:         dialer(false),
		TLSClientConfig:     t.cfg.TLS,
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
}

// closeIdle closes the idle pooled connections of p, data and probe.
func (p *pair) closeIdle() {
	p.rt.CloseIdleConnections()
	p.probeRT.CloseIdleConnections()
}

// isLoopback4 reports whether ip is in 127.0.0.0/8.
func isLoopback4(ip net.IP) bool {
	ip4 := ip.To4()
	return ip4 != nil && ip4[0] == 127
}

// pair returns the state of (loc, remote), creating it; the scheme of a
// remote address is the one it was first seen with.
func (t *Transport) pair(loc *iface, remote, scheme string) *pair {
	key := loc.addr + "|" + remote
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.pairs[key]
	if p == nil {
		rem := t.remotes[remote]
		if rem == nil {
			rem = &endpoint{addr: remote, scheme: scheme}
			t.remotes[remote] = rem
		}
		p = &pair{key: key, loc: loc, rem: rem, flights: map[*flight]struct{}{}}
		t.newRoundTrippers(p)
		now := time.Now().UnixNano()
		p.lastProgress.Store(now)
		p.lastUsed.Store(now)
		t.pairs[key] = p
	}
	return p
}

// pairsFor returns the usable pairs for a peer's addresses.
func (t *Transport) pairsFor(addrs []string) ([]*pair, error) {
	if len(addrs) == 0 {
		return nil, ErrNoAddrs
	}
	key := strings.Join(addrs, ",")
	t.mu.Lock()
	ps, ok := t.lists[key]
	if ok { // still valid unless a pair was dropped
		for _, p := range ps {
			if t.pairs[p.key] != p {
				ok = false
				break
			}
		}
	}
	t.mu.Unlock()
	if ok {
		markWanted(ps)
		return ps, nil
	}
	ps = nil
	for _, ra := range addrs {
		hp, scheme, err := ParseAddr(ra)
		if err != nil {
			return nil, err
		}
		for _, loc := range t.usableLocals(hp) {
			ps = append(ps, t.pair(loc, hp, scheme))
		}
	}
	if len(ps) == 0 {
		return nil, fmt.Errorf("%w: no usable interface pair for %v", ErrNoAddrs, addrs)
	}
	t.mu.Lock()
	t.lists[key] = ps
	t.mu.Unlock()
	markWanted(ps)
	return ps, nil
}

// Down reports whether every pair this transport keeps to addrs (a peer's
// addresses, as given to Do) is down: as far as it can tell, the peer is
// gone or hangs. It is false when it keeps none yet.
func (t *Transport) Down(addrs []string) bool {
	t.mu.Lock()
	ps := t.lists[strings.Join(addrs, ",")]
	t.mu.Unlock()
	for _, p := range ps {
		if !p.down.Load() {
			return false
		}
	}
	return len(ps) > 0
}

// markWanted records that a request has ps among its candidates: they are in
// use (see Config.PairTTL) even if the picker passes them over.
func markWanted(ps []*pair) {
	now := time.Now().UnixNano()
	for _, p := range ps {
		p.wanted.Store(now)
	}
}

func (t *Transport) usableLocals(remote string) []*iface {
	if f := t.cfg.PairFilter; f != nil {
		var out []*iface
		for _, loc := range t.locals {
			if f(loc.addr, remote) {
				out = append(out, loc)
			}
		}
		return out
	}
	host := remote
	if h, _, err := net.SplitHostPort(remote); err == nil {
		host = h
	}
	ip := net.ParseIP(host)
	var out []*iface
	if ip != nil {
		for _, loc := range t.locals {
			if loc.subnet != nil && loc.subnet.Contains(ip) {
				out = append(out, loc)
			}
		}
	}
	if len(out) == 0 {
		return t.locals
	}
	return out
}

// pick returns the least-loaded untried pair, preferring pairs that are up;
// ties go round-robin. Load is the requests in flight on the local interface
// plus those in flight to the remote address. The round-robin is per peer
// (kept on the endpoint of its first address): one counter shared by all
// peers would, with requests going to two peers in turn, advance by two
// between two picks for the same peer and give it the same pair every time.
func (t *Transport) pick(ps []*pair, tried map[*pair]bool) *pair {
	n := len(ps)
	start := int(ps[0].rem.rr.Add(1) % uint64(n))
	var best *pair
	var bestLoad, bestOwn int64
	bestDown := false
	for i := 0; i < n; i++ {
		p := ps[(start+i)%n]
		if tried[p] {
			continue
		}
		down := p.down.Load()
		load := p.loc.inflight.Load() + p.rem.inflight.Load()
		own := p.inflight.Load()
		better := best == nil ||
			(bestDown && !down) ||
			(down == bestDown && (load < bestLoad || (load == bestLoad && own < bestOwn)))
		if better {
			best, bestLoad, bestOwn, bestDown = p, load, own, down
		}
	}
	return best
}

// Replayable reports whether req may be sent again after a failure: an
// idempotent method (or an Idempotency-Key header) and a body that is empty
// or can be re-created with GetBody.
func Replayable(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
	default:
		if req.Header.Get("Idempotency-Key") == "" && req.Header.Get("X-Idempotency-Key") == "" {
			return false
		}
	}
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// SetPeers tells the transport the cluster's peers, so RoundTrip can map a
// request's host (a peer ID or any one of its addresses) to all of them.
func (t *Transport) SetPeers(peers []Peer) {
	m := make(map[string]Peer, len(peers)*3)
	for _, p := range peers {
		if p.ID != "" {
			m[p.ID] = p
		}
		for _, a := range p.Addrs {
			m[a] = p
			if hp, _, err := ParseAddr(a); err == nil {
				m[hp] = p
			}
		}
	}
	t.mu.Lock()
	t.peers = m
	t.mu.Unlock()
}

// RoundTrip implements http.RoundTripper: the request goes to the peer that
// req.URL.Host names (by ID or by one of its addresses, see SetPeers; an
// unknown host is a one-address peer), over its least-loaded pair. The Host
// header keeps the original host, so signed requests stay valid.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.mu.Lock()
	peer, ok := t.peers[req.URL.Host]
	t.mu.Unlock()
	if !ok {
		peer = Peer{ID: req.URL.Host, Addrs: []string{req.URL.Host}}
	}
	scheme := req.URL.Scheme
	if scheme == "" {
		scheme = t.cfg.Scheme
	}
	return t.do(req.Context(), peer, req, scheme, req.URL.Host)
}

// Do sends req to peer over its least-loaded usable pair and retries it on
// another pair that is not down when it fails and is Replayable. When the
// connection under a GET response's body fails part-way and the response
// names its version (ETag or Last-Modified), the rest is fetched from
// another pair with a Range request, and the body reads on unbroken.
// req.URL carries only the path and query; Do fills in the scheme and the
// chosen address. The response body must be closed.
func (t *Transport) Do(ctx context.Context, peer Peer, req *http.Request) (*http.Response, error) {
	return t.do(ctx, peer, req, t.cfg.Scheme, "")
}

func (t *Transport) do(ctx context.Context, peer Peer, req *http.Request, scheme, host string) (*http.Response, error) {
	if t.closed.Load() {
		return nil, ErrClosed
	}
	ps, err := t.pairsFor(peer.Addrs)
	if err != nil {
		return nil, err
	}
	attempts := 1
	if Replayable(req) {
		attempts = t.cfg.MaxAttempts
	}
	tried := make(map[*pair]bool, 4)
	var lastErr error
	for i := 0; i < attempts; i++ {
		p := t.pick(ps, tried)
		if p == nil || (i > 0 && p.down.Load()) {
			// Every pair left is down too: the peer itself is gone or
			// hangs, and a caller with another node to ask should not
			// wait for a stall on each of its pairs in turn.
			break
		}
		tried[p] = true
		if i > 0 {
			p.loc.retries.Add(1)
			t.log.Debug("netx: retrying", "peer", peer.ID, "local", p.loc.addr, "remote", p.rem.addr, "err", lastErr)
		}
		resp, err := t.attempt(ctx, p, req, i, scheme, host)
		if err == nil {
			if resp.Body != http.NoBody {
				t.resumable(ctx, req, resp, p, ps, scheme, host)
			}
			return resp, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func (t *Transport) attempt(ctx context.Context, p *pair, req *http.Request, n int, scheme, host string) (*http.Response, error) {
	actx, cancel := context.WithCancelCause(ctx)
	f := &flight{cancel: cancel}
	// The connection the request gets is where its own progress is seen.
	tctx := httptrace.WithClientTrace(actx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		if c := connOf(i.Conn); c != nil {
			f.conn.Store(c)
		}
	}})
	r := req.Clone(tctx)
	if n > 0 && req.Body != nil && req.Body != http.NoBody {
		b, err := req.GetBody()
		if err != nil {
			cancel(nil)
			return nil, fmt.Errorf("netx: replay body: %w", err)
		}
		r.Body = b
	}
	r.URL.Scheme = scheme
	if p.rem.scheme != "" {
		r.URL.Scheme = p.rem.scheme
	}
	r.URL.Host = p.rem.addr
	if r.Host == "" {
		r.Host = host
	}
	t.start(p, f)
	resp, err := p.rt.RoundTrip(r)
	if err != nil {
		cause := context.Cause(actx)
		t.finish(p, f)
		if ctx.Err() != nil { // the caller gave up: not the pair's fault
			return nil, err
		}
		if errors.Is(cause, ErrPairDown) && !errors.Is(err, ErrPairDown) {
			err = fmt.Errorf("%w: %w", ErrPairDown, err)
		}
		t.fail(p, err)
		return nil, fmt.Errorf("%w: %s %s from %s: %w", ErrUnreachable, req.Method, p.rem.addr, p.loc.name(), err)
	}
	if resp.Body == nil || resp.Body == http.NoBody {
		t.finish(p, f)
		return resp, nil
	}
	resp.Body = &body{rc: resp.Body, t: t, p: p, f: f, parent: ctx, actx: actx}
	f.delivered.Store(true)
	return resp, nil
}

func (loc *iface) name() string {
	if loc.addr == "" {
		return "any"
	}
	return loc.addr
}

func (t *Transport) start(p *pair, f *flight) {
	now := time.Now().UnixNano()
	f.start = now // the clock of the flight's stall starts with it
	p.mu.Lock()
	p.flights[f] = struct{}{}
	p.mu.Unlock()
	p.inflight.Add(1)
	p.loc.inflight.Add(1)
	p.rem.inflight.Add(1)
	p.requests.Add(1)
	p.loc.requests.Add(1)
	p.lastUsed.Store(now)
	if p.inflight.Load() == 1 { // the clock of a stall starts with the request
		p.lastProgress.Store(now)
	}
}

func (t *Transport) finish(p *pair, f *flight) {
	p.mu.Lock()
	_, ok := p.flights[f]
	delete(p.flights, f)
	p.mu.Unlock()
	if ok {
		p.inflight.Add(-1)
		p.loc.inflight.Add(-1)
		p.rem.inflight.Add(-1)
	}
	f.cancel(nil)
}

// fail counts an error on p and takes it out for new requests, and has it
// probed at once. Requests still in flight on it are not aborted here (one
// failed request says little about its siblings, which may just be waiting
// for a slow server): only a failed probe aborts them, and only those whose
// own connection has stalled.
func (t *Transport) fail(p *pair, err error) {
	p.errors.Add(1)
	p.loc.errors.Add(1)
	t.markDown(p, err, false)
	select {
	case t.kick <- p:
	default: // the loop is behind: the pair is probed at its next tick
	}
}

// stalled reports whether no data connection of p has moved a byte for
// FailAfter.
func (t *Transport) stalled(p *pair) bool {
	return time.Since(time.Unix(0, p.lastProgress.Load())) > t.cfg.FailAfter
}

// markDown takes p out; with abort, the flights on it that are stuck (see
// pair.stuck) are aborted too.
func (t *Transport) markDown(p *pair, err error, abort bool) {
	var stuck []*flight
	if abort {
		p.mu.Lock()
		stuck = p.stuck(time.Now().UnixNano(), t.cfg.FailAfter)
		p.mu.Unlock()
	}
	t.takeDown(p, err, stuck)
}

// takeDown takes p out for new requests, restarts its recovery count,
// closes its idle pooled connections (so none is reused once it is back)
// and aborts the flights in stuck.
func (t *Transport) takeDown(p *pair, err error, stuck []*flight) {
	p.mu.Lock()
	was := p.down.Swap(true)
	now := time.Now()
	if !was {
		p.since = now
	}
	p.lastErr = err.Error()
	p.okProbes = 0
	p.verdictAt = now // probes started before this are stale
	p.mu.Unlock()
	p.closeIdle()
	if !was {
		t.log.Warn("netx: pair down", "local", p.loc.name(), "remote", p.rem.addr, "err", err, "aborted", len(stuck))
	}
	for _, f := range stuck {
		f.cancel(ErrPairDown)
	}
}

func (t *Transport) markUp(p *pair) {
	p.mu.Lock()
	was := p.down.Swap(false)
	var downFor time.Duration
	if was {
		downFor = time.Since(p.since)
		p.since = time.Now()
	}
	p.okProbes = 0
	p.mu.Unlock()
	if was {
		// Connections pooled while the pair was down (by requests that
		// finished then) are not trusted either: it starts afresh.
		p.closeIdle()
		t.log.Info("netx: pair up", "local", p.loc.name(), "remote", p.rem.addr, "down_for", downFor)
	}
}

// body tracks a response body: the request stays in flight until the body
// is drained or closed.
type body struct {
	rc     io.ReadCloser
	t      *Transport
	p      *pair
	f      *flight
	parent context.Context
	actx   context.Context
	done   atomic.Bool
}

func (b *body) Read(buf []byte) (int, error) {
	// While the caller is blocked here the flight waits on the network;
	// its quiet time starts now at the latest.
	b.f.mark.Store(time.Now().UnixNano())
	b.f.reading.Add(1)
	n, err := b.rc.Read(buf)
	b.f.reading.Add(-1)
	if err == io.EOF {
		b.end()
	} else if err != nil {
		if b.parent.Err() == nil {
			if errors.Is(context.Cause(b.actx), ErrPairDown) && !errors.Is(err, ErrPairDown) {
				err = fmt.Errorf("%w: %w", ErrPairDown, err)
			}
			if !b.done.Load() {
				b.t.fail(b.p, err)
			}
		}
		b.end()
	}
	return n, err
}

func (b *body) Close() error {
	err := b.rc.Close()
	b.end()
	return err
}

func (b *body) end() {
	if b.done.CompareAndSwap(false, true) {
		b.t.finish(b.p, b.f)
	}
}

// loop probes pairs that are down or idle and drops pairs unused for long.
func (t *Transport) loop() {
	defer t.wg.Done()
	tick := time.NewTicker(t.cfg.FailAfter / 4)
	defer tick.Stop()
	for {
		select {
		case <-t.ctx.Done():
			return
		case now := <-tick.C:
			t.check(now)
		case p := <-t.kick:
			t.probeNow(p)
		}
	}
}

// maxProbes bounds the probes under way to one pair that is down.
const maxProbes = 4

func (t *Transport) check(now time.Time) {
	t.mu.Lock()
	ps := make([]*pair, 0, len(t.pairs))
	var dropped []*pair
	for k, p := range t.pairs {
		used := max(p.lastUsed.Load(), p.wanted.Load())
		if p.inflight.Load() == 0 && now.Sub(time.Unix(0, used)) > t.cfg.PairTTL {
			delete(t.pairs, k)
			dropped = append(dropped, p)
			continue
		}
		ps = append(ps, p)
	}
	if len(dropped) > 0 {
		// The address lists and remote endpoints only dropped pairs
		// used go too: a peer whose addresses changed leaves nothing.
		for k, l := range t.lists {
			for _, p := range l {
				if t.pairs[p.key] != p {
					delete(t.lists, k)
					break
				}
			}
		}
		live := make(map[*endpoint]bool, len(t.remotes))
		for _, p := range t.pairs {
			live[p.rem] = true
		}
		for a, e := range t.remotes {
			if !live[e] {
				delete(t.remotes, a)
			}
		}
	}
	t.mu.Unlock()
	for _, p := range dropped {
		p.closeIdle()
	}
	for _, p := range ps {
		// A pair is probed when it is idle or when one of its requests
		// has moved nothing for an interval, even while its siblings
		// stream: a stall is per connection.
		idle := now.Sub(time.Unix(0, p.lastProgress.Load()))
		p.mu.Lock()
		idle = max(idle, p.quietest(now.UnixNano()))
		// A pair that is down gets a new probe every interval even while
		// older ones wait for their timeout, so it comes back within about
		// RecoverAfter intervals of being reachable again.
		limit := 1
		if p.down.Load() {
			limit = maxProbes
		}
		due := p.probing < limit && now.Sub(p.lastProbe) >= t.cfg.ProbeInterval &&
			(p.down.Load() || idle >= t.cfg.ProbeInterval)
		if due {
			p.probing++
			p.lastProbe = now
		}
		p.mu.Unlock()
		if due {
			t.wg.Add(1)
			go t.probe(p)
		}
	}
}

// probeNow starts a probe of p unless maxProbes are under way. Only the
// loop calls it, so that no probe starts once Close waits for them.
func (t *Transport) probeNow(p *pair) {
	p.mu.Lock()
	due := p.probing < maxProbes
	if due {
		p.probing++
		p.lastProbe = time.Now()
	}
	p.mu.Unlock()
	if due {
		t.wg.Add(1)
		go t.probe(p)
	}
}

func (t *Transport) probe(p *pair) {
	defer t.wg.Done()
	started := time.Now()
	ctx, cancel := context.WithTimeout(t.ctx, t.cfg.FailAfter)
	defer cancel()
	err := t.probeOnce(ctx, p)
	p.mu.Lock()
	p.probing--
	p.mu.Unlock()
	if t.ctx.Err() != nil {
		return
	}
	t.verdict(p, started, err)
}

// verdict acts on the result of a probe of p started at started. A result
// is stale, and ignored, when the probe started before the previous result
// that counted arrived or before the pair last went down: so probes that
// overlap count once, and a late answer to an old probe does not outvote
// newer ones.
//
// A pair that is down comes back after Config.RecoverAfter consecutive
// successes. A failure restarts that count; it aborts the requests on the
// pair that are stuck (their own connection moved nothing for FailAfter
// while they waited on the network) and takes the pair out when it
// aborted some or when nothing at all moved on the pair for FailAfter.
// Requests still moving bytes are left alone, and a quiet request on a
// pair whose probes succeed is never aborted.
func (t *Transport) verdict(p *pair, started time.Time, err error) {
	now := time.Now()
	p.mu.Lock()
	if started.Before(p.verdictAt) {
		p.mu.Unlock()
		return
	}
	p.verdictAt = now
	if err == nil {
		back := false
		if p.down.Load() {
			p.okProbes++
			back = p.okProbes >= t.cfg.RecoverAfter
		}
		p.mu.Unlock()
		if back {
			t.markUp(p)
		}
		return
	}
	p.okProbes = 0
	stuck := p.stuck(now.UnixNano(), t.cfg.FailAfter)
	if len(stuck) == 0 && !t.stalled(p) {
		if p.down.Load() {
			p.lastErr = err.Error()
		}
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	t.takeDown(p, fmt.Errorf("probe: %w", err), stuck)
}

func (t *Transport) probeOnce(ctx context.Context, p *pair) error {
	if t.cfg.ProbePath == "" {
		c, err := p.loc.dialer.DialContext(ctx, "tcp", p.rem.addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
	scheme := t.cfg.Scheme
	if p.rem.scheme != "" {
		scheme = p.rem.scheme
	}
	// The zone of a link-local remote ("[fe80::1%eth0]:80") is escaped in a URL.
	host := strings.Replace(p.rem.addr, "%", "%25", 1)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+host+t.cfg.ProbePath, nil)
	if err != nil {
		return err
	}
	resp, err := p.probeRT.RoundTrip(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode >= 500 {
		return fmt.Errorf("probe status %d", resp.StatusCode)
	}
	return nil
}

// Close stops probing and closes idle connections. Requests in flight finish.
func (t *Transport) Close() error {
	if t.closed.Swap(true) {
		return nil
	}
	t.cancel()
	t.wg.Wait()
	t.mu.Lock()
	ps := make([]*pair, 0, len(t.pairs))
	for _, p := range t.pairs {
		ps = append(ps, p)
	}
	t.mu.Unlock()
	for _, p := range ps {
		p.closeIdle()
	}
	return nil
}

// IfaceStats are the counters of one local interface, for metrics and admin.
type IfaceStats struct {
	Local     string `json:"local"` // source address; "" = unbound
	State     State  `json:"state"`
	PairsUp   int    `json:"pairs_up"`
	PairsDown int    `json:"pairs_down"`
	BytesSent uint64 `json:"bytes_sent"`
	BytesRecv uint64 `json:"bytes_recv"`
	Requests  uint64 `json:"requests"`
	Errors    uint64 `json:"errors"`
	Retries   uint64 `json:"retries"` // requests retried from this interface
	InFlight  int64  `json:"in_flight"`
}

// PairStats are the counters of one (local, remote) pair.
type PairStats struct {
	Local     string    `json:"local"`
	Remote    string    `json:"remote"`
	State     State     `json:"state"`
	Since     time.Time `json:"since"`
	LastError string    `json:"last_error,omitempty"`
	BytesSent uint64    `json:"bytes_sent"`
	BytesRecv uint64    `json:"bytes_recv"`
	Requests  uint64    `json:"requests"`
	Errors    uint64    `json:"errors"`
	InFlight  int64     `json:"in_flight"`
}

// Pairs returns the state of every known pair, sorted by local then remote.
func (t *Transport) Pairs() []PairStats {
	t.mu.Lock()
	ps := make([]*pair, 0, len(t.pairs))
	for _, p := range t.pairs {
		ps = append(ps, p)
	}
	t.mu.Unlock()
	out := make([]PairStats, 0, len(ps))
	for _, p := range ps {
		p.mu.Lock()
		s := PairStats{Local: p.loc.addr, Remote: p.rem.addr, Since: p.since, LastError: p.lastErr}
		p.mu.Unlock()
		if p.down.Load() {
			s.State = StateDown
		}
		s.BytesSent, s.BytesRecv = p.c.sent.Load(), p.c.recv.Load()
		s.Requests, s.Errors, s.InFlight = p.requests.Load(), p.errors.Load(), p.inflight.Load()
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Local != out[j].Local {
			return out[i].Local < out[j].Local
		}
		return out[i].Remote < out[j].Remote
	})
	return out
}

// Stats returns the counters of every local interface, in configured order.
func (t *Transport) Stats() []IfaceStats {
	pairs := t.Pairs()
	out := make([]IfaceStats, 0, len(t.locals))
	for _, loc := range t.locals {
		s := IfaceStats{
			Local:     loc.addr,
			BytesSent: loc.c.sent.Load(),
			BytesRecv: loc.c.recv.Load(),
			Requests:  loc.requests.Load(),
			Errors:    loc.errors.Load(),
			Retries:   loc.retries.Load(),
			InFlight:  loc.inflight.Load(),
		}
		for _, p := range pairs {
			if p.Local != loc.addr {
				continue
			}
			if p.State == StateDown {
				s.PairsDown++
			} else {
				s.PairsUp++
			}
		}
		switch {
		case s.PairsDown > 0 && s.PairsUp == 0:
			s.State = StateDown
		case s.PairsDown > 0:
			s.State = StateDegraded
		}
		out = append(out, s)
	}
	return out
}
