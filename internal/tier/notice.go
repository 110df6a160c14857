package tier

import (
	"context"
	"maps"
	"slices"
	"time"
)

// notice tells a replica holder that the owner's operation seq of a key is
// done: destaged, or (deleted) a delete destaged, after which the holder
// drops its copy too. A holder that is down misses it, and a replica nobody
// clears stays dirty and journaled on the holder, to be taken over and
// uploaded again (a deleted object brought back) if the owner dies. So a
// notice that fails is journaled and sent again until it arrives or is
// noticeTTL old, across restarts of the owner.
type notice struct {
	holder      string
	deleted     bool
	seq         uint64
	bucket, key string
	first       time.Time
}

// noticeTTL bounds how long an undelivered notice is retried.
const noticeTTL = 24 * time.Hour

func (n notice) id() string { return n.holder + "\x00" + okey(n.bucket, n.key) }

func (n notice) record() Record {
	k := KindNotice
	if n.deleted {
		k = KindNoticeDelete
	}
	return Record{Kind: k, Seq: n.seq, Time: n.first, Bucket: n.bucket, Key: n.key, Owner: n.holder}
}

// tell sends the notices of o, just destaged, to its holders and to the
// holders of the operations of the key that o superseded before they were
// destaged (they hold replicas of writes that will never be destaged).
// Those are o's own: an older operation that finishes first must not use
// them up, since its notice (an older seq) is ignored by a holder of a
// newer replica.
func (d *destager) tell(o *op) {
	if d.t.cfg.Replicator == nil {
		return
	}
	d.mu.Lock()
	superseded := o.notify
	d.mu.Unlock()
	now := time.Now()
	for _, h := range o.holders {
		d.send(notice{holder: h, seq: o.seq, bucket: o.bucket, key: o.key, first: now})
	}
	for _, h := range superseded {
		if !slices.Contains(o.holders, h) {
			d.send(notice{holder: h, deleted: o.kind == KindDelete, seq: o.seq, bucket: o.bucket, key: o.key, first: now})
		}
	}
}

// send delivers n, or journals it for the retry loop.
func (d *destager) send(n notice) {
	err := d.deliver(n)
	if err == nil {
		return
	}
	d.t.warnThrottled(n.holder, "tier: a replica holder missed a notice; it will be sent again", "holder", n.holder, "bucket", n.bucket, "key", n.key, "delete", n.deleted, "err", err)
	if err := d.j.append(false, func() { d.mu.Lock(); d.keep(n); d.mu.Unlock() }, n.record()); err != nil {
		d.t.log.Error("tier: could not journal an undelivered notice", "holder", n.holder, "bucket", n.bucket, "key", n.key, "err", err)
	}
}

// keep records n as undelivered: one per holder and key, the newest (whose
// seq covers the older ones). d.mu held.
func (d *destager) keep(n notice) {
	if u, ok := d.undelivered[n.id()]; ok {
		if u.seq > n.seq {
			return
		}
		n.first = u.first
	}
	d.undelivered[n.id()] = n
}

// forget drops n once delivered or expired, unless a newer notice
// replaced it meanwhile.
func (d *destager) forget(n notice) {
	err := d.j.append(false, func() {
		d.mu.Lock()
		if u, ok := d.undelivered[n.id()]; ok && u.seq <= n.seq {
			delete(d.undelivered, n.id())
		}
		d.mu.Unlock()
	}, Record{Kind: KindNoticeDone, Seq: n.seq, Time: time.Now(), Bucket: n.bucket, Key: n.key, Owner: n.holder})
	if err != nil {
		d.t.log.Warn("tier: could not journal a delivered notice", "holder", n.holder, "err", err)
	}
}

func (d *destager) deliver(n notice) error {
	t := d.t
	ctx, r := t.ctx, t.cfg.Replicator
	if n.deleted {
		if err := r.Deleted(ctx, t.cfg.NodeID, n.seq, n.bucket, n.key, []string{n.holder}); err != nil {
			return err
		}
	}
	return r.Destaged(ctx, t.cfg.NodeID, n.seq, n.bucket, n.key, []string{n.holder})
}

// redeliver sends the undelivered notices again every interval until ctx
// ends. It also repairs a journal that a failed write left unusable (by
// a compaction, which writes it afresh from memory): otherwise only a
// successful destage would, and with no backlog or the backend down every
// write-back PUT and DELETE would fail until a restart.
func (d *destager) redeliver(ctx context.Context, interval time.Duration) {
	defer d.wg.Done()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if d.j.needsRewrite() || d.dj.needsRewrite() {
			d.maybeCompact()
		}
		d.mu.Lock()
		ns := slices.Collect(maps.Values(d.undelivered))
		d.mu.Unlock()
		unreachable := map[string]bool{} // one failure per holder and round
		for _, n := range ns {
			if ctx.Err() != nil {
				return
			}
			if time.Since(n.first) > noticeTTL {
				d.t.log.Error("tier: gave up telling a replica holder; its replica stays dirty", "holder", n.holder, "bucket", n.bucket, "key", n.key)
			} else if unreachable[n.holder] {
				continue
			} else if d.deliver(n) != nil {
				unreachable[n.holder] = true
				continue
			}
			d.forget(n)
		}
	}
}

// supersede records that q will never be destaged, so that o, which
// replaces it, tells q's holders and those q had to tell (d.mu held).
func (o *op) supersede(q *op) {
	for _, h := range append(slices.Clip(q.holders), q.notify...) {
		if !slices.Contains(o.notify, h) {
			o.notify = append(o.notify, h)
		}
	}
}
