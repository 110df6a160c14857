package volume_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/slipstream-io/slipstream/internal/placement"
	"github.com/slipstream-io/slipstream/internal/volume"
)

// TestBenchReplacement (benchmark, SLIPSTREAM_BENCH=1) measures how fast
// a re-placement copies a removed node's chunks to the volume's other
// nodes: a 512 MiB copies=2 volume of 4 MiB chunks on four nodes (real
// chunk replicas on this machine's disk, the others over the chunk
// stream on loopback) loses node b, and the writer copies b's chunks to
// their new owners with 1 and with 4 chunks at a time (CopyWorkers); and
// a rebalance adds node d to the volume on a, b, c (4 at a time). The
// peer, in the same run, is a copy of the same bytes from one file to
// another on the same disk, as dd with iflag=direct oflag=direct bs=1M
// makes it. Rounds interleave the three; the median round is shown. It
// writes its table to BENCH_OUT if set.
func TestBenchReplacement(t *testing.T) {
	if os.Getenv("SLIPSTREAM_BENCH") == "" {
		t.Skip("set SLIPSTREAM_BENCH=1 (make bench) to run the re-placement benchmark")
	}
	const (
		size   = 512 << 20
		chunk  = 4 << 20
		rounds = 3
	)
	ctx := context.Background()
	// copyRun re-places the volume with workers chunks at a time and
	// returns the bytes copied and how long it took: node b removed from
	// a, b, c, d, or, with rebalance, node d added to a, b, c.
	copyRun := func(workers int, rebalance bool) (int64, time.Duration) {
		a, b, c, d := startNode(t, "a"), startNode(t, "b"), startNode(t, "c"), startNode(t, "d")
		spec := volume.Spec{Name: "bench", Size: size, ChunkSize: chunk, Copies: 2}
		cfg := volumeConfig(t, spec, t.TempDir(), a, b, c, d)
		cfg.CopyWorkers = workers
		abc, abcd := []string{"a", "b", "c"}, []string{"a", "b", "c", "d"}
		if rebalance {
			cfg.Nodes = abc
		}
		done := make(chan struct{})
		cfg.Placed = func(context.Context, []string, uint64, []int64) error { close(done); return nil }
		v, err := volume.Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer v.Close()
		p := bytes.Repeat([]byte("re-placement"), (8<<20)/12+1)[:8<<20]
		for off := int64(0); off < size; off += int64(len(p)) {
			if err := v.WriteAt(ctx, p, off, false); err != nil {
				t.Fatal(err)
			}
		}
		if err := v.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		moved := int64(0)
		for i := int64(0); i < spec.Chunks(); i++ {
			switch {
			case rebalance && slices.Contains(placement.Owners(abcd, volume.ChunkName(spec.Name, i), spec.Copies), "d"),
				!rebalance && slices.Contains(v.Owners(i), "b"):
				moved += chunk
			}
		}
		start := time.Now()
		if rebalance {
			v.AddMirrors(abcd, func(id string) volume.Replica { return cfg.Replicas[id] })
			v.NotePlacement(abcd, abc, false)
		} else {
			b.kill()
			start = time.Now()
			v.NotePlacement([]string{"a", "c", "d"}, abcd, false)
		}
		select {
		case <-done:
		case <-time.After(5 * time.Minute):
			t.Fatal("the re-placement did not end")
		}
		elapsed := time.Since(start)
		for _, n := range []*testNode{a, b, c, d} {
			n.kill()
		}
		return moved, elapsed
	}
	// diskRun copies n bytes from one file to another on the same disk,
	// as dd does with iflag=direct oflag=direct bs=1M, and syncs them.
	diskRun := func(n int64) time.Duration {
		dir := t.TempDir()
		buf := alignedBuf(1 << 20)
		copy(buf, bytes.Repeat([]byte("disk"), len(buf)/4))
		open := func(name string, flag int) *os.File {
			f, err := os.OpenFile(filepath.Join(dir, name), flag|syscall.O_DIRECT, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
		src := open("src", os.O_CREATE|os.O_WRONLY)
		for off := int64(0); off < n; off += int64(len(buf)) {
			if _, err := src.Write(buf); err != nil {
				t.Fatal(err)
			}
		}
		if err := src.Close(); err != nil {
			t.Fatal(err)
		}
		src, dst := open("src", os.O_RDONLY), open("dst", os.O_CREATE|os.O_WRONLY)
		defer src.Close()
		defer dst.Close()
		start := time.Now()
		for off := int64(0); off < n; off += int64(len(buf)) {
			if _, err := io.ReadFull(src, buf); err != nil {
				t.Fatal(err)
			}
			if _, err := dst.Write(buf); err != nil {
				t.Fatal(err)
			}
		}
		if err := dst.Sync(); err != nil {
			t.Fatal(err)
		}
		return time.Since(start)
	}
	mib := func(n int64, d time.Duration) float64 { return float64(n) / (1 << 20) / d.Seconds() }
	var disk, one, four, reb, r1, r4, rr []float64
	for range rounds {
		n1, d1 := copyRun(1, false)
		n4, d4 := copyRun(4, false)
		nr, dr := copyRun(4, true)
		dd := diskRun(n4)
		disk = append(disk, mib(n4, dd))
		one = append(one, mib(n1, d1))
		four = append(four, mib(n4, d4))
		reb = append(reb, mib(nr, dr))
		r1 = append(r1, mib(n1, d1)/mib(n4, dd))
		r4 = append(r4, mib(n4, d4)/mib(n4, dd))
		rr = append(rr, mib(nr, dr)/mib(n4, dd))
	}
	med := func(xs []float64) float64 { s := slices.Clone(xs); sort.Float64s(s); return s[len(s)/2] }
	span := func(xs []float64) string { return fmt.Sprintf("%.2f–%.2f", slices.Min(xs), slices.Max(xs)) }
	var out strings.Builder
	fmt.Fprintf(&out, "<!-- written by internal/volume TestBenchReplacement on %s -->\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&out, "A 512 MiB copies=2 volume of 4 MiB chunks on four nodes (chunk replicas in directories on this machine's one disk, the other nodes over the chunk stream on loopback) loses a node; the writer copies its chunks (about a quarter of the volume's copies) to their new owners. A rebalance adds a fourth node to the same volume on three, and the writer copies it the chunks HRW now gives it (about half of the chunks). %d rounds, the four runs interleaved; medians, with the range of the per-round ratios.\n\n", rounds)
	fmt.Fprintln(&out, "| run | MiB/s | vs the disk |")
	fmt.Fprintln(&out, "|---|---:|---|")
	fmt.Fprintf(&out, "| the disk: the same bytes copied from one file to another, O_DIRECT, 1 MiB reads and writes, one fsync (dd) | %.0f | 1.00 |\n", med(disk))
	fmt.Fprintf(&out, "| re-placement, 1 chunk at a time | %.0f | **%.2f** (%s) |\n", med(one), med(r1), span(r1))
	fmt.Fprintf(&out, "| re-placement, 4 chunks at a time (the default) | %.0f | **%.2f** (%s) |\n", med(four), med(r4), span(r4))
	fmt.Fprintf(&out, "| rebalance onto a fourth node, 4 chunks at a time | %.0f | **%.2f** (%s) |\n", med(reb), med(rr), span(rr))
	t.Log("\n" + out.String())
	if p := os.Getenv("BENCH_OUT"); p != "" {
		if err := os.WriteFile(filepath.Clean(p), []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// alignedBuf returns n bytes aligned for O_DIRECT.
func alignedBuf(n int) []byte {
	b := make([]byte, n+4096)
	off := 0
	if r := int(uintptr(unsafe.Pointer(&b[0])) & 4095); r != 0 {
		off = 4096 - r
	}
	return b[off : off+n]
}
