package nbd_test

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/slipstream-io/slipstream/internal/volume/filedev"
	"github.com/slipstream-io/slipstream/internal/volume/nbd"
)

func fileExport(t *testing.T, size int64) (*filedev.Device, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "disk.img")
	d, err := filedev.Open(path, size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, path
}

func TestNbdinfo(t *testing.T) {
	needTool(t, "nbdinfo")
	d, _ := fileExport(t, 64<<20)
	sock := serveUnix(t, nbd.Map{"disk": d, "other": newMem(1 << 20)})
	out := run(t, "nbdinfo", "--json", "nbd+unix:///disk?socket="+sock)
	var info struct {
		Exports []struct {
			Size         int64 `json:"export-size"`
			CanMultiConn bool  `json:"can_multi_conn"`
			CanFlush     bool  `json:"can_flush"`
			CanFUA       bool  `json:"can_fua"`
			CanTrim      bool  `json:"can_trim"`
			CanZero      bool  `json:"can_zero"`
			ReadOnly     bool  `json:"is_read_only"`
			MaxBlock     int64 `json:"block_size_maximum"`
			PrefBlock    int64 `json:"block_size_preferred"`
		} `json:"exports"`
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("nbdinfo json: %v\n%s", err, out)
	}
	if len(info.Exports) != 1 {
		t.Fatalf("exports: %s", out)
	}
	e := info.Exports[0]
	if e.Size != 64<<20 || !e.CanMultiConn || !e.CanFlush || !e.CanFUA || !e.CanTrim || !e.CanZero || e.ReadOnly {
		t.Errorf("export info wrong: %+v", e)
	}
	if e.MaxBlock != 32<<20 || e.PrefBlock != 4096 {
		t.Errorf("block sizes: %+v", e)
	}
	// The memory device does not claim multi-conn safety.
	if out, err := execOut("nbdinfo", "--can", "multi-conn", "nbd+unix:///other?socket="+sock); err == nil {
		t.Errorf("memory device advertised multi-conn: %s", out)
	}
	run(t, "nbdinfo", "--can", "multi-conn", "nbd+unix:///disk?socket="+sock)
	list := run(t, "nbdinfo", "--list", "--json", "nbd+unix://?socket="+sock)
	if !strings.Contains(list, `"disk"`) || !strings.Contains(list, `"other"`) {
		t.Errorf("export list misses names:\n%s", list)
	}
}

func TestNbdinfoTCP(t *testing.T) {
	needTool(t, "nbdinfo")
	addr := serveTCP(t, nbd.Map{"m": newMem(3 << 20)})
	out := run(t, "nbdinfo", "--size", "nbd://"+addr+"/m")
	if strings.TrimSpace(out) != "3145728" {
		t.Errorf("size over TCP = %q", out)
	}
}

// TestFioVerify writes patterns with fio's nbd engine on several jobs,
// pipelined at queue depth 32, and verifies them on read back.
func TestFioVerify(t *testing.T) {
	needTool(t, "fio")
	d, _ := fileExport(t, 32<<20)
	for _, tr := range []string{"unix", "tcp"} {
		t.Run(tr, func(t *testing.T) {
			var uri string
			if tr == "unix" {
				uri = "nbd+unix:///disk?socket=" + serveUnix(t, nbd.Map{"disk": d})
			} else {
				uri = "nbd://" + serveTCP(t, nbd.Map{"disk": d}) + "/disk"
			}
			out := run(t, "fio", "--name=verify", "--ioengine=nbd", "--uri="+uri,
				"--rw=randwrite", "--bs=4k", "--bsrange=4k-64k", "--iodepth=32", "--numjobs=2",
				"--size=16m", "--offset_increment=16m", "--verify=crc32c", "--verify_state_save=0", "--do_verify=1",
				"--verify_fatal=1", "--group_reporting")
			if !strings.Contains(out, "connected to NBD server") || strings.Contains(out, "verify:") && strings.Contains(out, "bad") {
				t.Fatalf("fio output:\n%s", out)
			}
		})
	}
}

func TestQemuImgAndNbdcopy(t *testing.T) {
	needTool(t, "qemu-img")
	needTool(t, "nbdcopy")
	d, _ := fileExport(t, 16<<20)
	sock := serveUnix(t, nbd.Map{"disk": d})
	uri := "nbd+unix:///disk?socket=" + sock
	dir := t.TempDir()
	src := filepath.Join(dir, "src.img")
	data := make([]byte, 16<<20)
	rand.Read(data[:5<<20])
	rand.Read(data[9<<20:])
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, "qemu-img", "convert", "-n", "-f", "raw", "-O", "raw", src, uri)
	run(t, "qemu-img", "compare", "-f", "raw", "-F", "raw", src, uri)
	// A changed byte must make compare fail.
	if err := d.WriteAt(t.Context(), []byte{data[100] ^ 1}, 100, false); err != nil {
		t.Fatal(err)
	}
	if out, err := execOut("qemu-img", "compare", "-f", "raw", "-F", "raw", src, uri); err == nil {
		t.Fatalf("compare did not notice a changed byte:\n%s", out)
	}
	if err := d.WriteAt(t.Context(), data[100:101], 100, false); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "dst.img")
	run(t, "nbdcopy", uri, dst)
	got, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("nbdcopy copy differs from the source")
	}
	// nbdcopy in the other direction, multi-conn, then compare.
	d2, _ := fileExport(t, 16<<20)
	sock2 := serveUnix(t, nbd.Map{"disk": d2})
	run(t, "nbdcopy", "--connections=4", src, "nbd+unix:///disk?socket="+sock2)
	run(t, "qemu-img", "compare", "-f", "raw", "-F", "raw", src, "nbd+unix:///disk?socket="+sock2)
	out := run(t, "qemu-img", "bench", "-f", "raw", "-d", "32", "-s", "4k", "-c", "20000", uri)
	if !strings.Contains(out, "Run completed") {
		t.Errorf("qemu-img bench output:\n%s", out)
	}
	run(t, "qemu-img", "bench", "-w", "-f", "raw", "-d", "16", "-s", "64k", "-c", "500", uri)
}

// TestMapWithRealClients: nbdinfo --map and qemu-img map read the holes
// and data of a sparse file export through BLOCK_STATUS.
func TestMapWithRealClients(t *testing.T) {
	needTool(t, "nbdinfo")
	needTool(t, "qemu-img")
	d, _ := fileExport(t, 8<<20)
	data := make([]byte, 8192)
	rand.Read(data)
	if err := d.WriteAt(t.Context(), data, 1<<20, true); err != nil {
		t.Fatal(err)
	}
	uri := "nbd+unix:///disk?socket=" + serveUnix(t, nbd.Map{"disk": d})
	var extents []struct {
		Offset int64 `json:"offset"`
		Length int64 `json:"length"`
		Type   int   `json:"type"`
	}
	out := run(t, "nbdinfo", "--map", "--json", uri)
	if err := json.Unmarshal([]byte(out), &extents); err != nil {
		t.Fatalf("nbdinfo --map: %v\n%s", err, out)
	}
	type ext struct {
		off, n int64
		typ    int
	}
	var got []ext
	for _, e := range extents {
		got = append(got, ext{e.Offset, e.Length, e.Type})
	}
	want := []ext{{0, 1 << 20, 3}, {1 << 20, 8192, 0}, {1<<20 + 8192, 7<<20 - 8192, 3}}
	if !slices.Equal(got, want) {
		t.Errorf("nbdinfo --map: %v, want %v", got, want)
	}
	var qmap []struct {
		Start  int64 `json:"start"`
		Length int64 `json:"length"`
		Data   bool  `json:"data"`
		Zero   bool  `json:"zero"`
	}
	out = run(t, "qemu-img", "map", "--output=json", "-f", "raw", uri)
	if err := json.Unmarshal([]byte(out), &qmap); err != nil {
		t.Fatalf("qemu-img map: %v\n%s", err, out)
	}
	if len(qmap) != 3 || qmap[1].Start != 1<<20 || qmap[1].Length != 8192 || !qmap[1].Data || qmap[0].Data || !qmap[2].Zero {
		t.Errorf("qemu-img map: %+v", qmap)
	}
}
