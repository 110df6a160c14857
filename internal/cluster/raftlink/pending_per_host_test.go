package raftlink_test

import (
	"net"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster/raftlink"
)

// TestOneHostCannotTakeEveryHandshakeSlot: anyone who reaches the raft
// port, without the secret, can open connections and send nothing. The
// bound on handshakes in progress must not let one such host take every
// slot: peers on other hosts would then be turned away (closed at once)
// for as long as it keeps reconnecting, and raft could open no new
// connection (after a leader change, a broken pooled connection).
func TestOneHostCannotTakeEveryHandshakeSlot(t *testing.T) {
	const slots = 16
	srv := listen(t, "right", raftlink.Options{MaxPending: slots, HandshakeTimeout: 10 * time.Second})
	acc := acceptAll(srv)
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	for range slots {
		c, err := d.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Skipf("cannot dial from 127.0.0.2: %v", err)
		}
		defer c.Close()
	}
	time.Sleep(200 * time.Millisecond) // let the listener take them
	cli := listen(t, "right", raftlink.Options{})
	c, err := cli.Dial(addr(srv), 2*time.Second)
	if err != nil {
		t.Fatalf("a peer holding the secret was turned away while one other host holds %d silent connections: %v", slots, err)
	}
	c.Close()
	if s := next(acc, 2*time.Second); s == nil {
		t.Fatal("no connection accepted")
	} else {
		s.Close()
	}
}
