package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/peer"
	"github.com/slipstream-io/slipstream/internal/placement"
	"github.com/slipstream-io/slipstream/internal/store"
)

// rebalanceRig is three nodes' stores and tombstones behind localServices
// that the rebalancer of node a reaches directly.
type rebalanceRig struct {
	t      *testing.T
	m      *cluster.Map
	stores map[string]*store.Store
	tombs  map[string]*tombstones
	dirs   map[string]string // each node's mountpath
	now    time.Time
}

func (r *rebalanceRig) dir(id string) string { return r.dirs[id] }

func newRebalanceRig(t *testing.T, ids ...string) *rebalanceRig {
	ctx := context.Background()
	r := &rebalanceRig{t: t, m: cluster.NewMap(), stores: map[string]*store.Store{}, tombs: map[string]*tombstones{}, dirs: map[string]string{},
		now: time.Now().UTC().Truncate(time.Millisecond)} // tombstones expire by the real clock
	for _, id := range ids {
		r.m.Nodes[id] = cluster.NodeInfo{ID: id, State: cluster.StateUp}
		r.dirs[id] = filepath.Join(t.TempDir(), "mp")
		st, err := store.Open(ctx, store.Config{Mountpaths: []string{r.dirs[id]}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		tb, err := openTombstones(filepath.Join(t.TempDir(), "tombstones"), time.Hour, time.Now)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tb.close() })
		r.stores[id], r.tombs[id] = st, tb
	}
	r.m.Buckets["two"] = cluster.BucketProps{Name: "two", Copies: 2, Mode: cluster.ModeLocal}
	r.m.Buckets["wback"] = cluster.BucketProps{Name: "wback", Copies: 1, Mode: cluster.ModeWriteback}
	return r
}

func (r *rebalanceRig) rebalancer(self string, downAfter time.Duration) *rebalancer {
	return &rebalancer{
		self: self, meta: fixedMap{r.m}, store: r.stores[self], log: slog.New(slog.DiscardHandler), parallel: 3,
		downAfter: downAfter, settle: time.Second, now: func() time.Time { return r.now }, downSince: map[string]time.Time{},
		at: func(m *cluster.Map, id string) peer.Local {
			return &localService{meta: fixedMap{r.m}, store: r.stores[id], tombs: r.tombs[id]}
		},
	}
}

func (r *rebalanceRig) put(id, bucket, key, body string, at time.Time, dirty bool) object.Info {
	r.t.Helper()
	info, err := r.stores[id].Put(context.Background(), bucket, key, bytes.NewReader([]byte(body)),
		store.PutOptions{PutOptions: object.PutOptions{Size: int64(len(body))}, ModTime: at, Dirty: dirty})
	if err != nil {
		r.t.Fatal(err)
	}
	return info
}

// holds returns the body node id holds for bucket/key, or "" if none.
func (r *rebalanceRig) holds(id, bucket, key string) string {
	r.t.Helper()
	return storeHolds(r.t, r.stores[id], bucket, key)
}

// top returns the first n nodes HRW orders for bucket/key among ids.
func top(ids []string, bucket, key string, n int) []string {
	return placement.Order(ids, placement.ObjectName(bucket, key))[:n]
}

func TestRebalancePlacesCopies(t *testing.T) {
	ctx := context.Background()
	all := []string{"a", "b", "c"}
	r := newRebalanceRig(t, all...)
	t0 := r.now.Add(-time.Hour)
	// Node a holds every key, as if it had taken the writes alone.
	const n = 24
	for i := range n {
		r.put("a", "two", fmt.Sprintf("k%02d", i), fmt.Sprintf("body %d", i), t0, false)
	}
	// A holder has a newer version of one key, and remembers deleting
	// another after a's copy was written.
	newerKey, deletedKey := "", ""
	var other string
	for i := range n {
		k := fmt.Sprintf("k%02d", i)
		h := top(all, "two", k, 2)
		o := h[0]
		if o == "a" {
			o = h[1]
		}
		switch {
		case newerKey == "":
			newerKey, other = k, o
			r.put(o, "two", k, "newer", t0.Add(time.Minute), false)
		case deletedKey == "" && o != other:
			deletedKey = k
			if err := r.tombs[o].add("two", k, t0.Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A dirty writeback copy is left to the destager.
	r.put("a", "wback", "dirty", "not destaged", t0, true)

	rb := r.rebalancer("a", time.Minute)
	p := rb.run(ctx, "", nil)
	// The dirty copy waits for a later pass if it has to move.
	skipped := 0
	if top(all, "wback", "dirty", 1)[0] != "a" {
		skipped = 1
	}
	if !p.Done || p.Failed != 0 || p.Skipped != skipped || p.Scanned != n+1 {
		t.Fatalf("pass = %+v, want done, %d scanned, %d skipped, no failures", p, n+1, skipped)
	}
	sent, dropped := 0, 0
	for i := range n {
		k := fmt.Sprintf("k%02d", i)
		want := fmt.Sprintf("body %d", i)
		h := top(all, "two", k, 2)
		for _, id := range all {
			got, placed := r.holds(id, "two", k), slices.Contains(h, id)
			switch {
			case k == deletedKey:
				if got != "" {
					t.Errorf("%s: deleted key still on %s", k, id)
				}
			case k == newerKey && id == other:
				if got != "newer" {
					t.Errorf("%s: the newer version on %s was replaced by %q", k, id, got)
				}
			case k == newerKey && id == "a":
				if placed != (got != "") {
					t.Errorf("%s on a: %q (a placed: %v)", k, got, placed)
				}
			case placed && got != want:
				t.Errorf("%s on %s (placed there): %q, want %q", k, id, got, want)
			case !placed && got != "":
				t.Errorf("%s on %s (not placed there): %q left behind", k, id, got)
			}
		}
		if k == deletedKey {
			dropped++
			continue
		}
		for _, id := range h {
			if id != "a" && !(k == newerKey && id == other) {
				sent++
			}
		}
		if !slices.Contains(h, "a") {
			dropped++
		}
	}
	if p.Sent != sent || p.Dropped != dropped {
		t.Fatalf("pass = %+v, want %d sent and %d dropped", p, sent, dropped)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(newRebalanceCollector(rb.passes.status))
	for name, want := range map[string]float64{
		"slipstream_rebalance_passes_total": 1, "slipstream_rebalance_copies_sent_total": float64(sent),
		"slipstream_rebalance_copies_dropped_total": float64(dropped), "slipstream_rebalance_running": 0,
	} {
		if got := gathered(t, reg, name); got != want {
			t.Errorf("metric %s = %v, want %v", name, got, want)
		}
	}
	if r.holds("a", "wback", "dirty") == "" {
		t.Fatal("the dirty copy was moved or dropped")
	}
	// A second pass finds everything in place.
	if p := r.rebalancer("a", time.Minute).run(ctx, "", nil); p.Sent != 0 || p.Dropped != 0 || p.Failed != 0 {
		t.Fatalf("second pass = %+v, want nothing to do", p)
	}
}

func TestRebalanceWaitsForDownNodes(t *testing.T) {
	ctx := context.Background()
	all := []string{"a", "b", "c"}
	r := newRebalanceRig(t, all...)
	// Keys whose holders are b and c; a holds a copy.
	var keys []string
	for i := 0; len(keys) < 6; i++ {
		k := fmt.Sprintf("k%03d", i)
		if !slices.Contains(top(all, "two", k, 2), "a") {
			keys = append(keys, k)
			r.put("a", "two", k, k, r.now.Add(-time.Hour), false)
			r.put("c", "two", k, k, r.now.Add(-time.Hour), false)
		}
	}
	b := r.m.Nodes["b"]
	b.State = cluster.StateDown
	r.m.Nodes["b"] = b
	rb := r.rebalancer("a", 10*time.Minute)
	before := rb.observe(r.m)
	// Down for less than downAfter: b still counts; a keeps its copies
	// (nothing is dropped in favour of a node that may come back), and
	// makes no extra ones.
	if p := rb.run(ctx, "", nil); p.Dropped != 0 || p.Sent != 0 || p.Failed != 0 {
		t.Fatalf("pass with b briefly down = %+v, want nothing done", p)
	}
	for _, k := range keys {
		if r.holds("a", "two", k) == "" {
			t.Fatalf("%s dropped from a while its holder b was down", k)
		}
	}
	// admin status shows how long b has been down, and down_after.
	r.now = r.now.Add(4 * time.Minute)
	if d := rb.downNodes(); len(d) != 1 || d["b"] != (DownNode{For: 4 * time.Minute, After: 10 * time.Minute}) {
		t.Errorf("downNodes = %+v, want b down for 4m of 10m", d)
	}
	// Down for longer: b no longer counts, a and c are the holders.
	r.now = r.now.Add(7 * time.Minute)
	if after := rb.observe(r.m); after == before {
		t.Fatalf("the node set did not change after downAfter: %q", after)
	}
	if p := rb.run(ctx, "", nil); p.Dropped != 0 || p.Failed != 0 {
		t.Fatalf("pass with b gone = %+v", p)
	}
	for _, k := range keys {
		if r.holds("a", "two", k) != k || r.holds("c", "two", k) != k {
			t.Fatalf("%s: not on both a and c after b counted as gone", k)
		}
	}
	// A node that starts while b is down counts from when the cluster
	// marked b down, not from its own start: it agrees with the others.
	b.StateSince = r.now.Add(-11 * time.Minute)
	r.m.Nodes["b"] = b
	fresh := r.rebalancer("c", 10*time.Minute)
	fresh.observe(r.m)
	if fresh.counts(r.m, "b") || fresh.downNodes()["b"].For != 11*time.Minute {
		t.Errorf("a node that started now counts b, down for 11m in the map, as a holder (down for %v)", fresh.downNodes()["b"].For)
	}
	// A node that is removed, or up again, is not shown down.
	delete(r.m.Nodes, "b")
	if d := rb.downNodes(); len(d) != 0 {
		t.Errorf("downNodes = %+v after b was removed", d)
	}
}

// TestCopyAfterDeleteIsRefused: a rebalance copy that arrives after the
// key was deleted on its target must not bring the object back.
func TestCopyAfterDeleteIsRefused(t *testing.T) {
	ctx := context.Background()
	r := newRebalanceRig(t, "a", "b")
	old := r.put("b", "two", "k", "old", r.now.Add(-time.Minute), false)
	b := r.rebalancer("a", time.Minute).at(r.m, "b")
	if err := b.Delete(ctx, "two", "k"); err != nil {
		t.Fatal(err)
	}
	_, err := b.Put(ctx, "two", "k", bytes.NewReader([]byte("old")), peer.PutOptions{
		PutOptions: object.PutOptions{Size: 3}, ModTime: old.ModTime, ETag: old.ETag, KeepNewer: true,
	})
	if !errors.Is(err, object.ErrPrecondition) {
		t.Fatalf("copy of a deleted key: %v, want a precondition failure", err)
	}
	var deleted *peer.DeletedError
	if _, err := b.Stat(peer.AsIs(ctx), "two", "k"); !errors.As(err, &deleted) {
		t.Fatalf("Stat after the delete: %v, want DeletedError", err)
	}
	if got := r.holds("b", "two", "k"); got != "" {
		t.Fatalf("the deleted key came back: %q", got)
	}
}

// gathered returns the value of the single metric called name in reg.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.Metric) == 1 {
			if c := mf.Metric[0].Counter; c != nil {
				return c.GetValue()
			}
			return mf.Metric[0].Gauge.GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestRebalanceDropsMisplacedCachedCopies: a clean copy of a tiered bucket
// on a node that no longer holds the key is dropped, not sent (its owner
// fills it on demand, and a delete through the owner leaves no tombstone
// that would stop a copy from bringing it back); a copy in place stays.
func TestRebalanceDropsMisplacedCachedCopies(t *testing.T) {
	ctx := context.Background()
	r := newRebalanceRig(t, "a", "b")
	r.m.Buckets["cache"] = cluster.BucketProps{Name: "cache", Copies: 1, Mode: cluster.ModeCache}
	var moved, kept string
	for i := 0; moved == "" || kept == ""; i++ {
		k := fmt.Sprintf("k%d", i)
		if top([]string{"a", "b"}, "cache", k, 1)[0] == "b" {
			moved = k
		} else {
			kept = k
		}
	}
	for _, k := range []string{moved, kept} {
		if _, err := r.stores["a"].Put(ctx, "cache", k, bytes.NewReader([]byte("warm")), store.PutOptions{
			PutOptions: object.PutOptions{Size: 4}, ModTime: r.now.Add(-time.Hour), BackendETag: "remote-etag",
		}); err != nil {
			t.Fatal(err)
		}
	}
	if p := r.rebalancer("a", time.Minute).run(ctx, "", nil); p.Sent != 0 || p.Dropped != 1 || p.Failed != 0 {
		t.Fatalf("pass = %+v, want the misplaced copy dropped and nothing sent", p)
	}
	if r.holds("a", "cache", moved) != "" || r.holds("b", "cache", moved) != "" {
		t.Fatal("the misplaced cached copy was kept or sent")
	}
	if r.holds("a", "cache", kept) != "warm" {
		t.Fatal("a cached copy in place was dropped")
	}
}

// TestRebalanceDrainsANode: a draining node that is up sends every copy to
// the nodes that hold them without it, and keeps none.
func TestRebalanceDrainsANode(t *testing.T) {
	ctx := context.Background()
	r := newRebalanceRig(t, "a", "b", "c")
	for i := range 12 {
		r.put("a", "two", fmt.Sprintf("k%02d", i), fmt.Sprintf("body %d", i), r.now.Add(-time.Hour), false)
	}
	a := r.m.Nodes["a"]
	a.Draining = true
	r.m.Nodes["a"] = a
	if up, _ := placementOf(r.m, "two", "k00"); slices.Contains(up, "a") {
		t.Fatalf("a draining node is placed: %v", up)
	}
	if p := r.rebalancer("a", time.Minute).run(ctx, "", nil); p.Dropped != 12 || p.Sent != 24 || p.Failed != 0 {
		t.Fatalf("pass on the draining node = %+v, want 24 copies sent and 12 dropped", p)
	}
	for i := range 12 {
		k, want := fmt.Sprintf("k%02d", i), fmt.Sprintf("body %d", i)
		if r.holds("a", "two", k) != "" || r.holds("b", "two", k) != want || r.holds("c", "two", k) != want {
			t.Fatalf("%s: not moved from the draining node to b and c", k)
		}
	}
}

// TestRebalanceSeesAnUndoneDrain: a node that did not pass while another
// was drained (drain and undrain came within its settle time) still sees a
// change once the drain is undone, because the drained node gave its
// copies away in between and they must be sent back to it.
func TestRebalanceSeesAnUndoneDrain(t *testing.T) {
	r := newRebalanceRig(t, "a", "b", "c")
	rb := r.rebalancer("b", time.Minute)
	before := rb.observe(r.m)
	a := r.m.Nodes["a"]
	a.Draining, a.Drains = true, 1
	r.m.Nodes["a"] = a
	draining := rb.observe(r.m)
	a.Draining, a.Drains = false, 2
	r.m.Nodes["a"] = a
	undone := rb.observe(r.m)
	if draining == before || undone == before || undone == draining {
		t.Fatalf("observed node sets: before %q, draining %q, undone %q; want three different", before, draining, undone)
	}
	if again := rb.observe(r.m); again != undone {
		t.Fatalf("the same map observed twice: %q then %q", undone, again)
	}
}
