// Package node is the one place that wires a Slipstream node together from
// its configuration: the local store over the mountpaths, the replicated
// cluster metadata, the gateway that routes S3 requests to the owners of
// objects, the peer protocol that serves this node's objects to the other
// nodes, and the listeners on every public and intra-cluster address. It
// owns the node's lifecycle: New starts everything, Close stops it.
package node

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/config"
	"github.com/slipstream-io/slipstream/internal/netx"
	"github.com/slipstream-io/slipstream/internal/peer"
	"github.com/slipstream-io/slipstream/internal/pki"
	"github.com/slipstream-io/slipstream/internal/s3api"
	"github.com/slipstream-io/slipstream/internal/seclink"
	"github.com/slipstream-io/slipstream/internal/store"
	"github.com/slipstream-io/slipstream/internal/sysstat"
	"github.com/slipstream-io/slipstream/internal/tier"
	"github.com/slipstream-io/slipstream/internal/volume"
)

// Paths served besides S3 on the public listeners. Bucket names cannot
// start with '_', so these never collide with a bucket.
const (
	PublicHealthPath  = "/_slipstream/health"
	PublicMetricsPath = "/_slipstream/metrics"
	StatsPath         = "/slipstream/v1/stats"
)

// Options are what the embedding program adds to the config.
type Options struct {
	Log *slog.Logger
	// Cluster tunes consensus and health timings (tests shorten them).
	HeartbeatInterval, DownAfter time.Duration
	Raft                         cluster.RaftTimeouts
}

// publicMapCatchUp bounds how long a request for the public map waits for
// a node that has applied no map yet to catch up with the leader.
const publicMapCatchUp = 10 * time.Second

// minSecretLen is the shortest cluster secret the node takes without a
// warning.
const minSecretLen = 16

// Node is one running Slipstream node.
type Node struct {
	cfg       config.Node
	log       *slog.Logger
	store     *store.Store
	cluster   *cluster.Cluster
	transport *netx.Transport
	hc        *http.Client // intra-cluster requests of the node's own, with the secret
	tier      *tier.Tier
	local     *localService
	tombs     *tombstones
	vols      *volumes
	bgCancel  context.CancelFunc
	gw        *gateway
	reg       *prometheus.Registry
	httpm     *httpMetrics
	servers   []*http.Server
	wg        sync.WaitGroup

	// statusFill fill in the sections of the admin status; adminExtras add
	// admin endpoints (tier jobs, interfaces, volumes).
	statusFill  []func(*Sections)
	adminExtras map[string]http.Handler

	closeOnce sync.Once
	closeErr  error
}

// New starts a node: it opens the store, binds every listener (so an
// address conflict fails here, not later), joins the cluster and serves.
func New(ctx context.Context, cfg config.Node, opts Options) (*Node, error) {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("node", cfg.ID)
	if len(cfg.Secret) < minSecretLen {
		log.Warn("cluster_secret is short: whoever reaches the raft or intra addresses can guess it; use a long random one (openssl rand -hex 32)", "length", len(cfg.Secret))
	}
	n := &Node{
		cfg: cfg, log: log, reg: prometheus.NewRegistry(),
		adminExtras: map[string]http.Handler{},
	}
	ok := false
	defer func() {
		if !ok {
			n.Close(context.Background())
		}
	}()

	st, err := store.Open(ctx, store.Config{
		Mountpaths:    cfg.Mountpaths,
		HighWatermark: cfg.Space.HighWatermark,
		LowWatermark:  cfg.Space.LowWatermark,
		Policy:        cfg.Space.Policy,
		MaxBytes:      cfg.Space.MaxBytes,
	}, log)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", cfg.ID, err)
	}
	n.store = st

	intraLns, err := listenCounted(ctx, cfg.Intra)
	if err != nil {
		return nil, err
	}
	publicLns, err := listenCounted(ctx, cfg.Public)
	if err != nil {
		closeAll(intraLns)
		return nil, err
	}
	defer func() {
		if !ok { // listeners not yet handed to a server
			closeAll(intraLns)
			closeAll(publicLns)
		}
	}()
	links, err := newIntraLinks(cfg, log)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", cfg.ID, err)
	}
	tr, err := netx.NewTransport(netx.Config{LocalAddrs: cfg.Intra, ProbePath: "/health", Secure: links.secure(), Log: log})
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", cfg.ID, err)
	}
	n.transport = tr

	// The cluster's own requests (joins, changes forwarded to the leader,
	// health probes) carry the secret that its endpoints ask for.
	hc := &http.Client{Transport: withSecret{secret: cfg.Secret, rt: newPeerTransport(links.dialer())}}
	n.hc = hc
	cl, err := cluster.New(ctx, cluster.Config{
		NodeID:   cfg.ID,
		DataDir:  filepath.Join(cfg.DataDir, "cluster"),
		RaftBind: cfg.Raft,
		Self: cluster.NodeInfo{
			ID: cfg.ID, PublicAddrs: cfg.Public, IntraAddrs: cfg.Intra, Mountpaths: cfg.Mountpaths,
		},
		Seeds:             cfg.Seeds,
		Bootstrap:         cfg.Bootstrap,
		HoldsData:         holdsData(st, cfg.Mountpaths),
		Voters:            cfg.Voters,
		HTTPClient:        hc,
		Authorized:        func(r *http.Request) bool { return hasSecret(cfg.Secret, r) },
		RaftSecret:        cfg.Secret,
		Log:               log,
		HeartbeatInterval: opts.HeartbeatInterval,
		DownAfter:         opts.DownAfter,
		Raft:              opts.Raft,
	})
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", cfg.ID, err)
	}
	n.cluster = cl

	rep := &replicator{}    // its gateway is set below: the gateway needs the tier
	peers := &deletePeers{} // likewise
	n.tier, err = tier.New(ctx, tier.Config{
		Replicator:        rep,
		Peers:             peers,
		NodeID:            cfg.ID,
		JournalDir:        filepath.Join(cfg.DataDir, "journal"),
		SpoolDir:          filepath.Join(cfg.Mountpaths[0], "spool"), // fills spool on a data drive
		ParallelThreshold: cfg.Tier.ParallelThreshold,
		PartSize:          cfg.Tier.PartSize,
		FillParallel:      cfg.Tier.FetchConcurrency,
		DestageParallel:   cfg.Tier.DestageWorkers,
		MaxDirtyBytes:     cfg.Tier.DirtyCap,
		DirtyWait:         cfg.Tier.DirtyWait,
		Log:               log,
	}, st)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", cfg.ID, err)
	}
	tombs, err := openTombstones(filepath.Join(cfg.DataDir, "tombstones"), tombstoneRetention, time.Now)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", cfg.ID, err)
	}
	n.tombs = tombs
	local := &localService{meta: cl, store: st, tier: n.tier, tombs: tombs}
	n.local = local
	n.gw = &gateway{
		self:          cfg.ID,
		meta:          cl,
		local:         local,
		peers:         &peer.Client{Doer: &netxDoer{tr: tr, secret: cfg.Secret}},
		defaultCopies: cfg.DefaultCopies,
		log:           log,
		now:           time.Now,
		sync:          leaderSync(cl),
		confirmDown:   cl.ConfirmRefused,
		unreachable:   tr.Down,
		listBackend:   local.ListBackend,
	}
	rep.g, peers.g = n.gw, n.gw
	rj := &rejoin{self: cfg.ID, meta: cl, store: st, at: n.gw.at, log: log, stateFile: filepath.Join(cfg.DataDir, "rejoin-downs")}
	rj.checked = rj.loadChecked()
	local.rejoin = rj
	bgCtx, bgCancel := context.WithCancel(context.Background())
	n.bgCancel = bgCancel
	ts := &tierSync{tier: n.tier, log: log, ttl: cfg.Tier.TTL, base: bgCtx, props: map[string]cluster.BucketProps{}, taking: map[string]bool{},
		purge: func(ctx context.Context, bucket string) {
			if err := st.PurgeBucket(ctx, bucket, time.Now()); err != nil {
				log.Warn("removing what is left of a deleted bucket", "bucket", bucket, "err", err)
			}
		},
		takeover: func(ctx context.Context, owner string) {
			if k, err := n.tier.TakeOver(ctx, owner); err != nil {
				log.Error("taking over destaging", "owner", owner, "err", err)
			} else if k > 0 {
				log.Info("took over destaging of a dead owner's replicas", "owner", owner, "operations", k)
			}
		}}
	ts.apply(ctx, cl.Map())
	local.syncTier = ts.apply
	n.wg.Add(1)
	go func() { defer n.wg.Done(); ts.run(bgCtx, cl) }()
	n.wg.Add(1)
	go func() { defer n.wg.Done(); rj.run(bgCtx) }()
	rb := &rebalancer{self: cfg.ID, meta: cl, store: st, at: n.gw.at, rejoin: rj, log: log,
		parallel: cfg.Rebalance.Parallel, rate: cfg.Rebalance.Rate, downAfter: cfg.Rebalance.DownAfter, settle: cfg.Rebalance.Settle,
		now: time.Now, downSince: map[string]time.Time{}}
	n.registerRebalance(rb)
	if !cfg.Rebalance.Off {
		n.wg.Add(1)
		go func() { defer n.wg.Done(); rb.watch(bgCtx) }()
	}
	sc := &scrubber{self: cfg.ID, meta: cl, store: st, at: n.gw.at, log: log, rate: cfg.Scrub.Rate,
		interval: cfg.Scrub.Interval, stateFile: filepath.Join(cfg.DataDir, "scrub-last"), now: time.Now}
	n.registerScrub(sc)
	if cfg.Scrub.Interval > 0 {
		n.wg.Add(1)
		go func() { defer n.wg.Done(); sc.watch(bgCtx) }()
	}
	n.statusFill = append(n.statusFill, func(s *Sections) { s.Destage = n.tier.Backlog() })

	creds := map[string]string{}
	for _, c := range cfg.S3.Credentials {
		creds[c.AccessKey] = c.SecretKey
	}
	s3h, err := s3api.NewHandler(s3api.Config{
		Region: cfg.S3.Region, Credentials: creds, Domains: cfg.S3.Domains, Log: log,
	}, n.gw)
	if err != nil {
		return nil, err
	}

	n.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		netx.NewCollector(tr, append(append([]*netx.CountingListener{}, intraLns...), publicLns...)...))
	n.statusFill = append(n.statusFill, func(s *Sections) {
		s.Interfaces.PeerTransport, s.Interfaces.Paths = tr.Stats(), tr.Pairs()
		for _, l := range append(append([]*netx.CountingListener{}, intraLns...), publicLns...) {
			s.Interfaces.Listeners = append(s.Interfaces.Listeners, l.Stats())
		}
	})
	n.httpm = newHTTPMetrics(n.reg)
	n.gw.redirected = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "slipstream_copies_redirected_total",
		Help: "Copies of PUTs written to the next node in HRW order because their node was gone (its connections refused, or the health checks marked it down).",
	})
	n.reg.MustRegister(n.gw.redirected)
	metrics := promhttp.HandlerFor(n.reg, promhttp.HandlerOpts{})
	stats := sysstat.Handler(cfg.ID, cfg.Mountpaths, n.statsCounters)
	live := sysstat.Page(StatsPath)
	n.reg.MustRegister(newTierCollector(n.tier), newClusterCollector(n.cluster.Map, n.cluster.LeaderID, n.store.Mountpaths))
	n.registerJobs()
	vl, err := volume.NewLocal(volume.LocalConfig{Mountpaths: cfg.Mountpaths})
	if err != nil {
		return nil, fmt.Errorf("node %s: volumes: %w", cfg.ID, err)
	}
	n.vols = &volumes{
		self: cfg.ID, meta: cl, marks: cl, local: vl, handler: volume.NewHandler(vl), stateDir: filepath.Join(cfg.DataDir, "volumes"),
		log: log, open: map[string]openVolume{}, clients: map[string]*volume.Client{}, sync: leaderSync(cl), secret: cfg.Secret, dial: links.dialer(),
		electionWait: 10 * time.Second, metrics: newNBDMetrics(n.reg), sweepDelay: sweepDelay,
	}
	n.reg.MustRegister(newVolumeCollector(n.vols))
	n.vols.initState() // before the node serves any chunk request
	n.vols.handler.Coordinate(n.vols.coordinator)
	n.registerVolumeAdmin()
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.vols.collect(bgCtx) }()
	n.statusFill = append(n.statusFill, func(s *Sections) { s.Volumes = n.vols.states() })

	intra := http.NewServeMux()
	intra.Handle("/cluster/", cl.Handler())
	intra.Handle(peer.Prefix, requireSecret(cfg.Secret, peer.NewHandler(local)))
	intra.HandleFunc("/health", n.health)
	intra.Handle("/metrics", metrics)
	intra.Handle(StatsPath, stats)
	intra.Handle(sysstat.PagePath, live)
	intra.Handle(AdminPrefix, requireSecret(cfg.Secret, n.adminHandler()))
	intra.Handle("/volume/", requireSecret(cfg.Secret, n.vols.handler))
	intra.Handle("/debug/pprof/", requireSecret(cfg.Secret, http.HandlerFunc(pprof.Index)))
	intra.Handle("/debug/pprof/profile", requireSecret(cfg.Secret, http.HandlerFunc(pprof.Profile)))
	intra.HandleFunc(nbdInfoPath, func(w http.ResponseWriter, r *http.Request) { writeAdmin(w, nodeNBDURLs(cfg), nil) })

	public := http.NewServeMux()
	public.HandleFunc(PublicHealthPath, n.health)
	public.HandleFunc("GET "+cluster.PublicMapPath, func(w http.ResponseWriter, r *http.Request) {
		if cl.Map().Version == 0 && !r.URL.Query().Has("after") {
			// A node that has just started has applied no map yet (on a
			// restart, until the leader reaches it): it catches up with
			// the leader first, for a while, rather than answer with an
			// empty map; without a leader it answers with what it has.
			ctx, cancel := context.WithTimeout(r.Context(), publicMapCatchUp)
			_ = cl.Sync(ctx)
			cancel()
		}
		r = r.Clone(r.Context())
		r.URL.Path = cluster.PathMap
		r.Header.Del(peer.SecretHeader) // backends' keys never leave on public addresses
		cl.Handler().ServeHTTP(w, r)
	})
	public.Handle(PublicMetricsPath, metrics)
	public.Handle(StatsPath, stats)
	public.Handle(sysstat.PagePath, live)
	public.Handle("/", n.httpm.wrap(s3h))

	var tlsCfg *tls.Config
	if cfg.TLS.Enabled() {
		if tlsCfg, err = pki.ServerConfig(cfg.TLS.Cert, cfg.TLS.Key, ""); err != nil {
			return nil, fmt.Errorf("node %s: tls: %w", cfg.ID, err)
		}
	}
	var nbdTLS *tls.Config
	if cfg.NBDTLS.Enabled() {
		if nbdTLS, err = pki.ServerConfig(cfg.NBDTLS.Cert, cfg.NBDTLS.Key, cfg.NBDTLS.ClientCA); err != nil {
			return nil, fmt.Errorf("node %s: nbd_tls: %w", cfg.ID, err)
		}
		if cfg.NBDTLS.ClientCA == "" {
			log.Warn("nbd_tls has no client_ca: NBD traffic is encrypted, but any client is served")
		}
	}
	for _, ln := range intraLns {
		n.serve(links.listener(ln, log), intra, nil)
	}
	for _, ln := range publicLns {
		n.serve(ln, public, tlsCfg)
	}
	if len(cfg.NBD) > 0 || cfg.NBDSocket != "" {
		if err := n.vols.serve(bgCtx, cfg.NBD, cfg.NBDSocket, nbdTLS); err != nil {
			return nil, fmt.Errorf("node %s: %w", cfg.ID, err)
		}
	}
	ok = true
	log.Info("node started", "public", cfg.Public, "intra", cfg.Intra, "mountpaths", cfg.Mountpaths)
	return n, nil
}

// holdsData reports whether the node's drives hold objects or volume
// chunks, that is whether it was a member of a cluster before.
func holdsData(st *store.Store, mountpaths []string) bool {
	for _, mp := range st.Mountpaths() {
		if mp.Objects > 0 {
			return true
		}
	}
	keys, err := volume.LocalKeys(mountpaths)
	return err == nil && len(keys) > 0
}

// WaitReady blocks until the node knows a leader and sees itself up in the
// cluster map.
func (n *Node) WaitReady(ctx context.Context) error {
	if err := n.cluster.WaitForLeader(ctx); err != nil {
		return err
	}
	for {
		if ni, ok := n.cluster.Map().Node(n.cfg.ID); ok && ni.State == cluster.StateUp {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s: waiting to appear in the cluster map: %w", n.cfg.ID, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Cluster returns the node's handle on the cluster metadata.
func (n *Node) Cluster() *cluster.Cluster { return n.cluster }

func (n *Node) health(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	fmt.Fprintln(w, "ok")
}

func (n *Node) serve(ln net.Listener, h http.Handler, tlsCfg *tls.Config) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 5 * time.Minute, TLSConfig: tlsCfg}
	n.servers = append(n.servers, srv)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		var err error
		if tlsCfg != nil {
			err = srv.ServeTLS(ln, "", "")
		} else {
			err = srv.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("listener stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
}

// Close stops serving (letting requests in flight finish until ctx ends),
// leaves raft cleanly and closes the store.
func (n *Node) Close(ctx context.Context) error {
	n.closeOnce.Do(func() {
		var errs []error
		if n.vols != nil {
			// First, while the cluster transport still runs and before
			// the background context its requests carry ends: the NBD
			// server answers the requests in flight, on every mirror.
			n.vols.stopServing()
		}
		if n.bgCancel != nil {
			n.bgCancel()
		}
		for _, s := range n.servers {
			if err := s.Shutdown(ctx); err != nil {
				_ = s.Close()
			}
		}
		n.wg.Wait()
		if n.vols != nil {
			errs = append(errs, n.vols.close())
		}
		if n.tier != nil {
			errs = append(errs, n.tier.Close())
		}
		if n.cluster != nil {
			errs = append(errs, n.cluster.Close(ctx))
		}
		if n.transport != nil {
			errs = append(errs, n.transport.Close())
		}
		if n.store != nil {
			errs = append(errs, n.store.Close())
		}
		if n.tombs != nil {
			errs = append(errs, n.tombs.close())
		}
		n.closeErr = errors.Join(errs...)
	})
	return n.closeErr
}

// listenCounted listens on every address (never on all interfaces) and
// counts bytes per address.
func listenCounted(ctx context.Context, addrs []string) ([]*netx.CountingListener, error) {
	lns, err := netx.Listen(ctx, addrs)
	if err != nil {
		return nil, err
	}
	out := make([]*netx.CountingListener, len(lns))
	for i, l := range lns {
		out[i] = netx.CountListener(l)
	}
	return out, nil
}

func closeAll(lns []*netx.CountingListener) {
	for _, l := range lns {
		_ = l.Close()
	}
}

// requireSecret rejects intra-cluster requests without the cluster secret
// (when one is configured).
func requireSecret(secret string, h http.Handler) http.Handler {
	if secret == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hasSecret(secret, r) {
			http.Error(w, "cluster secret required", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// hasSecret reports whether r carries the cluster secret (any request
// does when there is none).
func hasSecret(secret string, r *http.Request) bool {
	return secret == "" || subtle.ConstantTimeCompare([]byte(r.Header.Get(peer.SecretHeader)), []byte(secret)) == 1
}

// withSecret adds the cluster secret to every request it sends.
type withSecret struct {
	secret string
	rt     http.RoundTripper
}

func (t withSecret) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.secret == "" {
		return t.rt.RoundTrip(r)
	}
	r = r.Clone(r.Context()) // a RoundTripper must not change the caller's request
	r.Header.Set(peer.SecretHeader, t.secret)
	return t.rt.RoundTrip(r)
}

// newPeerTransport is tuned for many concurrent streams between nodes.
func newPeerTransport(dial seclink.DialFunc) *http.Transport {
	return &http.Transport{
		Proxy:               nil,
		DialContext:         dial,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 128,
		IdleConnTimeout:     90 * time.Second,
		WriteBufferSize:     256 << 10,
		ReadBufferSize:      256 << 10,
		DisableCompression:  true,
	}
}
