package node

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/fanout"
	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/peer"
	"github.com/slipstream-io/slipstream/internal/placement"
	"github.com/slipstream-io/slipstream/internal/testnet"
	"github.com/slipstream-io/slipstream/internal/tier"
)

func keys(r object.ListResult) (objs, prefixes []string) {
	for _, o := range r.Objects {
		objs = append(objs, o.Key)
	}
	return objs, r.CommonPrefixes
}

func TestMergePages(t *testing.T) {
	page := func(truncated bool, prefixes []string, ks ...string) object.ListResult {
		var r object.ListResult
		for _, k := range ks {
			r.Objects = append(r.Objects, object.Info{Key: k})
		}
		r.CommonPrefixes, r.IsTruncated = prefixes, truncated
		return r
	}
	withNext := func(r object.ListResult, next string) object.ListResult {
		r.NextMarker = next
		return r
	}
	tests := []struct {
		name      string
		pages     []object.ListResult
		max       int
		objs, pfx []string
		truncated bool
		next      string
	}{
		{"replicas collapse", []object.ListResult{page(false, nil, "a", "c"), page(false, nil, "a", "b")}, 10,
			[]string{"a", "b", "c"}, nil, false, ""},
		{"cut at max", []object.ListResult{page(false, nil, "a", "d"), page(false, nil, "b", "c")}, 3,
			[]string{"a", "b", "c"}, nil, true, "c"},
		{"a node truncated", []object.ListResult{page(true, nil, "a", "c"), page(false, nil, "b", "d")}, 2,
			[]string{"a", "b"}, nil, true, "b"},
		{"a short truncated page bounds the merge", []object.ListResult{page(true, nil, "a"), page(false, nil, "b")}, 10,
			[]string{"a"}, nil, true, "a"},
		{"a page's marker bounds the merge", []object.ListResult{withNext(page(true, nil, "a"), "m"), page(false, nil, "b", "n")}, 10,
			[]string{"a", "b"}, nil, true, "b"},
		{"a truncated page with every entry left out", []object.ListResult{withNext(page(true, nil), "m"), page(false, nil, "n")}, 10,
			nil, nil, true, "m"},
		{"prefixes count and sort with keys", []object.ListResult{page(false, []string{"dir/"}, "a", "z"), page(false, []string{"dir/"}, "e")}, 3,
			[]string{"a", "e"}, []string{"dir/"}, true, "e"},
		{"empty", nil, 10, nil, nil, false, ""},
	}
	t.Run("the newest copy is listed", func(t *testing.T) {
		t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
		old := object.ListResult{Objects: []object.Info{{Key: "k", ETag: "old", ModTime: t0}}}
		cur := object.ListResult{Objects: []object.Info{{Key: "k", ETag: "new", ModTime: t0.Add(time.Second)}}}
		for _, pages := range [][]object.ListResult{{old, cur}, {cur, old}} {
			if r := mergePages(pages, 2, 10); len(r.Objects) != 1 || r.Objects[0].ETag != "new" {
				t.Errorf("merged %+v, want the newer copy only", r.Objects)
			}
		}
		// A backend's page (after the nodes') only fills gaps: its
		// LastModified is the upload's, not the write's.
		if r := mergePages([]object.ListResult{old, cur}, 1, 10); len(r.Objects) != 1 || r.Objects[0].ETag != "old" {
			t.Errorf("merged %+v, want the node's copy", r.Objects)
		}
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mergePages(tt.pages, len(tt.pages), tt.max)
			objs, pfx := keys(r)
			if !reflect.DeepEqual(objs, tt.objs) || !reflect.DeepEqual(pfx, tt.pfx) || r.IsTruncated != tt.truncated || r.NextMarker != tt.next {
				t.Fatalf("got objs %v prefixes %v truncated %v next %q", objs, pfx, r.IsTruncated, r.NextMarker)
			}
		})
	}
}

func TestUploadIDRoundTrip(t *testing.T) {
	for _, owner := range []string{"node1", "a.b.c", "n-1_x"} {
		id := newUploadID(owner, "local.id-42")
		o, l, err := parseUploadID(id)
		if err != nil || o != owner || l != "local.id-42" {
			t.Fatalf("parseUploadID(%q) = %q, %q, %v", id, o, l, err)
		}
	}
	for _, bad := range []string{"", "nodot", ".x", "!!!.x", "bm9kZQ."} {
		if _, _, err := parseUploadID(bad); !errors.Is(err, object.ErrUploadNotFound) {
			t.Errorf("parseUploadID(%q) = %v, want ErrUploadNotFound", bad, err)
		}
	}
}

func TestPlacementSkipsDownNodes(t *testing.T) {
	m := cluster.NewMap()
	for _, id := range []string{"n1", "n2", "n3", "n4"} {
		m.Nodes[id] = cluster.NodeInfo{ID: id, State: cluster.StateUp}
	}
	order := placement.Order(m.NodeIDs(), placement.ObjectName("b", "k"))
	m.Nodes[order[0]] = cluster.NodeInfo{ID: order[0], State: cluster.StateDown}
	up, down := placementOf(m, "b", "k")
	if !reflect.DeepEqual(up, order[1:]) || !reflect.DeepEqual(down, order[:1]) {
		t.Fatalf("up %v down %v, HRW order %v with %s down", up, down, order, order[0])
	}
	g := &gateway{}
	b := cluster.BucketProps{Name: "b", Copies: 2, Mode: cluster.ModeLocal}
	targets, err := g.writeTargets(m, b, "k")
	if err != nil || !reflect.DeepEqual(targets, order[1:3]) {
		t.Fatalf("write targets %v, %v", targets, err)
	}
	b.Mode = cluster.ModeWriteback
	if targets, _ := g.writeTargets(m, b, "k"); !reflect.DeepEqual(targets, order[1:2]) {
		t.Fatalf("writeback goes to the owner only, got %v", targets)
	}
	b.Copies = 4
	if _, err := g.writeTargets(m, b, "k"); !errors.Is(err, object.ErrUnavailable) {
		t.Fatalf("4 copies with 3 nodes up: %v", err)
	}
}

// putRecorder is a peer.Local that keeps what Put received and answers
// like the store: the ETag is the sender's MD5 when a digest comes with
// the body, checked by CRC32C.
type putRecorder struct {
	peer.Local
	mu      sync.Mutex
	got     []byte
	opts    peer.PutOptions // of the last Put
	digests int
}

func (p *putRecorder) Put(ctx context.Context, bucket, key string, r io.Reader, opts peer.PutOptions) (object.Info, error) {
	p.mu.Lock()
	p.opts = opts
	p.mu.Unlock()
	b, err := io.ReadAll(r)
	if err != nil {
		return object.Info{}, err
	}
	sum := md5.Sum(b)
	etag := hex.EncodeToString(sum[:])
	if opts.Digest != nil {
		d, err := opts.Digest()
		if err != nil {
			return object.Info{}, err
		}
		if d.CRC32C != crc32.Checksum(b, object.Castagnoli) {
			return object.Info{}, object.ErrUnavailable
		}
		etag = hex.EncodeToString(d.MD5)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.got = b
	if opts.Digest != nil {
		p.digests++
	}
	return object.Info{Bucket: bucket, Key: key, Size: int64(len(b)), ETag: etag}, nil
}

// TestFanOutHashesOnce writes one body to a local and a remote target: both
// get all of it with the gateway's digest, and the copies agree.
func TestFanOutHashesOnce(t *testing.T) {
	local, remote := &putRecorder{}, &putRecorder{}
	srv := httptest.NewServer(peer.NewHandler(remote))
	defer srv.Close()
	m := cluster.NewMap()
	m.Nodes["n1"] = cluster.NodeInfo{ID: "n1", State: cluster.StateUp}
	m.Nodes["n2"] = cluster.NodeInfo{ID: "n2", State: cluster.StateUp, IntraAddrs: []string{srv.URL}}
	g := &gateway{self: "n1", local: local, peers: &peer.Client{Doer: &peer.HTTPDoer{Client: srv.Client()}}}
	data := bytes.Repeat([]byte("fan out "), 100_000)
	for _, targets := range [][]string{{"n1", "n2"}, {"n2", "n1"}} {
		info, err := g.fanOut(context.Background(), m, targets, nil, "b", "k", bytes.NewReader(data), func(int) peer.PutOptions {
			return peer.PutOptions{PutOptions: object.PutOptions{Size: int64(len(data))}}
		})
		sum := md5.Sum(data)
		if err != nil || info.ETag != hex.EncodeToString(sum[:]) {
			t.Fatalf("fanOut to %v = %+v, %v", targets, info, err)
		}
	}
	for name, r := range map[string]*putRecorder{"local": local, "remote": remote} {
		if !bytes.Equal(r.got, data) || r.digests != 2 {
			t.Errorf("%s target: %d of %d bytes, %d of 2 writes with the gateway's digest", name, len(r.got), len(data), r.digests)
		}
	}
}

// TestWriteToNextNodeWhenOneIsGone: a copy whose node refuses
// connections, once the leader confirms it is gone, goes to the next node
// in HRW order that is up and holds no copy, with the options the gone
// node would have had: the owner's (a substitute owner writes a cache
// bucket's object through) or a replica's. A write-back owner's replicas
// never land on the owner itself, and a node the leader does not confirm
// gone fails the write (503) instead.
func TestWriteToNextNodeWhenOneIsGone(t *testing.T) {
	ids := []string{"n1", "n2", "n3", "n4", "n5"}
	order := placement.Order(ids, placement.ObjectName("b", "k"))
	deadAddr := "http://" + testnet.RefusingAddr(t, "127.0.0.1")
	tests := []struct {
		name     string
		mode     string
		self     string // the node receiving the PUT
		gone     string
		confirm  bool   // the leader confirms it gone
		want     string // the node that gets the gone node's copy
		wantRepl bool   // and whether as a replica
		hangs    bool   // the gone node takes connections and never answers; its paths are down
	}{
		{"replica of a local bucket", cluster.ModeLocal, order[0], order[1], true, order[2], true, false},
		{"owner of a local bucket", cluster.ModeLocal, order[1], order[0], true, order[2], false, false},
		{"owner of a cache bucket writes through", cluster.ModeCache, order[1], order[0], true, order[2], false, false},
		{"gateway is the next node", cluster.ModeLocal, order[2], order[0], true, order[2], false, false},
		{"write-back replica is not the owner", cluster.ModeWriteback, order[0], order[1], true, order[2], true, false},
		{"not confirmed gone", cluster.ModeLocal, order[0], order[1], false, "", false, false},
		{"a hung replica is asked about before the body flows", cluster.ModeLocal, order[0], order[1], true, order[2], true, true},
		{"a hung owner too", cluster.ModeLocal, order[1], order[0], true, order[2], false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := cluster.NewMap()
			m.Buckets["b"] = cluster.BucketProps{Name: "b", Copies: 2, Mode: tt.mode}
			recs := map[string]*putRecorder{}
			for _, id := range ids {
				recs[id] = &putRecorder{}
				addr := deadAddr
				switch {
				case id != tt.gone:
					srv := httptest.NewServer(peer.NewHandler(recs[id]))
					t.Cleanup(srv.Close)
					addr = srv.URL
				case tt.hangs:
					release := make(chan struct{})
					srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
					t.Cleanup(srv.Close)
					t.Cleanup(func() { close(release) })
					addr = srv.URL
				}
				m.Nodes[id] = cluster.NodeInfo{ID: id, State: cluster.StateUp, IntraAddrs: []string{addr}}
			}
			asked := 0
			meta := &swapMeta{}
			meta.m.Store(m)
			g := &gateway{self: tt.self, meta: meta, local: recs[tt.self], log: slog.New(slog.DiscardHandler), now: time.Now,
				peers: &peer.Client{Doer: &peer.HTTPDoer{Client: &http.Client{}}},
				unreachable: func(addrs []string) bool {
					return tt.hangs && slices.Equal(addrs, hostPorts(m.Nodes[tt.gone].IntraAddrs))
				},
				confirmDown: func(_ context.Context, id string) (bool, error) {
					asked++
					if id != tt.gone || !tt.confirm {
						return false, nil
					}
					// A new map, as the cluster publishes one: copies in
					// flight keep reading the one they were given.
					down := meta.Map().Clone()
					n := down.Nodes[id]
					n.State = cluster.StateDown
					down.Nodes[id] = n
					meta.m.Store(down)
					return true, nil
				}}
			data := bytes.Repeat([]byte("next node "), 50_000)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var err error
			if tt.mode == cluster.ModeWriteback {
				// The owner's replicas (the owner's own copy is the tier's).
				r := &replicator{g: g}
				var holders []string
				holders, err = r.Replicate(ctx, tier.ReplicaPut{Owner: tt.self, Seq: 1, Bucket: "b", Key: "k",
					Opts: object.PutOptions{Size: int64(len(data))}, Copies: 1, Body: bytes.NewReader(data)})
				if err == nil && !slices.Equal(holders, []string{tt.want}) {
					t.Errorf("replica holders %v, want %v", holders, []string{tt.want})
				}
			} else {
				_, err = g.PutObject(ctx, "b", "k", bytes.NewReader(data), object.PutOptions{Size: int64(len(data))})
			}
			if asked != 1 {
				t.Errorf("the leader was asked %d times, want once", asked)
			}
			if tt.want == "" {
				if !errors.Is(err, peer.ErrUnreachable) {
					t.Fatalf("PUT with %s unreachable and not gone: %v, want unreachable", tt.gone, err)
				}
				for id, r := range recs {
					if id != order[0] && r.got != nil {
						t.Errorf("%s got a copy", id)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("PUT with %s gone: %v", tt.gone, err)
			}
			r := recs[tt.want]
			if !bytes.Equal(r.got, data) || r.opts.Replica != tt.wantRepl {
				t.Fatalf("%s: %d of %d bytes, replica %v, want a whole copy with replica %v", tt.want, len(r.got), len(data), r.opts.Replica, tt.wantRepl)
			}
			copies := 0
			for _, r := range recs {
				if bytes.Equal(r.got, data) {
					copies++
				}
			}
			if want := 2; tt.mode == cluster.ModeWriteback {
				want = 1 // the owner's own copy is not written here
				if copies != want {
					t.Errorf("%d copies written, want %d", copies, want)
				}
			} else if copies != want {
				t.Errorf("%d copies written, want %d", copies, want)
			}
			if recs[tt.self].got != nil && recs[tt.self].opts.Replica && tt.mode == cluster.ModeWriteback {
				t.Errorf("the write-back owner %s got one of its own replicas", tt.self)
			}
		})
	}
}

func TestFirstError(t *testing.T) {
	bad := fmt.Errorf("%w: content does not match its digest", object.ErrBadDigest)
	dead := fmt.Errorf("%w: %w: node b", object.ErrUnavailable, peer.ErrUnreachable)
	canceled := fmt.Errorf("put: %w", context.Canceled)
	stopped := fmt.Errorf("body: %w", fanout.ErrConsumerDone)
	short := fmt.Errorf("store: read body: %w", io.ErrUnexpectedEOF)
	tests := []struct {
		name string
		errs []error
		want error
	}{
		{"all fine", []error{nil, nil}, nil},
		{"a target's own answer wins", []error{canceled, bad, dead}, bad},
		{"dead target, the other stopped", []error{stopped, dead}, dead},
		{"dead target first", []error{dead, canceled}, dead},
		{"client body failed", []error{short, stopped}, short},
		{"only cancellations", []error{canceled, stopped}, canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := firstError(tt.errs); got != tt.want {
				t.Errorf("firstError = %v, want %v", got, tt.want)
			}
		})
	}
}

// statLocal answers Stat from a table; a key it maps to an error fails
// with it (a broken drive, a bad range).
type statLocal struct {
	peer.Local
	infos map[string]object.Info
	errs  map[string]error
}

func (s statLocal) Stat(_ context.Context, _, key string) (object.Info, error) {
	if err, ok := s.errs[key]; ok {
		return object.Info{}, err
	}
	if i, ok := s.infos[key]; ok {
		return i, nil
	}
	return object.Info{}, object.ErrNotFound
}

type fixedMeta struct{ fixedMap }

func (fixedMeta) CreateBucket(context.Context, cluster.BucketProps) error { return nil }
func (fixedMeta) DeleteBucket(context.Context, string) error              { return nil }

// TestReadFallsOverFailedHolder: a holder whose drive fails is passed over
// for the next; an answer about the object itself is not; an object that
// no holder can read is an error, not "not found".
func TestReadFallsOverFailedHolder(t *testing.T) {
	eio := fmt.Errorf("read /mp1/obj/b/k: %w", syscall.EIO)
	remote := statLocal{infos: map[string]object.Info{"k": {Key: "k", ETag: "good"}},
		errs: map[string]error{"bad-range": object.ErrInvalidRange}}
	srv := httptest.NewServer(peer.NewHandler(remote))
	defer srv.Close()
	m := cluster.NewMap()
	m.Buckets["b"] = cluster.BucketProps{Name: "b", Copies: 2, Mode: cluster.ModeLocal}
	for _, key := range []string{"k", "bad-range", "only-on-broken", "nowhere"} {
		order := placement.Order([]string{"n1", "n2"}, placement.ObjectName("b", key))
		m.Nodes[order[0]] = cluster.NodeInfo{ID: order[0], State: cluster.StateUp}
		m.Nodes[order[1]] = cluster.NodeInfo{ID: order[1], State: cluster.StateUp, IntraAddrs: []string{srv.URL}}
		broken := statLocal{errs: map[string]error{"k": eio, "bad-range": object.ErrInvalidRange, "only-on-broken": eio}}
		g := &gateway{self: order[0], meta: fixedMeta{fixedMap{m}}, local: broken, log: slog.New(slog.DiscardHandler),
			peers: &peer.Client{Doer: &peer.HTTPDoer{Client: srv.Client()}}}
		info, err := g.HeadObject(context.Background(), "b", key)
		switch key {
		case "k":
			if err != nil || info.ETag != "good" {
				t.Errorf("%s: %+v %v, want the second holder's copy", key, info, err)
			}
		case "bad-range":
			if !errors.Is(err, object.ErrInvalidRange) {
				t.Errorf("%s: %v, want the first holder's answer", key, err)
			}
		case "only-on-broken":
			if err == nil || errors.Is(err, object.ErrNotFound) || !errors.Is(err, syscall.EIO) {
				t.Errorf("%s: %v, want the broken drive's error", key, err)
			}
		case "nowhere":
			if !errors.Is(err, object.ErrNotFound) {
				t.Errorf("%s: %v, want not found", key, err)
			}
		}
	}
}

// countingStat is a statLocal that counts the Stats it answers.
type countingStat struct {
	statLocal
	n *atomic.Int32
}

func (c countingStat) Stat(ctx context.Context, bucket, key string) (object.Info, error) {
	c.n.Add(1)
	return c.statLocal.Stat(ctx, bucket, key)
}

// TestReadTriesUnreachableHolderLast: a holder every connection path to
// which is down (a node that hangs, before the map marks it down) is
// asked after the object's other holders, not first.
func TestReadTriesUnreachableHolderLast(t *testing.T) {
	order := placement.Order([]string{"n1", "n2", "n3"}, placement.ObjectName("b", "k"))
	m := cluster.NewMap()
	m.Buckets["b"] = cluster.BucketProps{Name: "b", Copies: 2, Mode: cluster.ModeLocal}
	asked := map[string]*atomic.Int32{}
	for _, id := range order[:2] {
		asked[id] = &atomic.Int32{}
		srv := httptest.NewServer(peer.NewHandler(countingStat{statLocal{infos: map[string]object.Info{"k": {Key: "k", ETag: id}}}, asked[id]}))
		t.Cleanup(srv.Close)
		m.Nodes[id] = cluster.NodeInfo{ID: id, State: cluster.StateUp, IntraAddrs: []string{srv.URL}}
	}
	m.Nodes[order[2]] = cluster.NodeInfo{ID: order[2], State: cluster.StateUp}
	for _, hung := range []bool{false, true} {
		g := &gateway{self: order[2], meta: fixedMeta{fixedMap{m}}, local: statLocal{}, log: slog.New(slog.DiscardHandler),
			peers: &peer.Client{Doer: &peer.HTTPDoer{Client: &http.Client{}}},
			unreachable: func(addrs []string) bool {
				return hung && slices.Equal(addrs, hostPorts(m.Nodes[order[0]].IntraAddrs))
			}}
		before := asked[order[0]].Load()
		info, err := g.HeadObject(context.Background(), "b", "k")
		want := order[0]
		if hung {
			want = order[1]
		}
		if err != nil || info.ETag != want {
			t.Errorf("hung=%v: served %q (%v), want %s's copy", hung, info.ETag, err, want)
		}
		if n := asked[order[0]].Load() - before; hung && n != 0 {
			t.Errorf("the unreachable first holder was asked %d times", n)
		}
	}
}

// deleteRecorder remembers the keys deleted through it.
type deleteRecorder struct {
	peer.Local
	mu   sync.Mutex
	keys []string
}

func (d *deleteRecorder) Delete(_ context.Context, _, key string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.keys = append(d.keys, key)
	return object.ErrNotFound
}

// TestDeleteReachesDrainingNode: a draining node is out of placement but may
// still hold a copy it has not moved; a delete must reach it too.
func TestDeleteReachesDrainingNode(t *testing.T) {
	self, up, draining := &deleteRecorder{}, &deleteRecorder{}, &deleteRecorder{}
	srvUp := httptest.NewServer(peer.NewHandler(up))
	defer srvUp.Close()
	srvDr := httptest.NewServer(peer.NewHandler(draining))
	defer srvDr.Close()
	m := cluster.NewMap()
	m.Buckets["b"] = cluster.BucketProps{Name: "b", Copies: 1, Mode: cluster.ModeLocal}
	m.Nodes["n1"] = cluster.NodeInfo{ID: "n1", State: cluster.StateUp}
	m.Nodes["n2"] = cluster.NodeInfo{ID: "n2", State: cluster.StateUp, IntraAddrs: []string{srvUp.URL}}
	m.Nodes["n3"] = cluster.NodeInfo{ID: "n3", State: cluster.StateUp, Draining: true, IntraAddrs: []string{srvDr.URL}}
	g := &gateway{self: "n1", meta: fixedMeta{fixedMap{m}}, local: self, log: slog.New(slog.DiscardHandler), now: time.Now,
		peers: &peer.Client{Doer: &peer.HTTPDoer{Client: srvUp.Client()}}}
	if err := g.DeleteObject(context.Background(), "b", "k"); err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]*deleteRecorder{"the draining node": draining, "the up node": up, "this node": self} {
		if !slices.Contains(r.keys, "k") {
			t.Errorf("%s was not asked to delete the key", name)
		}
	}
}

// TestUnknownBucketWithoutLeader: a bucket this node's map lacks is "no
// such bucket" only once the leader confirms it. A node that just
// restarted has not applied its latest map entries until a leader reaches
// it, and during an election no leader can be asked: then the answer is
// unavailable (503, which clients retry), not a false NoSuchBucket.
func TestUnknownBucketWithoutLeader(t *testing.T) {
	m := cluster.NewMap()
	m.Buckets["known"] = cluster.BucketProps{Name: "known", Copies: 1, Mode: cluster.ModeLocal}
	tests := []struct {
		name   string
		bucket string
		sync   func(context.Context) error
		want   error
	}{
		{"known, no leader", "known", func(context.Context) error { return cluster.ErrNoLeader }, nil},
		{"unknown, no leader", "late", func(context.Context) error { return cluster.ErrNoLeader }, object.ErrUnavailable},
		{"unknown, the leader has no such bucket", "late", func(context.Context) error { return nil }, object.ErrBucketNotFound},
		{"unknown, no cluster to ask", "late", nil, object.ErrBucketNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := &gateway{self: "n1", meta: fixedMeta{fixedMap{m}}, log: slog.New(slog.DiscardHandler), sync: tt.sync}
			_, _, err := g.bucket(context.Background(), tt.bucket)
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("bucket %s: %v, want %v", tt.bucket, err, tt.want)
			}
		})
	}
}

// TestCheckBackend: a tiered bucket's backend must answer a listing before
// the bucket is created over it.
func TestCheckBackend(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		path string
		ok   bool
	}{
		{"a directory", dir, true},
		{"no such directory (an NFS mount missing)", filepath.Join(dir, "missing"), false},
		{"under a file", filepath.Join(file, "dir"), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := cluster.BucketProps{Name: "b", Mode: cluster.ModeCache, Copies: 1, Backend: cluster.BackendSpec{Kind: "fs", Path: tt.path}}
			err := checkBackend(context.Background(), b)
			if tt.ok != (err == nil) || err != nil && !errors.Is(err, object.ErrInvalidArgument) {
				t.Fatalf("checkBackend(%s): %v", tt.path, err)
			}
		})
	}
}
