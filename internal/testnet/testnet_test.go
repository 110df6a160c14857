package testnet

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// The address refuses connections, and listeners asking for any port are
// never handed it while it is held.
func TestRefusingAddr(t *testing.T) {
	addr := RefusingAddr(t, "127.0.0.1")
	_, err := net.DialTimeout("tcp", addr, time.Second)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial %s: %v, want connection refused", addr, err)
	}
	if l, err := net.Listen("tcp", addr); err == nil {
		l.Close()
		t.Fatalf("a listener took %s", addr)
	}
	for range 2000 { // bounded
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		got := l.Addr().String()
		l.Close()
		if got == addr {
			t.Fatalf("a listener on port 0 was handed %s", addr)
		}
	}
}
