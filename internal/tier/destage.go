package tier

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/slipstream-io/slipstream/internal/backend"
	"github.com/slipstream-io/slipstream/internal/object"
)

// op is a pending write-back operation (owned or held as a replica).
type op struct {
	kind    Kind // KindPut or KindDelete
	seq     uint64
	time    time.Time
	bucket  string
	key     string
	size    int64
	etag    string
	owner   string
	holders []string
	// notify: holders of the operations of the key this one superseded
	// before they were destaged, to tell when this one is (they hold
	// replicas of writes that will never be destaged).
	notify []string
	// verify: the operation may be older than a write that went through
	// another node, so it is checked against the backend's stamp first. It
	// is set for operations read from the journal at start (this node may
	// have been down and taken over) and for operations taken over from a
	// dead owner (another holder may have destaged them, or the key may
	// have been rewritten since); never for writes this process accepted.
	verify bool
}

func (o *op) record() Record {
	return Record{Kind: o.kind, Seq: o.seq, Time: o.time, Bucket: o.bucket, Key: o.key, Size: o.size,
		ETag: o.etag, Owner: o.owner, Holders: o.holders}
}

// supersededRecords returns the records that keep o.notify across a
// compaction (which drops the records of the superseded operations they
// were rebuilt from): KindSuperseded records of o's seq, to follow o's own
// record (d.mu held).
func (o *op) supersededRecords() []Record {
	var recs []Record
	for h := o.notify; len(h) > 0; {
		n := min(len(h), maxHolders)
		recs = append(recs, Record{Kind: KindSuperseded, Seq: o.seq, Time: o.time, Bucket: o.bucket, Key: o.key,
			Holders: slices.Clone(h[:n])})
		h = h[n:]
	}
	return recs
}

func (o *op) bytes() int64 {
	if o.kind == KindPut || o.kind == KindReplicaPut {
		return o.size
	}
	return 0
}

type keyState struct {
	pending  *op // latest operation not started yet
	running  *op // operation being destaged
	queued   bool
	attempts int // consecutive failures
}

// destager owns the journal, the backlog and the upload workers.
type destager struct {
	t *Tier
	j *journal
	// dj is the deletes journal: every owned delete is appended to it,
	// durably, before the main journal. A dirty copy in the store stands
	// for a write whose record the main journal lost to damage; nothing
	// stands for a delete, so replay takes such deletes from dj (see
	// replay). djMu is held shared across a delete's two appends and
	// exclusively by compact, so that the two files are rewritten from
	// one state.
	dj   *journal
	djMu sync.RWMutex

	mu       sync.Mutex
	note     notifier // backlog changes: dirty bytes, queue, completions
	keys     map[string]*keyState
	queue    []string
	replicas map[string]map[string]*op // owner -> object -> latest replica op
	nextSeq  uint64
	dirty    int64    // bytes of owned pending + running operations
	reserved int64    // bytes promised to PUTs in progress
	waiters  []*int64 // PUTs waiting for room, in arrival order
	replicaB int64
	destaged int64
	failures int64
	lastErr  string

	undelivered map[string]notice // notices replica holders missed, by holder and key (journaled)

	// betweenRewrites, if set (tests), runs in compact after the deletes
	// journal's rewrite and before the main journal's.
	betweenRewrites func()

	wg sync.WaitGroup
}

func openDestager(ctx context.Context, t *Tier) (*destager, error) {
	j, recs, err := openJournal(t.cfg.JournalDir)
	if err != nil {
		return nil, err
	}
	dj, drecs, err := openJournal(filepath.Join(t.cfg.JournalDir, deletesDir))
	if err != nil {
		j.close()
		return nil, err
	}
	if dj.cut != "" {
		t.log.Warn("tier: damaged records cut out of the deletes journal (the main journal holds the same deletes)",
			"bytes", dj.cutBytes, "kept_in", dj.cut)
	}
	switch {
	case j.cutMiddle:
		t.log.Error("tier: damaged journal records skipped, the good ones behind them replayed; the writes the damaged ones held may be lost",
			"bytes", j.cutBytes, "regions", j.cutRegions, "kept_in", j.cut, "records", len(recs))
	case j.cut != "":
		t.log.Warn("tier: journal cut after its last good record (normally the torn tail of an interrupted append)",
			"bytes", j.cutBytes, "kept_in", j.cut, "records", len(recs))
	}
	d := &destager{t: t, j: j, dj: dj, keys: make(map[string]*keyState), replicas: make(map[string]map[string]*op),
		undelivered: make(map[string]notice), nextSeq: 1}
	if n := d.replay(recs, drecs); n > 0 {
		t.log.Warn("tier: deletes whose main journal records were lost recovered from the deletes journal", "deletes", n)
	}
	// Owned records lost in damaged regions may carry numbers above every
	// one replayed (beyond those in flight, which seqGap covers): a lost
	// record took at least minFrame bytes and at most one new number.
	d.nextSeq += uint64(j.cutBytes / minFrame)
	if err := d.reconcile(ctx); err != nil {
		j.close()
		dj.close()
		return nil, err
	}
	if err := d.compact(); err != nil {
		j.close()
		dj.close()
		return nil, err
	}
	return d, nil
}

// deletesDir is the deletes journal's directory, in the journal's.
const deletesDir = "deletes"

// appendOwned journals the owned operation o, with extra records, in the
// main journal, where apply runs as in append; a delete goes to the
// deletes journal first.
func (d *destager) appendOwned(o *op, apply func(), extra ...Record) error {
	rec := o.record()
	if o.kind == KindDelete {
		d.djMu.RLock()
		defer d.djMu.RUnlock()
		if err := d.dj.append(true, nil, rec); err != nil {
			return err
		}
	}
	return d.j.append(true, apply, append([]Record{rec}, extra...)...)
}

// replay rebuilds the backlog from the main journal's records, and
// from the deletes journal's the deletes the main one does not know
// (their records there were damaged): those newer than every owned
// operation or completion of their key in it. It returns how many
// deletes it took from there.
func (d *destager) replay(recs, deletes []Record) int {
	latest := make(map[string]uint64) // per key, the newest owned operation or completion
	for _, r := range recs {
		if r.Owner == "" && (r.Kind == KindPut || r.Kind == KindDelete || r.Kind == KindDone) {
			k := okey(r.Bucket, r.Key)
			latest[k] = max(latest[k], r.Seq)
		}
	}
	recovered := 0
	recs = slices.Clip(recs) // appended to below: never into the caller's array
	for _, r := range deletes {
		if k := okey(r.Bucket, r.Key); r.Kind == KindDelete && r.Seq > latest[k] {
			latest[k] = r.Seq
			recs = append(recs, r)
			recovered++
		}
	}
	for _, r := range recs {
		o := &op{kind: r.Kind, seq: r.Seq, time: r.Time, bucket: r.Bucket, key: r.Key, size: r.Size, etag: r.ETag, owner: r.Owner,
			holders: r.Holders, verify: true}
		k := okey(r.Bucket, r.Key)
		switch r.Kind {
		case KindSeqMark:
		case KindPut, KindDelete:
			d.setPending(k, o)
		case KindSuperseded:
			// Written by a compaction right after the operation it adds
			// to: the holders of the writes it superseded, whose records
			// the compaction dropped.
			if ks := d.keys[k]; ks != nil && ks.pending != nil && ks.pending.seq == r.Seq {
				ks.pending.supersede(&op{holders: r.Holders})
			}
		case KindDone:
			if ks := d.keys[k]; ks != nil && ks.pending != nil && ks.pending.seq <= r.Seq {
				d.dirty -= ks.pending.bytes()
				delete(d.keys, k)
			}
		case KindReplicaPut, KindReplicaDelete:
			d.setReplica(o)
		case KindReplicaDone:
			d.replicaDone(r.Owner, k, r.Seq)
		case KindNotice, KindNoticeDelete:
			d.keep(notice{holder: r.Owner, deleted: r.Kind == KindNoticeDelete, seq: r.Seq, bucket: r.Bucket, key: r.Key, first: r.Time})
		case KindNoticeDone:
			if n := (notice{holder: r.Owner, bucket: r.Bucket, key: r.Key}); d.undelivered[n.id()].seq <= r.Seq {
				delete(d.undelivered, n.id())
			}
		}
		if r.Seq >= d.nextSeq && r.Owner == "" { // owned records
			d.nextSeq = r.Seq + 1
		}
	}
	// Numbers handed out before a crash to writes that never reached the
	// journal (their replicas may have) are past the last one journaled:
	// skip well beyond, so that none is handed out twice.
	d.nextSeq += seqGap
	for k, ks := range d.keys {
		if ks.pending != nil && !ks.queued {
			ks.queued = true
			d.queue = append(d.queue, k)
		}
	}
	d.sortQueue()
	return recovered
}

func (d *destager) sortQueue() {
	sort.SliceStable(d.queue, func(i, j int) bool {
		a, b := d.keys[d.queue[i]], d.keys[d.queue[j]]
		if a == nil || b == nil || a.pending == nil || b.pending == nil {
			return false
		}
		return a.pending.seq < b.pending.seq
	})
}

// setPending makes o the latest owned operation of k (d.mu held or replay).
func (d *destager) setPending(k string, o *op) {
	ks := d.keys[k]
	if ks == nil {
		ks = &keyState{}
		d.keys[k] = ks
	}
	if ks.pending != nil {
		if ks.pending.seq > o.seq {
			return
		}
		d.dirty -= ks.pending.bytes() // superseded before it was destaged
		o.supersede(ks.pending)
	}
	ks.pending = o
	d.dirty += o.bytes()
}

func (d *destager) setReplica(o *op) {
	m := d.replicas[o.owner]
	if m == nil {
		m = make(map[string]*op)
		d.replicas[o.owner] = m
	}
	k := okey(o.bucket, o.key)
	if old := m[k]; old != nil {
		if old.seq > o.seq {
			return
		}
		d.replicaB -= old.bytes()
	}
	m[k] = o
	d.replicaB += o.bytes()
}

func (d *destager) replicaDone(owner, k string, seq uint64) bool {
	m := d.replicas[owner]
	if m == nil || m[k] == nil || m[k].seq > seq {
		return false
	}
	d.replicaB -= m[k].bytes()
	delete(m, k)
	if len(m) == 0 {
		delete(d.replicas, owner)
	}
	return true
}

// reconcile adds an owned put for every dirty local object the journal does
// not know or knows only older operations of (a crash between the store's
// commit and the journal append; a pending older delete would otherwise be
// destaged and leave the copy dirty for ever, served but never uploaded), and
// removes the local copies that pending deletes left behind (a crash
// between the journal append of a delete and the removal of the copy).
func (d *destager) reconcile(ctx context.Context) error {
	var missing []*op
	var leftovers []object.Info
	err := d.t.local.Walk(ctx, "", func(i object.Info) error {
		k := okey(i.Bucket, i.Key)
		if ks := d.keys[k]; ks != nil && ks.pending != nil && ks.pending.kind == KindDelete && !i.ModTime.After(ks.pending.time) {
			leftovers = append(leftovers, i)
			return nil
		}
		// A replica delete leaves a copy behind only if no write of the
		// key is pending here: a late notice never removes this node's own
		// write, or another owner's replica (see DeleteReplica).
		for _, m := range d.replicas {
			if o := m[k]; o != nil && o.kind == KindReplicaDelete && !i.ModTime.After(o.time) && d.kindLocked(k) != KindPut {
				leftovers = append(leftovers, i)
				return nil
			}
		}
		if !i.Dirty {
			return nil
		}
		if ks := d.keys[k]; ks != nil && (ks.pending == nil || !i.ModTime.After(ks.pending.time)) {
			return nil
		}
		for _, m := range d.replicas {
			if m[k] != nil {
				return nil
			}
		}
		missing = append(missing, &op{kind: KindPut, time: i.ModTime, bucket: i.Bucket, key: i.Key, size: i.Size, etag: i.ETag, verify: true})
		return nil
	})
	if err != nil {
		return fmt.Errorf("tier: reconcile journal with the store: %w", err)
	}
	for _, i := range leftovers {
		if err := d.t.local.Delete(ctx, i.Bucket, i.Key); err != nil && !errors.Is(err, object.ErrNotFound) {
			return fmt.Errorf("tier: remove the copy of %s/%s a journaled delete left: %w", i.Bucket, i.Key, err)
		}
		d.t.log.Info("tier: removed the local copy of a journaled delete", "bucket", i.Bucket, "key", i.Key)
	}
	for _, o := range missing {
		o.seq = d.nextSeq
		d.nextSeq++
		k := okey(o.bucket, o.key)
		d.setPending(k, o)
		d.keys[k].queued = true
		d.queue = append(d.queue, k)
		d.t.log.Info("tier: dirty object missing from the journal will be destaged", "bucket", o.bucket, "key", o.key)
	}
	return nil
}

// compact rewrites the journal with the live records only.
func (d *destager) compact() error {
	d.djMu.Lock()
	defer d.djMu.Unlock()
	// The deletes journal first: a crash before the main journal's
	// rewrite then leaves the main one whole, holding every delete the
	// other dropped as done. The other way round, a delete done and
	// dropped from the main journal could come back from the deletes
	// journal over a newer write of its key.
	var dels []Record
	if err := d.dj.rewrite(func() []Record {
		d.mu.Lock()
		defer d.mu.Unlock()
		dels = nil
		for _, o := range d.ownedOps() {
			if o.kind == KindDelete {
				dels = append(dels, o.record())
			}
		}
		sort.Slice(dels, func(i, j int) bool { return dels[i].Seq < dels[j].Seq })
		return dels
	}); err != nil {
		return err
	}
	if d.betweenRewrites != nil {
		d.betweenRewrites()
	}
	return d.j.rewrite(func() []Record {
		d.mu.Lock()
		recs := []Record{{Kind: KindSeqMark, Seq: d.nextSeq, Time: time.Now()}}
		live := map[uint64]bool{}
		oldest := map[string]uint64{} // per key, its oldest live operation
		for _, o := range d.ownedOps() {
			live[o.seq] = true
			if k := okey(o.bucket, o.key); oldest[k] == 0 || o.seq < oldest[k] {
				oldest[k] = o.seq
			}
			recs = append(recs, o.record())
			recs = append(recs, o.supersededRecords()...)
		}
		// A delete the deletes journal kept that finished (or was
		// superseded) since its rewrite: its completion was appended to
		// the journal being replaced, so it is written again here (unless
		// an older operation of its key is still live, which the
		// completion would drop at replay). Without it a restart would
		// take the delete back from the deletes journal and send it to
		// the backend again, over any newer write of its key destaged
		// meanwhile.
		for _, r := range dels {
			if o := oldest[okey(r.Bucket, r.Key)]; !live[r.Seq] && (o == 0 || o > r.Seq) {
				recs = append(recs, Record{Kind: KindDone, Seq: r.Seq, Time: time.Now(), Bucket: r.Bucket, Key: r.Key})
			}
		}
		for _, m := range d.replicas {
			for _, o := range m {
				recs = append(recs, o.record())
			}
		}
		for _, n := range d.undelivered {
			recs = append(recs, n.record())
		}
		d.mu.Unlock()
		sort.SliceStable(recs[1:], func(i, j int) bool { return recs[1+i].Seq < recs[1+j].Seq })
		return recs
	})
}

// ownedOps returns the owned operations being destaged or pending, in no
// order (d.mu held).
func (d *destager) ownedOps() []*op {
	var ops []*op
	for _, ks := range d.keys {
		for _, o := range []*op{ks.running, ks.pending} {
			if o != nil {
				ops = append(ops, o)
			}
		}
	}
	return ops
}

func (d *destager) maybeCompact() {
	if !d.j.needsCompaction(d.t.cfg.CompactBytes) && !d.dj.needsCompaction(d.t.cfg.CompactBytes) {
		return
	}
	if err := d.compact(); err != nil {
		d.t.log.Error("tier: journal compaction failed", "err", err)
	}
}

func (d *destager) start() {
	for i := 0; i < d.t.cfg.DestageParallel; i++ {
		d.wg.Add(1)
		go d.worker()
	}
	d.wg.Add(1)
	go d.redeliver(d.t.ctx, d.t.cfg.RetryBackoff)
}

func (d *destager) kick() {
	d.mu.Lock()
	d.note.broadcast()
	d.mu.Unlock()
}

func (d *destager) close() error {
	d.kick()
	d.wg.Wait()
	return errors.Join(d.j.close(), d.dj.close())
}

// seqGap is how far past the last journaled sequence number a restart
// starts: more than the writes one process can have in flight.
const seqGap = 1 << 20

func (d *destager) seq() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.nextSeq
	d.nextSeq++
	return s
}

// enqueue makes o the latest owned operation of its key and queues the key.
func (d *destager) enqueue(o *op) {
	k := okey(o.bucket, o.key)
	d.mu.Lock()
	d.setPending(k, o)
	ks := d.keys[k]
	if !ks.queued && ks.running == nil {
		ks.queued = true
		d.queue = append(d.queue, k)
	}
	d.note.broadcast()
	d.mu.Unlock()
}

// pendingOp returns the latest owned operation of bucket/key not yet done.
func (d *destager) pendingOp(bucket, key string) *op {
	d.mu.Lock()
	defer d.mu.Unlock()
	ks := d.keys[okey(bucket, key)]
	if ks == nil {
		return nil
	}
	if ks.pending != nil {
		return ks.pending
	}
	return ks.running
}

// pendingKind tells whether a write-back operation of bucket/key is pending
// or being destaged: KindDelete for a delete, KindPut for a write (owned or
// held as a replica: the local copy is newer than the backend), 0 for none.
// A replica held for any owner counts; so does a replica delete, if no
// replica write of the key is held.
func (d *destager) pendingKind(bucket, key string) Kind {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.kindLocked(okey(bucket, key))
}

// kindLocked is pendingKind of the object key k, with d.mu held.
func (d *destager) kindLocked(k string) Kind {
	if ks := d.keys[k]; ks != nil {
		if o := ks.pending; o != nil {
			return o.kind
		}
		if o := ks.running; o != nil {
			return o.kind
		}
	}
	var kind Kind
	for _, m := range d.replicas {
		switch o := m[k]; {
		case o == nil:
		case o.kind == KindReplicaPut:
			return KindPut
		default:
			kind = KindDelete
		}
	}
	return kind
}

// deletes tells which of keys of bucket have a delete as their pending
// operation here (pendingKind), and which of prefixes have such a key under
// them. prefixes is sorted and none of them starts with another (the common
// prefixes of one delimited listing).
func (d *destager) deletes(bucket string, keys, prefixes []string) (deleted, under []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, key := range keys {
		if d.kindLocked(okey(bucket, key)) == KindDelete {
			deleted = append(deleted, key)
		}
	}
	if len(prefixes) == 0 {
		return deleted, nil
	}
	hit := make([]bool, len(prefixes))
	mark := func(k string, o *op) {
		if o.bucket != bucket || d.kindLocked(k) != KindDelete {
			return
		}
		// The only prefix that can hold the key is the greatest one not
		// after it, since prefixes do not nest.
		i := sort.SearchStrings(prefixes, o.key)
		if i == len(prefixes) || prefixes[i] != o.key {
			i--
		}
		if i >= 0 && strings.HasPrefix(o.key, prefixes[i]) {
			hit[i] = true
		}
	}
	for k, ks := range d.keys {
		if o := ks.pending; o != nil {
			mark(k, o)
		} else if o := ks.running; o != nil {
			mark(k, o)
		}
	}
	for _, m := range d.replicas {
		for k, o := range m {
			mark(k, o)
		}
	}
	for i, p := range prefixes {
		if hit[i] {
			under = append(under, p)
		}
	}
	return deleted, under
}

// reserve waits until size more dirty bytes fit under the cap.
func (d *destager) reserve(ctx context.Context, size int64) error {
	limit := d.t.cfg.MaxDirtyBytes
	if size < 0 {
		size = 0
	}
	fits := func() bool {
		used := d.dirty + d.reserved
		return limit <= 0 || used == 0 || used+size <= limit
	}
	d.mu.Lock()
	if len(d.waiters) == 0 && fits() {
		d.reserved += size
		d.mu.Unlock()
		return nil
	}
	// First come, first served: a PUT that fits does not pass one that
	// waits for room, or a large PUT would wait for ever behind a steady
	// stream of small ones.
	w := &size // its place in the line
	d.waiters = append(d.waiters, w)
	leave := func() {
		d.waiters = slices.DeleteFunc(d.waiters, func(x *int64) bool { return x == w })
		d.note.broadcast()
	}
	d.mu.Unlock()
	timer := time.NewTimer(d.t.cfg.DirtyWait)
	defer timer.Stop()
	for {
		d.mu.Lock()
		if d.waiters[0] == w && fits() {
			d.reserved += size
			leave()
			d.mu.Unlock()
			return nil
		}
		used := d.dirty + d.reserved
		ch := d.note.wait()
		d.mu.Unlock()
		var err error
		select {
		case <-ch:
			continue
		case <-timer.C:
			err = fmt.Errorf("%w: %d dirty bytes of %d allowed", object.ErrSlowDown, used, limit)
		case <-ctx.Done():
			err = ctx.Err()
		case <-d.t.ctx.Done():
			err = ErrClosed
		}
		d.mu.Lock()
		leave()
		d.mu.Unlock()
		return err
	}
}

func (d *destager) unreserve(size int64) {
	if size < 0 {
		size = 0
	}
	d.mu.Lock()
	d.reserved -= size
	d.note.broadcast()
	d.mu.Unlock()
}

func (d *destager) worker() {
	defer d.wg.Done()
	for {
		d.mu.Lock()
		var k string
		var o *op
		for d.t.ctx.Err() == nil {
			k, o = d.take()
			if o != nil {
				break
			}
			ch := d.note.wait()
			d.mu.Unlock()
			select {
			case <-ch:
			case <-d.t.ctx.Done():
			}
			d.mu.Lock()
		}
		d.mu.Unlock()
		if o == nil {
			return
		}
		err := d.destage(o)
		d.finish(k, o, err)
	}
}

// take pops the first queued key whose bucket is known (d.mu held).
func (d *destager) take() (string, *op) {
	for i, k := range d.queue {
		ks := d.keys[k]
		if ks == nil || ks.pending == nil || ks.running != nil {
			continue
		}
		if _, err := d.t.bucket(ks.pending.bucket); err != nil {
			continue // waits for AddBucket
		}
		d.queue = append(d.queue[:i:i], d.queue[i+1:]...)
		ks.queued = false
		ks.running, ks.pending = ks.pending, nil
		return k, ks.running
	}
	return "", nil
}

func (d *destager) finish(k string, o *op, err error) {
	d.mu.Lock()
	ks := d.keys[k]
	ks.running = nil
	if err != nil {
		d.failures++
		ks.attempts++
		d.lastErr = err.Error()
		if ks.pending == nil {
			ks.pending = o // retry it
		} else {
			d.dirty -= o.bytes() // a newer operation replaces it
			ks.pending.supersede(o)
		}
		delay := d.backoff(ks.attempts)
		d.note.broadcast()
		d.mu.Unlock()
		d.t.warnThrottled(o.bucket, "tier: destage failed, will retry", "bucket", o.bucket, "key", o.key, "seq", o.seq, "err", err, "retry_in", delay)
		time.AfterFunc(delay, func() { d.requeue(k) })
		return
	}
	d.destaged++
	d.dirty -= o.bytes()
	if ks.pending != nil {
		ks.pending.supersede(o) // its holders learn of the next operation too (a delete)
		if !ks.queued {
			ks.queued = true
			d.queue = append(d.queue, k)
		}
	} else {
		delete(d.keys, k)
	}
	d.note.broadcast()
	d.mu.Unlock()
	if err := d.j.append(false, nil, Record{Kind: KindDone, Seq: o.seq, Time: time.Now(), Bucket: o.bucket, Key: o.key}); err != nil {
		d.t.log.Error("tier: journal", "err", err)
	}
	d.maybeCompact()
}

// backoff is the delay before retry number n (1-based): RetryBackoff,
// doubling, at most a minute.
func (d *destager) backoff(n int) time.Duration {
	b := d.t.cfg.RetryBackoff
	for i := 1; i < n && b < time.Minute; i++ {
		b *= 2
	}
	return min(b, time.Minute)
}

func (d *destager) requeue(k string) {
	d.mu.Lock()
	if ks := d.keys[k]; ks != nil && ks.pending != nil && !ks.queued && ks.running == nil {
		ks.queued = true
		d.queue = append(d.queue, k)
		d.note.broadcast()
	}
	d.mu.Unlock()
}

// verifyBucket makes the pending operations of bucket check the backend's
// stamp before they act: they wait for a bucket of that name to be added
// again, perhaps over the same backend, where writes made meanwhile through
// other nodes must not be deleted or replaced by them.
func (d *destager) verifyBucket(bucket string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, ks := range d.keys {
		if ks.pending != nil && ks.pending.bucket == bucket {
			ks.pending.verify = true
		}
	}
}

// destage sends one operation to the backend.
func (d *destager) destage(o *op) error {
	t := d.t
	ctx := t.ctx
	b, err := t.bucket(o.bucket)
	if err != nil {
		return err
	}
	if b.Backend == nil {
		return fmt.Errorf("%w: bucket %s has no backend", ErrNoBucket, o.bucket)
	}
	switch o.kind {
	case KindDelete:
		if o.verify {
			cur, err := b.Backend.Stat(ctx, o.key)
			if err != nil && !errors.Is(err, object.ErrNotFound) {
				return err
			}
			if err == nil && newerThan(cur, o.time) {
				t.log.Warn("tier: a newer write of the key is in the backend; the delete is dropped", "bucket", o.bucket, "key", o.key, "seq", o.seq)
				break
			}
		}
		if err := b.Backend.Delete(ctx, o.key); err != nil {
			return err
		}
		if err := d.dropLeftover(o); err != nil {
			return err
		}
	case KindPut:
		r, err := t.local.Get(ctx, o.bucket, o.key, nil)
		if errors.Is(err, object.ErrNotFound) {
			// Deleted locally; the delete is (or will be) its own operation.
			t.log.Warn("tier: object to destage is gone", "bucket", o.bucket, "key", o.key, "seq", o.seq)
			return nil
		}
		if err != nil {
			return err
		}
		info := r.Info()
		if o.verify {
			cur, err := b.Backend.Stat(ctx, o.key)
			if err != nil && !errors.Is(err, object.ErrNotFound) {
				r.Close()
				return err
			}
			if w, ok := stampOf(cur); err == nil && ok && !w.Before(info.ModTime) {
				r.Close()
				if err := d.superseded(o, info, cur, w); err != nil {
					return err
				}
				// o is done (the backend holds it, or newer): its replica
				// holders must hear of it like after an upload, or their
				// copies stay dirty and journaled for ever.
				d.tell(o)
				return nil
			}
		}
		a, err := b.Backend.Put(ctx, o.key, r, info.Size, backend.PutAttrs{ContentType: info.ContentType, UserMeta: withStamp(info.UserMeta, info.ModTime), Headers: info.Headers})
		r.Close()
		if err != nil {
			return err
		}
		now := time.Now()
		_, err = t.local.UpdateMeta(ctx, o.bucket, o.key, func(cur *object.Info) error {
			if cur.ETag != info.ETag || !cur.ModTime.Equal(info.ModTime) || d.pendingOp(o.bucket, o.key) != o {
				return errSkip // a newer version is local; it stays dirty
			}
			cur.Dirty = false
			cur.BackendETag, cur.BackendVersion, cur.ValidatedAt = a.ETag, a.Version, now
			return nil
		})
		if err != nil && !errors.Is(err, errSkip) && !errors.Is(err, object.ErrNotFound) {
			return err
		}
	}
	d.tell(o)
	return nil
}

var errSkip = errors.New("tier: skip")

// dropLeftover removes a local copy the delete o left behind (the removal
// after the journal append failed), unless the key was written again since.
func (d *destager) dropLeftover(o *op) error {
	t := d.t
	ctx := t.ctx
	if i, err := t.local.Stat(ctx, o.bucket, o.key); errors.Is(err, object.ErrNotFound) || (err == nil && i.ModTime.After(o.time)) {
		return nil // the usual case: nothing left
	}
	end, err := t.beginWrite(ctx, o.bucket, o.key)
	if err != nil {
		return err
	}
	defer end()
	i, err := t.local.Stat(ctx, o.bucket, o.key)
	switch {
	case errors.Is(err, object.ErrNotFound):
		return nil
	case err != nil:
		return err
	case i.ModTime.After(o.time) || d.pendingOp(o.bucket, o.key) != o:
		return nil // written again
	}
	t.log.Info("tier: removing the local copy a delete left behind", "bucket", o.bucket, "key", o.key, "seq", o.seq)
	if err := t.local.Delete(ctx, o.bucket, o.key); err != nil && !errors.Is(err, object.ErrNotFound) {
		return err
	}
	return nil
}

// newerThan reports whether the backend object a records a write accepted
// after t.
func newerThan(a backend.Attrs, t time.Time) bool {
	w, ok := stampOf(a)
	return ok && w.After(t)
}

// superseded ends the destage of o when the backend already holds the
// version it would upload (written at w == info.ModTime, by a replica holder
// that took over while this node was down) or a newer one (written through
// another node meanwhile). The local copy becomes clean in the first case;
// in the second it is out of date and is removed, unless it changed since.
func (d *destager) superseded(o *op, info object.Info, cur backend.Attrs, w time.Time) error {
	t := d.t
	ctx := t.ctx
	end, err := t.beginWrite(ctx, o.bucket, o.key)
	if err != nil {
		return err
	}
	defer end()
	now := time.Now()
	_, err = t.local.UpdateMeta(ctx, o.bucket, o.key, func(i *object.Info) error {
		if i.ETag != info.ETag || !i.ModTime.Equal(info.ModTime) || d.pendingOp(o.bucket, o.key) != o {
			return errSkip // rewritten here since; that write is destaged on its own
		}
		i.Dirty = false
		i.BackendETag, i.BackendVersion, i.ValidatedAt = cur.ETag, cur.Version, now
		return nil
	})
	switch {
	case errors.Is(err, errSkip) || errors.Is(err, object.ErrNotFound):
		return nil
	case err != nil:
		return err
	case w.Equal(info.ModTime):
		return nil
	}
	t.log.Warn("tier: a newer write of the key is in the backend; the local copy is out of date and is dropped",
		"bucket", o.bucket, "key", o.key, "seq", o.seq, "local", info.ModTime, "backend", w)
	if err := t.local.EvictObject(ctx, o.bucket, o.key); err != nil && !errors.Is(err, object.ErrNotFound) {
		return err
	}
	return nil
}

// Backlog describes the write-back work of a node.
type Backlog struct {
	Objects        int           `json:"objects"`        // owned operations not yet in the backend
	Bytes          int64         `json:"bytes"`          // their bytes (dirty bytes)
	Oldest         time.Duration `json:"oldest"`         // age of the oldest of them (nanoseconds in JSON)
	Running        int           `json:"running"`        // being destaged now
	ReplicaObjects int           `json:"replicaObjects"` // replicas held for other owners, not yet destaged by them
	ReplicaBytes   int64         `json:"replicaBytes"`
	Notices        int           `json:"notices"`  // notices to replica holders that missed them, waiting to be sent again
	Destaged       int64         `json:"destaged"` // operations destaged since start
	Failures       int64         `json:"failures"` // failed attempts since start
	LastError      string        `json:"lastError,omitempty"`
	JournalBytes   int64         `json:"journalBytes"`
	// What the start cut out of the journal as damaged (a torn tail, and
	// damaged records in the middle whose writes may be lost): bytes,
	// regions, and the journal.cut-<time> file that keeps them.
	JournalCutBytes   int64  `json:"journalCutBytes,omitempty"`
	JournalCutRegions int    `json:"journalCutRegions,omitempty"`
	JournalCutFile    string `json:"journalCutFile,omitempty"`
}

// Backlog returns the write-back backlog (zero without a journal).
func (t *Tier) Backlog() Backlog {
	d := t.d
	if d == nil {
		return Backlog{}
	}
	// The journal's size first: d.mu is never held while taking j.mu (the
	// journal calls into the destager with j.mu held: append's apply,
	// compaction's snapshot).
	jb := d.j.bytes()
	d.mu.Lock()
	defer d.mu.Unlock()
	bl := Backlog{JournalBytes: jb, Bytes: d.dirty, ReplicaBytes: d.replicaB, Notices: len(d.undelivered), Destaged: d.destaged, Failures: d.failures, LastError: d.lastErr,
		JournalCutBytes: int64(d.j.cutBytes), JournalCutRegions: d.j.cutRegions, JournalCutFile: d.j.cut} // set once, at open
	var oldest time.Time
	for _, ks := range d.keys {
		for _, o := range []*op{ks.running, ks.pending} {
			if o == nil {
				continue
			}
			bl.Objects++
			if oldest.IsZero() || o.time.Before(oldest) {
				oldest = o.time
			}
		}
		if ks.running != nil {
			bl.Running++
		}
	}
	if !oldest.IsZero() {
		bl.Oldest = time.Since(oldest)
	}
	for _, m := range d.replicas {
		bl.ReplicaObjects += len(m)
	}
	return bl
}

// WaitDestaged blocks until every owned operation accepted so far has
// reached the backend, or ctx ends.
func (t *Tier) WaitDestaged(ctx context.Context) error {
	d := t.d
	if d == nil {
		return nil
	}
	for {
		d.mu.Lock()
		if len(d.keys) == 0 {
			d.mu.Unlock()
			return nil
		}
		ch := d.note.wait()
		d.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
