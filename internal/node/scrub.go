package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/peer"
	"github.com/slipstream-io/slipstream/internal/store"
)

// scrubber reads every local copy back from its drive, at a bounded rate,
// and checks it against the size and CRC32C recorded when it was written:
// drives rot silently, and a copy nobody reads is found damaged only when
// the other copies are gone too. A damaged (or unreadable) copy is
// rewritten from another node that holds the same version, and the body
// fetched is checked against the recorded CRC32C before it replaces the
// damaged one; a clean copy of a tiered bucket is dropped instead (the
// next GET fetches it from the backend). A copy no other node can supply
// is reported (admin, log, metrics) and left in place.
type scrubber struct {
	self      string
	meta      mapView
	store     *store.Store
	at        func(m *cluster.Map, id string) peer.Local
	log       *slog.Logger
	rate      int64         // bytes read per second, 0: unlimited
	interval  time.Duration // between automatic passes; <= 0: none
	stateFile string        // holds the time the last pass finished
	now       func() time.Time

	passes passLog[ScrubProgress, *ScrubProgress]
}

// ScrubProgress is one line of a scrub job's NDJSON progress stream (and a
// pass's result).
type ScrubProgress struct {
	Node       string `json:"node"`
	Checked    int    `json:"checked"`    // copies read back
	Bytes      int64  `json:"bytes"`      // bytes read back
	Corrupt    int    `json:"corrupt"`    // copies damaged or unreadable
	Repaired   int    `json:"repaired"`   // of those, rewritten from another node (or dropped, for tiered buckets)
	Unrepaired int    `json:"unrepaired"` // of those, left as they are: no good copy elsewhere
	Done       bool   `json:"done"`
	LastErr    string `json:"lastError,omitempty"`
}

// Add adds o's counts to p.
func (p *ScrubProgress) Add(o ScrubProgress) {
	p.Checked += o.Checked
	p.Bytes += o.Bytes
	p.Corrupt += o.Corrupt
	p.Repaired += o.Repaired
	p.Unrepaired += o.Unrepaired
	if o.LastErr != "" {
		p.LastErr = o.LastErr
	}
}

// ScrubStatus is what `admin status` shows of a node's scrubs.
type ScrubStatus = PassStatus[ScrubProgress]

// scrubTimeout bounds a question to another node during a repair.
const scrubTimeout = 10 * time.Second

// watch runs a pass every interval (counted from the last one, across
// restarts) until ctx ends.
func (s *scrubber) watch(ctx context.Context) {
	last := s.loadLast()
	if last.IsZero() {
		last = s.now()
		s.saveLast(last)
	}
	for {
		t := time.NewTimer(max(time.Until(last.Add(s.interval)), 0))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		p := s.run(ctx, "", nil)
		if ctx.Err() != nil {
			return
		}
		last = s.now()
		s.saveLast(last)
		level := slog.LevelInfo
		if p.Corrupt > 0 {
			level = slog.LevelWarn
		}
		s.log.Log(ctx, level, "scrub pass done", "checked", p.Checked, "bytes", p.Bytes, "corrupt", p.Corrupt,
			"repaired", p.Repaired, "unrepaired", p.Unrepaired, "lastError", p.LastErr)
	}
}

func (s *scrubber) loadLast() time.Time {
	b, err := os.ReadFile(s.stateFile)
	if err != nil {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(string(b)))
	if err != nil {
		return time.Time{}
	}
	return t
}

func (s *scrubber) saveLast(t time.Time) {
	if err := os.WriteFile(s.stateFile, []byte(t.Format(time.RFC3339Nano)+"\n"), 0o644); err != nil {
		s.log.Warn("saving the scrub state (the next start scrubs sooner)", "err", err)
	}
}

// run makes one pass over the local copies (of bucket, or of every bucket),
// calling progress as it goes; it returns the totals.
func (s *scrubber) run(ctx context.Context, bucket string, progress func(ScrubProgress)) ScrubProgress {
	s.passes.begin()
	pace := pacer(s.rate)
	tot := ScrubProgress{Node: s.self}
	report := func(o ScrubProgress) {
		tot.Add(o)
		s.passes.add(o)
		if progress != nil {
			progress(tot)
		}
	}
	err := s.store.Walk(ctx, bucket, func(info object.Info) error {
		report(s.check(ctx, info, pace))
		return ctx.Err()
	})
	if err != nil && ctx.Err() == nil {
		report(ScrubProgress{LastErr: err.Error()})
	}
	tot.Done = true
	s.passes.end(tot, s.now())
	return tot
}

// check reads one copy back and repairs it if it is damaged.
func (s *scrubber) check(ctx context.Context, info object.Info, pace func(context.Context, int) error) ScrubProgress {
	got, err := s.store.Verify(ctx, info.Bucket, info.Key, pace)
	switch {
	case errors.Is(err, object.ErrNotFound) || ctx.Err() != nil:
		return ScrubProgress{}
	case err == nil:
		return ScrubProgress{Checked: 1, Bytes: got.Size}
	}
	res := ScrubProgress{Checked: 1, Bytes: got.Size, Corrupt: 1}
	s.log.Error("scrub: a copy does not match its checksum", "bucket", info.Bucket, "key", info.Key, "err", err)
	if rerr := s.repair(ctx, got); rerr != nil {
		res.Unrepaired, res.LastErr = 1, fmt.Sprintf("%s/%s: %v; not repaired: %v", info.Bucket, info.Key, err, rerr)
		s.log.Error("scrub: damaged copy not repaired; no longer served", "bucket", info.Bucket, "key", info.Key, "err", rerr)
		// Reads of it then fail (or go to another holder) rather than
		// return bytes known to be wrong; a later pass tries again.
		if merr := s.store.MarkDamaged(ctx, got); merr != nil && !errors.Is(merr, store.ErrChanged) && !errors.Is(merr, object.ErrNotFound) {
			s.log.Error("scrub: marking a damaged copy failed", "bucket", info.Bucket, "key", info.Key, "err", merr)
		}
		return res
	}
	res.Repaired = 1
	s.log.Warn("scrub: damaged copy repaired", "bucket", info.Bucket, "key", info.Key)
	return res
}

// repair replaces the damaged local version info with the same version
// from another node, checked against info's checksum on the way in.
func (s *scrubber) repair(ctx context.Context, info object.Info) error {
	m := s.meta.Map()
	b, ok := m.Bucket(info.Bucket)
	if !ok {
		return nil // the bucket is being deleted
	}
	if tiered(b) && !info.Dirty {
		err := s.store.DeleteVersion(ctx, info.Bucket, info.Key, info)
		if errors.Is(err, store.ErrChanged) || errors.Is(err, object.ErrNotFound) {
			return nil
		}
		return err
	}
	up, others := placementOf(m, info.Bucket, info.Key)
	var errs []error
	for _, id := range append(up, others...) { // draining nodes last
		if ni, _ := m.Node(id); id == s.self || ni.State != cluster.StateUp {
			continue
		}
		err := s.copyFrom(ctx, m, id, info)
		if err == nil || errors.Is(err, store.ErrChanged) {
			return nil // repaired, or rewritten meanwhile
		}
		errs = append(errs, fmt.Errorf("%s: %w", id, err))
	}
	if len(errs) == 0 {
		return errors.New("no other node is up")
	}
	return errors.Join(errs...)
}

// copyFrom rewrites info's version from node id, if it holds that version.
func (s *scrubber) copyFrom(ctx context.Context, m *cluster.Map, id string, info object.Info) error {
	node := s.at(m, id)
	cctx, cancel := context.WithTimeout(ctx, scrubTimeout)
	other, err := node.Stat(peer.AsIs(cctx), info.Bucket, info.Key)
	cancel()
	if err != nil {
		return err
	}
	if other.ETag != info.ETag || !other.ModTime.Equal(info.ModTime) {
		return fmt.Errorf("holds another version (%s at %s)", other.ETag, other.ModTime.Format(time.RFC3339Nano))
	}
	rd, err := node.Get(ctx, info.Bucket, info.Key, nil)
	if err != nil {
		return err
	}
	defer rd.Close()
	_, err = s.store.Put(ctx, info.Bucket, info.Key, rd, store.PutOptions{
		PutOptions: info.PutOptions(),
		ModTime:    info.ModTime, ETag: info.ETag, BackendETag: info.BackendETag, BackendVersion: info.BackendVersion,
		Dirty: info.Dirty, Pinned: info.Pinned, Replaces: &info, Checksum: info.Checksum,
	})
	return err
}
