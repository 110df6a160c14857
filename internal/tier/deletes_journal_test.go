package tier

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/backend"
	"github.com/slipstream-io/slipstream/internal/backend/fs"
	"github.com/slipstream-io/slipstream/internal/object"
)

// refusingDeletes is a backend whose deletes fail while down is set.
type refusingDeletes struct {
	backend.Backend
	down atomic.Bool
}

func (b *refusingDeletes) Delete(ctx context.Context, key string) error {
	if b.down.Load() {
		return errors.New("backend unreachable")
	}
	return b.Backend.Delete(ctx, key)
}

// TestDamagedDeleteRecordIsRecovered: an acknowledged write-back delete
// whose record in the main journal is damaged (bit rot) before it is
// destaged is recovered from the deletes journal at the next start and
// reaches the backend; the object does not come back on a cold GET.
func TestDamagedDeleteRecordIsRecovered(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	st := openStore(t, dir)
	fsb := fsBackend(t)
	be := &refusingDeletes{Backend: fsb}
	if _, err := be.Put(ctx, "gone", bytes.NewReader([]byte("old")), 3, backend.PutAttrs{}); err != nil {
		t.Fatal(err)
	}
	be.down.Store(true)
	cfg := Config{JournalDir: dir + "/journal", SpoolDir: dir + "/spool", RetryBackoff: 10 * time.Millisecond}
	tr, err := New(ctx, cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.AddBucket("wback", Bucket{Mode: ModeWriteback, Backend: be}); err != nil {
		t.Fatal(err)
	}
	body := []byte("kept")
	if _, err := tr.Put(ctx, "wback", "kept", bytes.NewReader(body), object.PutOptions{Size: int64(len(body))}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Delete(ctx, "wback", "gone"); err != nil {
		t.Fatal(err)
	}
	tr.Close()

	// Flip a bit in the key of the delete's record in the main journal.
	path := filepath.Join(cfg.JournalDir, journalName)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.LastIndex(data, []byte("gone"))
	if i < 0 {
		t.Fatal("the main journal holds no record of the delete")
	}
	data[i] ^= 0x01
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}

	be.down.Store(false)
	tr, err = New(ctx, cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if bl := tr.Backlog(); bl.JournalCutRegions != 1 {
		t.Fatalf("backlog %+v: the damaged record was not cut out", bl)
	}
	destageTo(t, tr, be)
	if _, err := be.Stat(ctx, "gone"); !errors.Is(err, object.ErrNotFound) {
		t.Errorf("the delete whose record was damaged never reached the backend: %v", err)
	}
	if _, err := be.Stat(ctx, "kept"); err != nil {
		t.Errorf("the write journaled beside the delete: %v", err)
	}
}

// TestDeletesJournalNeverUndoesANewerWrite: a delete that the deletes
// journal still holds but the main journal has finished, or followed with
// a newer write of its key, is not taken from the deletes journal.
func TestDeletesJournalNeverUndoesANewerWrite(t *testing.T) {
	now := time.Now()
	del := Record{Kind: KindDelete, Seq: 7, Time: now, Bucket: "wback", Key: "k"}
	tests := []struct {
		name     string
		main     []Record
		wantKind Kind // of k's pending operation; 0: none
	}{
		{"main lost it", []Record{{Kind: KindSeqMark, Seq: 1, Time: now}}, KindDelete},
		{"main finished it", []Record{{Kind: KindDone, Seq: 7, Bucket: "wback", Key: "k"}}, 0},
		{"a newer write pending", []Record{{Kind: KindPut, Seq: 9, Time: now, Bucket: "wback", Key: "k", Size: 1, ETag: "e"}}, KindPut},
		{"a newer write finished", []Record{{Kind: KindDone, Seq: 9, Bucket: "wback", Key: "k"}}, 0},
		{"another node's write of the key", []Record{{Kind: KindReplicaPut, Seq: 9, Time: now, Bucket: "wback", Key: "k", Owner: "n2"}}, KindDelete},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &destager{keys: make(map[string]*keyState), replicas: make(map[string]map[string]*op), undelivered: make(map[string]notice), nextSeq: 1}
			n := d.replay(tt.main, []Record{del})
			var got Kind
			if ks := d.keys[okey("wback", "k")]; ks != nil && ks.pending != nil {
				got = ks.pending.kind
			}
			if got != tt.wantKind {
				t.Errorf("pending %v, want %v", got, tt.wantKind)
			}
			if want := tt.wantKind == KindDelete; (n == 1) != want {
				t.Errorf("recovered %d deletes", n)
			}
			if d.nextSeq <= del.Seq {
				t.Errorf("next sequence number %d not past the recovered delete's", d.nextSeq)
			}
		})
	}
}

// TestDeletesJournalIsCompacted: finished deletes leave the deletes
// journal at compaction; pending ones stay.
func TestDeletesJournalIsCompacted(t *testing.T) {
	tr, _ := wbTier(t)
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c"} {
		if err := tr.Delete(ctx, "wback", k); err != nil {
			t.Fatal(err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := tr.WaitDestaged(wctx); err != nil {
		t.Fatal(err)
	}
	before := tr.d.dj.bytes()
	if err := tr.d.compact(); err != nil {
		t.Fatal(err)
	}
	if before == 0 || tr.d.dj.bytes() != 0 {
		t.Errorf("deletes journal %d bytes before compaction, %d after; want some, then none", before, tr.d.dj.bytes())
	}
}

// TestBrokenDeletesJournalIsRepaired: a failed fsync of the deletes
// journal fails that delete and leaves the journal refusing appends; the
// destager's periodic loop rewrites it, so deletes work again, and the
// failed delete changed nothing.
func TestBrokenDeletesJournalIsRepaired(t *testing.T) {
	tr, st := wbTier(t)
	ctx := context.Background()
	body := []byte("still here")
	if _, err := tr.Put(ctx, "wback", "a", bytes.NewReader(body), object.PutOptions{Size: int64(len(body))}); err != nil {
		t.Fatal(err)
	}
	// Destaged first: no destage after the failure repairs the journal,
	// only the periodic loop.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := tr.WaitDestaged(wctx); err != nil {
		t.Fatal(err)
	}
	j := tr.d.dj
	j.mu.Lock()
	j.f = &shortFile{File: j.f.(*os.File), failSync: true}
	j.mu.Unlock()
	if err := tr.Delete(ctx, "wback", "a"); err == nil {
		t.Fatal("the failed fsync of the deletes journal was not reported")
	}
	if _, err := st.Stat(ctx, "wback", "a"); err != nil {
		t.Fatalf("a delete that failed removed the copy: %v", err)
	}
	var err error
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if err = tr.Delete(ctx, "wback", "a"); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("write-back deletes still fail 3s after the deletes journal failed an fsync: %v", err)
}

// fsBackend is a filesystem backend in a temporary directory.
func fsBackend(t *testing.T) backend.Backend {
	t.Helper()
	b, err := fs.New(backend.Spec{Kind: "fs", Path: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// gatedDeletes is a backend whose deletes wait for gate and count.
type gatedDeletes struct {
	backend.Backend
	gate    chan struct{}
	deletes atomic.Int64
}

func (b *gatedDeletes) Delete(ctx context.Context, key string) error {
	<-b.gate
	b.deletes.Add(1)
	return b.Backend.Delete(ctx, key)
}

// TestDeleteDoneDuringCompaction: a delete that finishes while a journal
// compaction is between its two rewrites (the deletes journal rewritten
// with the delete still running, the main journal after it finished) is
// not taken back from the deletes journal at the next start: nothing is
// pending, and the backend gets no second delete.
func TestDeleteDoneDuringCompaction(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	st := openStore(t, dir)
	fsb := fsBackend(t)
	be := &gatedDeletes{Backend: fsb, gate: make(chan struct{})}
	cfg := Config{JournalDir: dir + "/journal", SpoolDir: dir + "/spool", CompactBytes: 1 << 40}
	tr, err := New(ctx, cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.AddBucket("wback", Bucket{Mode: ModeWriteback, Backend: be}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Delete(ctx, "wback", "gone"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return tr.Backlog().Running == 1 }) // the delete waits at the gate
	tr.d.betweenRewrites = func() {
		jb := tr.Backlog().JournalBytes
		close(be.gate)
		// Done, and its completion appended to the main journal.
		waitUntil(t, func() bool { b := tr.Backlog(); return b.Objects == 0 && b.Destaged == 1 && b.JournalBytes > jb })
	}
	if err := tr.d.compact(); err != nil {
		t.Fatal(err)
	}
	tr.Close()

	be.gate = make(chan struct{})
	close(be.gate)
	tr2, err := New(ctx, cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	defer tr2.Close()
	if err := tr2.AddBucket("wback", Bucket{Mode: ModeWriteback, Backend: be}); err != nil {
		t.Fatal(err)
	}
	if b := tr2.Backlog(); b.Objects != 0 {
		t.Errorf("after the restart %d operations are pending: the finished delete came back from the deletes journal", b.Objects)
	}
	if err := tr2.WaitDestaged(ctx); err != nil {
		t.Fatal(err)
	}
	if n := be.deletes.Load(); n != 1 {
		t.Errorf("the backend got %d deletes, want 1", n)
	}
}

// waitUntil polls cond for up to 10 s.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
	}
}
