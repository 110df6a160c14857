package raftlink_test

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/slipstream-io/slipstream/internal/cluster/raftlink"
)

func listen(t *testing.T, secret string, opts raftlink.Options) *raftlink.Layer {
	t.Helper()
	l, err := raftlink.Listen("127.0.0.1:0", secret, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func addr(l *raftlink.Layer) raft.ServerAddress { return raft.ServerAddress(l.Addr().String()) }

// acceptAll hands out every connection l accepts, until l closes.
func acceptAll(l *raftlink.Layer) <-chan net.Conn {
	ch := make(chan net.Conn, 16)
	go func() {
		defer close(ch)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			ch <- c
		}
	}()
	return ch
}

// next returns the next accepted connection, or nil if none comes within
// wait.
func next(ch <-chan net.Conn, wait time.Duration) net.Conn {
	select {
	case c := <-ch:
		return c
	case <-time.After(wait):
		return nil
	}
}

func TestSameSecretCarriesBytesBothWays(t *testing.T) {
	srv := listen(t, "s3cret-of-the-cluster", raftlink.Options{})
	acc := acceptAll(srv)
	cli := listen(t, "s3cret-of-the-cluster", raftlink.Options{})

	c, err := cli.Dial(addr(srv), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := next(acc, 2*time.Second)
	if s == nil {
		t.Fatal("the listener handed out no connection")
	}
	defer s.Close()

	msg := bytes.Repeat([]byte("append-entries "), 10000)
	go func() { c.Write(msg) }()
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(s, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("listener read %d bytes, err %v", len(got), err)
	}
	if _, err := s.Write([]byte("ok")); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, 2)
	if _, err := io.ReadFull(c, back); err != nil || string(back) != "ok" {
		t.Fatalf("dialer read %q, err %v", back, err)
	}
}

func TestWrongSecretIsRefusedBothWays(t *testing.T) {
	srv := listen(t, "right", raftlink.Options{})
	acc := acceptAll(srv)
	stranger := listen(t, "wrong", raftlink.Options{})

	if c, err := stranger.Dial(addr(srv), 2*time.Second); !errors.Is(err, raftlink.ErrRefused) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("dial with the wrong secret: %v, want ErrRefused", err)
	}
	if c := next(acc, 300*time.Millisecond); c != nil {
		c.Close()
		t.Fatal("a connection with the wrong secret reached Accept")
	}
	// The listener is still in service for those who know the secret.
	friend := listen(t, "right", raftlink.Options{})
	c, err := friend.Dial(addr(srv), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if s := next(acc, 2*time.Second); s == nil {
		t.Fatal("the listener stopped admitting after a refusal")
	} else {
		s.Close()
	}
}

// A listener with the wrong secret that still speaks first must not get the
// dialer's connection either: the dialer checks the listener's proof too.
func TestDialerChecksTheListener(t *testing.T) {
	impostor := listen(t, "impostor", raftlink.Options{})
	go func() {
		if c, err := impostor.Accept(); err == nil {
			c.Close()
		}
	}()
	cli := listen(t, "right", raftlink.Options{})
	if c, err := cli.Dial(addr(impostor), 2*time.Second); err == nil {
		c.Close()
		t.Fatal("dialed an impostor without error")
	}
}

func TestPlainTCPAndPlainTLSGetNothing(t *testing.T) {
	srv := listen(t, "right", raftlink.Options{HandshakeTimeout: 500 * time.Millisecond})
	acc := acceptAll(srv)

	// A raft peer speaking the plain TCP transport: its first byte is an
	// RPC type, which is not a TLS record.
	raw, err := net.Dial("tcp", srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.Write([]byte{1, 0x80, 0x81})
	raw.SetReadDeadline(time.Now().Add(2 * time.Second))
	if n, err := raw.Read(make([]byte, 64)); err == nil && n > 0 {
		// A TLS alert is fine; what matters is that Accept gets nothing.
		t.Logf("plain TCP peer got %d bytes back (a TLS alert)", n)
	}

	// A TLS client that knows nothing of the secret: its reads end when
	// the listener gives up on its proof.
	tc, err := tls.Dial("tcp", srv.Addr().String(), &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	tc.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := tc.Read(make([]byte, 1)); err == nil {
		t.Fatal("a TLS client without the secret was sent data")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the listener kept a silent TLS client past its handshake timeout")
	}
	if c := next(acc, 300*time.Millisecond); c != nil {
		c.Close()
		t.Fatal("a peer without the secret reached Accept")
	}
}

// A peer that connects and sends nothing does not hold up the next one.
func TestSilentPeerDoesNotBlockOthers(t *testing.T) {
	srv := listen(t, "right", raftlink.Options{HandshakeTimeout: 5 * time.Second})
	acc := acceptAll(srv)
	for range 3 {
		silent, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer silent.Close()
	}
	cli := listen(t, "right", raftlink.Options{})
	start := time.Now()
	c, err := cli.Dial(addr(srv), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if s := next(acc, 2*time.Second); s == nil {
		t.Fatal("no connection accepted while silent peers wait")
	} else {
		s.Close()
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("admitting took %v behind silent peers", d)
	}
}

func TestPendingHandshakesAreBounded(t *testing.T) {
	srv := listen(t, "right", raftlink.Options{MaxPending: 2, HandshakeTimeout: 10 * time.Second})
	var silent []net.Conn
	defer func() {
		for _, c := range silent {
			c.Close()
		}
	}()
	for range 2 {
		c, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		silent = append(silent, c)
	}
	time.Sleep(200 * time.Millisecond) // let the listener take both
	extra, err := net.Dial("tcp", srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	extra.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := extra.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("a connection over the bound: read %v, want EOF (closed at once)", err)
	}
}

func TestCloseEndsAcceptAndHandshakes(t *testing.T) {
	srv, err := raftlink.Listen("127.0.0.1:0", "right", raftlink.Options{HandshakeTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	silent, err := net.Dial("tcp", srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	errc := make(chan error, 1)
	go func() { _, err := srv.Accept(); errc <- err }()
	time.Sleep(100 * time.Millisecond)
	done := make(chan struct{})
	go func() { srv.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Fatal("Close waited on a silent peer's handshake")
	}
	if err := <-errc; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v, want net.ErrClosed", err)
	}
}

func TestListenRefusesBadSetups(t *testing.T) {
	if _, err := raftlink.Listen("127.0.0.1:0", "", raftlink.Options{}); !errors.Is(err, raftlink.ErrNoSecret) {
		t.Fatalf("empty secret: %v", err)
	}
	if _, err := raftlink.Listen("0.0.0.0:0", "s", raftlink.Options{}); !errors.Is(err, raftlink.ErrNotAdvertisable) {
		t.Fatalf("unspecified bind without advertise: %v", err)
	}
	adv := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 7000}
	l, err := raftlink.Listen("0.0.0.0:0", "s", raftlink.Options{Advertise: adv})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.Addr().String() != adv.String() {
		t.Fatalf("Addr %s, want the advertise address %s", l.Addr(), adv)
	}
}
