package sysstat

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

func TestParseDiskstats(t *testing.T) {
	f, err := os.Open("testdata/diskstats")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := ParseDiskstats(f)
	if err != nil {
		t.Fatal(err)
	}
	want := []DiskCounters{
		{Major: 7, Minor: 0, Name: "loop0"},
		{Major: 254, Minor: 0, Name: "vda", ReadIOs: 63288, ReadSectors: 2778770, WriteIOs: 11691, WriteSectors: 3318008, IOTimeMs: 7196},
		{Major: 254, Minor: 1, Name: "vda1", ReadIOs: 1000, ReadSectors: 8000, WriteIOs: 500, WriteSectors: 4000, IOTimeMs: 20},
		{Major: 259, Minor: 0, Name: "nvme0n1", ReadIOs: 5000000, ReadSectors: 400000000, WriteIOs: 2000000, WriteSectors: 160000000, InFlight: 3, IOTimeMs: 987654},
		{Major: 8, Minor: 16, Name: "sdb", ReadIOs: 10, ReadSectors: 80, IOTimeMs: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

func TestParseDiskstatsTable(t *testing.T) {
	full := "254 0 vda 63288 9237 2778770 13954 11691 35128 3318008 7441 0 7196 21879 5616 45 880240 446 917 36\n"
	old14 := "259 0 nvme0n1 5000000 10 400000000 123456 2000000 5 160000000 65432 3 987654 188888\n"
	tests := []struct {
		name    string
		in      string
		want    []DiskCounters
		wantErr bool
	}{
		{"empty", "", nil, false},
		{"kernel 5.5+ with flush fields", full, []DiskCounters{{Major: 254, Name: "vda", ReadIOs: 63288, ReadSectors: 2778770, WriteIOs: 11691, WriteSectors: 3318008, IOTimeMs: 7196}}, false},
		{"14 fields", old14, []DiskCounters{{Major: 259, Name: "nvme0n1", ReadIOs: 5000000, ReadSectors: 400000000, WriteIOs: 2000000, WriteSectors: 160000000, InFlight: 3, IOTimeMs: 987654}}, false},
		{"blank lines", "\n" + old14 + "\n", []DiskCounters{{Major: 259, Name: "nvme0n1", ReadIOs: 5000000, ReadSectors: 400000000, WriteIOs: 2000000, WriteSectors: 160000000, InFlight: 3, IOTimeMs: 987654}}, false},
		{"short line (pre-2.6.25 partition)", "8 1 sda1 10 80 5 40\n", nil, true},
		{"not a number", strings.Replace(full, "63288", "x", 1), nil, true},
		{"negative", strings.Replace(full, "63288", "-1", 1), nil, true},
		{"bad major", strings.Replace(full, "254", "a", 1), nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseDiskstats(strings.NewReader(tc.in))
			if tc.wantErr {
				if !errors.Is(err, ErrParse) {
					t.Fatalf("err = %v, want ErrParse", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestParseNetDev(t *testing.T) {
	b, err := os.ReadFile("testdata/net_dev")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseNetDev(strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	want := []NICStat{
		{Name: "lo", RxBytes: 3193, TxBytes: 3193},
		{Name: "eth0", RxBytes: 220641191, TxBytes: 1253581, RxErrors: 2, RxDrops: 1, TxErrors: 3, TxDrops: 4},
		{Name: "eth1", RxBytes: 18446744073709551615, TxBytes: 5},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	for _, bad := range []string{
		"h1\nh2\neth0: 1 2 3\n",
		"h1\nh2\neth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 x\n",
		"h1\nh2\nnocolon 1 2\n",
		"h1\nh2\n: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n",
	} {
		if _, err := ParseNetDev(strings.NewReader(bad)); !errors.Is(err, ErrParse) {
			t.Errorf("ParseNetDev(%q) err = %v, want ErrParse", bad, err)
		}
	}
}

func TestParseMountinfo(t *testing.T) {
	f, err := os.Open("testdata/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := ParseMountinfo(f)
	if err != nil {
		t.Fatal(err)
	}
	want := []Mount{
		{Major: 0, Minor: 21, MountPoint: "/proc", FSType: "proc", Source: "proc"},
		{Major: 254, Minor: 0, MountPoint: "/", FSType: "ext4", Source: "/dev/vda"},
		{Major: 0, Minor: 27, MountPoint: "/dev/shm", FSType: "tmpfs", Source: "tmpfs"},
		{Major: 259, Minor: 1, MountPoint: "/mnt/nvme disk", FSType: "xfs", Source: "/dev/nvme0n1p1"},
		{Major: 0, Minor: 55, MountPoint: "/mnt/btr", FSType: "btrfs", Source: "/dev/sdc"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	for _, bad := range []string{
		"22 27 0:21 / /proc rw,relatime proc proc rw\n", // no separator
		"22 27 021 / /proc rw - proc proc rw\n",         // bad device
		"22 27 0:21 / /proc rw -\n",                     // no fstype
	} {
		if _, err := ParseMountinfo(strings.NewReader(bad)); !errors.Is(err, ErrParse) {
			t.Errorf("ParseMountinfo(%q) err = %v, want ErrParse", bad, err)
		}
	}
}

func FuzzParseDiskstats(f *testing.F) {
	b, _ := os.ReadFile("testdata/diskstats")
	f.Add(string(b))
	f.Add("254 0 vda 1 2 3 4 5 6 7 8 9 10 11\n")
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseDiskstats(strings.NewReader(s))
		if err != nil && !errors.Is(err, ErrParse) {
			t.Fatalf("unwrapped error %v", err)
		}
		for _, d := range got {
			if d.Name == "" {
				t.Fatal("empty device name")
			}
		}
	})
}

func FuzzParseNetDev(f *testing.F) {
	b, _ := os.ReadFile("testdata/net_dev")
	f.Add(string(b))
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseNetDev(strings.NewReader(s))
		if err != nil && !errors.Is(err, ErrParse) {
			t.Fatalf("unwrapped error %v", err)
		}
		for _, n := range got {
			if n.Name == "" || strings.ContainsAny(n.Name, " \t:") {
				t.Fatalf("bad name %q", n.Name)
			}
		}
	})
}

func FuzzParseMountinfo(f *testing.F) {
	b, _ := os.ReadFile("testdata/mountinfo")
	f.Add(string(b))
	f.Add(`1 2 3:4 / /a\040b\ rw - ext4 /dev/x\134 rw`)
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseMountinfo(strings.NewReader(s))
		if err != nil && !errors.Is(err, ErrParse) {
			t.Fatalf("unwrapped error %v", err)
		}
		for _, m := range got {
			if m.FSType == "" {
				t.Fatal("empty fstype")
			}
		}
	})
}

func TestParseProcStatCPU(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     uint64
		ok       bool
	}{
		{"plain", "1234 (slipstream) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 70 0 0 20 0 12 0 5 0 0", 320, true},
		{"spaces and parens in the name", "99 (a (b) c) R 1 99 99 0 -1 0 0 0 0 0 7 8 0 0", 15, true},
		{"no name", "99 R 1 2 3", 0, false},
		{"too short", "99 (x) R 1 2", 0, false},
		{"not numbers", "99 (x) R 1 99 99 0 -1 0 0 0 0 0 u s 0 0", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseProcStatCPU([]byte(tc.in))
			if (err == nil) != tc.ok || got != tc.want {
				t.Fatalf("ParseProcStatCPU = %d, %v; want %d, ok=%v", got, err, tc.want, tc.ok)
			}
		})
	}
	if d, err := ProcessCPU(os.Getpid()); err != nil || d < 0 {
		t.Fatalf("ProcessCPU(self) = %v, %v", d, err)
	}
}
