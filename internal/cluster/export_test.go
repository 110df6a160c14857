package cluster

import (
	"context"
	"sync"
)

// Hooks for the external tests (package cluster_test).

// HoldApply makes c's state machine hold every command back, as a slow
// state machine would: entries are still appended and committed, but c's
// map stays as it is until release is called. release is idempotent.
func HoldApply(c *Cluster) (release func()) {
	ch := make(chan struct{})
	c.fsm.hold.Store(&ch)
	var once sync.Once
	return func() {
		once.Do(func() {
			c.fsm.hold.Store(nil)
			close(ch)
		})
	}
}

// SyncVoters runs the suffrage step of the leader's health round with
// every member of c's map alive and following c.
func SyncVoters(ctx context.Context, c *Cluster) {
	alive := map[string]bool{}
	for id := range c.Map().Nodes {
		alive[id] = true
	}
	c.syncVoters(ctx, alive, alive)
}

// PutNodeRecord writes n as node id's record in the map through c, which
// must lead, as the leader's own membership changes do (node.put is not
// applied over HTTP).
func PutNodeRecord(ctx context.Context, c *Cluster, n NodeInfo) error {
	return c.applyLocal(ctx, command{Op: opNodePut, Node: &n})
}

// RaftTerm is c's current raft term.
func RaftTerm(c *Cluster) uint64 { return c.raft.CurrentTerm() }
