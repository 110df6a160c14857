package tier_test

import (
	"context"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/backend"
	"github.com/slipstream-io/slipstream/internal/tier"
)

// lostAck uploads, then reports failure (a timeout after the backend
// committed, or a crash before Done/tell).
type lostAck struct {
	*ctl
	lose atomic.Bool
}

func (l *lostAck) Put(ctx context.Context, key string, r io.Reader, size int64, pa backend.PutAttrs) (backend.Attrs, error) {
	a, err := l.ctl.Put(ctx, key, r, size, pa)
	if err == nil && l.lose.Load() {
		return backend.Attrs{}, errInjected
	}
	return a, err
}

// An owner that uploaded a write but lost the answer (or crashed before
// recording it) finds at restart that the backend already holds the write:
// it must still tell the replica holders, whose copies become clean.
func TestSupersededDestageTellsHolders(t *testing.T) {
	owner, holder := newEnv(t, "fs"), newEnv(t, "fs")
	la := &lostAck{ctl: owner.be}
	la.lose.Store(true)
	p := &peers{tiers: map[string]*tier.Tier{}, order: []string{"A", "B"}}
	cfgA := tier.Config{NodeID: "A", Replicator: p, RetryBackoff: time.Hour, SpoolDir: owner.dir + "/spool", JournalDir: owner.dir + "/journal"}
	ta, err := tier.New(context.Background(), cfgA, owner.local)
	if err != nil {
		t.Fatal(err)
	}
	ta.AddBucket("wback", tier.Bucket{Mode: tier.ModeWriteback, Copies: 2, Backend: la})
	tb := holder.newTier(t, tier.Config{NodeID: "B", Replicator: p}, map[string]tier.Bucket{"wback": {Mode: tier.ModeWriteback, Copies: 2}})
	p.set("A", ta)
	p.set("B", tb)
	ctx := context.Background()
	if _, err := ta.Put(ctx, "wback", "k", bytesReader([]byte("hello")), putOpts(5)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "first (uploaded, reported failed) attempt", func() bool { return ta.Backlog().Failures >= 1 })
	ta.Close()
	// A restarts; the backend already has the write: the superseded path.
	la.lose.Store(false)
	ta2, err := tier.New(ctx, cfgA, owner.local)
	if err != nil {
		t.Fatal(err)
	}
	defer ta2.Close()
	p.set("A", ta2)
	ta2.AddBucket("wback", tier.Bucket{Mode: tier.ModeWriteback, Copies: 2, Backend: la})
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := ta2.WaitDestaged(wctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	i, _ := holder.local.Stat(ctx, "wback", "k")
	if bl := tb.Backlog(); bl.ReplicaObjects != 0 || i.Dirty {
		t.Fatalf("holder still holds a dirty journaled replica of a destaged write: backlog %+v dirty=%v (owner notices pending: %d)", bl, i.Dirty, ta2.Backlog().Notices)
	}
}
