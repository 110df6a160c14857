package volume_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/slipstream-io/slipstream/internal/volume"
)

func newLocal(t testing.TB, mountpaths int) (*volume.Local, []string) {
	t.Helper()
	var mps []string
	for i := 0; i < mountpaths; i++ {
		mps = append(mps, filepath.Join(t.TempDir(), "mp"))
	}
	l, err := volume.NewLocal(volume.LocalConfig{Mountpaths: mps})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, mps
}

// allocated returns the bytes allocated to the chunk files under the mountpaths.
func allocated(t *testing.T, mps []string) int64 {
	t.Helper()
	var total int64
	for _, mp := range mps {
		filepath.Walk(mp, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.Mode().IsRegular() {
				total += fi.Sys().(*syscall.Stat_t).Blocks * 512
			}
			return nil
		})
	}
	return total
}

// TestReplicas runs one conformance suite on the local replica and on the
// HTTP client talking to a handler over a local replica.
func TestReplicas(t *testing.T) {
	for _, kind := range []string{"local", "stream", "http"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			l, mps := newLocal(t, 2)
			var r volume.Replica = l
			if kind != "local" {
				srv := httptest.NewServer(volume.NewHandler(l))
				t.Cleanup(srv.Close)
				conns := 2
				if kind == "http" {
					conns = -1 // plain HTTP requests
				}
				c, err := volume.NewClientConfig(volume.ClientConfig{BaseURL: srv.URL, StreamConns: conns})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				r = c
			}
			if err := r.Ping(ctx); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 8192)
			// Unwritten chunks read as zeros and take no space.
			buf[0] = 1
			if err := r.ReadAt(ctx, "v1", 3, buf, 4096); err != nil || !allZeroes(buf) {
				t.Fatalf("unwritten read: %v", err)
			}
			data := bytes.Repeat([]byte("slipstream"), 410)[:4096]
			if err := r.WriteAt(ctx, "v1", 0, 3, data, 1<<20, false); err != nil {
				t.Fatal(err)
			}
			if err := r.WriteAt(ctx, "v1", 0, 5, data, 0, true); err != nil {
				t.Fatal(err)
			}
			// A 4 KiB write in the middle of a chunk allocates about 4 KiB per chunk.
			if a := allocated(t, mps); a > 64<<10 {
				t.Errorf("two 4 KiB writes allocated %d bytes", a)
			}
			got := make([]byte, 4096+100)
			if err := r.ReadAt(ctx, "v1", 3, got, 1<<20); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got[:4096], data) || !allZeroes(got[4096:]) {
				t.Fatal("read back differs (or the tail past the write is not zero)")
			}
			if err := r.Sync(ctx, "v1", []int64{3, 5, 9}); err != nil {
				t.Fatal(err)
			}
			if err := r.Zero(ctx, "v1", 0, 3, 1<<20, 4096, true); err != nil {
				t.Fatal(err)
			}
			if err := r.ReadAt(ctx, "v1", 3, got, 1<<20); err != nil || !allZeroes(got) {
				t.Fatalf("punched range not zero: %v", err)
			}
			if err := r.Zero(ctx, "v1", 0, 5, 100, 10, false); err != nil {
				t.Fatal(err)
			}
			if err := r.ReadAt(ctx, "v1", 5, got[:200], 0); err != nil || !allZeroes(got[100:110]) || got[99] != data[99] || got[110] != data[110] {
				t.Fatalf("zero range wrong: %v", err)
			}
			for _, bad := range []string{"", "../x", "_ping", "a/b"} {
				if err := r.WriteAt(ctx, bad, 0, 0, data, 0, false); err == nil {
					t.Errorf("volume name %q accepted", bad)
				}
			}
			if err := r.ReadAt(ctx, "v1", -1, got, 0); err == nil {
				t.Error("negative chunk accepted")
			}
			if err := r.ReadAt(ctx, "v1", 0, got, 1<<40); !errors.Is(err, volume.ErrOutOfRange) {
				t.Errorf("huge offset: %v", err)
			}
			if err := r.Delete(ctx, "v1"); err != nil {
				t.Fatal(err)
			}
			if err := r.ReadAt(ctx, "v1", 5, got, 0); err != nil || !allZeroes(got) {
				t.Fatalf("deleted volume still has data: %v", err)
			}
			if a := allocated(t, mps); a != 0 {
				t.Errorf("deleted volume still holds %d bytes", a)
			}
		})
	}
}

func allZeroes(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// fullLocal is a replica whose only drive is a 1 MiB tmpfs (mounted for
// the test, unmounted after): writes beyond that fail with ENOSPC.
func fullLocal(t *testing.T) *volume.Local {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mounting a small tmpfs (the test runs as root): %v", err)
	}
	l, err := volume.NewLocal(volume.LocalConfig{Mountpaths: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.Close()
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return l
}

// TestFullDriveIsENOSPC: a mirror whose drive is full answers ENOSPC over
// both transports, and a volume write that no mirror can take fails with
// ENOSPC (what the NBD server passes to the client), not a bare EIO.
func TestFullDriveIsENOSPC(t *testing.T) {
	ctx := context.Background()
	big := make([]byte, 2<<20)
	isENOSPC := func(err error) bool {
		var e syscall.Errno
		return errors.As(err, &e) && e == syscall.ENOSPC
	}
	remote := fullLocal(t)
	srv := httptest.NewServer(volume.NewHandler(remote))
	defer srv.Close()
	for _, streams := range []int{0, -1} { // the chunk stream, plain HTTP
		c, err := volume.NewClientConfig(volume.ClientConfig{BaseURL: srv.URL, StreamConns: streams})
		if err != nil {
			t.Fatal(err)
		}
		err = c.WriteAt(ctx, "v@1", 0, 0, big, 0, false)
		c.Close()
		if !errors.Is(err, volume.ErrNoSpace) || !isENOSPC(err) {
			t.Errorf("write to a full remote drive (streams %d): %v, want ErrNoSpace (ENOSPC)", streams, err)
		}
	}
	c, err := volume.NewClientConfig(volume.ClientConfig{BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	v, err := volume.Open(ctx, volume.Config{
		Spec:  volume.Spec{Name: "v", Size: 8 << 20, Copies: 2, ID: "2"},
		Nodes: []string{"a", "b"}, Self: "a", StateDir: t.TempDir(),
		Replicas: map[string]volume.Replica{"a": fullLocal(t), "b": c},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	err = v.WriteAt(ctx, big, 0, false)
	if !errors.Is(err, volume.ErrNoMirror) || !isENOSPC(err) {
		t.Fatalf("volume write with every mirror full: %v, want ENOSPC", err)
	}
	if st := v.StaleChunks(); len(st) != 0 {
		t.Errorf("a write no mirror took marked mirrors stale: %v", st)
	}
}

// TestClientSendsHeader: the client's header (the cluster secret) goes
// with plain requests and with the chunk stream's upgrade, so a node can
// refuse chunk I/O from whoever lacks it.
func TestClientSendsHeader(t *testing.T) {
	ctx := context.Background()
	l, err := volume.NewLocal(volume.LocalConfig{Mountpaths: []string{t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	h := volume.NewHandler(l)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Secret") != "s3cret" {
			http.Error(w, "secret required", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	for _, streams := range []int{0, -1} { // the chunk stream, plain HTTP
		for _, hdr := range []http.Header{nil, {"X-Secret": {"s3cret"}}} {
			c, err := volume.NewClientConfig(volume.ClientConfig{BaseURL: srv.URL, StreamConns: streams, Header: hdr})
			if err != nil {
				t.Fatal(err)
			}
			err = c.WriteAt(ctx, "v@1", 0, 0, []byte("data"), 0, false)
			c.Close()
			if (hdr == nil) != (err != nil) {
				t.Errorf("write with header %v (streams %d): %v", hdr, streams, err)
			}
		}
	}
	if _, err := volume.NewClientConfig(volume.ClientConfig{BaseURL: srv.URL, Header: http.Header{"X-Secret": {"a\r\nb"}}}); err == nil {
		t.Error("a header value with a line break was accepted")
	}
}
