package cluster

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

// admit adds or updates a member; it runs on the leader. A new node joins
// as a non-voter, which the health loop promotes while there are fewer than
// Config.Voters voters. A known node that comes back with another raft
// address keeps its suffrage.
func (c *Cluster) admit(ctx context.Context, info NodeInfo) (*Map, error) {
	c.memberMu.Lock()
	defer c.memberMu.Unlock()
	info = info.Clone()
	if info.ID == "" || info.RaftAddr == "" || len(info.IntraAddrs) == 0 {
		return nil, fmt.Errorf("%w: join needs id, raftAddr and intraAddrs", ErrInvalid)
	}
	// An address raft cannot dial would still count as a member, a voter
	// even, and could cost a small cluster its quorum.
	if host, port, err := net.SplitHostPort(info.RaftAddr); err != nil || host == "" || !validPort(port) {
		return nil, fmt.Errorf("%w: join: raftAddr %q is not host:port", ErrInvalid, info.RaftAddr)
	}
	for _, a := range info.IntraAddrs {
		if u, err := url.Parse(BaseURL(a)); err != nil || u.Hostname() == "" {
			return nil, fmt.Errorf("%w: join: intra address %q", ErrInvalid, a)
		}
	}
	if err := c.checkNotLive(ctx, info); err != nil {
		return nil, err
	}
	timeout := timeoutFrom(ctx, 10*time.Second)
	cf := c.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return nil, err
	}
	id, addr := raft.ServerID(info.ID), raft.ServerAddress(info.RaftAddr)
	var found *raft.Server
	for _, s := range cf.Configuration().Servers {
		switch {
		case s.ID == id:
			s := s
			found = &s
		case s.Address == addr:
			// Another ID on the same address: a member that this node replaced
			// if that member is down, else a configuration mistake.
			if other, ok := c.Map().Nodes[string(s.ID)]; string(s.ID) == c.self.ID || ok && other.State != StateDown {
				return nil, fmt.Errorf("%w: raft address %s belongs to live node %s", ErrInvalid, addr, s.ID)
			}
			if err := c.raft.RemoveServer(s.ID, 0, timeout).Error(); err != nil {
				return nil, err
			}
			if err := c.applyLocal(ctx, command{Op: opNodeRemove, Name: string(s.ID)}); err != nil {
				return nil, err
			}
			c.log.Warn("stale member on a reused raft address removed", "peer", s.ID, "addr", addr)
		}
	}
	voter := false
	var err error
	switch {
	case found != nil && found.Address == addr:
		voter = found.Suffrage == raft.Voter
	case found != nil && found.Suffrage == raft.Voter:
		voter = true
		err = c.raft.AddVoter(id, addr, 0, timeout).Error()
	case found != nil:
		err = c.raft.AddNonvoter(id, addr, 0, timeout).Error()
	default:
		// A new member starts as a non-voter, even while voters are
		// missing: the health loop promotes it once it answers and hears
		// this leader over raft. Made a voter at once, a member whose raft
		// address does not lead to it (a wrong advertised address that
		// something else answers) or that dies right away would count
		// towards a quorum it can never be part of; with one or two
		// voters, the cluster would stop.
		err = c.raft.AddNonvoter(id, addr, 0, timeout).Error()
	}
	if err != nil {
		return nil, err
	}
	info.Voter = voter
	info.State = StateUp // a node in maintenance stays so (node.put keeps it)
	info.Joined = time.Now().UTC()
	if err := c.applyLocal(ctx, command{Op: opNodePut, Node: &info}); err != nil {
		return nil, err
	}
	c.log.Info("node admitted", "id", info.ID, "raft", info.RaftAddr, "voter", voter)
	return c.Map(), nil
}

// validPort reports whether s is a port number, 1..65535.
func validPort(s string) bool {
	p, err := strconv.ParseUint(s, 10, 16)
	return err == nil && p > 0
}

// checkNotLive refuses a join with the ID of a member that is up and
// still answers, as that ID, on addresses the joiner does not have: a
// second process with a copied configuration would otherwise take over
// the member's entry and drop it out of raft. A member that restarted with
// other addresses no longer answers on its old ones.
func (c *Cluster) checkNotLive(ctx context.Context, info NodeInfo) error {
	if info.ID == c.self.ID {
		// This node is live: only its own announcement has its ID.
		if !info.sameIdentity(c.self) {
			return fmt.Errorf("%w: node %s is live (the leader): another node has its ID", ErrInvalid, info.ID)
		}
		return nil
	}
	old, ok := c.Map().Nodes[info.ID]
	if !ok || old.State != StateUp {
		return nil
	}
	var gone []string
	for _, a := range old.IntraAddrs {
		if !slices.Contains(info.IntraAddrs, a) {
			gone = append(gone, a)
		}
	}
	if len(gone) == 0 {
		return nil
	}
	old.IntraAddrs = gone
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if alive, _ := c.probe(pctx, old); alive {
		return fmt.Errorf("%w: node %s is live at %v: another node has its ID", ErrInvalid, info.ID, gone)
	}
	return nil
}

// removeMember drops a node from the map and the raft configuration; it runs
// on the leader. A voter that leaves is replaced first (see replaceVoter).
func (c *Cluster) removeMember(ctx context.Context, id string) error {
	c.memberMu.Lock()
	defer c.memberMu.Unlock()
	timeout := timeoutFrom(ctx, 10*time.Second)
	if err := c.replaceVoter(ctx, id, timeout); err != nil {
		return err
	}
	if err := c.applyLocal(ctx, command{Op: opNodeRemove, Name: id}); err != nil {
		return err
	}
	if err := c.raft.RemoveServer(raft.ServerID(id), 0, timeout).Error(); err != nil {
		return err
	}
	c.log.Info("node removed", "id", id)
	return nil
}

// replaceVoter promotes a non-voter that is up (the first by ID) before
// voter id leaves, if the cluster would otherwise have fewer than
// Config.Voters voters: the health round would promote one too, but only
// later, and a voter going down meanwhile would cost the quorum. As in
// the health round, only a non-voter that answers its probe naming this
// node its raft leader qualifies: one whose raft address does not reach
// it would count towards a quorum it can never be part of. The caller
// holds memberMu.
func (c *Cluster) replaceVoter(ctx context.Context, id string, timeout time.Duration) error {
	cf := c.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return err
	}
	m := c.Map()
	leaving := false
	voters := 0
	var candidates []raft.Server
	for _, s := range cf.Configuration().Servers {
		switch {
		case s.Suffrage == raft.Voter:
			voters++
			leaving = leaving || string(s.ID) == id
		case string(s.ID) != id:
			if n, ok := m.Nodes[string(s.ID)]; ok && n.State == StateUp {
				candidates = append(candidates, s)
			}
		}
	}
	if !leaving || voters > c.cfg.Voters || len(candidates) == 0 {
		return nil
	}
	slices.SortFunc(candidates, func(a, b raft.Server) int { return strings.Compare(string(a.ID), string(b.ID)) })
	i := slices.IndexFunc(candidates, func(s raft.Server) bool { return c.follows(ctx, m.Nodes[string(s.ID)]) })
	if i < 0 {
		return nil
	}
	s := candidates[i]
	if err := c.raft.AddVoter(s.ID, s.Address, 0, timeout).Error(); err != nil {
		return err
	}
	c.log.Info("non-voter promoted in place of a leaving voter", "peer", s.ID, "leaving", id)
	if err := c.applyLocal(ctx, command{Op: opNodeVoter, Node: &NodeInfo{ID: string(s.ID), Voter: true}}); err != nil {
		c.log.Warn("recording suffrage failed", "peer", s.ID, "err", err)
	}
	return nil
}

// follows reports whether n answers its health probe naming this node its
// raft leader (or just answers, on another health path), as the health
// round requires of a non-voter it promotes.
func (c *Cluster) follows(ctx context.Context, n NodeInfo) bool {
	pctx, cancel := context.WithTimeout(ctx, min(max(c.cfg.HeartbeatInterval, 100*time.Millisecond), c.cfg.DownAfter))
	defer cancel()
	alive, leader := c.probe(pctx, n)
	return alive && (leader == c.self.ID || c.cfg.HealthPath != PathHealth)
}

// announceLoop makes sure the map holds this node with its current addresses:
// it joins a new node through the seeds, and re-announces a restarted node
// whose addresses changed or that was marked down. Once announced, it
// announces the node again whenever it has known no leader for
// rejoinAfter: a member removed while it was away hears from no leader
// after its restart (its raft state, restored from a snapshot, still lists
// it), yet may have seen one for a moment (a heartbeat the leader sent as
// it stopped replicating to it), which made it look announced.
func (c *Cluster) announceLoop() {
	defer c.wg.Done()
	for c.announceOnce() && c.leaderless() {
		c.log.Info("no raft leader for a while: announcing this node again", "after", c.rejoinAfter)
	}
}

// leaderless waits until this node has known no raft leader for
// rejoinAfter, and reports whether it has (false: the node is closing).
func (c *Cluster) leaderless() bool {
	tick := time.NewTicker(c.rejoinAfter / 4)
	defer tick.Stop()
	var since time.Time
	for {
		select {
		case <-c.ctx.Done():
			return false
		case now := <-tick.C:
			switch {
			case c.LeaderID() != "":
				since = time.Time{}
			case since.IsZero():
				since = now
			case now.Sub(since) >= c.rejoinAfter:
				return true
			}
		}
	}
}

// announceOnce announces this node until the map holds it and a leader is
// known (true), or the node closes (false).
func (c *Cluster) announceOnce() bool {
	delay := 50 * time.Millisecond
	for {
		m, changed := c.pub.snapshot()
		if c.announced(m) {
			return true
		}
		err := c.announce(c.ctx)
		if err == nil {
			delay = 50 * time.Millisecond
			// Admitted: wait for the entry to reach this node's copy of the map.
			wait := time.NewTimer(2 * time.Second)
			for {
				m, changed = c.pub.snapshot()
				if c.announced(m) {
					wait.Stop()
					return true
				}
				select {
				case <-changed:
					continue
				case <-wait.C:
				case <-c.ctx.Done():
					wait.Stop()
					return false
				}
				break
			}
			continue
		}
		c.log.Debug("join attempt failed", "err", err)
		select {
		case <-c.ctx.Done():
			return false
		case <-changed:
		case <-time.After(delay):
		}
		if delay < time.Second {
			delay *= 2
		}
	}
}

// announced reports whether m holds this node, up or in maintenance, with
// its current addresses, and a leader is known. Without a leader, m may be
// only what a restart restored from this node's snapshot: a node removed
// since (no leader talks to it any more) finds itself there too.
func (c *Cluster) announced(m *Map) bool {
	n, ok := m.Nodes[c.self.ID]
	return ok && n.sameIdentity(c.self) && n.State != StateDown && c.LeaderID() != ""
}

// announce sends this node's info to the leader, through the seeds when no
// leader is known.
func (c *Cluster) announce(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if c.IsLeader() {
		_, err := c.admit(ctx, c.self)
		return err
	}
	err := c.postLeader(ctx, PathJoin, c.self, nil)
	if err == nil || !retryable(err) {
		return err
	}
	if len(c.cfg.Seeds) == 0 {
		return err
	}
	return c.postAny(ctx, c.cfg.Seeds, PathJoin, c.self, nil, false)
}
