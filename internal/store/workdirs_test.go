package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slipstream-io/slipstream/internal/object"
)

// TestWorkFilesSpread: work files are created in the work directories in
// turn, and tmp/ is marked a top directory where the file system has the
// flag.
func TestWorkFilesSpread(t *testing.T) {
	s := openTest(t, Config{Mountpaths: []string{filepath.Join(t.TempDir(), "mp")}})
	mp := s.mps[0]
	if len(mp.workDirs) != defaultWorkDirs {
		t.Fatalf("%d work directories, want %d", len(mp.workDirs), defaultWorkDirs)
	}
	used := map[string]int{}
	s.createWork = func(dir string, direct bool) (workFile, error) {
		used[dir]++
		return createWorkFile(dir, direct)
	}
	for i := range 2 * defaultWorkDirs {
		put(t, s, "bkt", fmt.Sprintf("k%02d", i), []byte("body"))
	}
	for _, d := range mp.workDirs {
		if used[d] != 2 {
			t.Fatalf("work directory %s used %d times, want 2 (all: %v)", d, used[d], used)
		}
	}
	if f := files(t, s, "tmp"); len(f) != 0 {
		t.Fatalf("work files left: %v", f)
	}
	f, err := os.Open(mp.tmpDir)
	if err != nil {
		t.Fatal(err)
	}
	flags, ferr := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	f.Close()
	if ferr == nil && flags&fsTopdirFl == 0 { // a file system without flags has no such allocator either
		t.Fatalf("%s is not marked a top directory (flags %#x)", mp.tmpDir, flags)
	}
}

// TestWorkDirSpread (benchmark, SLIPSTREAM_BENCH=1) measures the CPU a PUT
// costs right after many objects were removed at once (as an eviction pass
// from the high to the low watermark, or a bulk delete, does), with work
// files in one directory and spread over defaultWorkDirs, interleaved in
// one run.
func TestWorkDirSpread(t *testing.T) {
	if os.Getenv("SLIPSTREAM_BENCH") == "" {
		t.Skip("benchmark: set SLIPSTREAM_BENCH=1")
	}
	const n, size = 3000, 4 << 10
	body := randBytes(1, size)
	cpu := func() time.Duration {
		var ru unix.Rusage
		if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	putAll := func(s *Store, prefix string) {
		for i := range n {
			if _, err := s.Put(context.Background(), "bkt", fmt.Sprintf("%s%04d", prefix, i), bytes.NewReader(body), PutOptions{PutOptions: object.PutOptions{Size: size}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	type run struct{ cpuPerPut, wallPerPut time.Duration }
	runs := map[int][]run{}
	for round := range 3 {
		for _, dirs := range []int{1, defaultWorkDirs} {
			s := openTest(t, Config{Mountpaths: []string{filepath.Join(t.TempDir(), "mp")}, workDirs: dirs})
			putAll(s, "old")
			for i := range n {
				if err := s.Delete(context.Background(), "bkt", fmt.Sprintf("old%04d", i)); err != nil {
					t.Fatal(err)
				}
			}
			c0, w0 := cpu(), time.Now()
			putAll(s, "new")
			runs[dirs] = append(runs[dirs], run{(cpu() - c0) / n, time.Since(w0) / n})
			s.Close()
			t.Logf("round %d, %d work dirs: %v CPU, %v wall per PUT", round, dirs, runs[dirs][round].cpuPerPut, runs[dirs][round].wallPerPut)
		}
	}
	med := func(dirs int) run {
		rs := slices.Clone(runs[dirs])
		slices.SortFunc(rs, func(a, b run) int { return int(a.cpuPerPut - b.cpuPerPut) })
		return rs[len(rs)/2]
	}
	one, many := med(1), med(defaultWorkDirs)
	fmt.Printf("| work directories | CPU µs per PUT | wall µs per PUT |\n|---:|---:|---:|\n")
	fmt.Printf("| 1 | %.0f | %.0f |\n", float64(one.cpuPerPut)/1e3, float64(one.wallPerPut)/1e3)
	fmt.Printf("| %d | %.0f | %.0f |\n", defaultWorkDirs, float64(many.cpuPerPut)/1e3, float64(many.wallPerPut)/1e3)
	fmt.Printf("\nCPU per PUT, %d directories / one: %.2f\n", defaultWorkDirs, float64(many.cpuPerPut)/float64(one.cpuPerPut))
}

// TestDurableDirs: a directory that already exists, perhaps made a moment
// ago by a writer that has not fsynced its parent yet, is synced into its
// parent (and its parents into theirs) before mkdir returns; after that,
// and for directories it made itself, it syncs nothing again.
func TestDurableDirs(t *testing.T) {
	stop := t.TempDir()
	a := filepath.Join(stop, "a")
	ab := filepath.Join(a, "b")
	ac := filepath.Join(a, "c")
	tests := []struct {
		name     string
		premade  []string // made by "someone else" before the call
		dir      string
		wantSync []string // parents synced, in order
	}{
		{"made by another writer", []string{ab}, ab, []string{stop, a}},
		{"known since", nil, ab, nil},
		{"new beside a known one", nil, ac, []string{a}},
		{"the stop itself", nil, stop, nil},
		{"new two levels down", nil, filepath.Join(stop, "x", "y"), []string{stop, filepath.Join(stop, "x")}},
	}
	var synced []string
	d := newDurableDirs()
	d.sync = func(dir string) error {
		synced = append(synced, dir)
		return syncDir(dir)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, p := range tc.premade {
				if err := os.MkdirAll(p, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			synced = nil
			if err := d.mkdir(tc.dir, stop); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(synced, tc.wantSync) {
				t.Fatalf("synced %q, want %q", synced, tc.wantSync)
			}
			if fi, err := os.Stat(tc.dir); err != nil || !fi.IsDir() {
				t.Fatalf("%s: %v", tc.dir, err)
			}
		})
	}
	t.Run("sync fails", func(t *testing.T) {
		d := newDurableDirs()
		d.sync = func(string) error { return errors.New("EIO") }
		if err := d.mkdir(filepath.Join(stop, "z"), stop); err == nil {
			t.Fatal("mkdir succeeded although its parent could not be synced")
		}
		d.sync = syncDir
		if err := d.mkdir(filepath.Join(stop, "z"), stop); err != nil {
			t.Fatal(err)
		}
	})
}
