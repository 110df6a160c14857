package netx

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// A local address must be one of this host's (an interface's own address,
// any 127/8 address or the unspecified address): one that is on no
// interface can never be a source address and is rejected at
// construction with ErrBadAddr, rather than becoming a pair down forever.
func TestNonLocalAddrRejected(t *testing.T) {
	tr, err := NewTransport(Config{LocalAddrs: []string{"127.0.0.1", "192.0.2.55"}})
	if err == nil {
		defer tr.Close()
		t.Fatalf("NewTransport accepted local address 192.0.2.55, which is on no interface")
	}
	if !errors.Is(err, ErrBadAddr) {
		t.Fatalf("err = %v, want ErrBadAddr", err)
	}
}

// The local addresses a host always has are accepted: any 127/8 address
// (with a port, as a listen address, too) and the unspecified address.
func TestLocalAddrsOfThisHostAccepted(t *testing.T) {
	for _, a := range []string{"127.0.0.9", "127.0.0.1:8080", "0.0.0.0"} {
		tr, err := NewTransport(Config{LocalAddrs: []string{a}})
		if err != nil {
			t.Errorf("NewTransport(LocalAddrs: %q): %v", a, err)
			continue
		}
		tr.Close()
	}
}

// An IPv6 link-local interface address is given with its zone
// ("fe80::1%eth0"): it is accepted as a local address and requests are sent
// from it.
func TestLinkLocalLocalAddrWithZone(t *testing.T) {
	var ll, llIP string
	ifs, _ := net.Interfaces()
	for _, ifc := range ifs {
		as, _ := ifc.Addrs()
		for _, a := range as {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() == nil && n.IP.IsLinkLocalUnicast() {
				ll, llIP = n.IP.String()+"%"+ifc.Name, n.IP.String()
			}
		}
	}
	if ll == "" {
		t.Skip("no IPv6 link-local address")
	}
	l, err := net.Listen("tcp", net.JoinHostPort(ll, "0"))
	if err != nil {
		t.Skip(err)
	}
	from := make(chan string, 8)
	probed := make(chan struct{}, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil && r.URL.Path == "/" {
			from <- h
		}
		if r.URL.Path == "/healthz" {
			select {
			case probed <- struct{}{}:
			default:
			}
		}
	}))
	srv.Listener = l
	srv.Start()
	defer srv.Close()
	tr, err := NewTransport(Config{LocalAddrs: []string{ll}, ProbePath: "/healthz",
		ProbeInterval: 50 * time.Millisecond, FailAfter: 200 * time.Millisecond})
	if err != nil {
		t.Fatalf("NewTransport(LocalAddrs: %q): %v", ll, err)
	}
	defer tr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, _ := http.NewRequest(http.MethodGet, "/", nil)
	_, port, _ := net.SplitHostPort(l.Addr().String())
	remote := net.JoinHostPort(ll, port) // zoned, as a peer would list it
	resp, err := tr.Do(ctx, Peer{ID: "p", Addrs: []string{remote}}, req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if h := <-from; h != llIP && h != ll {
		t.Errorf("request came from %s, want %s", h, ll)
	}
	if ps := tr.Pairs(); len(ps) != 1 || ps[0].Local != ll {
		t.Errorf("pairs %+v, want one from %s", ps, ll)
	}
	select { // the health path of a zoned remote is probed too
	case <-probed:
	case <-ctx.Done():
		t.Errorf("no probe of %s/healthz", remote)
	}
}

// A link-local local address without a zone, or whose zone names no
// interface, cannot be bound and is rejected with ErrBadAddr.
func TestLinkLocalLocalAddrNeedsZone(t *testing.T) {
	for _, a := range []string{"fe80::1", "fe80::1%no-such-if0"} {
		tr, err := NewTransport(Config{LocalAddrs: []string{a}})
		if err == nil {
			tr.Close()
			t.Errorf("NewTransport accepted local address %q", a)
		} else if !errors.Is(err, ErrBadAddr) {
			t.Errorf("%q: err = %v, want ErrBadAddr", a, err)
		}
	}
}
