package seclink_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/seclink"
)

const secret = "a-cluster-secret-of-some-length"

func newLink(t *testing.T, secret, purpose string) *seclink.Link {
	t.Helper()
	k, err := seclink.New(secret, purpose)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// listen serves an echo on a Listener of k.
func listen(t *testing.T, k *seclink.Link) *seclink.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := k.Listen(ln, seclink.ListenOptions{HandshakeTimeout: time.Second})
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return l
}

func dial(ctx context.Context, k *seclink.Link, addr string) (net.Conn, error) {
	return k.Dialer((&net.Dialer{}).DialContext)(ctx, "tcp", addr)
}

// recorder is a TCP proxy that keeps every byte it forwards.
type recorder struct {
	ln  net.Listener
	mu  sync.Mutex
	buf bytes.Buffer
}

func record(t *testing.T, to string) *recorder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			pipe := func(dst, src net.Conn) {
				defer dst.Close()
				b := make([]byte, 32<<10)
				for {
					n, err := src.Read(b)
					if n > 0 {
						r.mu.Lock()
						r.buf.Write(b[:n])
						r.mu.Unlock()
						if _, err := dst.Write(b[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}
			go pipe(up, c)
			go pipe(c, up)
		}
	}()
	return r
}

func (r *recorder) seen() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.buf.Bytes())
}

func TestLinkCarriesBytesAndHidesThem(t *testing.T) {
	k := newLink(t, secret, "intra")
	l := listen(t, newLink(t, secret, "intra"))
	rec := record(t, l.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := dial(ctx, k, rec.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := bytes.Repeat([]byte("plain object bytes "), 1000)
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("echo: %v (equal %v)", err, bytes.Equal(got, msg))
	}
	wire := rec.seen()
	if len(wire) < len(msg) {
		t.Fatalf("the proxy saw %d bytes, fewer than the %d sent", len(wire), len(msg))
	}
	for _, s := range []string{secret, "plain object bytes"} {
		if bytes.Contains(wire, []byte(s)) {
			t.Fatalf("%q went over the wire in the clear", s)
		}
	}
}

func TestRefusals(t *testing.T) {
	for _, tt := range []struct {
		name                        string
		dialSecret, dialPurpose     string
		listenSecret, listenPurpose string
	}{
		{"wrong secret", "another-secret-entirely", "intra", secret, "intra"},
		{"a raft proof on the intra port", secret, "raft", secret, "intra"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := listen(t, newLink(t, tt.listenSecret, tt.listenPurpose))
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			c, err := dial(ctx, newLink(t, tt.dialSecret, tt.dialPurpose), l.Addr().String())
			if err == nil {
				c.Close()
				t.Fatal("dial succeeded")
			}
			if !errors.Is(err, seclink.ErrRefused) {
				t.Fatalf("dial: %v, want ErrRefused", err)
			}
		})
	}
}

// A listener that does not hold the secret is found out by the dialer,
// which has then sent only its own proof (nothing the listener can use).
func TestDialerChecksTheListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	impostor := newLink(t, "not-the-secret-at-all", "intra")
	go func() {
		raw, err := ln.Accept()
		if err != nil {
			return
		}
		tc, err := impostor.Server(context.Background(), raw)
		if err == nil { // it cannot prove; reaching here is a bug
			tc.Close()
		}
	}()
	// The impostor's Server refuses the dialer's proof and hangs up.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if c, err := dial(ctx, newLink(t, secret, "intra"), ln.Addr().String()); err == nil {
		c.Close()
		t.Fatal("dial to an impostor succeeded")
	}
}

func TestPlainClientsGetNothing(t *testing.T) {
	l := listen(t, newLink(t, secret, "intra"))
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	b, _ := io.ReadAll(c)
	if bytes.Contains(b, []byte("HTTP/1.1")) {
		t.Fatalf("a plain request got an HTTP answer: %q", b)
	}
}

func TestEmptySecretIsRefused(t *testing.T) {
	if _, err := seclink.New("", "intra"); !errors.Is(err, seclink.ErrNoSecret) {
		t.Fatalf("New with no secret: %v", err)
	}
}

func TestCloseEndsAccept(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newLink(t, secret, "intra").Listen(ln, seclink.ListenOptions{})
	done := make(chan error, 1)
	go func() { _, err := l.Accept(); done <- err }()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Accept did not return after Close")
	}
}

// A context that ends during the handshake ends the dial.
func TestDialHonoursTheContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if c, err := dial(ctx, newLink(t, secret, "intra"), ln.Addr().String()); err == nil {
		c.Close()
		t.Fatal("dial to a silent listener succeeded")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("dial took %v, beyond its 200ms context", d)
	}
}

// A migrating listener takes plain connections as they are and secure
// ones after their proofs; a migrating dialer reaches both kinds of node.
func TestMigration(t *testing.T) {
	k := newLink(t, secret, "intra")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mixed := k.Listen(ln, seclink.ListenOptions{AcceptPlain: true, HandshakeTimeout: time.Second})
	defer mixed.Close()
	kinds := make(chan bool, 4) // whether each accepted connection is TLS
	go func() {
		for {
			c, err := mixed.Accept()
			if err != nil {
				return
			}
			_, isTLS := c.(*tls.Conn)
			kinds <- isTLS
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	plainNode := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "plain node") }))
	defer plainNode.Close()

	echo := func(c net.Conn) {
		t.Helper()
		defer c.Close()
		if _, err := io.WriteString(c, "ping"); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 4)
		if _, err := io.ReadFull(c, b); err != nil || string(b) != "ping" {
			t.Fatalf("echo: %q, %v", b, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	raw, err := net.Dial("tcp", mixed.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	echo(raw) // its first byte, 'p', is not a TLS record: taken as plain
	if isTLS := <-kinds; isTLS {
		t.Fatal("a plain connection was handed out as TLS")
	}
	mdial := k.MigratingDialer((&net.Dialer{}).DialContext)
	sc, err := mdial(ctx, "tcp", mixed.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := sc.(*tls.Conn); !ok {
		t.Fatalf("the migrating dialer reached a secure listener in plain (%T)", sc)
	}
	echo(sc)
	if isTLS := <-kinds; !isTLS {
		t.Fatal("a secure connection was handed out as plain")
	}
	// A node without secure links answers the handshake in plain HTTP:
	// the plain Dialer fails, the migrating one connects in plain.
	addr := strings.TrimPrefix(plainNode.URL, "http://")
	if c, err := dial(ctx, k, addr); err == nil || !seclink.IsPlainPeer(err) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("secure dial to a plain node: %v, want a plain-peer error", err)
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: mdial}}
	resp, err := hc.Get(plainNode.URL)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "plain node" {
		t.Fatalf("migrating dialer to a plain node: %q", b)
	}
	// A wrong secret is not taken for a plain peer: no fallback.
	if c, err := newLink(t, "another-secret-entirely", "intra").MigratingDialer((&net.Dialer{}).DialContext)(ctx, "tcp", mixed.Addr().String()); err == nil || seclink.IsPlainPeer(err) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("migrating dial with the wrong secret: %v", err)
	}
}
