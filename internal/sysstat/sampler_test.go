package sysstat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// fakeRoots builds a /proc and /sys fixture in which the file system holding
// dataDir is device diskName (or partition partName of it).
func fakeRoots(t *testing.T, dataDir, diskName, partName string, extraMounts string) (proc, sys string) {
	t.Helper()
	root := t.TempDir()
	proc, sys = filepath.Join(root, "proc"), filepath.Join(root, "sys")
	maj, min, err := devNumber(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	devDir := filepath.Join(sys, "devices", "virtual", "block", diskName)
	leaf := devDir
	if partName != "" {
		leaf = filepath.Join(devDir, partName)
	}
	for _, d := range []string{leaf, filepath.Join(sys, "dev", "block"), filepath.Join(proc, "net"), filepath.Join(proc, "self")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if partName != "" {
		if err := os.WriteFile(filepath.Join(leaf, "partition"), []byte("1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rel, _ := filepath.Rel(filepath.Join(sys, "dev", "block"), leaf)
	if err := os.Symlink(rel, filepath.Join(sys, "dev", "block", fmt.Sprintf("%d:%d", maj, min))); err != nil {
		t.Fatal(err)
	}
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(proc, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("diskstats", fmt.Sprintf(
		"%[1]d %[2]d %[3]s 100 0 2048 5 50 0 4096 7 2 1500 12 0 0 0 0\n"+
			"%[1]d %[4]d %[3]sp1 90 0 2000 5 40 0 4000 7 1 1400 12 0 0 0 0\n", maj, min, diskName, min+1))
	net, _ := os.ReadFile("testdata/net_dev")
	write("net/dev", string(net))
	write("self/mountinfo", fmt.Sprintf("27 1 %d:%d / / rw - ext4 /dev/%s rw\n%s", maj, min, diskName, extraMounts))
	return proc, sys
}

func TestSampleCollapsesMountpathsOnOneDisk(t *testing.T) {
	base := t.TempDir()
	mp1, mp2 := filepath.Join(base, "mp1"), filepath.Join(base, "mp2")
	for _, d := range []string{mp1, mp2} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dirs := []string{mp1, mp2}
	extra := ""
	var shm string
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if maj, min, err := devNumber("/dev/shm"); err == nil && maj == 0 {
			shm = "/dev/shm"
			dirs = append(dirs, shm)
			extra = fmt.Sprintf("30 25 %d:%d / /dev/shm rw - tmpfs tmpfs rw\n", maj, min)
		}
	}
	for _, part := range []string{"", "fakedisk1"} {
		t.Run("part="+part, func(t *testing.T) {
			proc, sys := fakeRoots(t, base, "fakedisk", part, extra)
			now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			s := &Sampler{Node: "n1", Dirs: dirs, NICs: []string{"eth0"}, ProcRoot: proc, SysRoot: sys,
				Now:      func() time.Time { return now },
				Counters: func() map[string]float64 { return map[string]float64{"warm_hits": 7} }}
			snap, err := s.Sample(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			want := DiskStat{Device: "fakedisk", Dirs: []string{mp1, mp2},
				ReadIOs: 100, ReadBytes: 2048 * 512, WriteIOs: 50, WriteBytes: 4096 * 512, IOTimeMs: 1500, InFlight: 2}
			if part != "" {
				want.Parts = []string{part}
			}
			want.MajMin = snap.Disks[0].MajMin
			if !reflect.DeepEqual(snap.Disks, []DiskStat{want}) {
				t.Fatalf("disks = %+v\nwant %+v", snap.Disks, want)
			}
			if len(snap.NICs) != 1 || snap.NICs[0].Name != "eth0" || snap.NICs[0].RxBytes != 220641191 {
				t.Fatalf("nics = %+v", snap.NICs)
			}
			if snap.Node != "n1" || !snap.Time.Equal(now) || snap.Counters["warm_hits"] != 7 {
				t.Fatalf("snapshot header = %+v", snap)
			}
			if shm != "" && (len(snap.Unmapped) != 1 || !containsStr(snap.Unmapped[0], "tmpfs")) {
				t.Fatalf("unmapped = %q, want the tmpfs dir", snap.Unmapped)
			}
		})
	}
}

func containsStr(s, sub string) bool { return strings.Contains(s, sub) }

func TestSampleMissingDir(t *testing.T) {
	s := &Sampler{Dirs: []string{filepath.Join(t.TempDir(), "nope")}}
	if _, err := s.Sample(context.Background()); err == nil {
		t.Fatal("no error for a missing directory")
	}
}

func TestResolveDeviceNoDevice(t *testing.T) {
	mounts := []Mount{{Major: 0, Minor: 40, FSType: "overlay", Source: "overlay"}}
	if _, err := resolveDevice(t.TempDir(), mounts, 0, 40); !errors.Is(err, ErrNoDevice) {
		t.Fatalf("err = %v, want ErrNoDevice", err)
	}
	if _, err := resolveDevice(t.TempDir(), nil, 0, 41); !errors.Is(err, ErrNoDevice) {
		t.Fatalf("err = %v, want ErrNoDevice", err)
	}
}

// TestSampleLive samples this machine: the disk behind the test's temp dir
// must be found, and writing a file with fsync must move its write counter.
func TestSampleLive(t *testing.T) {
	dir := t.TempDir()
	s := &Sampler{Node: "live", Dirs: []string{dir}}
	a, err := s.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(a.NICs) == 0 {
		t.Fatal("no NICs on this machine")
	}
	if len(a.Disks) == 0 {
		t.Skipf("temp dir is not on a block device here: %q", a.Unmapped)
	}
	buf := make([]byte, 1<<20)
	f, err := os.Create(filepath.Join(dir, "x"))
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := f.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	time.Sleep(20 * time.Millisecond)
	b, err := s.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if b.Disks[0].WriteBytes < a.Disks[0].WriteBytes+4<<20 {
		t.Errorf("device %s write bytes moved by %d, want >= 4 MiB", b.Disks[0].Device, b.Disks[0].WriteBytes-a.Disks[0].WriteBytes)
	}
	r := Rates(a, b)
	if len(r.Disks) != 1 || r.Disks[0].WriteBps <= 0 || r.Disks[0].UtilPct < 0 || r.Disks[0].UtilPct > 100 {
		t.Errorf("rates = %+v", r.Disks)
	}
}

func TestRates(t *testing.T) {
	t0 := time.Unix(1000, 0)
	prev := Snapshot{Node: "n", Time: t0,
		Disks:    []DiskStat{{Device: "vda", ReadBytes: 1000, WriteBytes: 0, ReadIOs: 10, IOTimeMs: 100}, {Device: "gone"}},
		NICs:     []NICStat{{Name: "eth0", RxBytes: 100, TxBytes: 200, RxErrors: 1}},
		Counters: map[string]float64{"cold": 5, "warm": 10, "reset": 100}}
	cur := Snapshot{Node: "n", Time: t0.Add(2 * time.Second),
		Disks:    []DiskStat{{Device: "vda", ReadBytes: 5000, WriteBytes: 2048, ReadIOs: 30, WriteIOs: 4, IOTimeMs: 1100, InFlight: 3}, {Device: "new"}},
		NICs:     []NICStat{{Name: "eth0", RxBytes: 300, TxBytes: 1200, RxErrors: 5}},
		Counters: map[string]float64{"cold": 7, "warm": 30, "reset": 1, "fresh": 9}}
	got := Rates(prev, cur)
	want := Rate{Node: "n", Time: cur.Time, Interval: 2,
		Disks:    []DiskRate{{Device: "vda", ReadBps: 2000, WriteBps: 1024, ReadIOPS: 10, WriteIOPS: 2, UtilPct: 50, InFlight: 3}},
		NICs:     []NICRate{{Name: "eth0", RxBps: 100, TxBps: 500, RxErrorsS: 2}},
		Counters: map[string]float64{"cold": 1, "warm": 10, "reset": 0}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	// util is clamped at 100 % (io_ticks can run slightly ahead of wall time).
	cur.Disks[0].IOTimeMs = 100 + 2500
	if u := Rates(prev, cur).Disks[0].UtilPct; u != 100 {
		t.Fatalf("util = %v, want 100", u)
	}
	// Counter wrap or device reset: zero, never negative or huge.
	cur.Disks[0].ReadBytes = 0
	if r := Rates(prev, cur).Disks[0].ReadBps; r != 0 {
		t.Fatalf("read rate after reset = %v", r)
	}
	if r := Rates(cur, prev); r.Interval != 0 || r.Disks != nil {
		t.Fatalf("backwards interval gave %+v", r)
	}
	if math.IsNaN(Rates(prev, prev).Interval) {
		t.Fatal("NaN interval")
	}
}

func TestHandler(t *testing.T) {
	dir := t.TempDir()
	srv := httptest.NewServer(Handler("node-a", []string{dir}, func() map[string]float64 { return map[string]float64{"cold_hits": 3} }))
	defer srv.Close()
	resp, err := http.Get(srv.URL + Path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var snap Snapshot
	if err := json.NewDecoder(resp.Body).Decode(&snap); err != nil {
		t.Fatal(err)
	}
	if snap.Node != "node-a" || snap.Counters["cold_hits"] != 3 || len(snap.NICs) == 0 || snap.Time.IsZero() {
		t.Fatalf("snapshot = %+v", snap)
	}
	if len(snap.Disks)+len(snap.Unmapped) != 1 {
		t.Fatalf("dir neither mapped nor reported unmapped: %+v", snap)
	}
	r2, err := http.Post(srv.URL+Path, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	if r2.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST status %d", r2.StatusCode)
	}
}
