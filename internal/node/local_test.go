package node

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/backend"
	"github.com/slipstream-io/slipstream/internal/backend/fs"
	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/peer"
	"github.com/slipstream-io/slipstream/internal/store"
	"github.com/slipstream-io/slipstream/internal/tier"
)

// openTestStore opens a store on one mountpath in a temporary directory,
// closed when the test ends.
func openTestStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), store.Config{Mountpaths: []string{filepath.Join(t.TempDir(), "mp")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestLocalBucketCopiesArePinned: every way a copy of a local bucket's
// object reaches a node's store (a PUT to the owner, a replica, a
// rebalance copy, a completed multipart upload) stores it pinned, so the
// store never evicts it; a replica of a cache bucket stays evictable, and
// a write-back bucket's completed upload is dirty from its commit.
func TestLocalBucketCopiesArePinned(t *testing.T) {
	ctx := context.Background()
	st := openTestStore(t)
	tombs, err := openTombstones(filepath.Join(t.TempDir(), "tombstones"), time.Hour, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tombs.close() })
	m := cluster.NewMap()
	m.Buckets["loc"] = cluster.BucketProps{Name: "loc", Copies: 2, Mode: cluster.ModeLocal}
	m.Buckets["cached"] = cluster.BucketProps{Name: "cached", Copies: 2, Mode: cluster.ModeCache}
	m.Buckets["wback"] = cluster.BucketProps{Name: "wback", Copies: 1, Mode: cluster.ModeWriteback}
	l := &localService{meta: fixedMap{m}, store: st, tombs: tombs}
	body := []byte("the only copies are ours")
	put := func(bucket, key string, o peer.PutOptions) object.Info {
		t.Helper()
		o.Size = int64(len(body))
		info, err := l.Put(ctx, bucket, key, bytes.NewReader(body), o)
		if err != nil {
			t.Fatalf("Put %s/%s: %v", bucket, key, err)
		}
		return info
	}
	id, err := l.CreateUpload(ctx, "loc", "multipart", object.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pi, err := l.PutPart(ctx, "loc", "multipart", id, 1, bytes.NewReader(body), object.PutOptions{Size: int64(len(body))})
	if err != nil {
		t.Fatal(err)
	}
	mpu, err := l.CompleteUpload(ctx, "loc", "multipart", id, []object.CompletePart{{PartNumber: 1, ETag: pi.ETag}})
	if err != nil {
		t.Fatal(err)
	}
	// A write-back bucket's upload is committed dirty: if the node dies
	// before the tier adopts it (journals it), it is neither evicted nor
	// forgotten (the tier's restart journals dirty objects it lacks).
	wid, err := l.CreateUpload(ctx, "wback", "multipart", object.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wpi, err := l.PutPart(ctx, "wback", "multipart", wid, 1, bytes.NewReader(body), object.PutOptions{Size: int64(len(body))})
	if err != nil {
		t.Fatal(err)
	}
	wmpu, err := st.CompleteUpload(ctx, "wback", "multipart", wid, []object.CompletePart{{PartNumber: 1, ETag: wpi.ETag}})
	if err != nil || !wmpu.Dirty || wmpu.Pinned || wmpu.Evictable() {
		t.Fatalf("write-back upload completed as %+v, %v; want dirty, not pinned", wmpu, err)
	}
	for _, tt := range []struct {
		name   string
		info   object.Info
		pinned bool
	}{
		{"owner's copy", put("loc", "owner", peer.PutOptions{}), true},
		{"replica", put("loc", "replica", peer.PutOptions{Replica: true, Owner: "x"}), true},
		{"rebalance copy", put("loc", "moved", peer.PutOptions{KeepNewer: true, ModTime: time.Now()}), true},
		{"multipart upload", mpu, true},
		{"replica of a cache bucket", put("cached", "replica", peer.PutOptions{Replica: true, Owner: "x"}), false},
	} {
		stored, err := st.Stat(ctx, tt.info.Bucket, tt.info.Key)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if stored.Pinned != tt.pinned || stored.Evictable() == tt.pinned {
			t.Errorf("%s: pinned %v, evictable %v; want pinned %v", tt.name, stored.Pinned, stored.Evictable(), tt.pinned)
		}
	}
}

// TestSlowKeepNewerCopyRefusedAfterDelete: a rebalance copy (KeepNewer)
// that began before its key was deleted on this node is refused at commit
// however long its body takes to arrive (a large object at the rebalance
// rate limit can take longer than the in-memory memory of recent deletes
// otherwise lasts): it must not bring the deleted object back.
func TestSlowKeepNewerCopyRefusedAfterDelete(t *testing.T) {
	ctx := context.Background()
	st := openTestStore(t)
	var offset atomic.Int64 // how far the tombstones' clock is ahead of the real one
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	tombs, err := openTombstones(filepath.Join(t.TempDir(), "tombstones"), time.Hour, clock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tombs.close() })
	m := cluster.NewMap()
	m.Buckets["loc"] = cluster.BucketProps{Name: "loc", Copies: 2, Mode: cluster.ModeLocal}
	l := &localService{meta: fixedMap{m}, store: st, tombs: tombs}

	body := bytes.Repeat([]byte("x"), 1<<20)
	old := time.Now().Add(-time.Hour).UTC()
	if _, err := l.Put(ctx, "loc", "k", bytes.NewReader(body), peer.PutOptions{PutOptions: object.PutOptions{Size: int64(len(body))}, ModTime: old}); err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := l.Put(ctx, "loc", "k", pr, peer.PutOptions{PutOptions: object.PutOptions{Size: int64(len(body))}, ModTime: old, KeepNewer: true})
		pr.CloseWithError(err)
		done <- err
	}()
	if _, err := pw.Write(body[:len(body)/2]); err != nil {
		t.Fatal(err)
	}
	// The client deletes the key while the copy is on its way.
	if err := l.Delete(ctx, "loc", "k"); err != nil {
		t.Fatal(err)
	}
	offset.Store(int64(recentRetention + time.Minute)) // the copy is slow
	if _, err := pw.Write(body[len(body)/2:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the copy's Put did not return")
	}
	if !errors.Is(err, object.ErrPrecondition) {
		t.Errorf("copy sent before the delete, arriving after it: %v, want ErrPrecondition", err)
	}
	if _, err := st.Stat(ctx, "loc", "k"); !errors.Is(err, object.ErrNotFound) {
		t.Errorf("deleted object after the slow copy: %v, want not found", err)
	}
	// Once no copy is in flight, recent deletes expire as before.
	if _, ok := tombs.get("loc", "k"); ok {
		t.Error("a recent delete outlived recentRetention with no copy in flight")
	}
}

// flakyReplicator fails its first Replicate and stores nothing; later
// ones read the body and name one holder. Notices to holders succeed.
type flakyReplicator struct {
	calls atomic.Int32
}

func (f *flakyReplicator) ReplicateDelete(context.Context, string, uint64, string, string, int) ([]string, error) {
	return nil, nil
}
func (f *flakyReplicator) Destaged(context.Context, string, uint64, string, string, []string) error {
	return nil
}
func (f *flakyReplicator) Abandoned(context.Context, string, uint64, string, string, []string) error {
	return nil
}
func (f *flakyReplicator) Deleted(context.Context, string, uint64, string, string, []string) error {
	return nil
}

func (f *flakyReplicator) Replicate(ctx context.Context, req tier.ReplicaPut) ([]string, error) {
	if f.calls.Add(1) == 1 {
		return nil, errors.New("peer unreachable")
	}
	if _, err := io.Copy(io.Discard, req.Body); err != nil {
		return nil, err
	}
	return []string{"peer"}, nil
}

// TestRetriedCompletionAfterReplicasFailed: a write-back bucket's
// multipart completion commits the object, then fails to make its
// replica; the client's retry of the same completion (S3 clients retry a
// 503) finds the upload gone. It must not answer NoSuchUpload for an
// object that is there: it replicates again and answers with the object.
func TestRetriedCompletionAfterReplicasFailed(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(ctx, store.Config{Mountpaths: []string{filepath.Join(dir, "mp")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	be, err := fs.New(backend.Spec{Kind: "fs", Path: filepath.Join(dir, "remote")})
	if err != nil {
		t.Fatal(err)
	}
	rep := &flakyReplicator{}
	tr, err := tier.New(ctx, tier.Config{NodeID: "n1", JournalDir: filepath.Join(dir, "journal"), SpoolDir: filepath.Join(dir, "spool"), Replicator: rep}, st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	if err := tr.AddBucket("wback", tier.Bucket{Mode: tier.ModeWriteback, Copies: 2, Backend: be}); err != nil {
		t.Fatal(err)
	}
	m := cluster.NewMap()
	m.Buckets["wback"] = cluster.BucketProps{Name: "wback", Copies: 2, Mode: cluster.ModeWriteback}
	l := &localService{meta: fixedMap{m}, store: st, tier: tr}
	body := bytes.Repeat([]byte("part "), 1000)
	id, err := l.CreateUpload(ctx, "wback", "mp", object.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pi, err := l.PutPart(ctx, "wback", "mp", id, 1, bytes.NewReader(body), object.PutOptions{Size: int64(len(body))})
	if err != nil {
		t.Fatal(err)
	}
	parts := []object.CompletePart{{PartNumber: 1, ETag: pi.ETag}}
	if _, err := l.CompleteUpload(ctx, "wback", "mp", id, parts); !errors.Is(err, object.ErrUnavailable) {
		t.Fatalf("completion whose replica failed: %v, want ErrUnavailable", err)
	}
	info, err := l.CompleteUpload(ctx, "wback", "mp", id, parts)
	if err != nil {
		t.Fatalf("retried completion: %v", err)
	}
	want, _ := object.MultipartETag(parts)
	if info.ETag != want || !info.Dirty || info.Size != int64(len(body)) {
		t.Errorf("retried completion answered %+v; want the object, dirty, ETag %s", info, want)
	}
	if n := rep.calls.Load(); n != 2 {
		t.Errorf("Replicate called %d times, want 2 (the retry replicates again)", n)
	}
	// A completion retried with other parts is still refused.
	if _, err := l.CompleteUpload(ctx, "wback", "mp", id, []object.CompletePart{{PartNumber: 1, ETag: strings.Repeat("0", 32)}}); !errors.Is(err, object.ErrUploadNotFound) {
		t.Errorf("completion of a gone upload with other parts: %v, want ErrUploadNotFound", err)
	}
	// Let the destager finish with the remote directory before it goes.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := tr.WaitDestaged(wctx); err != nil {
		t.Fatal(err)
	}
}

// TestReplicaWrittenThrough: a cache bucket's plain copy records the
// backend version its owner wrote it through as, but only the version
// meant (same ETag), and never over one it already records; a key gone
// since is no error.
func TestReplicaWrittenThrough(t *testing.T) {
	ctx := context.Background()
	st := openTestStore(t)
	m := cluster.NewMap()
	m.Buckets["cached"] = cluster.BucketProps{Name: "cached", Copies: 2, Mode: cluster.ModeCache}
	l := &localService{meta: fixedMap{m}, store: st}
	body := []byte("a replica of a written-through object")
	info, err := l.Put(ctx, "cached", "k", bytes.NewReader(body), peer.PutOptions{PutOptions: object.PutOptions{Size: int64(len(body))}, Replica: true, Owner: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().UTC().Truncate(time.Millisecond)
	op := peer.ReplicaOp{Op: peer.ReplicaWrittenThrough, Bucket: "cached", Key: "k", Time: at, BackendETag: "be-1", BackendVersion: "v1"}
	tests := []struct {
		name        string
		etag        string
		backendETag string
		want        string // the copy's BackendETag after
	}{
		{"another version of the key", "0123", "be-1", ""},
		{"the version meant", info.ETag, "be-1", "be-1"},
		{"one already recorded stays", info.ETag, "be-2", "be-1"},
	}
	for _, tt := range tests {
		o := op
		o.ETag, o.BackendETag = tt.etag, tt.backendETag
		if err := l.Replica(ctx, o); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		got, err := st.Stat(ctx, "cached", "k")
		if err != nil {
			t.Fatal(err)
		}
		if got.BackendETag != tt.want {
			t.Errorf("%s: backend ETag %q, want %q", tt.name, got.BackendETag, tt.want)
		}
		if tt.want != "" && (got.BackendVersion != "v1" || !got.ValidatedAt.Equal(at)) {
			t.Errorf("%s: backend version %q validated at %v, want v1 at %v", tt.name, got.BackendVersion, got.ValidatedAt, at)
		}
	}
	o := op
	o.Key = "gone"
	if err := l.Replica(ctx, o); err != nil {
		t.Errorf("a key this node no longer has: %v", err)
	}
	o.BackendETag = ""
	if err := l.Replica(ctx, o); !errors.Is(err, object.ErrInvalidArgument) {
		t.Errorf("no backend ETag: %v, want invalid argument", err)
	}
}
