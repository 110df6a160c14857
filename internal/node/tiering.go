package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/slipstream-io/slipstream/internal/backend/open"
	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/peer"
	"github.com/slipstream-io/slipstream/internal/tier"
)

// tierSync keeps the tier's bucket table in step with the cluster map and
// makes this node take over destaging for owners that die.
type tierSync struct {
	tier *tier.Tier
	log  *slog.Logger
	ttl  time.Duration // what a bucket's "ttl" validation means here (tier.ttl)

	// base is the context take-overs run with: they outlive the request
	// or map change that started them.
	base context.Context

	mu       sync.Mutex
	props    map[string]cluster.BucketProps
	taking   map[string]bool // owners whose take-over is running
	takeover func(ctx context.Context, owner string)
	// purge removes what this node holds of a bucket deleted from the
	// map (nil: nothing).
	purge func(ctx context.Context, bucket string)
}

// apply registers new or changed buckets with the tier and removes deleted
// ones; it opens backends lazily here, never on the request path.
func (s *tierSync) apply(ctx context.Context, m *cluster.Map) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, b := range m.Buckets {
		if cur, ok := s.props[name]; ok && cur == b {
			continue
		}
		tb := tier.Bucket{Mode: tier.Mode(b.Mode), Copies: b.Copies}
		v, err := tier.ParseValidate(b.Validate, s.ttl)
		if err != nil {
			s.log.Error("bucket validation policy", "bucket", name, "err", err)
			continue
		}
		tb.Validate = v
		if b.Mode != cluster.ModeLocal {
			be, err := open.New(ctx, b.Backend)
			if err != nil {
				s.log.Error("opening the backend of a bucket", "bucket", name, "err", err)
				continue
			}
			tb.Backend = be
		}
		if err := s.tier.AddBucket(name, tb); err != nil {
			s.log.Error("registering a bucket with the tier", "bucket", name, "err", err)
			continue
		}
		s.props[name] = b
	}
	for name := range s.props {
		if _, ok := m.Buckets[name]; !ok {
			s.tier.RemoveBucket(name)
			delete(s.props, name)
			if s.purge != nil {
				// A node that missed the gateway's DeleteBucket (its map
				// lagged) or a PUT that raced it leaves nothing behind.
				go s.purge(s.bg(), name)
			}
		}
	}
	s.takeOvers(m)
}

// takeOvers starts a take-over for every owner this node holds replicas
// for that the map shows down or no longer has (removed while this node
// was away, or before it restarted: it never saw the owner go down). An
// owner whose take-over failed still has replicas and is tried again at
// the next map change or retry tick (s.mu held).
func (s *tierSync) takeOvers(m *cluster.Map) {
	if s.takeover == nil {
		return
	}
	for _, owner := range s.tier.ReplicaOwners() {
		if n, ok := m.Node(owner); ok && n.State != cluster.StateDown {
			continue
		}
		if s.taking[owner] {
			continue
		}
		s.taking[owner] = true
		go func() {
			s.takeover(s.bg(), owner)
			s.mu.Lock()
			delete(s.taking, owner)
			s.mu.Unlock()
		}()
	}
}

// bg is the context of work that outlives the map change starting it.
func (s *tierSync) bg() context.Context { return cmp.Or(s.base, context.Background()) }

// takeOverRetry is how often take-overs that failed are tried again when
// the map does not change.
const takeOverRetry = time.Minute

// run follows the map until ctx ends.
func (s *tierSync) run(ctx context.Context, mv mapView) {
	tick := time.NewTicker(takeOverRetry)
	defer tick.Stop()
	maps := mv.Watch(ctx)
	for {
		select {
		case m, ok := <-maps:
			if !ok {
				return
			}
			s.apply(ctx, m)
		case <-tick.C:
			s.mu.Lock()
			s.takeOvers(mv.Map())
			s.mu.Unlock()
		}
	}
}

// replicator makes the peer copies of writeback objects for the tier: the
// next up nodes after the owner in HRW order hold them.
type replicator struct {
	g *gateway
}

var _ tier.Replicator = (*replicator)(nil)

// peersFor returns up to n up nodes other than self for bucket/key, in
// HRW order.
func (r *replicator) peersFor(m *cluster.Map, bucket, key string, n int) ([]string, error) {
	up, _ := placementOf(m, bucket, key)
	var out []string
	for _, id := range up {
		if id != r.g.self && len(out) < n {
			out = append(out, id)
		}
	}
	if len(out) < n {
		return nil, fmt.Errorf("%w: %d peer copies wanted, %d peers up", object.ErrUnavailable, n, len(out))
	}
	return out, nil
}

func (r *replicator) Replicate(ctx context.Context, req tier.ReplicaPut) ([]string, error) {
	if req.Copies <= 0 {
		_, err := io.Copy(io.Discard, req.Body)
		return nil, err
	}
	m := r.g.meta.Map()
	peers, err := r.peersFor(m, req.Bucket, req.Key, req.Copies)
	if err != nil {
		return nil, err
	}
	opts := peer.PutOptions{PutOptions: req.Opts, ModTime: req.ModTime, Replica: true, Owner: req.Owner, Seq: req.Seq, Dirty: true}
	// Every target is a replica: one whose node is gone is replaced, in
	// peers, by the next node other than this one (the owner).
	if _, err := r.g.fanOut(ctx, m, peers, []string{r.g.self}, req.Bucket, req.Key, req.Body, func(int) peer.PutOptions { return opts }); err != nil {
		// Some peers may have stored their copy before another failed:
		// they are holders all the same, to be told when the write is
		// destaged, or their dirty replicas would stay for ever.
		return peers, err
	}
	return peers, nil
}

// replicaOpTimeout bounds a replica notice: the destager waits on them.
const replicaOpTimeout = 30 * time.Second

func (r *replicator) ReplicateDelete(ctx context.Context, owner string, seq uint64, bucket, key string, copies int) ([]string, error) {
	peers, err := r.peersFor(r.g.meta.Map(), bucket, key, copies)
	if err != nil {
		return nil, err
	}
	return peers, r.Deleted(ctx, owner, seq, bucket, key, peers)
}

func (r *replicator) Destaged(ctx context.Context, owner string, seq uint64, bucket, key string, holders []string) error {
	return r.tell(ctx, peer.ReplicaOp{Op: peer.ReplicaDestaged, Owner: owner, Seq: seq, Bucket: bucket, Key: key}, holders)
}

func (r *replicator) Abandoned(ctx context.Context, owner string, seq uint64, bucket, key string, holders []string) error {
	return r.tell(ctx, peer.ReplicaOp{Op: peer.ReplicaAbandoned, Owner: owner, Seq: seq, Bucket: bucket, Key: key}, holders)
}

func (r *replicator) Deleted(ctx context.Context, owner string, seq uint64, bucket, key string, holders []string) error {
	return r.tell(ctx, peer.ReplicaOp{Op: peer.ReplicaDelete, Owner: owner, Seq: seq, Bucket: bucket, Key: key}, holders)
}

// tell sends op to holders (nodes no longer in the cluster are skipped).
func (r *replicator) tell(ctx context.Context, op peer.ReplicaOp, holders []string) error {
	ctx, cancel := context.WithTimeout(ctx, replicaOpTimeout)
	defer cancel()
	m := r.g.meta.Map()
	var errs []error
	for _, id := range holders {
		if _, ok := m.Node(id); !ok {
			continue
		}
		if err := r.g.at(m, id).Replica(ctx, op); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// deletePeers tells the tier's listings about the write-back deletes the
// other up nodes have not destaged (tier.Peers).
type deletePeers struct {
	g *gateway
}

var _ tier.Peers = (*deletePeers)(nil)

// PendingDeletes asks every other up node at once and merges the answers.
// A node that does not answer fails the listing, as it does for the
// nodes' own pages.
func (p *deletePeers) PendingDeletes(ctx context.Context, bucket string, keys, prefixes []string) (deleted, under []string, err error) {
	m := p.g.meta.Map()
	var ids []string
	for _, id := range m.UpNodeIDs() {
		if id != p.g.self {
			ids = append(ids, id)
		}
	}
	answers := make([]peer.PendingAnswer, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := &answers[i]
			a.Deleted, a.Under, errs[i] = p.g.at(m, id).PendingDeletes(ctx, bucket, keys, prefixes)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("%s: %w", id, errs[i])
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	seen := map[string]bool{}
	for _, a := range answers {
		deleted = append(deleted, a.Deleted...)
		for _, pre := range a.Under {
			if !seen[pre] {
				seen[pre] = true
				under = append(under, pre)
			}
		}
	}
	return deleted, under, nil
}
