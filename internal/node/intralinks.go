package node

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/slipstream-io/slipstream/internal/config"
	"github.com/slipstream-io/slipstream/internal/netx"
	"github.com/slipstream-io/slipstream/internal/seclink"
)

// intraLinks is how a node secures its intra-cluster connections: with
// intra_tls every one is TLS 1.3 and proves the cluster secret both ways
// (internal/seclink), as raft's port does; with intra_tls_migrate plain
// ones are taken and made too, towards nodes without intra_tls. The zero
// value is plain.
type intraLinks struct {
	link    *seclink.Link
	migrate bool
}

func newIntraLinks(cfg config.Node, log *slog.Logger) (intraLinks, error) {
	if !cfg.IntraTLS {
		return intraLinks{}, nil
	}
	link, err := seclink.New(cfg.Secret, "intra")
	if err != nil {
		return intraLinks{}, fmt.Errorf("intra_tls: %w", err)
	}
	if cfg.IntraTLSMigrate {
		log.Warn("intra_tls_migrate: plain intra-cluster connections are accepted and nodes without intra_tls are dialed in plain; remove it once every node runs intra_tls")
	}
	return intraLinks{link: link, migrate: cfg.IntraTLSMigrate}, nil
}

// dialer dials intra-cluster addresses.
func (l intraLinks) dialer() seclink.DialFunc {
	dial := (&net.Dialer{Timeout: 3 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	switch {
	case l.link == nil:
		return dial
	case l.migrate:
		return l.link.MigratingDialer(dial)
	}
	return l.link.Dialer(dial)
}

// secure is netx.Config.Secure (nil when plain).
func (l intraLinks) secure() func(ctx context.Context, c net.Conn) (net.Conn, error) {
	if l.link == nil {
		return nil
	}
	return func(ctx context.Context, c net.Conn) (net.Conn, error) {
		tc, err := l.link.Client(ctx, c)
		if err != nil && l.migrate && seclink.IsPlainPeer(err) {
			return nil, netx.ErrPlainPeer
		}
		return tc, err
	}
}

// listener wraps an intra listener.
func (l intraLinks) listener(ln net.Listener, log *slog.Logger) net.Listener {
	if l.link == nil {
		return ln
	}
	return l.link.Listen(ln, seclink.ListenOptions{Log: log, AcceptPlain: l.migrate})
}
