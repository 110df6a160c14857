package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"syscall"
	"time"
)

// PathRefused is where a node reports a member that refused its
// connections (POST, body refusedRequest); the leader answers
// refusedResponse.
const PathRefused = "/cluster/refused"

type refusedRequest struct {
	ID string `json:"id"`
}

type refusedResponse struct {
	// Down: the member is down in the map of Version (or a later one).
	Down    bool   `json:"down"`
	Version uint64 `json:"version"`
}

// refusedDialTimeout bounds the leader's own connection attempts to a
// reported member.
const refusedDialTimeout = time.Second

// ConfirmRefused asks the leader whether member id is gone: a node that
// could not reach id calls it before it puts a copy elsewhere. The leader
// tries to connect to every intra address of id itself, and marks it down
// at once if each one refuses the connection: no process listens there,
// so the node is not running, where waiting DownAfter would only fail
// writes meanwhile. A member that the leader reaches, or whose addresses
// do not answer at all (a host that is off, or a network cut, which the
// health checks judge after DownAfter), is left as it is. It reports
// whether id is down in this node's map on return.
func (c *Cluster) ConfirmRefused(ctx context.Context, id string) (bool, error) {
	if n, ok := c.Map().Node(id); ok && n.State == StateDown {
		return true, nil
	}
	var resp refusedResponse
	var err error
	if c.IsLeader() {
		resp, err = c.markRefused(ctx, id)
	} else {
		err = c.postLeader(ctx, PathRefused, refusedRequest{ID: id}, &resp)
	}
	if err != nil || !resp.Down {
		return false, err
	}
	if !c.waitVersion(ctx, resp.Version) {
		return false, ctx.Err()
	}
	n, ok := c.Map().Node(id)
	return ok && n.State == StateDown, nil
}

func (c *Cluster) serveRefused(w http.ResponseWriter, r *http.Request) {
	if !c.authorized(r) {
		writeError(w, ErrForbidden)
		return
	}
	var req refusedRequest
	if err := decodeBody(r, &req); err != nil {
		writeError(w, err)
		return
	}
	c.leaderOnly(w, r, PathRefused, req, func(ctx context.Context) (any, error) { return c.markRefused(ctx, req.ID) })
}

// markRefused marks member id down if it is up and every one of its
// intra addresses refuses a connection from here.
func (c *Cluster) markRefused(ctx context.Context, id string) (refusedResponse, error) {
	n, ok := c.Map().Node(id)
	switch {
	case !ok:
		return refusedResponse{}, fmt.Errorf("%w: %q", ErrNodeNotFound, id)
	case n.State == StateDown:
		return refusedResponse{Down: true, Version: c.Map().Version}, nil
	case n.State != StateUp || !refusesAll(ctx, n.IntraAddrs):
		return refusedResponse{Version: c.Map().Version}, nil
	}
	if err := c.applyLocal(ctx, command{Op: opNodeState, Name: id, From: StateUp, State: StateDown}); err != nil {
		return refusedResponse{}, err
	}
	c.log.Info("node state changed: its addresses refuse connections", "peer", id, "state", StateDown)
	n, _ = c.Map().Node(id)
	return refusedResponse{Down: n.State == StateDown, Version: c.Map().Version}, nil
}

// refusesAll reports whether a TCP connection to each of addrs (host:port
// or URLs) is refused (ECONNREFUSED: the host answers, no process listens).
func refusesAll(ctx context.Context, addrs []string) bool {
	if len(addrs) == 0 {
		return false
	}
	d := net.Dialer{Timeout: refusedDialTimeout}
	for _, a := range addrs {
		u, err := url.Parse(BaseURL(a))
		if err != nil {
			return false
		}
		conn, err := d.DialContext(ctx, "tcp", u.Host)
		if err == nil {
			conn.Close()
			return false
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return false
		}
	}
	return true
}
