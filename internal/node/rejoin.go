package node

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/peer"
	"github.com/slipstream-io/slipstream/internal/store"
)

// rejoin keeps a node that was away (stopped, crashed or cut off) from
// serving copies of local-bucket objects that were overwritten through other
// nodes meanwhile. Reads try the first holder in HRW order, and a returning
// node is often first: without this, it would answer with its old version.
//
// The cluster map counts the times each node was marked down (Downs). When
// the map shows this node up with a count above the one it last checked at
// (kept in a file, so it survives restarts), every copy modified before that
// moment is suspect until checked: the copy is compared with the same key on
// the next up nodes in HRW order (as many as the bucket's copies: those that
// took the writes while this node was away), and dropped if one of them has
// a newer one, or remembers deleting the key after the copy was written
// (tombstones). A background pass checks every suspect copy; until it is
// through, a read of a suspect copy checks that copy first. Objects written
// through this node since are not suspect.
//
// Tiered buckets are not checked here: dirty copies are checked by the
// tier's destager against the backend, clean ones by the bucket's
// validation policy.
type rejoin struct {
	self      string
	meta      mapView
	store     *store.Store
	at        func(m *cluster.Map, id string) peer.Local
	log       *slog.Logger
	stateFile string // holds the Downs count last checked at

	mu      sync.Mutex
	since   time.Time // copies modified before it are suspect; zero when none are
	checked uint64    // the Downs count copies were last checked for (saved in stateFile)
	target  uint64    // the Downs count the current pass checks for
	running bool      // a pass is going
	again   bool      // a newer down mark came during the pass
	wg      sync.WaitGroup
}

// rejoinParallel bounds the copies checked at once by the background pass;
// rejoinTimeout bounds one comparison with a peer.
const (
	rejoinParallel = 8
	rejoinTimeout  = 5 * time.Second
)

// run follows the map until ctx ends and checks the node's copies whenever
// the map shows it up after a down mark it has not checked for.
func (r *rejoin) run(ctx context.Context) {
	r.mu.Lock()
	checked := r.checked
	r.mu.Unlock()
	for m := range r.meta.Watch(ctx) {
		n, ok := m.Node(r.self)
		if !ok || n.State != cluster.StateUp || n.Downs <= checked {
			continue
		}
		checked = n.Downs
		r.log.Info("up after being marked down: checking copies against the other holders", "downs", n.Downs)
		r.begin(ctx, n.Downs)
	}
	r.wg.Wait()
}

func (r *rejoin) loadChecked() uint64 {
	b, err := os.ReadFile(r.stateFile)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			r.log.Warn("reading the rejoin state", "err", err)
		}
		return 0
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		r.log.Warn("bad rejoin state: checking copies again", "file", r.stateFile, "err", err)
		return 0
	}
	return n
}

func (r *rejoin) saveChecked(n uint64) {
	tmp := r.stateFile + ".tmp"
	err := os.WriteFile(tmp, []byte(strconv.FormatUint(n, 10)+"\n"), 0o644)
	if err == nil {
		err = os.Rename(tmp, r.stateFile)
	}
	if err != nil {
		r.log.Warn("saving the rejoin state (the next start checks again)", "err", err)
	}
}

// begin makes every copy modified before now suspect and starts a pass
// that checks them for the down mark number downs.
func (r *rejoin) begin(ctx context.Context, downs uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.since, r.target = time.Now(), downs
	if r.running {
		r.again = true
		return
	}
	r.running = true
	r.wg.Go(func() { r.pass(ctx) })
}

// suspect reports whether the copy described by info must be checked:
// it was modified before the down mark being checked for, or the read
// comes from a node whose map has this node marked down more times than
// its copies were checked for (peer.WithDowns): this node's own map may
// not show that mark yet, and then no pass has begun.
func (r *rejoin) suspect(ctx context.Context, info object.Info) bool {
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if downs, ok := peer.DownsOf(ctx); ok && downs > r.checked {
		return true
	}
	return info.ModTime.Before(r.since)
}

// pass checks every suspect copy, then clears the suspicion and records
// the down mark as checked, unless a newer one came meanwhile (then it
// passes again).
func (r *rejoin) pass(ctx context.Context) {
	for {
		r.mu.Lock()
		since, target := r.since, r.target
		r.mu.Unlock()
		checked, dropped := r.checkAll(ctx, since)
		r.mu.Lock()
		if ctx.Err() != nil || !r.again {
			done := ctx.Err() == nil
			if done {
				r.since = time.Time{}
				r.checked = max(r.checked, target)
			}
			r.running = false
			r.mu.Unlock()
			if done {
				r.saveChecked(target)
				r.log.Info("copies checked against the other holders", "checked", checked, "dropped", dropped)
			}
			return
		}
		r.again = false
		r.mu.Unlock()
	}
}

func (r *rejoin) checkAll(ctx context.Context, since time.Time) (checked, dropped int) {
	var mu sync.Mutex
	sem := make(chan struct{}, rejoinParallel)
	var wg sync.WaitGroup
	err := r.store.Walk(ctx, "", func(info object.Info) error {
		if !info.ModTime.Before(since) {
			return nil
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			stale := r.check(ctx, info)
			mu.Lock()
			checked++
			if stale {
				dropped++
			}
			mu.Unlock()
		})
		return nil
	})
	wg.Wait()
	if err != nil && ctx.Err() == nil {
		r.log.Error("walking the store to check copies", "err", err)
	}
	return checked, dropped
}

// check compares the local copy described by info with the other holders
// and drops it if one has a newer version. It reports whether it dropped
// it. A holder that cannot be asked is skipped: a copy is dropped only on
// evidence of a newer one.
func (r *rejoin) check(ctx context.Context, info object.Info) bool {
	m := r.meta.Map()
	b, ok := m.Buckets[info.Bucket]
	if !ok || b.Mode != cluster.ModeLocal {
		return false
	}
	up, _ := placementOf(m, info.Bucket, info.Key)
	asked := 0
	for _, id := range up {
		if id == r.self {
			continue
		}
		// As far as reads fall back: with copies=1, the node that took
		// the last write may be the third one, behind one that has since
		// dropped the copy it took while this one was away.
		if asked == max(b.Copies, 1)+readFallback {
			break
		}
		asked++
		cctx, cancel := context.WithTimeout(ctx, rejoinTimeout)
		other, err := r.at(m, id).Stat(peer.AsIs(cctx), info.Bucket, info.Key)
		cancel()
		var deleted *peer.DeletedError
		var why string
		var when time.Time
		switch {
		case err == nil && other.ModTime.After(info.ModTime):
			why, when = "overwritten", other.ModTime
		case errors.As(err, &deleted) && deleted.At.After(info.ModTime):
			why, when = "deleted", deleted.At
		default:
			continue
		}
		err = r.store.DeleteVersion(ctx, info.Bucket, info.Key, info)
		if err != nil {
			r.log.Debug("out-of-date copy not dropped", "bucket", info.Bucket, "key", info.Key, "err", err)
			return false
		}
		r.log.Warn("dropped a copy "+why+" through other nodes while this one was away",
			"bucket", info.Bucket, "key", info.Key, "local", info.ModTime, why, when, "on", id)
		return true
	}
	return false
}
