package netx

import (
	"context"
	"testing"
	"time"
)

// TestSpreadWhenAlternatingPeers: requests that go to two peers in turn
// (a gateway reading from two holders, a PUT sent to its replicas one
// after the other) still use every local interface towards each peer.
// The round-robin of ties must be per peer: one counter shared by all
// peers advances by two between two requests to the same peer, so with
// two pairs each peer would always get the same one.
func TestSpreadWhenAlternatingPeers(t *testing.T) {
	a := startServer(t, "127.0.0.2:0", 0)
	b := startServer(t, "127.0.0.3:0", 0)
	tr := newTestTransport(t, Config{LocalAddrs: []string{"127.0.0.5", "127.0.0.6"}, ProbeInterval: time.Minute})
	pa := Peer{ID: "a", Addrs: []string{a.addr}}
	pb := Peer{ID: "b", Addrs: []string{b.addr}}
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		for _, p := range []Peer{pa, pb} {
			if _, err := get(ctx, tr, p, "/obj"); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, s := range []*testServer{a, b} {
		src := s.sources()
		if src["127.0.0.5"] < 5 || src["127.0.0.6"] < 5 {
			t.Errorf("server %s saw sources %v: want both interfaces used", s.addr, src)
		}
	}
}
