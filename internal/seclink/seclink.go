// Package seclink encrypts connections between the nodes of a cluster with
// TLS 1.3 and admits only peers that prove they hold the cluster secret.
//
// Each side presents a throwaway self-signed certificate, so TLS gives the
// link its encryption but no identity. Identity comes from the secret,
// bound to the connection: once TLS is up, the dialer sends
// HMAC-SHA256(secret, "dialer" | exporter) and the listener answers with
// HMAC-SHA256(secret, "listener" | exporter), where exporter is keying
// material exported from that TLS session (RFC 8446 section 7.5) under a
// label of the link's purpose. A proof is good for one connection only, so
// it cannot be replayed; a man in the middle holds two sessions with two
// different exporters, so it cannot relay one either; and a proof made for
// one purpose (raft) is worthless for another (intra-cluster HTTP). The
// dialer proves itself first: someone who merely reaches the port learns
// nothing derived from the secret.
//
// A Listener hands out a connection only after both proofs check out, and
// runs each handshake in its own goroutine under a deadline, with bounded
// handshakes in progress (in all and per remote IP), so a peer that
// connects and sends nothing holds up nobody.
package seclink

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
)

// Errors.
var (
	// ErrRefused means the other end did not prove it holds the secret.
	ErrRefused = errors.New("seclink: peer does not hold the cluster secret")
	// ErrNoSecret means New was given an empty secret.
	ErrNoSecret = errors.New("seclink: the cluster secret is empty")
)

// Defaults.
const (
	// DefaultHandshakeTimeout bounds a handshake and its proofs when the
	// caller's context has no deadline, and every incoming one.
	DefaultHandshakeTimeout = 5 * time.Second
	// DefaultMaxPending bounds the incoming handshakes in progress; more
	// connections are closed at once.
	DefaultMaxPending = 64
	// DefaultMaxPendingPerHost bounds the incoming handshakes in progress
	// from one IP address, so that one host cannot take every slot.
	DefaultMaxPendingPerHost = 8
)

const macLen = sha256.Size

// Link holds a cluster secret and the TLS settings of one purpose. It is
// safe for concurrent use.
type Link struct {
	label  string
	secret []byte
	server *tls.Config
	client *tls.Config
}

// New returns a Link for secret. purpose names what the connections carry
// ("raft", "intra"); proofs are bound to it.
func New(secret, purpose string) (*Link, error) {
	if secret == "" {
		return nil, ErrNoSecret
	}
	cert, err := throwawayCert()
	if err != nil {
		return nil, err
	}
	return &Link{
		label:  "EXPORTER-slipstream-" + purpose,
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
	}, nil
}

// Client runs the dialer's side on raw: the TLS handshake, its own proof,
// then the listener's. It fails with ErrRefused when the listener does not
// prove the secret, and closes raw on any failure. ctx bounds it
// (DefaultHandshakeTimeout when ctx has no deadline).
func (k *Link) Client(ctx context.Context, raw net.Conn) (*tls.Conn, error) {
	tc := tls.Client(raw, k.client)
	if err := k.prove(ctx, tc, "dialer", "listener"); err != nil {
		tc.Close()
		return nil, err
	}
	return tc, nil
}

// Server runs the listener's side on raw, as Client.
func (k *Link) Server(ctx context.Context, raw net.Conn) (*tls.Conn, error) {
	tc := tls.Server(raw, k.server)
	if err := k.prove(ctx, tc, "listener", "dialer"); err != nil {
		tc.Close()
		return nil, err
	}
	return tc, nil
}

// DialFunc dials an address, as net.Dialer.DialContext.
type DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// Dialer wraps a dial function (net.Dialer.DialContext, say) so that the
// connections it returns are secured by Client.
func (k *Link) Dialer(dial DialFunc) DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		raw, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c, err := k.Client(ctx, raw)
		if err != nil {
			return nil, fmt.Errorf("seclink: %s: %w", addr, err)
		}
		return c, nil
	}
}

// MigratingDialer is Dialer for a cluster moving to or from secure links:
// when the far end answers the TLS handshake in plain HTTP (a node without
// secure links), it dials again and returns that plain connection. It
// authenticates nobody who does not want to be: use it only while nodes
// without secure links are left.
func (k *Link) MigratingDialer(dial DialFunc) DialFunc {
	secure := k.Dialer(dial)
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := secure(ctx, network, addr)
		if IsPlainPeer(err) {
			return dial(ctx, network, addr)
		}
		return c, err
	}
}

// IsPlainPeer reports whether err is Client's (or a Dialer's) failure
// because the far end does not speak TLS: it answered the handshake with
// something else, such as an HTTP error.
func IsPlainPeer(err error) bool {
	var rhe tls.RecordHeaderError
	return errors.As(err, &rhe)
}

// prove completes tc's TLS handshake and exchanges proofs of the secret
// within ctx: the dialer sends first, the listener checks it and answers.
func (k *Link) prove(ctx context.Context, tc *tls.Conn, self, peer string) error {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(DefaultHandshakeTimeout)
	}
	if err := tc.SetDeadline(deadline); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { _ = tc.SetDeadline(time.Now()) })
	defer stop()
	if err := tc.Handshake(); err != nil {
		return fmt.Errorf("tls handshake: %w", err)
	}
	st := tc.ConnectionState()
	ekm, err := st.ExportKeyingMaterial(k.label, nil, 32)
	if err != nil {
		return fmt.Errorf("tls exporter: %w", err)
	}
	send := func() error {
		_, err := tc.Write(k.mac(self, ekm))
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
		if !hmac.Equal(got, k.mac(peer, ekm)) {
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
	if !stop() { // ctx ended: the deadline may have been cut
		return ctx.Err()
	}
	return tc.SetDeadline(time.Time{})
}

func (k *Link) mac(role string, ekm []byte) []byte {
	h := hmac.New(sha256.New, k.secret)
	h.Write([]byte(role))
	h.Write([]byte{0})
	h.Write(ekm)
	return h.Sum(nil)
}

// throwawayCert makes the self-signed certificate TLS needs; it
// identifies nothing.
func throwawayCert() (tls.Certificate, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("seclink: key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().AddDate(100, 0, 0),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("seclink: certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv}, nil
}

// ListenOptions tunes a Listener. The zero value uses the defaults.
type ListenOptions struct {
	// HandshakeTimeout bounds an incoming handshake.
	HandshakeTimeout time.Duration
	// MaxPending bounds the incoming handshakes in progress.
	MaxPending int
	// MaxPendingPerHost bounds those from one IP address.
	MaxPendingPerHost int
	// AcceptPlain also hands out connections that do not open with a TLS
	// handshake, as they are: for a cluster moving to or from secure
	// links, whose nodes without them still dial in plain. Such a
	// connection is neither encrypted nor authenticated.
	AcceptPlain bool
	Log         *slog.Logger
}

// Listener is a net.Listener whose connections passed Server.
type Listener struct {
	ln       net.Listener
	k        *Link
	opts     ListenOptions
	mu       sync.Mutex
	pending  int            // incoming handshakes in progress
	perHost  map[string]int // the same by remote IP
	conns    chan net.Conn  // connections that passed their handshake
	ctx      context.Context
	cancel   context.CancelFunc
	once     sync.Once
	closeErr error
	wg       sync.WaitGroup
}

var _ net.Listener = (*Listener)(nil)

// Listen starts admitting the connections of ln; the Listener owns ln.
func (k *Link) Listen(ln net.Listener, opts ListenOptions) *Listener {
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
	l := &Listener{ln: ln, k: k, opts: opts, perHost: map[string]int{}, conns: make(chan net.Conn)}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.wg.Add(1)
	go l.acceptLoop()
	return l
}

// Addr is the address of the underlying listener.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Accept returns the next incoming connection that passed its handshake.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.ctx.Done():
		return nil, net.ErrClosed
	}
}

// Close stops listening, ends the handshakes in progress and waits for
// them. Connections already handed out stay open.
func (l *Listener) Close() error {
	l.once.Do(func() {
		l.cancel()
		l.closeErr = l.ln.Close()
		l.wg.Wait()
	})
	return l.closeErr
}

func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	for {
		raw, err := l.ln.Accept()
		if err != nil {
			if l.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				l.cancel()
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			l.opts.Log.Warn("secure link: accept", "err", err)
			select {
			case <-l.ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		host := remoteHost(raw)
		if !l.reserve(host) {
			l.opts.Log.Warn("secure link: too many handshakes in progress, closing a connection", "remote", raw.RemoteAddr())
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
func (l *Listener) reserve(host string) bool {
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
func (l *Listener) release(host string) {
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
func (l *Listener) admit(raw net.Conn) {
	ctx, cancel := context.WithTimeout(l.ctx, l.opts.HandshakeTimeout)
	defer cancel()
	if l.opts.AcceptPlain {
		pc, tlsHello, err := peek(ctx, raw)
		if err != nil {
			raw.Close()
			return
		}
		if !tlsHello {
			l.hand(pc)
			return
		}
		raw = pc
	}
	tc, err := l.k.Server(ctx, raw)
	if err != nil {
		l.opts.Log.Warn("secure link: refused a connection", "remote", raw.RemoteAddr(), "err", err)
		return
	}
	l.hand(tc)
}

// hand gives c to Accept, or closes it if the listener closes first.
func (l *Listener) hand(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.ctx.Done():
		c.Close()
	}
}

// peek reads c's first byte within ctx and reports whether it opens a
// TLS handshake record (content type 22); the returned conn reads that
// byte again.
func peek(ctx context.Context, c net.Conn) (net.Conn, bool, error) {
	deadline, _ := ctx.Deadline()
	if err := c.SetReadDeadline(deadline); err != nil {
		return nil, false, err
	}
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return nil, false, err
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		return nil, false, err
	}
	return &prefixConn{Conn: c, prefix: b[:]}, b[0] == recordTypeHandshake, nil
}

const recordTypeHandshake = 22

// prefixConn reads prefix before the rest of Conn.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
