package node

import (
	"context"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster"
)

// mapView is the cluster map with change notification.
type mapView interface {
	Map() *cluster.Map
	Watch(ctx context.Context) <-chan *cluster.Map
}

// mapLag bounds how long a node waits for its copy of the cluster map to
// catch up with a change another node has already seen (a bucket created
// through one gateway and written through another at once).
const mapLag = 3 * time.Second

// waitMap waits until cond holds for this node's map or mapLag passes, and
// returns the last map seen. It is called only when cond fails on the
// current map, so the common path costs nothing.
func waitMap(ctx context.Context, mv mapView, cond func(*cluster.Map) bool) *cluster.Map {
	m := mv.Map()
	if cond(m) {
		return m
	}
	ctx, cancel := context.WithTimeout(ctx, mapLag)
	defer cancel()
	for m2 := range mv.Watch(ctx) {
		m = m2
		if cond(m) {
			return m
		}
	}
	return m
}

func hasBucket(name string) func(*cluster.Map) bool {
	return func(m *cluster.Map) bool { _, ok := m.Bucket(name); return ok }
}

// leaderSync returns a function that makes this node's map at least as new
// as the leader's, so bucket operations read their own writes across
// gateways. On the leader it costs one barrier per term (a leader just
// elected may not have applied what its predecessor acknowledged), then
// nothing.
func leaderSync(cl *cluster.Cluster) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if cl.LeaderID() == "" {
			// An election, or no quorum: there is no newer map to wait
			// for, and waiting would stall every bucket lookup by mapLag.
			return cluster.ErrNoLeader
		}
		ctx, cancel := context.WithTimeout(ctx, mapLag)
		defer cancel()
		return cl.Sync(ctx)
	}
}
