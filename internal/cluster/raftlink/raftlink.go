// Package raftlink carries raft's traffic between nodes over TLS 1.3 and
// admits only peers that prove they hold the cluster secret.
//
// Each node presents a throwaway self-signed certificate, so TLS gives the
// link its encryption but no identity. Identity comes from the secret,
// bound to the connection: once TLS is up, the dialer sends
// HMAC-SHA256(secret, "dialer" | exporter) and the listener answers with
// HMAC-SHA256(secret, "listener" | exporter), where exporter is keying
// material exported from that TLS session (RFC 8446 section 7.5). A proof
// is good for one connection only, so it cannot be replayed, and a man in
// the middle holds two sessions with two different exporters, so it cannot
// relay one either. The dialer proves itself first: someone who merely
// reaches the port learns nothing derived from the secret.
//
// A connection is handed to raft only after both proofs check out, and
// each handshake runs in its own goroutine under a deadline, so a peer
// that connects and sends nothing holds up nobody.
package raftlink

import (
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Errors.
var (
	// ErrRefused means the other end did not prove it holds the secret.
	ErrRefused = errors.New("raftlink: peer does not hold the cluster secret")
	// ErrNotAdvertisable means the link would tell peers an address they
	// cannot dial (an unspecified IP such as 0.0.0.0).
	ErrNotAdvertisable = errors.New("raftlink: bind address is not advertisable: set an advertise address")
	// ErrNoSecret means Listen was given an empty secret.
	ErrNoSecret = errors.New("raftlink: the cluster secret is empty")
)

// Defaults.
const (
	// DefaultHandshakeTimeout bounds an incoming connection's TLS handshake
	// and proof.
	DefaultHandshakeTimeout = 5 * time.Second
	// DefaultMaxPending bounds the incoming handshakes in progress; more
	// connections are closed at once.
	DefaultMaxPending = 64
	// DefaultMaxPendingPerHost bounds the incoming handshakes in progress
	// from one IP address, so that one host cannot take every slot.
	DefaultMaxPendingPerHost = 8
)

const (
	exporterLabel = "EXPORTER-slipstream-raft"
	macLen        = sha256.Size
)

// Options tunes a Layer. The zero value uses the defaults.
type Options struct {
	// Advertise is the address peers dial (default: the bound address).
	Advertise net.Addr
	// HandshakeTimeout bounds an incoming handshake.
	HandshakeTimeout time.Duration
	// MaxPending bounds the incoming handshakes in progress.
	MaxPending int
	// MaxPendingPerHost bounds those from one IP address.
	MaxPendingPerHost int
	Log               *slog.Logger
}

// Layer is a raft.StreamLayer whose connections are authenticated and
// encrypted. It is safe for concurrent use.
type Layer struct {
	ln      net.Listener
	adv     net.Addr
	secret  []byte
	server  *tls.Config
	client  *tls.Config
	opts    Options
	log     *slog.Logger
	mu      sync.Mutex
	pending int             // incoming handshakes in progress
	perHost map[string]int  // the same by remote IP
	conns   chan net.Conn   // connections that passed their handshake
	ctx     context.Context // cancelled by Close
	cancel  context.CancelFunc
	once    sync.Once
	wg      sync.WaitGroup
}

var _ raft.StreamLayer = (*Layer)(nil)

// Listen binds bind ("host:port"; port 0 picks one) and starts accepting
// connections from peers that hold secret.
func Listen(bind, secret string, opts Options) (*Layer, error) {
	if secret == "" {
		return nil, ErrNoSecret
	}
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = DefaultMaxPending
	}
	if opts.MaxPendingPerHost <= 0 {
		opts.MaxPendingPerHost = DefaultMaxPendingPerHost
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	cert, err := throwawayCert()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("raftlink: %w", err)
	}
	l := &Layer{
		ln:     ln,
		adv:    opts.Advertise,
		secret: []byte(secret),
		server: &tls.Config{
			MinVersion:   tls.VersionTLS13,
			Certificates: []tls.Certificate{cert},
		},
		client: &tls.Config{
			MinVersion: tls.VersionTLS13,
			// The certificate carries no identity (see the package
			// comment): the peer is authenticated by its proof of the
			// secret, bound to this session's exporter.
			InsecureSkipVerify: true, //nolint:gosec // authenticated by the secret below
		},
		opts:    opts,
		log:     opts.Log,
		perHost: map[string]int{},
		conns:   make(chan net.Conn),
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	if a, ok := l.Addr().(*net.TCPAddr); !ok || a.IP == nil || a.IP.IsUnspecified() {
		ln.Close()
		return nil, fmt.Errorf("%w: %s", ErrNotAdvertisable, l.Addr())
	}
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

// Addr is the address peers dial: the advertise address if one was given.
func (l *Layer) Addr() net.Addr {
	if l.adv != nil {
		return l.adv
	}
	return l.ln.Addr()
}

// Accept returns the next incoming connection that passed its handshake.
func (l *Layer) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.ctx.Done():
		return nil, net.ErrClosed
	}
}

// Close stops listening, ends the handshakes in progress and waits for
// them. Connections already handed out stay open.
func (l *Layer) Close() error {
	var err error
	l.once.Do(func() {
		l.cancel()
		err = l.ln.Close()
		l.wg.Wait()
	})
	return err
}

// Dial connects to a peer's layer and proves the secret to it; it fails
// with ErrRefused when the peer does not prove it back.
func (l *Layer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	d := tls.Dialer{NetDialer: &net.Dialer{}, Config: l.client}
	c, err := d.DialContext(ctx, "tcp", string(address))
	if err != nil {
		return nil, fmt.Errorf("raftlink: dial %s: %w", address, err)
	}
	tc := c.(*tls.Conn)
	if err := l.prove(tc, time.Now().Add(timeout), "dialer", "listener"); err != nil {
		tc.Close()
		return nil, fmt.Errorf("raftlink: dial %s: %w", address, err)
	}
	return tc, nil
}

func (l *Layer) acceptLoop() {
	defer l.wg.Done()
	for {
		raw, err := l.ln.Accept()
		if err != nil {
			if l.ctx.Err() != nil {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			l.log.Warn("raft link: accept", "err", err)
			select {
			case <-l.ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		host := remoteHost(raw)
		if !l.reserve(host) {
			l.log.Warn("raft link: too many handshakes in progress, closing a connection", "remote", raw.RemoteAddr())
			raw.Close()
			continue
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			defer l.release(host)
			l.admit(raw)
		}()
	}
}

// reserve takes a handshake slot for a connection from host, unless every
// slot, or host's share of them, is taken.
func (l *Layer) reserve(host string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pending >= l.opts.MaxPending || l.perHost[host] >= l.opts.MaxPendingPerHost {
		return false
	}
	l.pending++
	l.perHost[host]++
	return true
}

// release gives back a slot reserve took.
func (l *Layer) release(host string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending--
	if l.perHost[host]--; l.perHost[host] <= 0 {
		delete(l.perHost, host)
	}
}

// remoteHost is the IP address c comes from (its whole address if it has
// no port).
func remoteHost(c net.Conn) string {
	a := c.RemoteAddr().String()
	if h, _, err := net.SplitHostPort(a); err == nil {
		return h
	}
	return a
}

// admit runs an incoming connection's handshake and hands it to Accept.
func (l *Layer) admit(raw net.Conn) {
	tc := tls.Server(raw, l.server)
	stop := context.AfterFunc(l.ctx, func() { tc.SetDeadline(time.Now()) })
	defer stop()
	if err := l.prove(tc, time.Now().Add(l.opts.HandshakeTimeout), "listener", "dialer"); err != nil {
		l.log.Warn("raft link: refused a connection", "remote", raw.RemoteAddr(), "err", err)
		tc.Close()
		return
	}
	select {
	case l.conns <- tc:
	case <-l.ctx.Done():
		tc.Close()
	}
}

// prove completes tc's TLS handshake and exchanges proofs of the secret
// before deadline: the dialer sends first, the listener checks it and
// answers. The deadline is lifted on success.
func (l *Layer) prove(tc *tls.Conn, deadline time.Time, self, peer string) error {
	if err := tc.SetDeadline(deadline); err != nil {
		return err
	}
	if err := tc.Handshake(); err != nil {
		return fmt.Errorf("tls handshake: %w", err)
	}
	st := tc.ConnectionState()
	ekm, err := st.ExportKeyingMaterial(exporterLabel, nil, 32)
	if err != nil {
		return fmt.Errorf("tls exporter: %w", err)
	}
	send := func() error {
		_, err := tc.Write(l.mac(self, ekm))
		return err
	}
	recv := func() error {
		got := make([]byte, macLen)
		if _, err := io.ReadFull(tc, got); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return fmt.Errorf("%w (it closed the connection)", ErrRefused)
			}
			return err
		}
		if !hmac.Equal(got, l.mac(peer, ekm)) {
			return ErrRefused
		}
		return nil
	}
	steps := []func() error{send, recv}
	if self == "listener" {
		steps = []func() error{recv, send}
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return tc.SetDeadline(time.Time{})
}

func (l *Layer) mac(role string, ekm []byte) []byte {
	h := hmac.New(sha256.New, l.secret)
	h.Write([]byte(role))
	h.Write([]byte{0})
	h.Write(ekm)
	return h.Sum(nil)
}

// throwawayCert makes the self-signed certificate TLS needs on the
// listening side; it identifies nothing.
func throwawayCert() (tls.Certificate, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("raftlink: key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().AddDate(100, 0, 0),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("raftlink: certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv}, nil
}
