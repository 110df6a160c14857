package tier

import (
	"context"
	"slices"
	"time"
)

// notice tells a replica holder that the owner's operation seq of a key is
// done: destaged, or (deleted) a delete destaged, after which the holder
// drops its copy too. A holder that is down misses it, and a replica nobody
// clears stays dirty and journaled on the holder, to be taken over and
// uploaded again (a deleted object brought back) if the owner dies. So a
// notice that fails is kept and sent again until it arrives or is
// noticeTTL old.
type notice struct {
	holder      string
	deleted     bool
	seq         uint64
	bucket, key string
	first       time.Time
}

// noticeTTL bounds how long an undelivered notice is retried (and kept in
// memory; they are not journaled, so an owner restart forgets them).
const noticeTTL = 24 * time.Hour

// tell sends the notices of o, just destaged, to its holders and to the
// holders of the operations of the key that o superseded before they were
// destaged (they hold replicas of writes that will never be destaged).
func (d *destager) tell(o *op) {
	if d.t.cfg.Replicator == nil {
		return
	}
	d.mu.Lock()
	var superseded []string
	if ks := d.keys[okey(o.bucket, o.key)]; ks != nil {
		superseded, ks.notify = ks.notify, nil
	}
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

// send delivers n, or keeps it for the retry loop (one per holder and
// key: a newer notice covers an older one).
func (d *destager) send(n notice) {
	if d.deliver(n) {
		return
	}
	d.mu.Lock()
	d.keep(n)
	d.mu.Unlock()
}

// keep records n as undelivered (d.mu held).
func (d *destager) keep(n notice) {
	k := n.holder + "\x00" + okey(n.bucket, n.key)
	if u, ok := d.undelivered[k]; ok {
		if u.seq > n.seq {
			return
		}
		n.first = u.first
	}
	if d.undelivered == nil {
		d.undelivered = make(map[string]notice)
	}
	d.undelivered[k] = n
}

func (d *destager) deliver(n notice) bool {
	t := d.t
	ctx, r := t.ctx, t.cfg.Replicator
	if n.deleted {
		if err := r.Deleted(ctx, t.cfg.NodeID, n.seq, n.bucket, n.key, []string{n.holder}); err != nil {
			t.log.Warn("tier: a replica holder missed a delete; will tell it again", "holder", n.holder, "bucket", n.bucket, "key", n.key, "err", err)
			return false
		}
	}
	if err := r.Destaged(ctx, t.cfg.NodeID, n.seq, n.bucket, n.key, []string{n.holder}); err != nil {
		t.log.Warn("tier: a replica holder missed a destage notice; will tell it again", "holder", n.holder, "bucket", n.bucket, "key", n.key, "err", err)
		return false
	}
	return true
}

// redeliver sends the undelivered notices again every interval until ctx
// ends.
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
		d.mu.Lock()
		ns := d.undelivered
		d.undelivered = nil
		d.mu.Unlock()
		var failed []notice
		for _, n := range ns {
			switch {
			case ctx.Err() != nil:
				failed = append(failed, n)
			case time.Since(n.first) > noticeTTL:
				d.t.log.Error("tier: gave up telling a replica holder; its replica stays dirty", "holder", n.holder, "bucket", n.bucket, "key", n.key)
			case !d.deliver(n):
				failed = append(failed, n)
			}
		}
		d.mu.Lock()
		for _, n := range failed {
			d.keep(n)
		}
		d.mu.Unlock()
	}
}

// supersede records that o will never be destaged, so that the operation
// that replaces it tells o's holders (d.mu held).
func (ks *keyState) supersede(o *op) {
	for _, h := range o.holders {
		if !slices.Contains(ks.notify, h) {
			ks.notify = append(ks.notify, h)
		}
	}
}
