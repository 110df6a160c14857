package tier_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/store"
	"github.com/slipstream-io/slipstream/internal/tier"
)

// deleteHook runs a hook at the next Delete of the store: before (its error,
// if any, is returned instead of deleting) or after it.
type deleteHook struct {
	*store.Store
	mu     sync.Mutex
	before func() error
	after  func()
}

func (h *deleteHook) Delete(ctx context.Context, bucket, key string) error {
	h.mu.Lock()
	before, after := h.before, h.after
	h.before, h.after = nil, nil
	h.mu.Unlock()
	if before != nil {
		if err := before(); err != nil {
			return err
		}
	}
	err := h.Store.Delete(ctx, bucket, key)
	if after != nil {
		after()
	}
	return err
}

// deleteEnv has an older version of k in the backend and an acknowledged
// write-back PUT of k that is not destaged (the backend fails uploads).
func deleteEnv(t *testing.T) (e *env, dh *deleteHook, cfg tier.Config, tr *tier.Tier, v1 []byte) {
	e = newEnv(t, "fs")
	ctx := context.Background()
	remotePut(t, e.raw, "k", []byte("v0-old"))
	e.be.set(func(c *ctl) { c.failPuts = true })
	dh = &deleteHook{Store: e.local}
	cfg = tier.Config{SpoolDir: e.dir + "/spool", JournalDir: e.dir + "/journal", RetryBackoff: 10 * time.Millisecond}
	tr, err := tier.New(ctx, cfg, dh)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	if err := tr.AddBucket("wback", tier.Bucket{Mode: tier.ModeWriteback, Backend: e.be}); err != nil {
		t.Fatal(err)
	}
	v1 = []byte("v1-acknowledged")
	if _, err := tr.Put(ctx, "wback", "k", bytesReader(v1), object.PutOptions{Size: int64(len(v1))}); err != nil {
		t.Fatal(err)
	}
	return e, dh, cfg, tr, v1
}

// restartDestaged reopens the tier over the same store and journal with a
// working backend and waits for the backlog to drain.
func restartDestaged(t *testing.T, e *env, cfg tier.Config) *tier.Tier {
	ctx := context.Background()
	e.be.set(func(c *ctl) { c.failPuts = false })
	tr, err := tier.New(ctx, cfg, e.local)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	if err := tr.AddBucket("wback", tier.Bucket{Mode: tier.ModeWriteback, Backend: e.be}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := tr.WaitDestaged(wctx); err != nil {
		t.Fatal(err)
	}
	return tr
}

// A node that crashes during a write-back DELETE (here: right after the
// store's delete) must come back with the key either deleted or at the
// acknowledged version, never at the backend's older one.
func TestWriteBackDeleteCrashKeepsAckedWriteOrDelete(t *testing.T) {
	e, dh, cfg, tr, v1 := deleteEnv(t)
	ctx := context.Background()
	dh.after = func() { tr.Close() } // the "crash"
	err := tr.Delete(ctx, "wback", "k")
	t.Logf("DELETE during the crash: %v", err)
	tr2 := restartDestaged(t, e, cfg)
	r, err := tr2.Get(ctx, "wback", "k", nil)
	if err != nil {
		if !errors.Is(err, object.ErrNotFound) {
			t.Fatal(err)
		}
		if _, err := e.raw.Stat(ctx, "k"); err == nil {
			t.Fatalf("deleted, but the backend still has the key; backend ops %v", e.be.ops())
		}
		return
	}
	got, _ := io.ReadAll(r)
	r.Close()
	if !bytes.Equal(got, v1) {
		t.Fatalf("GET after restart = %q: neither the acknowledged v1 nor deleted; backend ops %v", got, e.be.ops())
	}
}

// A crash after the delete is journaled but before the local copy is
// removed: the restart removes the copy, and the key stays deleted.
func TestJournaledDeleteRemovesLeftoverCopyAtStart(t *testing.T) {
	e, dh, cfg, tr, _ := deleteEnv(t)
	ctx := context.Background()
	crash := errors.New("crash before the local delete")
	dh.before = func() error { tr.Close(); return crash }
	if err := tr.Delete(ctx, "wback", "k"); !errors.Is(err, crash) {
		t.Fatalf("DELETE: %v, want the local delete's error (journaled first)", err)
	}
	if _, err := e.local.Stat(ctx, "wback", "k"); err != nil {
		t.Fatalf("the copy should still be there before the restart: %v", err)
	}
	// Restart, before the bucket is known (nothing can be destaged yet).
	tr2, err := tier.New(ctx, cfg, e.local)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.local.Stat(ctx, "wback", "k"); !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("local copy of a journaled delete after restart: %v", err)
	}
	tr2.Close()
	tr3 := restartDestaged(t, e, cfg)
	if _, err := tr3.Get(ctx, "wback", "k", nil); !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("GET of a deleted key after restart: %v; backend ops %v", err, e.be.ops())
	}
	if _, err := e.raw.Stat(ctx, "k"); err == nil {
		t.Fatalf("the delete was not destaged; backend ops %v", e.be.ops())
	}
}

// The local delete fails after the delete was journaled: the key is
// deleted all the same (hidden while the delete is pending), and the copy
// is removed when the delete is destaged.
func TestDeleteDestageRemovesLeftoverCopy(t *testing.T) {
	e, dh, _, tr, _ := deleteEnv(t)
	ctx := context.Background()
	dh.before = func() error { return errInjected }
	if err := tr.Delete(ctx, "wback", "k"); !errors.Is(err, errInjected) {
		t.Fatalf("DELETE: %v", err)
	}
	if _, err := tr.Get(ctx, "wback", "k", nil); !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("GET while the delete is pending: %v", err)
	}
	e.be.set(func(c *ctl) { c.failPuts = false })
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := tr.WaitDestaged(wctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.local.Stat(ctx, "wback", "k"); !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("local copy after the delete was destaged: %v", err)
	}
	if _, err := tr.Get(ctx, "wback", "k", nil); !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("GET after the delete was destaged: %v; backend ops %v", err, e.be.ops())
	}
}

// A replica holder that dies while it applies the owner's delete (here:
// before its store's delete) has journaled the delete: its restart removes
// the copy, and it holds no replica of the key any more.
func TestReplicaDeleteJournaledBeforeTheCopyGoes(t *testing.T) {
	e := newEnv(t, "fs")
	ctx := context.Background()
	dh := &deleteHook{Store: e.local}
	cfg := tier.Config{SpoolDir: e.dir + "/spool", JournalDir: e.dir + "/journal"}
	tr, err := tier.New(ctx, cfg, dh)
	if err != nil {
		t.Fatal(err)
	}
	body := []byte("replica")
	if _, err := tr.PutReplica(ctx, "owner", 1, "wback", "k", bytesReader(body), tier.ReplicaOptions{PutOptions: object.PutOptions{Size: int64(len(body))}, ModTime: time.Now()}); err != nil {
		t.Fatal(err)
	}
	crash := errors.New("crash before the local delete")
	dh.before = func() error { tr.Close(); return crash }
	if err := tr.DeleteReplica(ctx, "owner", 2, "wback", "k"); !errors.Is(err, crash) {
		t.Fatalf("DeleteReplica: %v, want the local delete's error (journaled first)", err)
	}
	tr2, err := tier.New(ctx, cfg, e.local)
	if err != nil {
		t.Fatal(err)
	}
	defer tr2.Close()
	if _, err := e.local.Stat(ctx, "wback", "k"); !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("the replica of a journaled delete after restart: %v", err)
	}
	if bl := tr2.Backlog(); bl.ReplicaBytes != 0 {
		t.Fatalf("backlog after restart: %+v, want no replica bytes", bl)
	}
}

// A dirty local copy newer than the key's pending journaled delete (a
// write committed to the store but not journaled before a crash) is
// destaged after the delete at the next start: before, the delete was
// destaged and the copy stayed dirty for ever, served but never uploaded.
func TestDirtyCopyNewerThanPendingDeleteIsDestaged(t *testing.T) {
	e, _, cfg, tr, _ := deleteEnv(t)
	ctx := context.Background()
	if err := tr.Delete(ctx, "wback", "k"); err != nil {
		t.Fatal(err)
	}
	tr.Close()
	v2 := []byte("v2-committed-not-journaled")
	if _, err := e.local.Put(ctx, "wback", "k", bytesReader(v2), store.PutOptions{PutOptions: object.PutOptions{Size: int64(len(v2))}, Dirty: true}); err != nil {
		t.Fatal(err)
	}
	tr2 := restartDestaged(t, e, cfg)
	r, _, err := e.raw.Get(ctx, "k", nil)
	if err != nil {
		t.Fatalf("backend after restart: %v; backend ops %v", err, e.be.ops())
	}
	got, _ := io.ReadAll(r)
	r.Close()
	if !bytes.Equal(got, v2) {
		t.Fatalf("backend has %q, want the local copy %q", got, v2)
	}
	if i, err := e.local.Stat(ctx, "wback", "k"); err != nil || i.Dirty {
		t.Fatalf("local copy after destage: %+v %v, want clean", i, err)
	}
	if bl := tr2.Backlog(); bl.Objects != 0 {
		t.Fatalf("backlog %+v", bl)
	}
}
