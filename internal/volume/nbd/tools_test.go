package nbd_test

import (
	"context"
	"net"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/slipstream-io/slipstream/internal/volume/nbd"
)

// needTool fails the test (or skips it under -short) when a client tool
// the test relies on is missing.
func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if testing.Short() {
			t.Skipf("%s not installed", name)
		}
		t.Fatalf("%s is required (install it with scripts/setup.sh): %v", name, err)
	}
	return p
}

// serveUnix starts a server for exports on a Unix socket in a temp dir and
// returns the socket path.
func serveUnix(t *testing.T, exports nbd.Exports) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "nbd.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, nbd.Config{Exports: exports}, ln)
	return sock
}

// serveTCP starts a server on a loopback TCP port and returns its address.
func serveTCP(t *testing.T, exports nbd.Exports) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, nbd.Config{Exports: exports}, ln)
	return ln.Addr().String()
}

func serve(t *testing.T, cfg nbd.Config, ln net.Listener) {
	srv, err := nbd.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		srv.Close()
		<-done
	})
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

func execOut(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}
