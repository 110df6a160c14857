package netx

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/testnet"
)

// TestDownPairNotForgottenWhileAvoided: a pair taken out is avoided by the
// picker, so no request starts on it; that must not count as "unused" for
// PairTTL. Dropping its state would re-create it up, and the next request
// picked onto it (here one that cannot be replayed) would fail on the dead
// address again, once every PairTTL for as long as the address is dead.
func TestDownPairNotForgottenWhileAvoided(t *testing.T) {
	deadAddr := testnet.RefusingAddr(t, "127.0.0.3")
	s := startServer(t, "127.0.0.2:0", 0)
	tr := newTestTransport(t, Config{
		LocalAddrs: []string{"127.0.0.5"}, FailAfter: 200 * time.Millisecond,
		ProbeInterval: 50 * time.Millisecond, PairTTL: 300 * time.Millisecond,
	})
	peer := Peer{ID: "n1", Addrs: []string{s.addr, deadAddr}}
	ctx := context.Background()
	deadDown := func() bool {
		for _, p := range tr.Pairs() {
			if p.Remote == deadAddr {
				return p.State == StateDown
			}
		}
		return false
	}
	for i := 0; i < 10 && !deadDown(); i++ { // GETs are retried on the live address
		if _, err := get(ctx, tr, peer, "/obj"); err != nil {
			t.Fatal(err)
		}
	}
	if !deadDown() {
		t.Fatalf("pair to the dead address not down: %+v", tr.Pairs())
	}
	failed := 0
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); {
		req, _ := http.NewRequest(http.MethodPost, "/obj", nil) // not replayable
		resp, err := tr.Do(ctx, peer, req)
		if err != nil {
			failed++
			t.Logf("POST failed: %v", err)
		} else {
			resp.Body.Close()
		}
		time.Sleep(20 * time.Millisecond)
	}
	if failed > 0 {
		t.Errorf("%d POSTs failed on a pair known down (its state was dropped as unused)", failed)
	}
	if !deadDown() {
		t.Errorf("pair to the dead address no longer known down: %+v", tr.Pairs())
	}
}

// TestUnusedPeerLeavesNothing: once a peer's pairs are dropped as unused,
// its address list and remote endpoints go too, so a peer whose addresses
// change over a long life leaves no state behind.
func TestUnusedPeerLeavesNothing(t *testing.T) {
	s := startServer(t, "127.0.0.2:0", 0)
	tr := newTestTransport(t, Config{LocalAddrs: []string{"127.0.0.5"}, PairTTL: time.Hour})
	if _, err := get(context.Background(), tr, Peer{ID: "n1", Addrs: []string{s.addr}}, "/obj"); err != nil {
		t.Fatal(err)
	}
	tr.check(time.Now().Add(2 * time.Hour))
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.pairs) != 0 || len(tr.lists) != 0 || len(tr.remotes) != 0 {
		t.Fatalf("after every pair was dropped: %d pairs, %d address lists, %d remotes", len(tr.pairs), len(tr.lists), len(tr.remotes))
	}
}
