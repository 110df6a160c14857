package node

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/peer"
	"github.com/slipstream-io/slipstream/internal/store"
)

// fixedMap is a mapView that never changes.
type fixedMap struct{ m *cluster.Map }

func (f fixedMap) Map() *cluster.Map { return f.m }
func (f fixedMap) Watch(ctx context.Context) <-chan *cluster.Map {
	ch := make(chan *cluster.Map, 1)
	ch <- f.m
	go func() { <-ctx.Done(); close(ch) }()
	return ch
}

// statPeer answers Stat from a table (and remembers deletes); nothing else
// is called.
type statPeer struct {
	peer.Local
	infos   map[string]object.Info
	deleted map[string]time.Time
	err     error
}

func (p statPeer) Stat(ctx context.Context, _, key string) (object.Info, error) {
	if !peer.IsAsIs(ctx) {
		return object.Info{}, errors.New("a check must ask for the copy as is")
	}
	if p.err != nil {
		return object.Info{}, p.err
	}
	i, ok := p.infos[key]
	if !ok {
		if at, ok := p.deleted[key]; ok {
			return object.Info{}, &peer.DeletedError{At: at}
		}
		return object.Info{}, object.ErrNotFound
	}
	return i, nil
}

func TestRejoinDropsOnlyOutOfDateCopies(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{Mountpaths: []string{filepath.Join(t.TempDir(), "mp")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m := cluster.NewMap()
	for _, id := range []string{"a", "b"} {
		m.Nodes[id] = cluster.NodeInfo{ID: id, State: cluster.StateUp}
	}
	m.Buckets["loc"] = cluster.BucketProps{Name: "loc", Copies: 2, Mode: cluster.ModeLocal}
	m.Buckets["wback"] = cluster.BucketProps{Name: "wback", Copies: 2, Mode: cluster.ModeWriteback}
	t0 := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	put := func(bucket, key string, at time.Time) object.Info {
		t.Helper()
		info, err := st.Put(ctx, bucket, key, bytes.NewReader([]byte(key)), store.PutOptions{PutOptions: object.PutOptions{Size: int64(len(key))}, ModTime: at})
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	newer := map[string]object.Info{}
	for _, tc := range []struct {
		bucket, key string
		onB         bool          // b holds the key too
		newer       time.Duration // b's copy is this much newer
	}{
		{"loc", "overwritten", true, time.Second},
		{"loc", "same", true, 0},
		{"loc", "older-elsewhere", true, -time.Second},
		{"loc", "only-here", false, 0},
		{"loc", "deleted", false, 0},
		{"loc", "deleted-then-written-here", false, 0},
		{"wback", "tiered", true, time.Second}, // the tier's destager checks these
	} {
		put(tc.bucket, tc.key, t0)
		if tc.onB {
			newer[tc.key] = object.Info{Bucket: tc.bucket, Key: tc.key, ModTime: t0.Add(tc.newer)}
		}
	}
	bPeer := statPeer{infos: newer, deleted: map[string]time.Time{
		"deleted":                   t0.Add(time.Second),  // deleted after this copy was written
		"deleted-then-written-here": t0.Add(-time.Second), // this copy is newer than the delete
	}}
	r := &rejoin{self: "a", meta: fixedMap{m}, store: st, log: slog.New(slog.DiscardHandler),
		at: func(_ *cluster.Map, id string) peer.Local { return bPeer }}

	// Reads of a suspect copy check it first.
	l := &localService{meta: fixedMap{m}, store: st, rejoin: r}
	r.since = t0.Add(time.Minute)
	if _, err := l.Get(ctx, "loc", "overwritten", nil); !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("read of an out-of-date copy: %v, want not found", err)
	}
	rd, err := l.Get(ctx, "loc", "same", nil)
	if err != nil {
		t.Fatalf("read of a current copy: %v", err)
	}
	if b, _ := io.ReadAll(rd); string(b) != "same" {
		t.Fatalf("read %q", b)
	}
	rd.Close()
	// So are HEADs, except another node's check (as is).
	if _, err := l.Stat(peer.AsIs(ctx), "loc", "deleted"); err != nil {
		t.Fatalf("as-is Stat of a suspect copy: %v", err)
	}
	if _, err := l.Stat(ctx, "loc", "deleted"); !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("Stat of a copy deleted elsewhere: %v, want not found", err)
	}
	if _, err := l.Stat(ctx, "loc", "same"); err != nil {
		t.Fatalf("Stat of a current copy: %v", err)
	}
	put("loc", "deleted", t0)

	// A holder that cannot be asked proves nothing.
	put("loc", "overwritten", t0)
	r.at = func(*cluster.Map, string) peer.Local { return statPeer{err: peer.ErrUnreachable} }
	if r.check(ctx, object.Info{Bucket: "loc", Key: "overwritten", ModTime: t0}) {
		t.Fatal("dropped a copy on no evidence")
	}

	// The background pass drops exactly the out-of-date copies, then reads
	// are no longer checked.
	r.at = func(*cluster.Map, string) peer.Local { return bPeer }
	r.stateFile = filepath.Join(t.TempDir(), "rejoin-downs")
	r.begin(ctx, 3)
	r.wg.Wait()
	for key, gone := range map[string]bool{"overwritten": true, "same": false, "older-elsewhere": false, "only-here": false,
		"deleted": true, "deleted-then-written-here": false} {
		if _, err := st.Stat(ctx, "loc", key); errors.Is(err, object.ErrNotFound) != gone {
			t.Errorf("%s: Stat %v, want dropped=%v", key, err, gone)
		}
	}
	if _, err := st.Stat(ctx, "wback", "tiered"); err != nil {
		t.Errorf("tiered copy: %v", err)
	}
	if r.suspect(ctx, object.Info{ModTime: t0}) {
		t.Error("copies still suspect after the pass")
	}
	if got := r.loadChecked(); got != 3 {
		t.Errorf("checked count saved as %d, want 3", got)
	}

	// A read from a node whose map has this one marked down once more
	// than it checked for (its own map does not show that yet: no pass
	// has begun) checks the copy; one from a node that knows of no newer
	// down mark does not.
	put("loc", "overwritten", t0)
	if _, err := l.Get(peer.WithDowns(ctx, 3), "loc", "overwritten", nil); err != nil {
		t.Fatalf("read from a node that knows of no newer down mark: %v", err)
	}
	if _, err := l.Get(peer.WithDowns(ctx, 4), "loc", "overwritten", nil); !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("read from a node that knows of a newer down mark: %v, want the out-of-date copy not found", err)
	}
}

// TestRejoinAsksPastAHolderThatDroppedItsCopy: with copies=1, the key was
// overwritten on the second node while this one was down, and again on a
// third while the second was down too; the second has since returned and
// dropped its out-of-date copy. This node, back last, finds nothing on the
// first node it asks: it must ask on (as far as reads fall back), find the
// newer version, and drop its own rather than serve it first.
func TestRejoinAsksPastAHolderThatDroppedItsCopy(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{Mountpaths: []string{filepath.Join(t.TempDir(), "mp")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m := cluster.NewMap()
	for _, id := range []string{"a", "b", "c", "d"} {
		m.Nodes[id] = cluster.NodeInfo{ID: id, State: cluster.StateUp}
	}
	m.Buckets["one"] = cluster.BucketProps{Name: "one", Copies: 1, Mode: cluster.ModeLocal}
	t0 := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	info, err := st.Put(ctx, "one", "k", bytes.NewReader([]byte("v1")), store.PutOptions{PutOptions: object.PutOptions{Size: 2}, ModTime: t0})
	if err != nil {
		t.Fatal(err)
	}
	up, _ := placementOf(m, "one", "k")
	var others []string
	for _, id := range up {
		if id != "a" {
			others = append(others, id)
		}
	}
	newest := others[len(others)-1] // asked last
	peers := map[string]peer.Local{}
	for _, id := range others {
		p := statPeer{infos: map[string]object.Info{}}
		if id == newest {
			p.infos["k"] = object.Info{Bucket: "one", Key: "k", ModTime: t0.Add(2 * time.Second)}
		}
		peers[id] = p
	}
	r := &rejoin{self: "a", meta: fixedMap{m}, store: st, log: slog.New(slog.DiscardHandler),
		at: func(_ *cluster.Map, id string) peer.Local { return peers[id] }}
	if !r.check(ctx, info) {
		t.Fatalf("kept a copy overwritten on %s (asked in order %v)", newest, others)
	}
}
