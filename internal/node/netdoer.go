package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/slipstream-io/slipstream/internal/netx"
	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/peer"
)

// netxDoer sends peer requests through the multihomed transport: every
// local intra-cluster interface is used, pairs are chosen by load, and a
// failing interface is taken out and retried later.
type netxDoer struct {
	tr     *netx.Transport
	secret string
}

var _ peer.Doer = (*netxDoer)(nil)

func (d *netxDoer) Do(ctx context.Context, t peer.Target, req *http.Request) (*http.Response, error) {
	if d.secret != "" {
		req.Header.Set(peer.SecretHeader, d.secret)
	}
	resp, err := d.tr.Do(ctx, netx.Peer{ID: t.ID, Addrs: t.Addrs}, req)
	if err != nil {
		if errors.Is(err, netx.ErrUnreachable) || errors.Is(err, netx.ErrPairDown) || errors.Is(err, netx.ErrNoAddrs) {
			return nil, fmt.Errorf("%w: %w: node %s: %w", object.ErrUnavailable, peer.ErrUnreachable, t.ID, err)
		}
		return nil, err
	}
	return resp, nil
}
