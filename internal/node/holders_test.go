package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/peer"
	"github.com/slipstream-io/slipstream/internal/placement"
	"github.com/slipstream-io/slipstream/internal/store"
	"github.com/slipstream-io/slipstream/internal/tier"
)

// holderRig is a cluster of real local services (store + tombstones), each
// behind the real peer protocol on an httptest server, and gateways that
// reach the others through it. A node can be cut off (its connections
// drop) without the map marking it down.
type holderRig struct {
	t      *testing.T
	m      *cluster.Map
	stores map[string]*store.Store
	tombs  map[string]*tombstones
	locals map[string]*localService
	cut    map[string]*atomic.Bool // a cut node aborts every peer request
	srvs   map[string]*httptest.Server

	mu      sync.Mutex
	tombNow time.Time // the tombstones' clock (zero: the real one)
}

func newHolderRig(t *testing.T, ids ...string) *holderRig {
	ctx := context.Background()
	r := &holderRig{t: t, m: cluster.NewMap(), stores: map[string]*store.Store{}, tombs: map[string]*tombstones{},
		locals: map[string]*localService{}, cut: map[string]*atomic.Bool{}, srvs: map[string]*httptest.Server{}}
	for _, id := range ids {
		r.addNode(ctx, id)
	}
	return r
}

func (r *holderRig) clock() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tombNow.IsZero() {
		return time.Now()
	}
	return r.tombNow
}

func (r *holderRig) addNode(ctx context.Context, id string) {
	t := r.t
	st := openTestStore(t)
	tb, err := openTombstones(filepath.Join(t.TempDir(), "tombstones"), tombstoneRetention, r.clock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.close() })
	l := &localService{meta: fixedMap{r.m}, store: st, tombs: tb}
	cut := &atomic.Bool{}
	h := peer.NewHandler(l)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if cut.Load() {
			panic(http.ErrAbortHandler) // the connection drops: the node is unreachable
		}
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	r.stores[id], r.tombs[id], r.locals[id], r.cut[id], r.srvs[id] = st, tb, l, cut, srv
	r.m.Nodes[id] = cluster.NodeInfo{ID: id, State: cluster.StateUp, IntraAddrs: []string{srv.URL}}
}

func (r *holderRig) gateway(self string) *gateway {
	return &gateway{self: self, meta: fixedMeta{fixedMap{r.m}}, local: r.locals[self], log: slog.New(slog.DiscardHandler),
		now: time.Now, peers: &peer.Client{Doer: &peer.HTTPDoer{Client: &http.Client{}}}}
}

func (r *holderRig) holds(id, bucket, key string) string {
	r.t.Helper()
	return storeHolds(r.t, r.stores[id], bucket, key)
}

// storeHolds returns the body st holds for bucket/key, or "" if none.
func storeHolds(t *testing.T, st *store.Store, bucket, key string) string {
	t.Helper()
	rd, err := st.Get(context.Background(), bucket, key, nil)
	if errors.Is(err, object.ErrNotFound) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return readAll(t, rd)
}

// putPair makes bucket "bkt" a local bucket with copies=2 over the rig's
// two nodes and PUTs body as key through its owner: both hold it.
func (r *holderRig) putPair(ctx context.Context, key, body string) (owner, replica string, g *gateway) {
	r.t.Helper()
	r.m.Buckets["bkt"] = cluster.BucketProps{Name: "bkt", Copies: 2, Mode: cluster.ModeLocal}
	order := placement.Order(r.m.NodeIDs(), placement.ObjectName("bkt", key))
	owner, replica = order[0], order[1]
	g = r.gateway(owner)
	if _, err := g.PutObject(ctx, "bkt", key, bytes.NewReader([]byte(body)), object.PutOptions{Size: int64(len(body))}); err != nil {
		r.t.Fatal(err)
	}
	if r.holds(owner, "bkt", key) != body || r.holds(replica, "bkt", key) != body {
		r.t.Fatal("PUT did not reach both holders")
	}
	return owner, replica, g
}

func readAll(t *testing.T, rd object.Reader) string {
	t.Helper()
	defer rd.Close()
	b, err := io.ReadAll(rd)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDeleteWithHolderUnreachable: a DELETE in a local bucket with
// copies=2 whose replica holder is briefly unreachable (a network blip, a
// restart shorter than the health check's DownAfter: the map never marks
// it down, so it never rejoins) is not acknowledged: it answers
// "unavailable", which clients retry. Meanwhile the owner's tombstone
// keeps every gateway from serving the replica's copy, and the retry
// removes it.
func TestDeleteWithHolderUnreachable(t *testing.T) {
	ctx := context.Background()
	r := newHolderRig(t, "n1", "n2")
	const key = "k"
	owner, replica, g := r.putPair(ctx, key, "acknowledged then deleted")

	r.cut[replica].Store(true) // a blip: the map still says up
	if err := g.DeleteObject(ctx, "bkt", key); !errors.Is(err, object.ErrUnavailable) {
		t.Fatalf("DELETE with the replica unreachable: %v, want ErrUnavailable", err)
	}
	r.cut[replica].Store(false)
	if _, ok := r.tombs[owner].get("bkt", key); !ok {
		t.Fatal("the owner recorded no tombstone")
	}
	for _, gw := range []string{owner, replica} {
		if rd, err := r.gateway(gw).GetObject(ctx, "bkt", key, object.GetOptions{}); !errors.Is(err, object.ErrNotFound) {
			if err == nil {
				t.Errorf("GET through %s served %q, deleted on the owner", gw, readAll(t, rd))
			} else {
				t.Errorf("GET through %s: %v, want not found", gw, err)
			}
		}
		if _, err := r.gateway(gw).HeadObject(ctx, "bkt", key); !errors.Is(err, object.ErrNotFound) {
			t.Errorf("HEAD through %s: %v, want not found", gw, err)
		}
	}

	if err := g.DeleteObject(ctx, "bkt", key); err != nil {
		t.Fatalf("DELETE retried: %v", err)
	}
	if got := r.holds(replica, "bkt", key); got != "" {
		t.Errorf("after the retried DELETE %s still holds %q", replica, got)
	}
	for _, gw := range []string{owner, replica} {
		res, err := r.gateway(gw).ListObjects(ctx, "bkt", object.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if objs, _ := keys(res); slices.Contains(objs, key) {
			t.Errorf("LIST through %s after the DELETE lists %v", gw, objs)
		}
	}
}

// TestHoldersAfterJoin: copies=1, two nodes; an object lives on its
// owner. Three nodes join and all three rank above the old owner for this
// key (1 key in 10 for 2 -> 5 nodes). Until the rebalance pass has moved
// the copy (a paced pass over a full store takes hours), the object is
// outside its copies+readFallback first nodes: GET and HEAD still find it,
// a DELETE still removes it, and a rebalance pass long after the DELETE
// (past the nodes' memory of recent deletes) does not bring it back.
func TestHoldersAfterJoin(t *testing.T) {
	ctx := context.Background()
	r := newHolderRig(t, "old1", "old2")
	r.m.Buckets["bkt"] = cluster.BucketProps{Name: "bkt", Copies: 1, Mode: cluster.ModeLocal}
	newIDs := []string{"new1", "new2", "new3"}
	all := append([]string{"old1", "old2"}, newIDs...)
	// A key whose old owner ranks after all three new nodes.
	key := ""
	for i := 0; key == ""; i++ {
		k := fmt.Sprintf("key%d", i)
		o := placement.Order(all, placement.ObjectName("bkt", k))
		if !slices.Contains(newIDs, o[0]) || !slices.Contains(newIDs, o[1]) || !slices.Contains(newIDs, o[2]) {
			continue
		}
		key = k
	}
	oldOwner := placement.Order([]string{"old1", "old2"}, placement.ObjectName("bkt", key))[0]
	body := "written before the join"
	if _, err := r.gateway(oldOwner).PutObject(ctx, "bkt", key, bytes.NewReader([]byte(body)), object.PutOptions{Size: int64(len(body))}); err != nil {
		t.Fatal(err)
	}
	for _, id := range newIDs {
		r.addNode(ctx, id)
	}
	g := r.gateway("new1")

	// The only copy is on an up node, and the listing shows it...
	res, err := g.ListObjects(ctx, "bkt", object.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	objs, _ := keys(res)
	_, headErr := g.HeadObject(ctx, "bkt", key)
	rd, getErr := g.GetObject(ctx, "bkt", key, object.GetOptions{})
	if getErr == nil {
		rd.Close()
	}
	if getErr != nil || headErr != nil {
		t.Errorf("listed %v; but GET %q = %v, HEAD = %v, while %s (up) holds %q", objs, key, getErr, headErr, oldOwner, r.holds(oldOwner, "bkt", key))
	}

	// ...and a DELETE does not reach it.
	if err := g.DeleteObject(ctx, "bkt", key); err != nil {
		t.Fatal(err)
	}
	if got := r.holds(oldOwner, "bkt", key); got != "" {
		t.Errorf("DELETE acknowledged, but %s still holds %q", oldOwner, got)
	}

	// The rebalance reaches the copy 11 minutes later.
	r.mu.Lock()
	r.tombNow = time.Now().Add(11 * time.Minute)
	r.mu.Unlock()
	rb := &rebalancer{self: oldOwner, meta: fixedMap{r.m}, store: r.stores[oldOwner], log: slog.New(slog.DiscardHandler), parallel: 1,
		downAfter: 10 * time.Minute, settle: time.Second, now: time.Now, downSince: map[string]time.Time{},
		at: func(m *cluster.Map, id string) peer.Local { return r.locals[id] }}
	p := rb.run(ctx, "", nil)
	if rd, err := g.GetObject(ctx, "bkt", key, object.GetOptions{}); err == nil {
		t.Errorf("after the rebalance pass (%+v), the deleted object is back: GET = %q", p, readAll(t, rd))
	}
}

// TestDeletedNotServedByNodeMarkedDown: a holder the map marks down while
// it still answers (it restarted and is not marked up yet, or it is cut
// off from the leader only) misses a DELETE, which its peers remember with
// tombstones. A GET that finds "not found" on the up holders goes on to
// the down node, which has not seen itself up again (its copies are not
// suspect yet): its copy, older than the tombstone, is not served.
func TestDeletedNotServedByNodeMarkedDown(t *testing.T) {
	ctx := context.Background()
	r := newHolderRig(t, "n1", "n2")
	const key = "k"
	owner, replica, g := r.putPair(ctx, key, "deleted while a holder was marked down")
	n := r.m.Nodes[replica]
	n.State, n.Downs = cluster.StateDown, 1
	r.m.Nodes[replica] = n
	if err := g.DeleteObject(ctx, "bkt", key); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.tombs[owner].get("bkt", key); !ok {
		t.Fatal("no tombstone on the owner")
	}
	if rd, err := g.GetObject(ctx, "bkt", key, object.GetOptions{}); err == nil {
		t.Errorf("GET after an acknowledged DELETE served %q from %s (marked down); %s answered with a tombstone", readAll(t, rd), replica, owner)
	}
}

// TestCompleteRetriedAfterReplicaFailed: with copies=2, a multipart
// completion whose replica is unreachable fails (the owner has assembled
// the object, the replica has nothing). The client's retry of the same
// completion finds the upload gone but the object there with the ETag
// of its parts, and makes the missing copy; a completion with other parts
// does not pass for it.
func TestCompleteRetriedAfterReplicaFailed(t *testing.T) {
	ctx := context.Background()
	r := newHolderRig(t, "n1", "n2")
	r.m.Buckets["bkt"] = cluster.BucketProps{Name: "bkt", Copies: 2, Mode: cluster.ModeLocal}
	const key = "big"
	order := placement.Order([]string{"n1", "n2"}, placement.ObjectName("bkt", key))
	owner, replica := order[0], order[1]
	g := r.gateway(replica) // it reaches the owner through the peer protocol
	id, err := g.CreateMultipartUpload(ctx, "bkt", key, object.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	body := "the only part"
	p, err := g.UploadPart(ctx, "bkt", key, id, 1, bytes.NewReader([]byte(body)), object.PutOptions{Size: int64(len(body))})
	if err != nil {
		t.Fatal(err)
	}
	parts := []object.CompletePart{{PartNumber: 1, ETag: p.ETag}}

	r.cut[replica].Store(true)
	if _, err := r.gateway(owner).CompleteMultipartUpload(ctx, "bkt", key, id, parts); !errors.Is(err, object.ErrUnavailable) {
		t.Fatalf("completion with the replica unreachable: %v, want ErrUnavailable", err)
	}
	r.cut[replica].Store(false)
	if r.holds(owner, "bkt", key) != body || r.holds(replica, "bkt", key) != "" {
		t.Fatal("expected the object on the owner only")
	}
	other := []object.CompletePart{{PartNumber: 1, ETag: strings.Repeat("0", 32)}}
	if _, err := g.CompleteMultipartUpload(ctx, "bkt", key, id, other); !errors.Is(err, object.ErrUploadNotFound) {
		t.Errorf("completion with other parts: %v, want ErrUploadNotFound", err)
	}
	info, err := g.CompleteMultipartUpload(ctx, "bkt", key, id, parts)
	if err != nil {
		t.Fatalf("retried completion: %v", err)
	}
	if got := r.holds(replica, "bkt", key); got != body {
		t.Errorf("after the retry the replica holds %q", got)
	}
	ri, err := r.stores[replica].Stat(ctx, "bkt", key)
	if err != nil || ri.ETag != info.ETag || !ri.ModTime.Equal(info.ModTime) {
		t.Errorf("replica's copy %+v (%v), want the owner's version %s at %s", ri, err, info.ETag, info.ModTime)
	}
}

// TestReplicateNamesHoldersOnFailure: when one peer fails while the others
// store their copy, Replicate fails but still names every peer it asked:
// the owner journals them as holders and tells them when the write is
// destaged, so no replica stays dirty for ever.
func TestReplicateNamesHoldersOnFailure(t *testing.T) {
	ctx := context.Background()
	r := newHolderRig(t, "n1", "n2", "n3")
	r.m.Buckets["bkt"] = cluster.BucketProps{Name: "bkt", Copies: 3, Mode: cluster.ModeLocal}
	const key = "k"
	order := placement.Order(r.m.NodeIDs(), placement.ObjectName("bkt", key))
	owner, ok, cut := order[0], order[1], order[2]
	r.cut[cut].Store(true)
	body := "a replica that one peer misses"
	holders, err := (&replicator{g: r.gateway(owner)}).Replicate(ctx, tier.ReplicaPut{Owner: owner, Seq: 1, Bucket: "bkt", Key: key,
		Opts: object.PutOptions{Size: int64(len(body))}, ModTime: time.Now(), Copies: 2, Body: strings.NewReader(body)})
	if !errors.Is(err, object.ErrUnavailable) {
		t.Fatalf("Replicate with a peer cut off: %v, want ErrUnavailable", err)
	}
	if !slices.Contains(holders, ok) || !slices.Contains(holders, cut) {
		t.Errorf("holders %v, want both peers %s and %s", holders, ok, cut)
	}
}
