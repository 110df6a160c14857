package node

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/fanout"
	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/peer"
	"github.com/slipstream-io/slipstream/internal/placement"
	"github.com/slipstream-io/slipstream/internal/s3api"
)

// metadata is what the gateway needs from the replicated cluster metadata.
type metadata interface {
	mapView
	CreateBucket(ctx context.Context, b cluster.BucketProps) error
	DeleteBucket(ctx context.Context, name string) error
}

// gateway implements the S3 layer's Objects over the whole cluster: it
// finds the owner and replicas of each object by HRW over the cluster map
// and sends the operation to them, locally or through the peer protocol.
type gateway struct {
	self          string
	meta          metadata
	local         peer.Local
	peers         *peer.Client
	defaultCopies int
	log           *slog.Logger
	now           func() time.Time
	// sync catches this node's map up with the leader's (nil: no-op).
	sync func(ctx context.Context) error
	// confirmDown asks the leader whether a node this one could not
	// reach is gone, and reports whether this node's map has it down
	// (cluster.ConfirmRefused; nil: never).
	confirmDown func(ctx context.Context, id string) (bool, error)
	// redirected counts the copies written to the next node because
	// their node was gone (nil: not counted).
	redirected prometheus.Counter
	// unreachable reports whether every connection path to a node is
	// down (netx.Transport.Down; nil: never): reads try it after the
	// object's other holders.
	unreachable func(addrs []string) bool
	// listBackend lists a tiered bucket's backend (with this node's
	// objects not yet destaged).
	listBackend func(ctx context.Context, bucket string, opts object.ListOptions) (object.ListResult, error)
}

var _ s3api.Objects = (*gateway)(nil)

// readFallback is how many nodes past the bucket's copies a read tries, to
// find objects written while one of their HRW nodes was down.
const readFallback = 2

// at returns the Local of node id: this node's own, or a remote one.
func (g *gateway) at(m *cluster.Map, id string) peer.Local {
	if id == g.self {
		return g.local
	}
	n, _ := m.Node(id)
	return g.peers.Node(peer.Target{ID: id, Addrs: hostPorts(n.IntraAddrs)})
}

func hostPorts(addrs []string) []string {
	out := make([]string, len(addrs))
	for i, a := range addrs {
		if _, rest, ok := strings.Cut(a, "://"); ok {
			a = rest
		}
		out[i] = strings.TrimRight(a, "/")
	}
	return out
}

// placementOf returns the nodes in HRW order for bucket/key, the up ones
// first and then the others. HRW runs over every member (up or not) so that
// a node going down does not move the objects of the others.
func placementOf(m *cluster.Map, bucket, key string) (up, down []string) {
	for _, id := range placement.Order(m.NodeIDs(), placement.ObjectName(bucket, key)) {
		if n, _ := m.Node(id); n.Places() {
			up = append(up, id)
		} else {
			down = append(down, id)
		}
	}
	return up, down
}

// bucket returns the cluster map and the bucket's properties. A bucket this
// node does not know yet may have just been created through another node:
// on a miss the node first catches up with the leader's map.
func (g *gateway) bucket(ctx context.Context, name string) (*cluster.Map, cluster.BucketProps, error) {
	m := g.meta.Map()
	if b, ok := m.Bucket(name); ok {
		return m, b, nil
	}
	if g.sync != nil {
		if err := g.sync(ctx); err != nil {
			// This node's map may be behind: a node that just started
			// applies the entries after its raft snapshot only once a
			// leader reaches it, and during an election no one can say.
			// Not knowing the bucket proves nothing; clients retry a 503.
			return m, cluster.BucketProps{}, fmt.Errorf("%w: bucket %s is not in this node's map, and the leader could not be asked whether it exists: %v",
				object.ErrUnavailable, name, err)
		}
		m = g.meta.Map()
		if b, ok := m.Bucket(name); ok {
			return m, b, nil
		}
	}
	return m, cluster.BucketProps{}, fmt.Errorf("%w: %s", object.ErrBucketNotFound, name)
}

// catchUp makes this node's map at least as new as the leader's, so that
// bucket operations read their own writes across gateways. It reports
// whether it could.
func (g *gateway) catchUp(ctx context.Context) bool {
	if g.sync == nil {
		return false
	}
	if err := g.sync(ctx); err != nil {
		g.log.Debug("catching up with the leader's map", "err", err)
		return false
	}
	return true
}

// writeTargets returns the nodes the gateway sends a new object to. For a
// writeback bucket that is the owner alone: its tier journals the write and
// makes the peer copies itself, so it can destage and track them.
func (g *gateway) writeTargets(m *cluster.Map, b cluster.BucketProps, key string) ([]string, error) {
	up, _ := placementOf(m, b.Name, key)
	if len(up) < b.Copies {
		return nil, fmt.Errorf("%w: bucket %s wants %d copies, %d nodes are up", object.ErrUnavailable, b.Name, b.Copies, len(up))
	}
	if b.Mode == cluster.ModeWriteback {
		return up[:1], nil
	}
	return up[:b.Copies], nil
}

// ListBuckets implements s3api.Objects.
func (g *gateway) ListBuckets(ctx context.Context) ([]object.BucketInfo, error) {
	g.catchUp(ctx)
	m := g.meta.Map()
	out := make([]object.BucketInfo, 0, len(m.Buckets))
	for _, name := range m.BucketNames() {
		b, _ := m.Bucket(name)
		out = append(out, object.BucketInfo{Name: name, Created: b.Created})
	}
	return out, nil
}

// CreateBucket implements s3api.Objects: an S3 CreateBucket makes a local
// bucket with the node's default copies; other modes are set through admin.
func (g *gateway) CreateBucket(ctx context.Context, name string) error {
	if err := object.ValidateBucketName(name); err != nil {
		return err
	}
	if err := g.meta.CreateBucket(ctx, cluster.BucketProps{Name: name, Created: g.now(), Copies: g.defaultCopies}.WithDefaults()); err != nil {
		return err
	}
	waitMap(ctx, g.meta, hasBucket(name)) // read your own write through this node
	return nil
}

// HeadBucket implements s3api.Objects.
func (g *gateway) HeadBucket(ctx context.Context, name string) error {
	g.catchUp(ctx) // a bucket deleted through another node must not exist here
	_, _, err := g.bucket(ctx, name)
	return err
}

// DeleteBucket implements s3api.Objects. The bucket must hold no objects
// and no uploads on any node.
func (g *gateway) DeleteBucket(ctx context.Context, name string) error {
	m, _, err := g.bucket(ctx, name)
	if err != nil {
		return err
	}
	res, err := g.listAll(ctx, m, name, object.ListOptions{MaxKeys: 1}, nil)
	if err != nil {
		return err
	}
	if len(res.Objects) > 0 {
		return fmt.Errorf("%w: %s", object.ErrBucketNotEmpty, name)
	}
	ups, err := g.ListMultipartUploads(ctx, name, "")
	if err != nil {
		return err
	}
	if len(ups) > 0 {
		return fmt.Errorf("%w: %s has %d multipart uploads in progress", object.ErrBucketNotEmpty, name, len(ups))
	}
	if err := g.meta.DeleteBucket(ctx, name); err != nil {
		return err
	}
	m = waitMap(ctx, g.meta, func(m *cluster.Map) bool { return !hasBucket(name)(m) })
	for _, id := range m.UpNodeIDs() {
		if err := g.at(m, id).DeleteBucket(ctx, name); err != nil && !errors.Is(err, object.ErrBucketNotFound) {
			g.log.Warn("removing local bucket directories", "peer", id, "bucket", name, "err", err)
		}
	}
	return nil
}

// PutObject implements s3api.Objects: the body streams to every target at
// once and the PUT is acknowledged when all of them have it durably.
func (g *gateway) PutObject(ctx context.Context, bucket, key string, body io.Reader, opts object.PutOptions) (object.Info, error) {
	if err := object.ValidateKey(key); err != nil {
		return object.Info{}, err
	}
	m, b, err := g.bucket(ctx, bucket)
	if err != nil {
		return object.Info{}, err
	}
	targets, err := g.writeTargets(m, b, key)
	if err != nil {
		return object.Info{}, err
	}
	popts := peer.PutOptions{PutOptions: opts, ModTime: g.now().UTC()}
	owner := targets[0]
	// A target whose node is gone is replaced by the next node, with the
	// same options: a substitute for the owner of a cache bucket's object
	// writes it through to the backend, and the first replica, which owns
	// the object under the map that says the owner is gone, holds a copy.
	info, err := g.fanOut(ctx, m, targets, nil, bucket, key, body, func(i int) peer.PutOptions {
		o := popts
		if i > 0 { // the first target owns the object; the others hold replicas
			o.Replica, o.Owner = true, owner
		}
		return o
	})
	if err == nil && b.Mode == cluster.ModeCache {
		g.writtenThrough(ctx, m, targets[1:], bucket, key, info)
	}
	return info, err
}

// writtenThrough tells the holders of a cache bucket's plain copies the
// backend version the owner wrote info through as, so that they validate
// their copy against the backend as the owner does (the bucket's validate
// policy), which matters once one of them serves it: while the owner is
// down, and for good once it is removed. A holder that misses it keeps a
// copy it serves without validation, as every copy was before; the write
// itself has succeeded, so that is logged, not answered.
func (g *gateway) writtenThrough(ctx context.Context, m *cluster.Map, holders []string, bucket, key string, info object.Info) {
	if info.BackendETag == "" {
		return
	}
	op := peer.ReplicaOp{Op: peer.ReplicaWrittenThrough, Bucket: bucket, Key: key, Time: g.now().UTC(),
		ETag: info.ETag, BackendETag: info.BackendETag, BackendVersion: info.BackendVersion}
	for _, id := range holders {
		if err := g.at(m, id).Replica(ctx, op); err != nil {
			g.log.Warn("a copy's holder was not told its backend version: it serves the copy without validation", "peer", id, "bucket", bucket, "key", key, "err", err)
		}
	}
}

// fanOut writes body to every target in parallel through pipes, with the
// options optsFor gives each target, and the body's digest computed once.
// A target that cannot be reached before it has read a byte is replaced,
// in targets, by the next node in HRW order that is up and neither a
// target nor one of others (nodes with a copy of their own, such as the
// owner that replicates), if the leader confirms that the node is gone
// (substitute): the write then lands where the map places it from now on,
// instead of failing until the map says so.
func (g *gateway) fanOut(ctx context.Context, m *cluster.Map, targets, others []string, bucket, key string, body io.Reader, optsFor func(i int) peer.PutOptions) (object.Info, error) {
	// A target every path to which is down already (a node that hangs
	// takes the body into its socket and stalls, and a body taken cannot
	// go to another node) is asked about before the body flows.
	for i, id := range targets {
		if g.pathsDown(m, id) {
			if nm, ok := g.substitute(ctx, targets, others, i, bucket, key); ok {
				m = nm
			}
		}
	}
	if len(targets) == 1 {
		tr := &readTracker{r: body}
		info, err := g.at(m, targets[0]).Put(ctx, bucket, key, tr, optsFor(0))
		for errors.Is(err, peer.ErrUnreachable) && !tr.read.Load() {
			m, ok := g.substitute(ctx, targets, others, 0, bucket, key)
			if !ok {
				break
			}
			info, err = g.at(m, targets[0]).Put(ctx, bucket, key, tr, optsFor(0))
		}
		return info, err
	}
	if optsFor(0).Digest == nil {
		// Hash MD5 once here; each target checks the bytes it got against
		// this digest with its CRC32C.
		dr, given := object.NewDigestReader(body), optsFor
		body, optsFor = dr, func(i int) peer.PutOptions {
			o := given(i)
			o.Digest = dr.Digest
			return o
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	infos := make([]object.Info, len(targets))
	put := func(i int, m *cluster.Map, id string) func(io.Reader) error {
		o := optsFor(i)
		return func(r io.Reader) error {
			var err error
			if infos[i], err = g.at(m, id).Put(ctx, bucket, key, r, o); err != nil && !errors.Is(err, peer.ErrUnreachable) {
				cancel() // one failed copy fails the PUT: stop the others early
			}
			return err
		}
	}
	puts := make([]func(io.Reader) error, len(targets))
	for i, id := range targets {
		puts[i] = put(i, m, id)
	}
	var mu sync.Mutex // guards targets against substitutes chosen at once
	spare := func(i int, err error) func(io.Reader) error {
		mu.Lock()
		defer mu.Unlock()
		if !errors.Is(err, peer.ErrUnreachable) {
			return nil
		}
		m, ok := g.substitute(ctx, targets, others, i, bucket, key)
		if !ok {
			return nil
		}
		return put(i, m, targets[i])
	}
	errs := fanout.CopySpare(ctx, body, spare, puts...)
	if err := firstError(errs); err != nil {
		return object.Info{}, err
	}
	for i := 1; i < len(infos); i++ {
		if infos[i].ETag != infos[0].ETag || infos[i].Size != infos[0].Size {
			return object.Info{}, fmt.Errorf("%w: replicas of %s/%s disagree: %s/%d on %s vs %s/%d on %s", object.ErrUnavailable,
				bucket, key, infos[0].ETag, infos[0].Size, targets[0], infos[i].ETag, infos[i].Size, targets[i])
		}
	}
	return infos[0], nil
}

// readTracker records whether a byte of r has been read.
type readTracker struct {
	r    io.Reader
	read atomic.Bool
}

func (t *readTracker) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 || err == nil {
		t.read.Store(true)
	}
	return n, err
}

// substituteWait bounds how long a write waits for the leader to confirm
// that a target's node is gone.
const substituteWait = 5 * time.Second

// substitute asks the leader whether targets[i], which could not be
// reached, is gone (cluster.ConfirmRefused) and, if it is, replaces it in
// targets by the first node in HRW order that is up and neither a target
// nor one of others in the map that says so, and returns that map.
func (g *gateway) substitute(ctx context.Context, targets, others []string, i int, bucket, key string) (*cluster.Map, bool) {
	if g.confirmDown == nil {
		return nil, false
	}
	cctx, cancel := context.WithTimeout(ctx, substituteWait)
	defer cancel()
	if down, err := g.confirmDown(cctx, targets[i]); !down {
		g.log.Debug("a copy's node could not be reached, and is not gone", "peer", targets[i], "err", err)
		return nil, false
	}
	m := g.meta.Map()
	up, _ := placementOf(m, bucket, key)
	for _, id := range up {
		if !slices.Contains(targets, id) && !slices.Contains(others, id) {
			g.log.Info("a copy's node is gone: writing the copy to the next node", "bucket", bucket, "key", key, "peer", targets[i], "instead", id)
			if g.redirected != nil {
				g.redirected.Inc()
			}
			targets[i] = id
			return m, true
		}
	}
	return nil, false
}

// firstError prefers an error a target answered with (the client's fault,
// such as a bad digest, or the body failing to arrive) over an unreachable
// target, and that over the stops and cancellations a failed target caused
// in the others (a dead target must answer 503, which clients retry, not
// "request canceled").
func firstError(errs []error) error {
	var unreachable, caused error
	for _, e := range errs {
		switch {
		case e == nil:
		case errors.Is(e, peer.ErrUnreachable):
			unreachable = cmp.Or(unreachable, e)
		case errors.Is(e, fanout.ErrConsumerDone) || errors.Is(e, context.Canceled):
			caused = cmp.Or(caused, e)
		default:
			return e
		}
	}
	return cmp.Or(unreachable, caused)
}

// GetObject implements s3api.Objects: the first live holder in HRW order
// serves it; a node that cannot be reached or lacks the object is skipped.
func (g *gateway) GetObject(ctx context.Context, bucket, key string, opts object.GetOptions) (object.Reader, error) {
	if err := object.ValidateKey(key); err != nil {
		return nil, err
	}
	var rd object.Reader
	err := g.eachHolder(ctx, bucket, key, func(ctx context.Context, l peer.Local) (object.Info, error) {
		var err error
		if rd, err = l.Get(ctx, bucket, key, opts.Range); err != nil {
			return object.Info{}, err
		}
		return rd.Info(), nil
	}, func() { rd.Close(); rd = nil })
	return rd, err
}

// HeadObject implements s3api.Objects.
func (g *gateway) HeadObject(ctx context.Context, bucket, key string) (object.Info, error) {
	if err := object.ValidateKey(key); err != nil {
		return object.Info{}, err
	}
	var info object.Info
	err := g.eachHolder(ctx, bucket, key, func(ctx context.Context, l peer.Local) (object.Info, error) {
		var err error
		info, err = l.Stat(ctx, bucket, key)
		return info, err
	}, func() {})
	return info, err
}

// eachHolder calls f on the nodes that may hold bucket/key, in order,
// until one serves it or answers from the object itself (a range, a
// precondition, ...): the read targets (its replicas and readFallback
// more up nodes); for a local bucket, then the other up nodes that have
// it, asked all at once (after nodes join, a copy stays outside the first
// ones until the rebalance moves it); then the nodes marked down (one that
// just restarted may hold the only copy). A holder that does not have the
// object, cannot be reached or fails (a broken drive) is passed over; if
// none serves it, the error says why, a failure first: an object that
// exists but cannot be read is not "not found".
//
// A holder that remembers deleting the key (a tombstone) makes a copy on a
// later holder that is not newer than the delete not found (drop releases
// what f got): a holder that missed the delete does not serve it.
//
// Each holder is told how many times this node's map has it marked down
// (peer.WithDowns): one that came back from a down mark it has not yet
// checked its copies for, which its own map may not show yet, checks the
// copy before serving it.
func (g *gateway) eachHolder(ctx context.Context, bucket, key string, f func(context.Context, peer.Local) (object.Info, error), drop func()) error {
	m, b, err := g.bucket(ctx, bucket)
	if err != nil {
		return err
	}
	up, down := placementOf(m, b.Name, key)
	if len(up)+len(down) == 0 {
		return fmt.Errorf("%w: no node is up", object.ErrUnavailable)
	}
	first := g.reachableFirst(m, up[:min(len(up), b.Copies+readFallback)])
	h := holderSearch{g: g, m: m, bucket: bucket, key: key, f: f, drop: drop,
		last: fmt.Errorf("%w: %s/%s", object.ErrNotFound, bucket, key)}
	if done, err := h.try(ctx, first); done {
		return err
	}
	if rest := up[len(first):]; b.Mode == cluster.ModeLocal && len(rest) > 0 {
		if done, err := h.try(ctx, h.having(ctx, rest)); done {
			return err
		}
	}
	if done, err := h.try(ctx, down); done {
		return err
	}
	return h.last
}

// pathsDown reports whether every connection path to node id is down.
func (g *gateway) pathsDown(m *cluster.Map, id string) bool {
	if g.unreachable == nil || id == g.self {
		return false
	}
	n, _ := m.Node(id)
	return g.unreachable(hostPorts(n.IntraAddrs))
}

// reachableFirst returns ids with the nodes every connection path to which
// is down moved to the end: a node that hangs is tried after the others
// that may hold the object, before the map marks it down.
func (g *gateway) reachableFirst(m *cluster.Map, ids []string) []string {
	var gone []string // asked once each: a path's state may change meanwhile
	for _, id := range ids {
		if g.pathsDown(m, id) {
			gone = append(gone, id)
		}
	}
	if len(gone) == 0 {
		return ids
	}
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if !slices.Contains(gone, id) {
			out = append(out, id)
		}
	}
	return append(out, gone...)
}

// holderSearch is the state of one eachHolder.
type holderSearch struct {
	g           *gateway
	m           *cluster.Map
	bucket, key string
	f           func(context.Context, peer.Local) (object.Info, error)
	drop        func()
	last        error     // the most telling error so far
	rank        int       // of last: 0 not found, 1 unreachable, 2 failed
	deleted     time.Time // the latest delete a holder remembers
}

// try calls f on ids in order; done when one served the object or the
// search must end with err.
func (h *holderSearch) try(ctx context.Context, ids []string) (done bool, err error) {
	for _, id := range ids {
		info, err := h.f(peer.WithDowns(ctx, h.m.Nodes[id].Downs), h.g.at(h.m, id))
		r := 0
		switch {
		case err == nil && !h.deleted.IsZero() && !info.ModTime.After(h.deleted):
			h.drop()
			h.g.log.Warn("a holder that missed a delete has the deleted version; not served", "peer", id, "bucket", h.bucket, "key", h.key, "deleted", h.deleted)
			err = &peer.DeletedError{At: h.deleted}
		case err == nil:
			return true, nil
		case ctx.Err() != nil:
			return true, ctx.Err()
		case h.noteDeleted(err):
		case errors.Is(err, object.ErrNotFound):
		case errors.Is(err, peer.ErrUnreachable):
			r = 1
			h.g.log.Debug("holder unreachable, trying the next", "peer", id, "bucket", h.bucket, "key", h.key, "err", err)
		case answersForObject(err):
			return true, err
		default:
			r = 2
			h.g.log.Warn("holder failed to read, trying the next", "peer", id, "bucket", h.bucket, "key", h.key, "err", err)
		}
		if r >= h.rank {
			h.last, h.rank = err, r
		}
	}
	return false, nil
}

// having asks ids at once whether they have the object, and returns those
// that do (in the order of ids) or could not say; it notes the deletes
// they remember.
func (h *holderSearch) having(ctx context.Context, ids []string) []string {
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { _, errs[i] = h.g.at(h.m, id).Stat(ctx, h.bucket, h.key) })
	}
	wg.Wait()
	var out []string
	for i, err := range errs {
		if !h.noteDeleted(err) && !errors.Is(err, object.ErrNotFound) {
			out = append(out, ids[i])
		}
	}
	return out
}

// noteDeleted reports whether err is a holder remembering a delete of the
// key, and keeps the latest such delete.
func (h *holderSearch) noteDeleted(err error) bool {
	var de *peer.DeletedError
	if !errors.As(err, &de) {
		return false
	}
	if de.At.After(h.deleted) {
		h.deleted = de.At
	}
	return true
}

// answersForObject reports whether err is an answer about the object or
// the request rather than a failure of the holder: another holder would
// answer the same.
func answersForObject(err error) bool {
	for _, e := range []error{
		object.ErrInvalidRange, object.ErrPrecondition, object.ErrNotModified, object.ErrInvalidArgument,
		object.ErrInvalidKey, object.ErrBucketNotFound, object.ErrInvalidBucketName, object.ErrUploadNotFound,
		object.ErrBackend, object.ErrSlowDown, context.Canceled, context.DeadlineExceeded,
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// DeleteObject implements s3api.Objects: every node that may hold a copy
// deletes it. Deleting a missing object is not an error (as in S3).
//
// For a local bucket that is every up node (after nodes join, a copy stays
// outside the first ones until the rebalance moves it, and a copy left
// there would be moved back later). The delete fails (503, which clients
// retry) unless every up node among the object's replicas and readFallback
// beyond took it: a node that answers again without having been marked
// down would serve the deleted copy, and nothing would ever remove it.
// Holders that missed it (down, or unreachable past those) are remembered
// by tombstones on the nodes that took it; they ask when they come back
// (rejoin), and reads do not serve their copy meanwhile.
func (g *gateway) DeleteObject(ctx context.Context, bucket, key string) error {
	if err := object.ValidateKey(key); err != nil {
		return err
	}
	m, b, err := g.bucket(ctx, bucket)
	if err != nil {
		return err
	}
	at := g.now().UTC()
	up, others := placementOf(m, b.Name, key)
	if len(up) == 0 {
		return fmt.Errorf("%w: no node is up", object.ErrUnavailable)
	}
	primary := min(len(up), b.Copies+readFallback)
	targets := up[:primary]
	switch b.Mode {
	case cluster.ModeWriteback:
		// The owner's tier journals the delete and tells its replica
		// holders itself; deleting on them too would race it.
		targets, primary = up[:1], 1
	case cluster.ModeLocal:
		targets = slices.Clone(up)
		// A draining node is up but out of placement: it may still hold
		// a copy it has not moved yet.
		for _, id := range others {
			if n, _ := m.Node(id); n.State == cluster.StateUp && n.Draining {
				targets = append(targets, id)
			}
		}
	}
	errs := make([]error, len(targets))
	var wg sync.WaitGroup
	for i, id := range targets {
		dctx := ctx
		if i > 0 && b.Mode == cluster.ModeCache {
			dctx = peer.AsIs(ctx) // the owner deletes from the backend, the others their copies
		}
		wg.Go(func() {
			if err := g.at(m, id).Delete(dctx, bucket, key); err != nil && !errors.Is(err, object.ErrNotFound) {
				errs[i] = err
			}
		})
	}
	wg.Wait()
	if b.Mode == cluster.ModeLocal && missedHolder(m, errs) {
		g.tombstone(ctx, m, targets, errs, bucket, key, at)
	}
	for i, err := range errs[primary:] {
		if err != nil {
			g.log.Warn("a node outside the object's replicas missed its delete", "peer", targets[primary+i], "bucket", bucket, "key", key, "err", err)
		}
	}
	err = firstError(errs[:primary])
	if errors.Is(err, peer.ErrUnreachable) && g.goneAll(ctx, targets[:primary], errs[:primary]) {
		// The nodes that could not be reached are gone and marked down:
		// delete again under the map that says so, which records the
		// delete for them (a tombstone, or the next owner's journal).
		return g.DeleteObject(ctx, bucket, key)
	}
	return err
}

// goneAll reports whether every target whose answer was ErrUnreachable is
// gone and marked down now (cluster.ConfirmRefused), and errs holds no
// other error.
func (g *gateway) goneAll(ctx context.Context, targets []string, errs []error) bool {
	if g.confirmDown == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, substituteWait)
	defer cancel()
	for i, err := range errs {
		if err == nil {
			continue
		}
		if !errors.Is(err, peer.ErrUnreachable) {
			return false
		}
		if down, _ := g.confirmDown(ctx, targets[i]); !down {
			return false
		}
	}
	return true
}

// missedHolder reports whether a node that may hold a copy of a local
// bucket's object did not take its delete (errs: the targets' answers):
// a target that failed, or any node not up, not only one among the first
// copies+readFallback in HRW order. After nodes join, a copy stays outside
// those until the rebalance moves it (reads ask every node for the same
// reason), and a node down during the delete that held one would serve it
// again when it comes back.
func missedHolder(m *cluster.Map, errs []error) bool {
	for _, id := range m.NodeIDs() {
		if n, _ := m.Node(id); n.State != cluster.StateUp {
			return true
		}
	}
	for _, err := range errs {
		if err != nil {
			return true
		}
	}
	return false
}

// tombstone asks the targets that took a delete to remember it.
func (g *gateway) tombstone(ctx context.Context, m *cluster.Map, targets []string, errs []error, bucket, key string, at time.Time) {
	op := peer.ReplicaOp{Op: peer.ReplicaTombstone, Bucket: bucket, Key: key, Time: at}
	for i, id := range targets {
		if errs[i] != nil {
			continue
		}
		if err := g.at(m, id).Replica(ctx, op); err != nil {
			g.log.Warn("a node could not record a delete that a holder missed", "peer", id, "bucket", bucket, "key", key, "err", err)
		}
	}
}

// CopyObject implements s3api.Objects by streaming the source through the
// gateway into a new PUT of the destination. opts.CheckSource sees the
// Info of the reader the bytes come from.
func (g *gateway) CopyObject(ctx context.Context, srcBucket, srcKey, dstBucket, dstKey string, opts object.CopyOptions) (object.Info, error) {
	rd, err := g.GetObject(ctx, srcBucket, srcKey, object.GetOptions{})
	if err != nil {
		return object.Info{}, err
	}
	defer rd.Close()
	src := rd.Info()
	if opts.CheckSource != nil {
		if err := opts.CheckSource(src); err != nil {
			return object.Info{}, err
		}
	}
	po := src.PutOptions()
	po.Parts = nil // a copy is one part, as in S3
	if opts.ReplaceMeta {
		po.ContentType, po.UserMeta, po.Headers = opts.ContentType, opts.UserMeta, opts.Headers
	}
	return g.PutObject(ctx, dstBucket, dstKey, rd, po)
}

// ListObjects implements s3api.Objects.
func (g *gateway) ListObjects(ctx context.Context, bucket string, opts object.ListOptions) (object.ListResult, error) {
	m, b, err := g.bucket(ctx, bucket)
	if err != nil {
		return object.ListResult{}, err
	}
	if b.Mode != cluster.ModeLocal {
		return g.listAll(ctx, m, bucket, opts, g.listBackend)
	}
	return g.listAll(ctx, m, bucket, opts, nil)
}

// listAll asks every up node for its first page after the marker and
// merges them: any entry among the first MaxKeys of the whole bucket is
// among the first MaxKeys of the node that holds it, so one round is exact.
// extra, if set, adds one more source (the backend of a tiered bucket).
func (g *gateway) listAll(ctx context.Context, m *cluster.Map, bucket string, opts object.ListOptions,
	extra func(ctx context.Context, bucket string, opts object.ListOptions) (object.ListResult, error)) (object.ListResult, error) {
	if opts.MaxKeys <= 0 || opts.MaxKeys > 1000 {
		opts.MaxKeys = 1000
	}
	ids := m.UpNodeIDs()
	pages := make([]object.ListResult, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func(i int, id string) {
			defer wg.Done()
			pages[i], errs[i] = g.at(m, id).List(ctx, bucket, opts)
		}(i, id)
	}
	if extra != nil {
		p, err := extra(ctx, bucket, opts)
		if err != nil {
			wg.Wait()
			return object.ListResult{}, fmt.Errorf("listing the backend of %s: %w", bucket, err)
		}
		pages = append(pages, p)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil && !errors.Is(err, object.ErrBucketNotFound) {
			return object.ListResult{}, fmt.Errorf("listing %s on %s: %w", bucket, ids[i], err)
		}
	}
	ranked := 0
	if b, ok := m.Buckets[bucket]; ok && b.Mode == cluster.ModeLocal {
		ranked = len(pages)
	}
	return mergePages(pages, ranked, opts.MaxKeys), nil
}

// mergePages merges sorted pages into one page of at most max entries
// (objects and common prefixes together), dropping the duplicates that
// replicas produce. Among the first ranked pages, the copy of a key
// modified last is listed (a local bucket's copy on a node that missed an
// overwrite is older); other pages only add keys not listed before (a
// tiered copy's time may be a backend upload's, not the write's).
//
// A truncated page covers its source only up to its NextMarker (or last
// entry): a tiered page that left out deleted keys has fewer than max
// entries but stops there all the same. Entries past the lowest such
// bound are left for the next page, so that no source's keys are skipped.
func mergePages(pages []object.ListResult, ranked, max int) object.ListResult {
	type entry struct {
		key    string
		prefix bool
		info   object.Info
	}
	seen := map[string]int{} // key -> index in all
	var all []entry
	truncated := false
	for n, p := range pages {
		truncated = truncated || p.IsTruncated
		for _, o := range p.Objects {
			if i, ok := seen[o.Key]; !ok {
				seen[o.Key] = len(all)
				all = append(all, entry{key: o.Key, info: o})
			} else if n < ranked && !all[i].prefix && o.ModTime.After(all[i].info.ModTime) {
				all[i].info = o
			}
		}
		for _, cp := range p.CommonPrefixes {
			if _, ok := seen[cp]; !ok {
				seen[cp] = len(all)
				all = append(all, entry{key: cp, prefix: true})
			}
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].key < all[j].key })
	bound, bounded := pagesBound(pages)
	if bounded {
		n := sort.Search(len(all), func(i int) bool { return all[i].key > bound })
		all = all[:n]
	}
	var res object.ListResult
	if len(all) > max {
		all, truncated = all[:max], true
	}
	for _, e := range all {
		if e.prefix {
			res.CommonPrefixes = append(res.CommonPrefixes, e.key)
		} else {
			res.Objects = append(res.Objects, e.info)
		}
	}
	res.IsTruncated = truncated
	switch {
	case truncated && len(all) > 0:
		res.NextMarker = all[len(all)-1].key
	case truncated:
		res.NextMarker = bound // every entry up to it was left out
	}
	return res
}

// pagesBound returns the lowest key up to which the truncated pages cover
// their sources, if any page is truncated.
func pagesBound(pages []object.ListResult) (bound string, ok bool) {
	for _, p := range pages {
		if !p.IsTruncated {
			continue
		}
		end := p.NextMarker
		if end == "" {
			if n := len(p.Objects); n > 0 {
				end = p.Objects[n-1].Key
			}
			if n := len(p.CommonPrefixes); n > 0 && p.CommonPrefixes[n-1] > end {
				end = p.CommonPrefixes[n-1]
			}
		}
		if end == "" {
			continue // nothing to resume from; the merge cannot bound it
		}
		if !ok || end < bound {
			bound, ok = end, true
		}
	}
	return bound, ok
}

// Multipart uploads live on the owner of the final object. The upload ID
// names that node so later calls find it even if membership changed.

func newUploadID(owner, local string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(owner)) + "." + local
}

func parseUploadID(id string) (owner, local string, err error) {
	o, l, ok := strings.Cut(id, ".")
	if ok {
		b, derr := base64.RawURLEncoding.DecodeString(o)
		if derr == nil && len(b) > 0 && l != "" {
			return string(b), l, nil
		}
	}
	return "", "", fmt.Errorf("%w: malformed upload id", object.ErrUploadNotFound)
}

func (g *gateway) uploadOwner(ctx context.Context, bucket, uploadID string) (*cluster.Map, peer.Local, string, error) {
	m, _, err := g.bucket(ctx, bucket)
	if err != nil {
		return nil, nil, "", err
	}
	owner, local, err := parseUploadID(uploadID)
	if err != nil {
		return nil, nil, "", err
	}
	if _, ok := m.Node(owner); !ok {
		return nil, nil, "", fmt.Errorf("%w: upload owner %s left the cluster", object.ErrUploadNotFound, owner)
	}
	return m, g.at(m, owner), local, nil
}

// CreateMultipartUpload implements s3api.Objects.
func (g *gateway) CreateMultipartUpload(ctx context.Context, bucket, key string, opts object.PutOptions) (string, error) {
	if err := object.ValidateKey(key); err != nil {
		return "", err
	}
	m, b, err := g.bucket(ctx, bucket)
	if err != nil {
		return "", err
	}
	targets, err := g.writeTargets(m, b, key)
	if err != nil {
		return "", err
	}
	id, err := g.at(m, targets[0]).CreateUpload(ctx, bucket, key, opts)
	if err != nil {
		return "", err
	}
	return newUploadID(targets[0], id), nil
}

// UploadPart implements s3api.Objects.
func (g *gateway) UploadPart(ctx context.Context, bucket, key, uploadID string, part int, body io.Reader, opts object.PutOptions) (object.PartInfo, error) {
	_, l, id, err := g.uploadOwner(ctx, bucket, uploadID)
	if err != nil {
		return object.PartInfo{}, err
	}
	return l.PutPart(ctx, bucket, key, id, part, body, opts)
}

// ListParts implements s3api.Objects.
func (g *gateway) ListParts(ctx context.Context, bucket, key, uploadID string) ([]object.PartInfo, error) {
	_, l, id, err := g.uploadOwner(ctx, bucket, uploadID)
	if err != nil {
		return nil, err
	}
	return l.ListParts(ctx, bucket, key, id)
}

// AbortMultipartUpload implements s3api.Objects.
func (g *gateway) AbortMultipartUpload(ctx context.Context, bucket, key, uploadID string) error {
	_, l, id, err := g.uploadOwner(ctx, bucket, uploadID)
	if err != nil {
		return err
	}
	return l.AbortUpload(ctx, bucket, key, id)
}

// CompleteMultipartUpload implements s3api.Objects: the owner assembles
// the object, then the gateway copies it to the other targets. If a copy
// fails the client gets the error, and its retry (S3 clients retry a 503)
// finds the upload gone but the object there with the ETag these parts
// give: the completion went through, so the copies are made again.
func (g *gateway) CompleteMultipartUpload(ctx context.Context, bucket, key, uploadID string, parts []object.CompletePart) (object.Info, error) {
	m, l, id, err := g.uploadOwner(ctx, bucket, uploadID)
	if err != nil {
		return object.Info{}, err
	}
	b, _ := m.Bucket(bucket)
	info, err := l.CompleteUpload(ctx, bucket, key, id, parts)
	if errors.Is(err, object.ErrUploadNotFound) && b.Mode == cluster.ModeLocal && b.Copies > 1 {
		if done, ok := completedAs(ctx, l, bucket, key, parts); ok {
			info, err = done, nil
		}
	}
	if err != nil {
		return object.Info{}, err
	}
	if b.Copies <= 1 {
		return info, nil
	}
	owner, _, _ := parseUploadID(uploadID)
	targets, err := g.writeTargets(m, b, key)
	if err != nil {
		return object.Info{}, err
	}
	errs := make([]error, len(targets))
	var wg sync.WaitGroup
	for i, id := range targets {
		if id == owner {
			continue
		}
		wg.Go(func() {
			if err := g.replicate(ctx, m, l, id, owner, info); err != nil {
				errs[i] = fmt.Errorf("replicating %s/%s to %s: %w", bucket, key, id, err)
			}
		})
	}
	wg.Wait()
	if err := firstError(errs); err != nil {
		return object.Info{}, err
	}
	return info, nil
}

// completedAs returns the owner's object if it is what completing an
// upload with parts made (its ETag is theirs): a retried completion.
func completedAs(ctx context.Context, owner interface {
	Stat(ctx context.Context, bucket, key string) (object.Info, error)
}, bucket, key string, parts []object.CompletePart) (object.Info, bool) {
	etag, err := object.MultipartETag(parts)
	if err != nil {
		return object.Info{}, false
	}
	info, err := owner.Stat(ctx, bucket, key)
	return info, err == nil && info.ETag == etag
}

// replicate copies the version info of an object from src to node id,
// keeping its ETag. A version rewritten or deleted on src since, or one
// as new on id, needs no copy: that write made its own.
func (g *gateway) replicate(ctx context.Context, m *cluster.Map, src peer.Local, id, owner string, info object.Info) error {
	rd, err := src.Get(ctx, info.Bucket, info.Key, nil)
	if errors.Is(err, object.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	defer rd.Close()
	if got := rd.Info(); got.ETag != info.ETag || !got.ModTime.Equal(info.ModTime) {
		return nil
	}
	o := peer.PutOptions{
		PutOptions: info.PutOptions(),
		ModTime:    info.ModTime, ETag: info.ETag, Dirty: info.Dirty, Replica: true, Owner: owner,
		BackendETag: info.BackendETag, BackendVersion: info.BackendVersion, KeepNewer: true,
		Checksum: info.Checksum,
	}
	_, err = g.at(m, id).Put(ctx, info.Bucket, info.Key, rd, o)
	if errors.Is(err, object.ErrPrecondition) {
		return nil
	}
	return err
}

// ListMultipartUploads implements s3api.Objects.
func (g *gateway) ListMultipartUploads(ctx context.Context, bucket, prefix string) ([]object.UploadInfo, error) {
	m, _, err := g.bucket(ctx, bucket)
	if err != nil {
		return nil, err
	}
	var (
		mu   sync.Mutex
		all  []object.UploadInfo
		wg   sync.WaitGroup
		errs []error
	)
	for _, id := range m.UpNodeIDs() {
		wg.Add(1)
		go func(id string) {
			defer wg.Done()
			ups, err := g.at(m, id).ListUploads(ctx, bucket, prefix)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && !errors.Is(err, object.ErrBucketNotFound) {
				errs = append(errs, fmt.Errorf("%s: %w", id, err))
				return
			}
			for _, u := range ups {
				u.UploadID = newUploadID(id, u.UploadID)
				all = append(all, u)
			}
		}(id)
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].Key != all[j].Key {
			return all[i].Key < all[j].Key
		}
		return all[i].Initiated.Before(all[j].Initiated)
	})
	return all, nil
}
