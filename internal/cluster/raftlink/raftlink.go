// Package raftlink carries raft's traffic between nodes over the secure
// links of internal/seclink: TLS 1.3, admitting only peers that prove
// they hold the cluster secret (proofs bound to the purpose "raft").
package raftlink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/hashicorp/raft"

	"github.com/slipstream-io/slipstream/internal/seclink"
)

// Errors.
var (
	// ErrRefused means the other end did not prove it holds the secret.
	ErrRefused = seclink.ErrRefused
	// ErrNotAdvertisable means the link would tell peers an address they
	// cannot dial (an unspecified IP such as 0.0.0.0).
	ErrNotAdvertisable = errors.New("raftlink: bind address is not advertisable: set an advertise address")
	// ErrNoSecret means Listen was given an empty secret.
	ErrNoSecret = seclink.ErrNoSecret
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
	*seclink.Listener
	adv  net.Addr
	link *seclink.Link
}

var _ raft.StreamLayer = (*Layer)(nil)

// Listen binds bind ("host:port"; port 0 picks one) and starts accepting
// connections from peers that hold secret.
func Listen(bind, secret string, opts Options) (*Layer, error) {
	link, err := seclink.New(secret, "raft")
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("raftlink: %w", err)
	}
	adv := opts.Advertise
	if adv == nil {
		adv = ln.Addr()
	}
	if a, ok := adv.(*net.TCPAddr); !ok || a.IP == nil || a.IP.IsUnspecified() {
		ln.Close()
		return nil, fmt.Errorf("%w: %s", ErrNotAdvertisable, adv)
	}
	l := link.Listen(ln, seclink.ListenOptions{
		HandshakeTimeout:  opts.HandshakeTimeout,
		MaxPending:        opts.MaxPending,
		MaxPendingPerHost: opts.MaxPendingPerHost,
		Log:               opts.Log,
	})
	return &Layer{Listener: l, adv: adv, link: link}, nil
}

// Addr is the address peers dial: the advertise address if one was given.
func (l *Layer) Addr() net.Addr { return l.adv }

// Dial connects to a peer's layer and proves the secret to it; it fails
// with ErrRefused when the peer does not prove it back.
func (l *Layer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	dial := l.link.Dialer((&net.Dialer{}).DialContext)
	c, err := dial(ctx, "tcp", string(address))
	if err != nil {
		return nil, fmt.Errorf("raftlink: dial %s: %w", address, err)
	}
	return c, nil
}
