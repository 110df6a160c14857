// Package testnet gives tests loopback addresses with a known behaviour.
package testnet

import (
	"net/netip"
	"syscall"
	"testing"
)

// RefusingAddr returns host:port on the loopback address ip (such as
// "127.0.0.1") that refuses connections until the test ends. A socket is
// bound to the port and never listens: the kernel answers connections to
// it with a reset, and no listener, in this process or another, can take
// the port meanwhile. A port that a closed listener left behind gives
// neither promise: the next listener may be handed it.
func RefusingAddr(t testing.TB, ip string) string {
	t.Helper()
	a, err := netip.ParseAddr(ip)
	if err != nil || !a.Is4() {
		t.Fatalf("testnet: %q is not an IPv4 address", ip)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("testnet: socket: %v", err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: a.As4()}); err != nil {
		t.Fatalf("testnet: bind %s: %v", ip, err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("testnet: getsockname: %v", err)
	}
	return netip.AddrPortFrom(a, uint16(sa.(*syscall.SockaddrInet4).Port)).String()
}
