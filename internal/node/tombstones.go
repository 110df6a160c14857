package node

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// tombstones remembers, for a while, deletes of local-bucket objects that a
// holder of a copy missed (it was down or unreachable): when that holder
// comes back it asks the nodes that took the delete (see rejoin) and drops
// its copy instead of serving a deleted object again. Records are JSON
// lines in one file, appended and fsynced (they are rare: only deletes
// during a failure), and rewritten without the expired ones at start and
// as the file grows.
type tombstones struct {
	path   string
	retain time.Duration
	now    func() time.Time

	mu   sync.Mutex
	m    map[string]time.Time // bucket "\x00" key -> time of the delete
	f    *os.File
	recs int // records in the file

	// recent remembers, in memory only, every delete this node made in
	// the last recentRetention (at most recentMax of them, oldest first
	// in recentQ): a rebalance copy sent before a delete may arrive after
	// it, and must not bring the object back.
	recent  map[string]time.Time
	recentQ []tombRecord
	// holds are the start times of the KeepNewer copies being received
	// (holdRecent): a recent delete remembered when one of them began, or
	// noted since, is kept past recentRetention until it is done.
	holds   map[uint64]time.Time
	holdSeq uint64
}

// Deletes are remembered in memory for recentRetention, at most recentMax.
const (
	recentRetention = 10 * time.Minute
	recentMax       = 1 << 16
)

// tombstoneRetention is how long a delete is remembered: a node that was
// down for longer can serve objects deleted meanwhile (wipe it first).
const tombstoneRetention = 7 * 24 * time.Hour

type tombRecord struct {
	Bucket string    `json:"b"`
	Key    string    `json:"k"`
	Time   time.Time `json:"t"`
}

func tombKey(bucket, key string) string { return bucket + "\x00" + key }

// openTombstones loads path (a torn last line from a crash is ignored) and
// compacts it.
func openTombstones(path string, retain time.Duration, now func() time.Time) (*tombstones, error) {
	t := &tombstones{path: path, retain: retain, now: now, m: map[string]time.Time{}, recent: map[string]time.Time{}, holds: map[uint64]time.Time{}}
	f, err := os.Open(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("tombstones: %w", err)
	default:
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var r tombRecord
			if json.Unmarshal(sc.Bytes(), &r) != nil {
				continue
			}
			t.put(r)
		}
		err := sc.Err()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("tombstones: reading %s: %w", path, err)
		}
	}
	if err := t.compact(); err != nil {
		return nil, err
	}
	return t, nil
}

// put keeps r if it is live and the newest delete of its key.
func (t *tombstones) put(r tombRecord) bool {
	k := tombKey(r.Bucket, r.Key)
	if t.now().Sub(r.Time) > t.retain || !r.Time.After(t.m[k]) {
		return false
	}
	t.m[k] = r.Time
	return true
}

// compact rewrites the file with the live records and reopens it for
// appending (t.mu held, or not yet shared).
func (t *tombstones) compact() error {
	if t.f != nil {
		t.f.Close()
		t.f = nil
	}
	tmp := t.path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("tombstones: %w", err)
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	t.recs = 0
	for k, at := range t.m {
		if t.now().Sub(at) > t.retain {
			delete(t.m, k)
			continue
		}
		b, key, _ := strings.Cut(k, "\x00")
		if err := enc.Encode(tombRecord{Bucket: b, Key: key, Time: at}); err != nil {
			f.Close()
			return fmt.Errorf("tombstones: %w", err)
		}
		t.recs++
	}
	err = w.Flush()
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, t.path)
	}
	if err == nil {
		err = syncDir(filepath.Dir(t.path))
	}
	if err != nil {
		return fmt.Errorf("tombstones: rewriting %s: %w", t.path, err)
	}
	t.f, err = os.OpenFile(t.path, os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("tombstones: %w", err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// add remembers that bucket/key was deleted at at, durably.
func (t *tombstones) add(bucket, key string, at time.Time) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.f == nil {
		return fmt.Errorf("tombstones: closed")
	}
	r := tombRecord{Bucket: bucket, Key: key, Time: at}
	if !t.put(r) {
		return nil
	}
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("tombstones: %w", err)
	}
	if _, err := t.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("tombstones: %w", err)
	}
	if err := t.f.Sync(); err != nil {
		return fmt.Errorf("tombstones: %w", err)
	}
	t.recs++
	if t.recs > 2*len(t.m)+1024 {
		return t.compact()
	}
	return nil
}

// noteDelete remembers in memory, for a while, that this node deleted
// bucket/key at at.
func (t *tombstones) noteDelete(bucket, key string, at time.Time) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireRecent()
	k := tombKey(bucket, key)
	if at.After(t.recent[k]) {
		t.recent[k] = at
		t.recentQ = append(t.recentQ, tombRecord{Bucket: bucket, Key: key, Time: at})
	}
}

// holdRecent keeps the recent deletes remembered now, and those noted
// from now on, in memory even past recentRetention, until release is
// called. A KeepNewer copy holds them while its body arrives: one sent
// before its key was deleted here may take longer than that (a large
// object at the rebalance rate), and must still be refused when it
// commits.
func (t *tombstones) holdRecent() (release func()) {
	if t == nil {
		return func() {}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.holdSeq++
	id := t.holdSeq
	t.holds[id] = t.now()
	return func() {
		t.mu.Lock()
		delete(t.holds, id)
		t.mu.Unlock()
	}
}

// recentLive reports whether a delete noted at at is still remembered:
// within recentRetention, or held by a copy that began while it was (t.mu
// held).
func (t *tombstones) recentLive(at, now time.Time) bool {
	if now.Sub(at) <= recentRetention {
		return true
	}
	for _, since := range t.holds {
		if since.Sub(at) <= recentRetention {
			return true
		}
	}
	return false
}

// expireRecent forgets the in-memory deletes that are too old or too many
// (t.mu held).
func (t *tombstones) expireRecent() {
	now, drop := t.now(), 0
	for _, r := range t.recentQ {
		if len(t.recentQ)-drop <= recentMax && t.recentLive(r.Time, now) {
			break
		}
		if k := tombKey(r.Bucket, r.Key); t.recent[k].Equal(r.Time) {
			delete(t.recent, k)
		}
		drop++
	}
	t.recentQ = t.recentQ[drop:]
}

// get returns when bucket/key was last deleted, if that is remembered.
func (t *tombstones) get(bucket, key string) (time.Time, bool) {
	if t == nil {
		return time.Time{}, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	k := tombKey(bucket, key)
	at, ok := t.m[k]
	if ok && t.now().Sub(at) > t.retain {
		at, ok = time.Time{}, false
	}
	if r, found := t.recent[k]; found && t.recentLive(r, t.now()) && r.After(at) {
		at, ok = r, true
	}
	return at, ok
}

func (t *tombstones) close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.f == nil {
		return nil
	}
	err := t.f.Close()
	t.f = nil
	return err
}
