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
	// Answers: the member answered the leader's health probe.
	Answers bool `json:"answers,omitempty"`
}

// refusedDialTimeout bounds the leader's own connection attempts to a
// reported member.
const refusedDialTimeout = time.Second

// ConfirmRefused asks the leader whether member id, which this node could
// not reach, is gone: a node calls it before it puts a copy elsewhere.
// The leader tries to connect to every intra address of id itself, and
// marks it down at once if each one refuses the connection: no process
// listens there, so the node is not running, where waiting DownAfter would
// only fail writes meanwhile. If id answers the leader's health probe, it
// is not gone (the trouble is between this node and it). Otherwise (a
// host that is off or hung, a cut link) the health checks decide, after
// DownAfter, and ConfirmRefused waits for their verdict until ctx ends:
// the leader cannot tell a dead host from a partition on one report. It
// reports whether id is down in this node's map on return.
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
	switch {
	case err != nil:
		return false, err
	case resp.Answers:
		return false, nil
	case resp.Down && !c.waitVersion(ctx, resp.Version):
		return false, ctx.Err()
	}
	return c.waitDown(ctx, id)
}

// waitDown waits until member id is down in this node's map, and reports
// whether it is (false when ctx ends first, or id is no member).
func (c *Cluster) waitDown(ctx context.Context, id string) (bool, error) {
	for {
		m, changed := c.pub.snapshot()
		n, ok := m.Node(id)
		switch {
		case !ok:
			return false, nil
		case n.State == StateDown:
			return true, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false, ctx.Err()
		case <-c.ctx.Done():
			return false, ErrClosed
		}
	}
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
// intra addresses refuses a connection from here; otherwise it says
// whether id answers the health probe.
func (c *Cluster) markRefused(ctx context.Context, id string) (refusedResponse, error) {
	n, ok := c.Map().Node(id)
	switch {
	case !ok:
		return refusedResponse{}, fmt.Errorf("%w: %q", ErrNodeNotFound, id)
	case n.State == StateDown:
		return refusedResponse{Down: true, Version: c.Map().Version}, nil
	case n.State != StateUp:
		return refusedResponse{Version: c.Map().Version, Answers: true}, nil // maintenance: an operator's
	case !refusesAll(ctx, n.IntraAddrs):
		pctx, cancel := context.WithTimeout(ctx, min(max(c.cfg.HeartbeatInterval, 100*time.Millisecond), c.cfg.DownAfter))
		defer cancel()
		alive, _ := c.probe(pctx, n)
		return refusedResponse{Version: c.Map().Version, Answers: alive}, nil
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
