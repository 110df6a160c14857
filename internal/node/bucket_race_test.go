package node

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/object"
)

// swapMeta is a map view whose DeleteBucket/CreateBucket publish a new map.
type swapMeta struct{ m atomic.Pointer[cluster.Map] }

func (s *swapMeta) Map() *cluster.Map { return s.m.Load() }
func (s *swapMeta) Watch(ctx context.Context) <-chan *cluster.Map {
	ch := make(chan *cluster.Map)
	go func() {
		defer close(ch)
		var last *cluster.Map
		for ctx.Err() == nil {
			if m := s.m.Load(); m != last {
				select {
				case ch <- m:
					last = m
				case <-ctx.Done():
					return
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return ch
}
func (s *swapMeta) CreateBucket(_ context.Context, b cluster.BucketProps) error {
	n := s.m.Load().Clone()
	n.Buckets[b.Name] = b
	n.Version++
	s.m.Store(n)
	return nil
}
func (s *swapMeta) DeleteBucket(_ context.Context, name string) error {
	n := s.m.Load().Clone()
	delete(n.Buckets, name)
	n.Version++
	s.m.Store(n)
	return nil
}

// TestDeleteBucketRacesPut: DeleteBucket checks that the bucket is empty
// on every node, then removes it from the map; a PUT that resolved the
// bucket before the removal commits afterwards. Its copy does not outlive
// the bucket: the PUT fails (or, had it been acknowledged first, the purge
// removes it), and a new bucket of the same name starts empty.
func TestDeleteBucketRacesPut(t *testing.T) {
	ctx := context.Background()
	st := openTestStore(t)
	tb, err := openTombstones(filepath.Join(t.TempDir(), "tombstones"), tombstoneRetention, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.close() })
	meta := &swapMeta{}
	m := cluster.NewMap()
	m.Nodes["a"] = cluster.NodeInfo{ID: "a", State: cluster.StateUp, IntraAddrs: []string{"127.0.0.1:1"}}
	m.Buckets["bkt"] = cluster.BucketProps{Name: "bkt", Copies: 1, Mode: cluster.ModeLocal, Validate: "never"}
	meta.m.Store(m)
	l := &localService{meta: meta, store: st, tombs: tb}
	g := &gateway{self: "a", meta: meta, local: l, log: slog.New(slog.DiscardHandler), now: time.Now}

	pr, pw := io.Pipe()
	type result struct {
		err error
	}
	done := make(chan result, 1)
	go func() {
		_, err := g.PutObject(ctx, "bkt", "k", pr, object.PutOptions{Size: 4})
		done <- result{err}
	}()
	wrote := make(chan error, 1)
	go func() { _, err := pw.Write([]byte("da")); wrote <- err }()
	select { // the PUT is under way: it has read part of the body
	case err := <-wrote:
		if err != nil {
			t.Fatal(err)
		}
	case r := <-done:
		t.Fatalf("PUT ended early: %v", r.err)
	case <-time.After(5 * time.Second):
		t.Fatal("PUT did not read its body")
	}
	if err := g.DeleteBucket(ctx, "bkt"); err != nil {
		t.Fatalf("delete bucket: %v", err)
	}
	pw.Write([]byte("ta"))
	pw.Close()
	r := <-done
	if r.err == nil {
		t.Errorf("PUT into bucket bkt acknowledged after DeleteBucket(bkt) succeeded")
	}
	if err := g.CreateBucket(ctx, "bkt"); err != nil {
		t.Fatal(err)
	}
	res, err := g.ListObjects(ctx, "bkt", object.ListOptions{MaxKeys: 10})
	if err != nil || len(res.Objects) != 0 {
		t.Errorf("re-created bucket bkt lists %d objects (%v)", len(res.Objects), err)
	}
}
