package tier_test

import (
	"context"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/tier"
)

// TestLateDeleteNoticeKeepsOwnedWriteAcrossRestart: as
// TestLateDeleteNoticeKeepsOwnedWrite, but B restarts before its own
// write is destaged. The journaled replica delete of A (a late notice) is
// newer than B's own pending write; the start must not take B's copy for
// a copy the delete left behind, or the acknowledged write never reaches
// the backend.
func TestLateDeleteNoticeKeepsOwnedWriteAcrossRestart(t *testing.T) {
	e := newEnv(t, "fs")
	e.be.set(func(c *ctl) { c.failPuts = true })
	cfg := tier.Config{NodeID: "B", RetryBackoff: 20 * time.Millisecond, SpoolDir: e.dir + "/spool", JournalDir: e.dir + "/journal"}
	ctx := context.Background()
	tb, err := tier.New(ctx, cfg, e.local)
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.AddBucket("wback", tier.Bucket{Mode: tier.ModeWriteback, Backend: e.be}); err != nil {
		t.Fatal(err)
	}
	v2 := []byte("v2 written through B while A was down")
	if _, err := tb.Put(ctx, "wback", "k", bytesReader(v2), putOpts(len(v2))); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	// A is back and redelivers a delete notice B missed.
	if err := tb.DeleteReplica(ctx, "A", 2, "wback", "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.local.Stat(ctx, "wback", "k"); err != nil {
		t.Fatalf("B's own write is gone before the restart: %v", err)
	}
	tb.Close()
	tr := restartDestaged(t, e, cfg)
	if got, err := e.destaged(t, tr, "k"); err != nil || got != string(v2) {
		t.Fatalf("backend k = %q (%v), want B's acknowledged write %q; ops %v", got, err, v2, e.be.ops())
	}
}
