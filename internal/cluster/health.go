package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// healthLoop runs on every node and acts only while the node leads: every
// HeartbeatInterval it probes each member's GET /cluster/health, marks a
// member down after DownAfter without an answer and up again when it
// answers, keeps NodeInfo.Voter in line with the raft configuration, and
// promotes a live non-voter when there are fewer voters than Config.Voters.
func (c *Cluster) healthLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.HeartbeatInterval)
	defer t.Stop()
	// silent holds, for each member whose last probe failed, when the
	// first probe of that run of failures began. Nil while not leading.
	var silent map[string]time.Time
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		if !c.IsLeader() {
			silent = nil
			continue
		}
		if silent == nil {
			silent = map[string]time.Time{}
		}
		c.healthRound(silent)
	}
}

// healthRound probes every member once and records the changes. A member
// goes down once its probes have failed for DownAfter, measured from the
// first failed one: time it was not asked (a round that stalled, a leader
// that paused) is not silence, and a new leader gives every member a full
// DownAfter.
func (c *Cluster) healthRound(silent map[string]time.Time) {
	m := c.Map()
	now := time.Now()
	timeout := min(max(c.cfg.HeartbeatInterval, 100*time.Millisecond), c.cfg.DownAfter)
	ctx, cancel := context.WithTimeout(c.ctx, timeout)
	var (
		mu      sync.Mutex
		ok      = map[string]bool{}
		follows = map[string]bool{} // answered naming this node its raft leader
		wg      sync.WaitGroup
		ids     = m.NodeIDs()
	)
	for _, id := range ids {
		if id == c.self.ID {
			mu.Lock()
			ok[id], follows[id] = true, true
			mu.Unlock()
			continue
		}
		n := m.Nodes[id]
		wg.Go(func() {
			alive, leader := c.probe(ctx, n)
			mu.Lock()
			ok[id], follows[id] = alive, alive && (leader == c.self.ID || c.cfg.HealthPath != PathHealth)
			mu.Unlock()
		})
	}
	wg.Wait()
	cancel()
	if c.ctx.Err() != nil || !c.IsLeader() {
		return
	}
	for id := range silent {
		if _, member := m.Nodes[id]; !member {
			delete(silent, id)
		}
	}
	actx, acancel := context.WithTimeout(c.ctx, 5*time.Second)
	defer acancel()
	for _, id := range ids {
		n := m.Nodes[id]
		since, failing := silent[id]
		switch {
		case ok[id]:
			delete(silent, id)
			if n.State == StateDown {
				c.setState(actx, id, StateDown, StateUp)
			}
		case !failing:
			silent[id] = now // the first failed probe began with the round
		case n.State == StateUp && time.Since(since) > c.cfg.DownAfter:
			c.setState(actx, id, StateUp, StateDown)
		}
	}
	c.syncVoters(actx, ok, follows)
}

// setState moves node id from state from (as the round saw it) to s; if
// an operator changed its state meanwhile, that change stands.
func (c *Cluster) setState(ctx context.Context, id string, from, s NodeState) {
	if err := c.applyLocal(ctx, command{Op: opNodeState, Name: id, From: from, State: s}); err != nil {
		c.log.Warn("recording node state failed", "peer", id, "state", s, "err", err)
		return
	}
	c.log.Info("node state changed", "peer", id, "state", s)
}

// probe reports whether the node answers GET HealthPath with 200 on any of
// its intra addresses (on the cluster's own health path, with its ID), and
// which raft leader it names there ("" if none or another health path).
// The addresses are tried at once, so one dead interface does not use up
// the probe's time.
func (c *Cluster) probe(ctx context.Context, n NodeInfo) (alive bool, leader string) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		ok     bool
		leader string
	}
	urls := n.IntraURLs()
	answers := make(chan answer, len(urls))
	for _, base := range urls {
		go func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+c.cfg.HealthPath, nil)
			if err != nil {
				answers <- answer{}
				return
			}
			resp, err := c.hc.Do(req)
			if err != nil {
				answers <- answer{}
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				answers <- answer{}
				return
			}
			if c.cfg.HealthPath != PathHealth {
				answers <- answer{ok: true}
				return
			}
			// The answer must come from the node itself, not from another
			// process that took over its address (a replacement node, a
			// recycled address).
			var h Health
			err = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&h)
			answers <- answer{ok: err == nil && h.ID == n.ID, leader: h.Leader}
		}()
	}
	for range urls {
		if a := <-answers; a.ok {
			return true, a.leader
		}
	}
	return false, ""
}

// syncVoters keeps Config.Voters live voters when it can: it promotes live
// non-voters while voters are missing, and in place of voters that are down
// (which it demotes to non-voters). A non-voter is live for this when it
// answers the health probe and names this node as its raft leader there,
// which it learns only from this leader's raft messages: its raft address
// works. It records each member's suffrage in the map, and only that: the
// rest of the record may have changed since the map it decided on (an
// operator's state change, one not applied here yet).
func (c *Cluster) syncVoters(ctx context.Context, alive, follows map[string]bool) {
	c.memberMu.Lock()
	defer c.memberMu.Unlock()
	cf := c.raft.GetConfiguration()
	if cf.Error() != nil {
		return
	}
	m := c.Map()
	voters := 0
	var candidates, downVoters []raft.Server
	for _, s := range cf.Configuration().Servers {
		id := string(s.ID)
		n, known := m.Nodes[id]
		switch {
		case s.Suffrage == raft.Voter:
			voters++
			if known && n.State == StateDown && !alive[id] && id != c.self.ID {
				downVoters = append(downVoters, s)
			}
		case follows[id] && known && n.State == StateUp:
			candidates = append(candidates, s)
		}
	}
	byID := func(a, b raft.Server) int { return strings.Compare(string(a.ID), string(b.ID)) }
	slices.SortFunc(candidates, byID)
	slices.SortFunc(downVoters, byID)
	timeout := timeoutFrom(ctx, 5*time.Second)
	for _, s := range candidates {
		if voters >= c.cfg.Voters && len(downVoters) == 0 {
			break
		}
		if err := c.raft.AddVoter(s.ID, s.Address, 0, timeout).Error(); err != nil {
			c.log.Warn("promoting non-voter failed", "peer", s.ID, "err", err)
			return
		}
		c.log.Info("non-voter promoted", "peer", s.ID)
		voters++
		if voters > c.cfg.Voters && len(downVoters) > 0 {
			d := downVoters[0]
			downVoters = downVoters[1:]
			if err := c.raft.DemoteVoter(d.ID, 0, timeout).Error(); err != nil {
				c.log.Warn("demoting down voter failed", "peer", d.ID, "err", err)
				return
			}
			c.log.Info("down voter demoted", "peer", d.ID)
			voters--
		}
	}
	if cf = c.raft.GetConfiguration(); cf.Error() != nil {
		return
	}
	m = c.Map()
	for _, s := range cf.Configuration().Servers {
		n, ok := m.Nodes[string(s.ID)]
		voter := s.Suffrage == raft.Voter
		if !ok || n.Voter == voter {
			continue
		}
		err := c.applyLocal(ctx, command{Op: opNodeVoter, Node: &NodeInfo{ID: n.ID, Voter: voter}})
		if err != nil && !errors.Is(err, ErrNodeNotFound) { // removed meanwhile
			c.log.Warn("recording suffrage failed", "peer", s.ID, "err", err)
		}
	}
}
