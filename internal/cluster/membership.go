package cluster

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

// admit adds or updates a member; it runs on the leader. A new node becomes
// a voter while there are fewer than Config.Voters voters, else a non-voter.
// A known node that comes back with another raft address keeps its suffrage.
func (c *Cluster) admit(ctx context.Context, info NodeInfo) (*Map, error) {
	c.memberMu.Lock()
	defer c.memberMu.Unlock()
	info = info.Clone()
	if info.ID == "" || info.RaftAddr == "" || len(info.IntraAddrs) == 0 {
		return nil, fmt.Errorf("%w: join needs id, raftAddr and intraAddrs", ErrInvalid)
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
	voters := 0
	for _, s := range cf.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			voters++
		}
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
			c.log.Warn("stale member on a reused raft address removed", "node", s.ID, "addr", addr)
			if s.Suffrage == raft.Voter {
				voters--
			}
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
	case voters < c.cfg.Voters:
		voter = true
		err = c.raft.AddVoter(id, addr, 0, timeout).Error()
	default:
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

// checkNotLive refuses a join with the ID of a member that is up and
// still answers, as that ID, on addresses the joiner does not have: a
// second process with a copied configuration would otherwise take over
// the member's entry and drop it out of raft. A member that restarted with
// other addresses no longer answers on its old ones.
func (c *Cluster) checkNotLive(ctx context.Context, info NodeInfo) error {
	old, ok := c.Map().Nodes[info.ID]
	if !ok || old.State != StateUp || info.ID == c.self.ID {
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
	if c.probe(pctx, old) {
		return fmt.Errorf("%w: node %s is live at %v: another node has its ID", ErrInvalid, info.ID, gone)
	}
	return nil
}

// removeMember drops a node from the map and the raft configuration; it runs
// on the leader.
func (c *Cluster) removeMember(ctx context.Context, id string) error {
	c.memberMu.Lock()
	defer c.memberMu.Unlock()
	if err := c.applyLocal(ctx, command{Op: opNodeRemove, Name: id}); err != nil {
		return err
	}
	if err := c.raft.RemoveServer(raft.ServerID(id), 0, timeoutFrom(ctx, 10*time.Second)).Error(); err != nil {
		return err
	}
	c.log.Info("node removed", "id", id)
	return nil
}

// announceLoop makes sure the map holds this node with its current addresses:
// it joins a new node through the seeds, and re-announces a restarted node
// whose addresses changed or that was marked down.
func (c *Cluster) announceLoop() {
	defer c.wg.Done()
	delay := 50 * time.Millisecond
	for {
		m, changed := c.pub.snapshot()
		if n, ok := m.Nodes[c.self.ID]; ok && n.sameIdentity(c.self) && n.State != StateDown {
			return
		}
		err := c.announce(c.ctx)
		if err == nil {
			delay = 50 * time.Millisecond
			// Admitted: wait for the entry to reach this node's copy of the map.
			wait := time.NewTimer(2 * time.Second)
			for {
				m, changed = c.pub.snapshot()
				if n, ok := m.Nodes[c.self.ID]; ok && n.sameIdentity(c.self) && n.State != StateDown {
					wait.Stop()
					return
				}
				select {
				case <-changed:
					continue
				case <-wait.C:
				case <-c.ctx.Done():
					wait.Stop()
					return
				}
				break
			}
			continue
		}
		c.log.Debug("join attempt failed", "err", err)
		select {
		case <-c.ctx.Done():
			return
		case <-changed:
		case <-time.After(delay):
		}
		if delay < time.Second {
			delay *= 2
		}
	}
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
