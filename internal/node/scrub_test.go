package node

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/peer"
	"github.com/slipstream-io/slipstream/internal/store"
)

// damage flips a byte in the middle of the object file of the given size
// under dir (a store's mountpath: dir/obj/<bucket>/<xx>/<file>).
func damage(t *testing.T, dir string, size int64) {
	t.Helper()
	var file string
	filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && fi.Size() == size && filepath.Base(filepath.Dir(filepath.Dir(filepath.Dir(path)))) == "obj" {
			file = path
		}
		return nil
	})
	if file == "" {
		t.Fatalf("no object file of %d bytes under %s", size, dir)
	}
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, size/2); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{b[0] ^ 0xff}, size/2); err != nil {
		t.Fatal(err)
	}
}

func TestScrubRepairsDamagedCopies(t *testing.T) {
	ctx := context.Background()
	r := newRebalanceRig(t, "a", "b")
	r.m.Buckets["cache"] = cluster.BucketProps{Name: "cache", Copies: 1, Mode: cluster.ModeCache}
	t0 := r.now.Add(-time.Hour)
	body := func(n int) string { return string(randomish(n)) }
	// Sizes tell the files apart on disk.
	r.put("a", "two", "both", body(5000), t0, false)
	r.put("b", "two", "both", body(5000), t0, false)
	r.put("a", "two", "alone", body(6000), t0, false)
	r.put("a", "two", "intact", body(7000), t0, false)
	r.put("a", "cache", "warm", body(8000), t0, false)
	for _, size := range []int64{5000, 6000, 8000} {
		damage(t, r.dir("a"), size)
	}
	sc := &scrubber{self: "a", meta: fixedMap{r.m}, store: r.stores["a"], log: slog.New(slog.DiscardHandler), now: time.Now,
		at: func(m *cluster.Map, id string) peer.Local {
			return &localService{meta: fixedMap{r.m}, store: r.stores[id], tombs: r.tombs[id]}
		}}
	p := sc.run(ctx, "", nil)
	if p.Checked != 4 || p.Corrupt != 3 || p.Repaired != 2 || p.Unrepaired != 1 || p.Bytes != 5000+6000+7000+8000 {
		t.Fatalf("scrub = %+v, want 4 checked, 3 corrupt, 2 repaired (from b, and the cached copy dropped), 1 not", p)
	}
	if got := r.holds("a", "two", "both"); got != body(5000) {
		t.Fatal("the damaged copy was not rewritten from b")
	}
	if got := r.holds("a", "cache", "warm"); got != "" {
		t.Fatal("a damaged cached copy was kept (the backend has it)")
	}
	if got := r.holds("a", "two", "intact"); got != body(7000) {
		t.Fatal("an intact copy changed")
	}
	// The copy no other node could supply is no longer served: a GET or
	// HEAD of it fails (the gateway then asks the next holder, or answers
	// an error) instead of returning bytes known to be wrong.
	la := &localService{meta: fixedMap{r.m}, store: r.stores["a"], tombs: r.tombs["a"]}
	if _, err := la.Get(ctx, "two", "alone", nil); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("GET of a copy damaged beyond repair: %v, want ErrCorrupt", err)
	}
	if _, err := la.Stat(ctx, "two", "alone"); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("HEAD of a copy damaged beyond repair: %v, want ErrCorrupt", err)
	}
	// The next pass finds only the copy no other node could supply.
	p = sc.run(ctx, "", nil)
	if p.Checked != 3 || p.Corrupt != 1 || p.Unrepaired != 1 {
		t.Fatalf("second scrub = %+v, want 3 checked, the unrepairable one still corrupt", p)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(newScrubCollector(sc.passes.status))
	for name, want := range map[string]float64{
		"slipstream_scrub_passes_total": 2, "slipstream_scrub_corrupt_total": 4,
		"slipstream_scrub_repaired_total": 2, "slipstream_scrub_unrepaired_total": 2,
	} {
		if got := gathered(t, reg, name); got != want {
			t.Errorf("metric %s = %v, want %v", name, got, want)
		}
	}
	// A new write of the key is served again.
	r.put("a", "two", "alone", "rewritten", r.now, false)
	if got := r.holds("a", "two", "alone"); got != "rewritten" {
		t.Fatalf("after a rewrite: %q", got)
	}
}

// randomish returns n bytes that differ from one n to another.
func randomish(n int) []byte {
	b := make([]byte, n)
	x := uint32(n)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

func TestPacedReader(t *testing.T) {
	if p := pacer(0); p != nil {
		t.Fatal("a zero rate must not pace")
	}
	const rate, size = 4 << 20, 6 << 20
	data := randomish(size)
	start := time.Now()
	got, err := io.ReadAll(pacedReader{context.Background(), bytes.NewReader(data), pacer(rate)})
	took := time.Since(start)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("paced read: %d bytes, %v", len(got), err)
	}
	// The first MiB is the burst; the rest goes at the rate.
	if min := time.Duration(float64(size-(1<<20)) / rate * float64(time.Second)); took < min*9/10 {
		t.Fatalf("%d bytes at %d B/s took %v, want at least %v", size, rate, took, min)
	}
	// A cancelled context stops the wait.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := io.ReadAll(pacedReader{ctx, bytes.NewReader(data), pacer(1)}); err == nil {
		t.Fatal("a paced read went on after its context was cancelled")
	}
}
