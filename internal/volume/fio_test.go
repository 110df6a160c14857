package volume_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/volume"
	"github.com/slipstream-io/slipstream/internal/volume/nbd"
)

func needTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		if testing.Short() {
			t.Skipf("%s not installed", name)
		}
		t.Fatalf("%s is required (install it with scripts/setup.sh): %v", name, err)
	}
}

// mirrorView is a read-only device that reads one node's copy of every
// chunk, so that fio can verify each mirror on its own.
type mirrorView struct {
	r    volume.Replica
	spec volume.Spec
}

func (m mirrorView) Size() int64 { return m.spec.Size }
func (m mirrorView) ReadAt(ctx context.Context, p []byte, off int64) error {
	for len(p) > 0 {
		c, co := off/m.spec.ChunkSize, off%m.spec.ChunkSize
		n := min(int64(len(p)), m.spec.ChunkSize-co)
		if err := m.r.ReadAt(ctx, m.spec.Name, c, p[:n], co); err != nil {
			return err
		}
		p, off = p[n:], off+n
	}
	return nil
}

var errReadOnly = errors.New("read-only view")

func (mirrorView) WriteAt(context.Context, []byte, int64, bool) error          { return errReadOnly }
func (mirrorView) Flush(context.Context) error                                 { return nil }
func (mirrorView) Trim(context.Context, int64, int64) error                    { return errReadOnly }
func (mirrorView) WriteZeroes(context.Context, int64, int64, bool, bool) error { return errReadOnly }

func serveNBD(t *testing.T, exports nbd.Exports) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "nbd.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := nbd.NewServer(nbd.Config{Exports: exports})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(context.Background(), ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return sock
}

// fio runs a fio job on export of the server at sock: two jobs of 4–16 KiB
// random writes over [base, base+32 MiB) with crc32c verify headers.
func fio(t *testing.T, sock, export string, base int64, extra ...string) string {
	t.Helper()
	args := []string{"--name=j", "--ioengine=nbd", "--uri=nbd+unix:///" + export + "?socket=" + sock,
		"--rw=randwrite", "--bsrange=4k-16k", "--iodepth=16", "--numjobs=2", "--size=16m",
		fmt.Sprintf("--offset=%d", base), "--offset_increment=16m",
		"--verify=crc32c", "--verify_state_save=0", "--verify_fatal=1", "--group_reporting"}
	out, err := exec.Command("fio", append(args, extra...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("fio on %s at %d %v: %v\n%s", export, base, extra, err, out)
	}
	if !strings.Contains(string(out), "connected to NBD server") {
		t.Fatalf("fio did not use the NBD server:\n%s", out)
	}
	return string(out)
}

// TestFioMirroredKillAndResync writes verified patterns with fio through a
// copies=2 volume on two in-process nodes, kills the remote mirror in the
// middle of the run (fio must see no error), checks the data with the
// mirror down, brings it back under more fio load, waits for the resync and
// verifies each mirror's copy on its own with fio.
func TestFioMirroredKillAndResync(t *testing.T) {
	needTool(t, "fio")
	a, b := startNode(t, "a"), startNode(t, "b")
	spec := volume.Spec{Name: "fiovol", Size: 64 << 20, ChunkSize: 1 << 20, Copies: 2}
	v := openVolume(t, spec, t.TempDir(), a, b)
	sock := serveNBD(t, nbd.Map{
		"vol":    v,
		"view-a": mirrorView{a.local, spec},
		"view-b": mirrorView{volume.NewClient(b.url(), nil), spec},
	})

	// Phase 1: rate-limited so that the kill lands mid-run (~1.5 s of I/O).
	killed := make(chan int64)
	go func() {
		// Kill b once it has taken a share of the writes.
		deadline := time.Now().Add(20 * time.Second)
		for b.puts.Load() < 1000 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		before := b.puts.Load()
		b.kill()
		killed <- before
	}()
	fio(t, sock, "vol", 0, "--do_verify=0", "--rate_iops=1500")
	if n := <-killed; n < 1000 {
		t.Fatalf("b received %d writes before it was killed; fio ended first", n)
	}
	if v.StaleChunks()["b"] == 0 || len(v.Down()) != 1 {
		t.Fatalf("kill was not noticed: stale %v down %v", v.StaleChunks(), v.Down())
	}
	fio(t, sock, "vol", 0, "--verify_only")

	// Phase 2: b returns while fio writes the other half; resync runs meanwhile.
	b.start()
	fio(t, sock, "vol", 32<<20, "--do_verify=1")
	waitInSync(t, v, 20*time.Second)
	compareMirrors(t, v, a, b)
	for _, view := range []string{"view-a", "view-b"} {
		fio(t, sock, view, 0, "--verify_only")
		fio(t, sock, view, 32<<20, "--verify_only")
	}
}

// TestClientsOnMirroredVolume runs nbdinfo, nbdcopy (4 connections) and
// qemu-img convert/compare/bench against a copies=2 volume on two nodes.
func TestClientsOnMirroredVolume(t *testing.T) {
	for _, tool := range []string{"nbdinfo", "nbdcopy", "qemu-img"} {
		needTool(t, tool)
	}
	a, b := startNode(t, "a"), startNode(t, "b")
	spec := volume.Spec{Name: "qvol", Size: 24 << 20, ChunkSize: 1 << 20, Copies: 2}
	v := openVolume(t, spec, t.TempDir(), a, b)
	sock := serveNBD(t, nbd.Map{"qvol": v, "view-b": mirrorView{volume.NewClient(b.url(), nil), spec}})
	uri := "nbd+unix:///qvol?socket=" + sock
	run := func(name string, args ...string) string {
		t.Helper()
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return string(out)
	}
	if out := run("nbdinfo", "--size", uri); strings.TrimSpace(out) != fmt.Sprint(spec.Size) {
		t.Errorf("nbdinfo size %q", out)
	}
	run("nbdinfo", "--can", "multi-conn", uri)

	src := filepath.Join(t.TempDir(), "src.img")
	data := make([]byte, spec.Size)
	for i := range data[:10<<20] {
		data[i] = byte(i*7 + i>>12)
	}
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	run("nbdcopy", "--connections=4", src, uri)
	run("qemu-img", "compare", "-f", "raw", "-F", "raw", src, uri)
	// The second mirror holds the same bytes.
	run("qemu-img", "compare", "-f", "raw", "-F", "raw", src, "nbd+unix:///view-b?socket="+sock)
	run("qemu-img", "convert", "-n", "-f", "raw", "-O", "raw", uri, "nbd+unix:///qvol?socket="+sock)
	out := run("qemu-img", "bench", "-f", "raw", "-d", "32", "-s", "4k", "-c", "5000", uri)
	if !strings.Contains(out, "Run completed") {
		t.Errorf("qemu-img bench: %s", out)
	}
	run("qemu-img", "compare", "-f", "raw", "-F", "raw", src, uri)
	// nbdcopy back out and compare byte for byte.
	dst := filepath.Join(t.TempDir(), "dst.img")
	run("nbdcopy", uri, dst)
	got, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(data) {
		t.Fatal("nbdcopy read back different bytes")
	}
}
