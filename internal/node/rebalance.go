package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/peer"
	"github.com/slipstream-io/slipstream/internal/placement"
	"github.com/slipstream-io/slipstream/internal/store"
)

// rebalancer puts the copies this node holds where HRW places them now.
// When the set of nodes that hold copies changes (a node joins, is drained
// or removed, comes back, or has been down for longer than downAfter and
// counts as gone), objects have new homes: a pass walks the local store
// and, for every copy of a local bucket, makes sure each node among the
// bucket's first `copies` in HRW order holds that version or a newer one,
// sending it where it is missing; a copy on a node that is no longer among
// them is then dropped. Both the old and the new holders can serve while
// this runs (reads try nodes past the replicas).
//
// A copy is sent with KeepNewer, so it never replaces a newer write or
// resurrects a later delete, and dropped only once every placed node has
// answered that it holds the key, and only if it is still the version that
// was sent (store.DeleteVersion). Clean copies of tiered buckets are never
// sent, only dropped where they no longer belong; dirty ones wait until
// they are destaged, and copies a node that came back has not checked yet
// wait for the rejoin pass.
type rebalancer struct {
	self      string
	meta      mapView
	store     *store.Store
	at        func(m *cluster.Map, id string) peer.Local
	rejoin    *rejoin
	log       *slog.Logger
	parallel  int
	rate      int64         // bytes sent per second by a pass, 0: unlimited
	downAfter time.Duration // a node down this long no longer holds copies (<= 0: never)
	settle    time.Duration // a change of the node set must last this long before a pass
	now       func() time.Time

	passes passLog[RebalanceProgress, *RebalanceProgress]

	mu        sync.Mutex
	downSince map[string]time.Time // when this node first saw each node down
}

// RebalanceStatus is what `admin status` shows of a node's rebalances.
type RebalanceStatus = PassStatus[RebalanceProgress]

// RebalanceProgress is one line of a rebalance job's NDJSON progress
// stream (and a pass's result).
type RebalanceProgress struct {
	Node    string `json:"node"`
	Scanned int    `json:"scanned"` // copies looked at
	Sent    int    `json:"sent"`    // copies sent to a node that lacked them
	Bytes   int64  `json:"bytes"`   // bytes sent
	Dropped int    `json:"dropped"` // copies removed here once their nodes held them
	Skipped int    `json:"skipped"` // copies to move once destaged or checked
	Failed  int    `json:"failed"`  // copies that could not be placed (kept here)
	Done    bool   `json:"done"`
	LastErr string `json:"lastError,omitempty"`
}

// Add adds o's counts to p.
func (p *RebalanceProgress) Add(o RebalanceProgress) {
	p.Scanned += o.Scanned
	p.Sent += o.Sent
	p.Bytes += o.Bytes
	p.Dropped += o.Dropped
	p.Skipped += o.Skipped
	p.Failed += o.Failed
	if o.LastErr != "" {
		p.LastErr = o.LastErr
	}
}

// rebalanceTimeout bounds a question to another node; sending a copy is
// bounded by rebalanceSendTimeout plus a second per MiB. A pass that could
// not place every copy (or left some for later) is made again after
// settle, then after twice as long each time, up to rebalanceMaxRetry.
const (
	rebalanceTimeout     = 10 * time.Second
	rebalanceSendTimeout = 30 * time.Second
	rebalanceMaxRetry    = 10 * time.Minute
)

// holders returns the nodes that should hold bucket/key: the first copies
// in HRW order among the nodes that count (up, or down for less than
// downAfter). A counted node that is down is included: its copy cannot be
// checked, so nothing is dropped in its favour, and nothing extra is made
// for it while it may come back.
func (r *rebalancer) holders(m *cluster.Map, bucket string, copies int, key string) []string {
	n := max(copies, 1)
	var out []string
	for _, id := range placement.Order(m.NodeIDs(), placement.ObjectName(bucket, key)) {
		if len(out) == n {
			break
		}
		if r.counts(m, id) {
			out = append(out, id)
		}
	}
	return out
}

// counts reports whether node id holds copies: it is not draining, and it
// is up or has been down for less than downAfter.
func (r *rebalancer) counts(m *cluster.Map, id string) bool {
	ni, ok := m.Node(id)
	if !ok || ni.Draining {
		return false
	}
	if ni.State == cluster.StateUp {
		return true
	}
	if r.downAfter <= 0 {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	since, ok := r.downSinceLocked(ni)
	return ok && r.now().Sub(since) < r.downAfter
}

// downSinceLocked returns since when node ni has been down: when the
// cluster recorded it (the map's StateSince, the same for every node and
// across restarts), or, when the map does not say or this node saw it
// first, when this node first saw it down. It is false for a node observe
// has not seen down.
func (r *rebalancer) downSinceLocked(ni cluster.NodeInfo) (time.Time, bool) {
	since, ok := r.downSince[ni.ID]
	if ok && !ni.StateSince.IsZero() && ni.StateSince.Before(since) {
		since = ni.StateSince
	}
	return since, ok
}

// downNodes returns the members that are down, with how long since they
// went down (downSinceLocked).
func (r *rebalancer) downNodes() map[string]DownNode {
	m := r.meta.Map()
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	var out map[string]DownNode
	for id := range r.downSince {
		ni, ok := m.Node(id)
		if !ok || ni.State == cluster.StateUp {
			continue // removed, or up since the last look
		}
		since, _ := r.downSinceLocked(ni)
		if out == nil {
			out = map[string]DownNode{}
		}
		out[id] = DownNode{For: now.Sub(since), After: max(r.downAfter, 0)}
	}
	return out
}

// observe records when nodes went down in m and returns the set of nodes
// that count, with the drain counts of the nodes that have any, as a string
// to compare. The drain counts make a drain undone before this node passed
// still count as a change: the drained node gave its copies away in
// between, and the others must send them back.
func (r *rebalancer) observe(m *cluster.Map) string {
	r.mu.Lock()
	now := r.now()
	for _, id := range m.NodeIDs() {
		ni, _ := m.Node(id)
		switch _, seen := r.downSince[id]; {
		case ni.State == cluster.StateUp:
			delete(r.downSince, id)
		case !seen:
			r.downSince[id] = now
		}
	}
	r.mu.Unlock()
	var set, drains []string
	for _, id := range m.NodeIDs() {
		if r.counts(m, id) {
			set = append(set, id)
		}
		if ni, _ := m.Node(id); ni.Drains > 0 {
			drains = append(drains, fmt.Sprintf("%s:%d", id, ni.Drains))
		}
	}
	slices.Sort(set)
	slices.Sort(drains)
	if len(drains) == 0 {
		return strings.Join(set, ",")
	}
	return strings.Join(set, ",") + " drains " + strings.Join(drains, ",")
}

// watch runs a pass whenever the set of nodes that count has changed and
// stayed changed for settle, until ctx ends. A pass that left copies
// unplaced or waiting is made again even if the set goes back to the one
// last passed for: the copies it moved meanwhile (and the holders that
// dropped theirs) are placed for the set it saw, not for that one.
func (r *rebalancer) watch(ctx context.Context) {
	maps := r.meta.Watch(ctx)
	last := r.observe(r.meta.Map())
	var changed time.Time // when the set first differed from last; zero if it does not
	retry := r.settle     // the wait after a pass that left copies unplaced, doubling
	unsettled := false    // the last pass left copies unplaced or waiting
	tick := time.NewTicker(min(r.settle, time.Second))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-maps:
			if !ok {
				return
			}
		case <-tick.C:
		}
		cur := r.observe(r.meta.Map())
		switch {
		case cur == last && !unsettled:
			changed = time.Time{}
		case changed.IsZero():
			changed = r.now()
		case r.now().Sub(changed) >= r.settle:
			r.log.Info("rebalancing: the nodes holding copies changed", "was", last, "now", cur)
			p := r.run(ctx, "", nil)
			r.log.Info("rebalance pass done", "scanned", p.Scanned, "sent", p.Sent, "bytes", p.Bytes,
				"dropped", p.Dropped, "skipped", p.Skipped, "failed", p.Failed, "lastError", p.LastErr)
			if p.Failed == 0 && p.Skipped == 0 && ctx.Err() == nil {
				last, changed, retry, unsettled = cur, time.Time{}, r.settle, false
			} else {
				// Pass again after retry (settle counts from changed).
				changed, unsettled = r.now().Add(retry-r.settle), true
				retry = min(2*retry, rebalanceMaxRetry)
			}
		}
	}
}

// run makes one pass over the local copies (of bucket, or of every bucket),
// calling progress as it goes; it returns the totals.
func (r *rebalancer) run(ctx context.Context, bucket string, progress func(RebalanceProgress)) RebalanceProgress {
	r.passes.begin()
	pace := pacer(r.rate)
	var (
		mu  sync.Mutex
		tot = RebalanceProgress{Node: r.self}
		wg  sync.WaitGroup
		sem = make(chan struct{}, max(r.parallel, 1))
	)
	report := func(o RebalanceProgress) {
		mu.Lock()
		tot.Add(o)
		p := tot
		mu.Unlock()
		r.passes.add(o)
		if progress != nil {
			progress(p)
		}
	}
	err := r.store.Walk(ctx, bucket, func(info object.Info) error {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		wg.Go(func() {
			defer func() { <-sem }()
			report(r.place(ctx, info, pace))
		})
		return nil
	})
	wg.Wait()
	if err != nil {
		report(RebalanceProgress{LastErr: err.Error()})
	}
	tot.Done = true // every goroutine has reported
	r.passes.end(tot, r.now())
	return tot
}

// place puts one local copy where it belongs and reports what it did.
func (r *rebalancer) place(ctx context.Context, info object.Info, pace func(context.Context, int) error) RebalanceProgress {
	res := RebalanceProgress{Scanned: 1}
	// drop removes the local copy if it is still the version looked at.
	drop := func() RebalanceProgress {
		if err := r.store.DeleteVersion(ctx, info.Bucket, info.Key, info); err == nil {
			res.Dropped = 1
		}
		return res
	}
	m := r.meta.Map()
	b, ok := m.Bucket(info.Bucket)
	if !ok {
		return res // the bucket is being deleted
	}
	holders := r.holders(m, info.Bucket, b.Copies, info.Key)
	here := slices.Contains(holders, r.self)
	switch {
	case here && (info.Dirty || tiered(b)):
		return res // in place; a dirty copy's replicas are the destager's
	case info.Dirty || r.rejoin.suspect(ctx, info):
		res.Skipped = 1 // moved by a later pass, once destaged or checked
		return res
	case tiered(b):
		// A clean copy of a tiered bucket is a cache of the backend: it is
		// dropped, not sent (its owner fills on demand). Sending it could
		// bring back an object deleted through the owner, which keeps no
		// tombstones for tiered buckets.
		return drop()
	}
	// Ask every holder first: one that remembers a later delete means this
	// copy must go, and must not be sent anywhere.
	placed := true // every holder has this version or a newer one
	var lacking []int
	for i, id := range holders {
		if id == r.self {
			continue
		}
		held, err := r.ask(ctx, m, id, info)
		switch {
		case errors.Is(err, errDeletedThere):
			return drop()
		case errors.Is(err, errHolderDown):
			placed = false // nothing is dropped in favour of a node that may come back
		case err != nil:
			placed = false
			res.Failed, res.LastErr = 1, fmt.Sprintf("%s/%s on %s: %v", info.Bucket, info.Key, id, err)
		case !held:
			lacking = append(lacking, i)
		}
	}
	for _, i := range lacking {
		err := r.send(ctx, m, holders[i], info, i > 0, pace)
		switch {
		case errors.Is(err, errGone):
			return res // deleted or overwritten here meanwhile
		case errors.Is(err, errDeletedThere):
			return drop()
		case err != nil:
			placed = false
			res.Failed, res.LastErr = 1, fmt.Sprintf("%s/%s on %s: %v", info.Bucket, info.Key, holders[i], err)
		default:
			res.Sent++
			res.Bytes += info.Size
		}
	}
	if !placed || here || len(holders) == 0 {
		return res
	}
	err := r.store.DeleteVersion(ctx, info.Bucket, info.Key, info)
	switch {
	case err == nil:
		res.Dropped = 1
	case !errors.Is(err, store.ErrChanged) && !errors.Is(err, object.ErrNotFound):
		r.log.Debug("rebalance: copy not placed", "bucket", info.Bucket, "key", info.Key, "err", err)
		res.Failed, res.LastErr = 1, fmt.Sprintf("%s/%s: %v", info.Bucket, info.Key, err)
	}
	return res
}

var (
	errGone         = errors.New("node: the local copy changed or went away")
	errDeletedThere = errors.New("node: the key was deleted after this copy was written")
	errHolderDown   = errors.New("node: the holder is down")
)

// ask reports whether node id holds info's version of the object or a
// newer one; errDeletedThere if it remembers deleting the key later. A
// copy a scrub marked damaged is not held: it is not served, and this
// copy may be the only good one left.
func (r *rebalancer) ask(ctx context.Context, m *cluster.Map, id string, info object.Info) (bool, error) {
	if ni, _ := m.Node(id); ni.State != cluster.StateUp {
		return false, fmt.Errorf("%w: %s", errHolderDown, id)
	}
	cctx, cancel := context.WithTimeout(ctx, rebalanceTimeout)
	defer cancel()
	other, err := r.at(m, id).Stat(peer.AsIs(cctx), info.Bucket, info.Key)
	var deleted *peer.DeletedError
	switch {
	case err == nil:
		return !other.ModTime.Before(info.ModTime) && (!other.Damaged || other.ModTime.After(info.ModTime)), nil
	case errors.As(err, &deleted) && !deleted.At.Before(info.ModTime):
		return false, errDeletedThere
	case errors.Is(err, object.ErrNotFound):
		return false, nil
	default:
		return false, err
	}
}

// send gives node id the local copy described by info, unless it has
// changed here meanwhile (errGone); a node that took a newer write or
// a delete meanwhile refuses it, which is fine unless it was a delete
// (errDeletedThere).
func (r *rebalancer) send(ctx context.Context, m *cluster.Map, id string, info object.Info, replica bool, pace func(context.Context, int) error) error {
	rd, err := r.store.Get(ctx, info.Bucket, info.Key, nil)
	if errors.Is(err, object.ErrNotFound) {
		return errGone
	}
	if err != nil {
		return err
	}
	defer rd.Close()
	if got := rd.Info(); got.ETag != info.ETag || !got.ModTime.Equal(info.ModTime) {
		return errGone
	}
	var body io.Reader = rd
	if pace != nil {
		body = pacedReader{ctx, rd, pace}
	}
	dr := object.NewDigestReader(body)
	opts := peer.PutOptions{
		PutOptions: info.PutOptions(),
		ModTime:    info.ModTime, ETag: info.ETag, BackendETag: info.BackendETag, BackendVersion: info.BackendVersion,
		Replica: replica, KeepNewer: true,
		Checksum: info.Checksum, // bytes that rotted here are refused, not spread
	}
	opts.Digest = dr.Digest
	sctx, cancel := context.WithTimeout(ctx, rebalanceSendTimeout+time.Duration(info.Size>>20)*time.Second)
	defer cancel()
	_, err = r.at(m, id).Put(sctx, info.Bucket, info.Key, dr, opts)
	if !errors.Is(err, object.ErrPrecondition) {
		return err
	}
	held, err := r.ask(ctx, m, id, info)
	switch {
	case err != nil:
		return err
	case !held:
		return fmt.Errorf("%w: %s refused the copy but holds an older or damaged one", object.ErrUnavailable, id)
	}
	return nil
}
