package tier

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/backend"
	"github.com/slipstream-io/slipstream/internal/backend/fs"
	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/store"
)

// destageTo adds the writeback bucket "wback" over be to tr and waits
// until its backlog has been destaged there.
func destageTo(t *testing.T, tr *Tier, be backend.Backend) {
	t.Helper()
	if err := tr.AddBucket("wback", Bucket{Mode: ModeWriteback, Backend: be}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tr.WaitDestaged(ctx); err != nil {
		t.Fatal(err)
	}
}

// openStore opens a store over dir/mp1, closed when the test ends.
func openStore(t *testing.T, dir string) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), store.Config{Mountpaths: []string{dir + "/mp1"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// wbTier is a Tier with one writeback bucket "wback" over an fs backend.
func wbTier(t *testing.T) (*Tier, *store.Store) {
	t.Helper()
	dir := t.TempDir()
	st := openStore(t, dir)
	be, err := fs.New(backend.Spec{Kind: "fs", Path: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := New(context.Background(), Config{JournalDir: dir + "/journal", SpoolDir: dir + "/spool", RetryBackoff: 10 * time.Millisecond}, st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	if err := tr.AddBucket("wback", Bucket{Mode: ModeWriteback, Backend: be}); err != nil {
		t.Fatal(err)
	}
	return tr, st
}

// TestBrokenJournalIsRepaired: a journal write that fails and cannot be
// cut off (ENOSPC, then a failing truncate) leaves the journal refusing
// appends until it is rewritten. With an empty backlog (or a backend that
// is down) no destage succeeds to trigger that rewrite; the destager's
// periodic loop repairs it, so write-back PUTs work again once the disk
// is fine.
func TestBrokenJournalIsRepaired(t *testing.T) {
	tr, _ := wbTier(t)
	ctx := context.Background()
	put := func(key string) error {
		body := []byte("body of " + key)
		_, err := tr.Put(ctx, "wback", key, bytes.NewReader(body), object.PutOptions{Size: int64(len(body))})
		return err
	}
	if err := put("a"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := tr.WaitDestaged(wctx); err != nil {
		t.Fatal(err)
	}
	// The fault hits b's record only: the destager may still be
	// appending the record of a's destage.
	j := tr.d.j
	j.mu.Lock()
	sf := &shortFile{File: j.f.(*os.File), short: true, failTruncate: true, match: []byte("broken-b")}
	j.f = sf
	j.mu.Unlock()
	if err := put("broken-b"); err == nil {
		t.Fatal("the failed journal write was not reported")
	}
	j.mu.Lock()
	sf.failTruncate = false // the file system is fine again
	j.mu.Unlock()
	var err error
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if err = put("c"); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("write-back PUTs still fail 3s after one journal write failed (nothing repairs the journal): %v", err)
}

// TestSeqNotReusedAfterCrash: sequence numbers handed out to writes that
// never reached the journal before the node died (their replicas may hold
// them) are not handed out again after the restart.
func TestSeqNotReusedAfterCrash(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	st := openStore(t, dir)
	open := func() *Tier {
		tr, err := New(ctx, Config{JournalDir: dir + "/journal", SpoolDir: dir + "/spool"}, st)
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	tr := open()
	var handed uint64
	for range 3 {
		handed = tr.d.seq() // replicated, then the node died before journaling
	}
	tr.Close() // journals nothing more
	tr = open()
	defer tr.Close()
	if s := tr.d.seq(); s <= handed {
		t.Errorf("after a restart sequence number %d is handed out again (the last one before was %d)", s, handed)
	}
}

// syncBuffer is a bytes.Buffer a logger may write from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestJournalDamageKeepsWritesBehindIt: a record damaged in the middle of
// the journal does not take the records behind it along. A write-back
// delete journaled after it (its local copy gone: only the journal knows
// of it) still reaches the backend, a Done whose Put was the damaged record
// is harmless, sequence numbers resume past those of the records behind the
// damage, and the damage is logged and in the backlog.
func TestJournalDamageKeepsWritesBehindIt(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	st := openStore(t, dir)
	be, err := fs.New(backend.Spec{Kind: "fs", Path: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := be.Put(ctx, "k", bytes.NewReader([]byte("old")), 3, backend.PutAttrs{}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	const seq = 5 << 20 // past where the records before the damage resume (1 + seqGap)
	data := Record{Kind: KindSeqMark, Seq: 1, Time: now}.Encode(nil)
	damaged := len(data)
	data = Record{Kind: KindPut, Seq: 2, Time: now, Bucket: "wback", Key: "lost", Size: 5, ETag: "e"}.Encode(data)
	data[damaged+12] ^= 0x40
	end := len(data)
	data = Record{Kind: KindDone, Seq: 2, Bucket: "wback", Key: "lost"}.Encode(data)
	data = Record{Kind: KindReplicaDone, Seq: 9, Bucket: "wback", Key: "x", Owner: "n9"}.Encode(data)
	data = Record{Kind: KindDelete, Seq: seq, Time: now, Bucket: "wback", Key: "k"}.Encode(data)
	if err := os.MkdirAll(dir+"/journal", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/journal/"+journalName, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	tr, err := New(ctx, Config{JournalDir: dir + "/journal", SpoolDir: dir + "/spool", RetryBackoff: 10 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(&logs, nil))}, st)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	bl := tr.Backlog()
	if bl.Objects != 1 || bl.JournalCutRegions != 1 || bl.JournalCutBytes != int64(end-damaged) || bl.JournalCutFile == "" {
		t.Errorf("backlog %+v, want the delete and %d damaged bytes in 1 region", bl, end-damaged)
	}
	if kept := readCut(t, bl.JournalCutFile); len(kept) != 1 || kept[0].off != damaged || !bytes.Equal(kept[0].b, data[damaged:end]) {
		t.Errorf("cut file holds %+v, want the damaged record", kept)
	}
	if l := logs.String(); !strings.Contains(l, "damaged journal records skipped") || !strings.Contains(l, "regions=1") {
		t.Errorf("log %q does not report the damage", l)
	}
	if s := tr.d.seq(); s <= seq {
		t.Errorf("sequence number %d handed out, not past %d journaled behind the damage", s, uint64(seq))
	}
	destageTo(t, tr, be)
	if _, err := be.Stat(ctx, "k"); !errors.Is(err, object.ErrNotFound) {
		t.Errorf("the delete journaled behind the damaged record was not destaged: %v", err)
	}
}

// TestDamagedPutRecordIsRecovered: the damaged record is the put of a
// write-back object itself. The object's copy is still in the store,
// marked dirty, so the reconcile pass at open finds it missing from the
// journal and destages it: a damaged put record loses nothing.
func TestDamagedPutRecordIsRecovered(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	st := openStore(t, dir)
	body := []byte("acknowledged body")
	mod := time.Now().Add(-time.Minute)
	if _, err := st.Put(ctx, "wback", "lost", bytes.NewReader(body), store.PutOptions{
		PutOptions: object.PutOptions{Size: int64(len(body))}, ModTime: mod, Dirty: true}); err != nil {
		t.Fatal(err)
	}
	be, err := fs.New(backend.Spec{Kind: "fs", Path: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	data := Record{Kind: KindSeqMark, Seq: 1, Time: mod}.Encode(nil)
	damaged := len(data)
	data = Record{Kind: KindPut, Seq: 2, Time: mod, Bucket: "wback", Key: "lost", Size: int64(len(body)), ETag: "e"}.Encode(data)
	data[damaged+12] ^= 0x40
	data = Record{Kind: KindSeqMark, Seq: 3, Time: mod}.Encode(data)
	if err := os.MkdirAll(dir+"/journal", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/journal/"+journalName, data, 0o644); err != nil {
		t.Fatal(err)
	}
	tr, err := New(ctx, Config{JournalDir: dir + "/journal", SpoolDir: dir + "/spool", RetryBackoff: 10 * time.Millisecond}, st)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if bl := tr.Backlog(); bl.Objects != 1 || bl.JournalCutRegions != 1 {
		t.Errorf("backlog %+v, want the recovered put and 1 damaged region", bl)
	}
	destageTo(t, tr, be)
	rc, _, err := be.Get(ctx, "lost", nil)
	if err != nil {
		t.Fatalf("the object whose put record was damaged never reached the backend: %v", err)
	}
	defer rc.Close()
	if got, _ := io.ReadAll(rc); !bytes.Equal(got, body) {
		t.Errorf("backend holds %q, want %q", got, body)
	}
	if info, err := st.Stat(ctx, "wback", "lost"); err != nil || info.Dirty {
		t.Errorf("local copy after destage: %+v, %v; want it clean", info, err)
	}
}

// TestFailedJournalAppendStillDestages: a write-back PUT whose journal
// record cannot be written (ENOSPC) answers the error, but its dirty copy
// is committed and served, so it is destaged all the same, and the
// journal is rewritten to hold the state it missed.
func TestFailedJournalAppendStillDestages(t *testing.T) {
	tr, st := wbTier(t)
	ctx := context.Background()
	b, err := tr.bucket("wback")
	if err != nil {
		t.Fatal(err)
	}
	j := tr.d.j
	j.mu.Lock()
	j.f = &shortFile{File: j.f.(*os.File), short: true}
	j.mu.Unlock()
	body := []byte("served although its record failed")
	if _, err := tr.Put(ctx, "wback", "k", bytes.NewReader(body), object.PutOptions{Size: int64(len(body))}); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("PUT with a failing journal: %v", err)
	}
	if info, err := st.Stat(ctx, "wback", "k"); err != nil || !info.Dirty {
		t.Fatalf("local copy %+v, %v: want the dirty copy", info, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := tr.WaitDestaged(wctx); err != nil {
		t.Fatal(err)
	}
	rc, _, err := b.Backend.Get(ctx, "k", nil)
	if err != nil {
		t.Fatalf("the copy readers saw never reached the backend: %v", err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("backend has %q, %v", got, err)
	}
	for deadline := time.Now().Add(5 * time.Second); j.needsRewrite(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the journal was not rewritten after it missed a record")
		}
	}
}
