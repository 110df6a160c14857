package loader

import (
	"bytes"
	"io"
	"math"
	"testing"
	"time"
)

// fakeClock is a synthetic clock the tests move by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time          { return c.t }
func (c *fakeClock) Advance(d time.Duration) { c.t = c.t.Add(d) }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol*math.Max(1, math.Abs(want)) }

// TestRecorderPercentiles records latencies 1..1000 ms: the percentiles of
// a uniform distribution are known exactly (within HDR's 3 digits).
func TestRecorderPercentiles(t *testing.T) {
	rec := NewRecorder(t0)
	for i := 1; i <= 1000; i++ {
		rec.Record(Sample{Op: OpGet, Start: t0, Latency: time.Duration(i) * time.Millisecond, TTFB: time.Duration(i) * time.Millisecond / 2, Bytes: 100})
	}
	total, ops, errs := rec.Summary(t0.Add(10 * time.Second))
	get := ops["GET"]
	tests := []struct {
		name      string
		got, want float64
	}{
		{"p50", get.Latency.P50, 500},
		{"p90", get.Latency.P90, 900},
		{"p99", get.Latency.P99, 990},
		{"p99.9", get.Latency.P999, 999},
		{"max", get.Latency.Max, 1000},
		{"min", get.Latency.Min, 1},
		{"mean", get.Latency.Mean, 500.5},
		{"ttfb p50", get.TTFB.P50, 250},
		{"ops/s", get.OpsPerSec, 100},
		{"bytes/s", get.BytesPerSec, 10000},
		{"total p99", total.Latency.P99, 990},
	}
	for _, tc := range tests {
		if !near(tc.got, tc.want, 0.002) {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	if get.Count != 1000 || total.Count != 1000 || len(errs) != 0 {
		t.Errorf("count %d total %d errs %v", get.Count, total.Count, errs)
	}
}

// TestRecorderSeries drives the recorder with a synthetic clock: a known
// number of requests completes in each second, so the per-second series,
// rates and percentiles are known.
func TestRecorderSeries(t *testing.T) {
	clk := &fakeClock{t: t0}
	rec := NewRecorder(clk.Now())
	// Second k (0..9): 10*(k+1) GETs of 1 MiB each taking (k+1) ms, plus
	// 2 PUTs of 4 KiB taking 50 ms; one error in second 3.
	for k := 0; k < 10; k++ {
		sec := t0.Add(time.Duration(k) * time.Second)
		n := 10 * (k + 1)
		for i := 0; i < n; i++ {
			clk.t = sec.Add(time.Duration(i) * time.Second / time.Duration(n+2))
			rec.Record(Sample{Op: OpGet, Start: clk.Now(), Latency: time.Duration(k+1) * time.Millisecond, Bytes: 1 << 20})
		}
		clk.t = sec.Add(900 * time.Millisecond)
		for range 2 {
			rec.Record(Sample{Op: OpPut, Start: clk.Now(), Latency: 50 * time.Millisecond, Bytes: 4096})
		}
		if k == 3 {
			rec.Record(Sample{Op: OpGet, Start: sec.Add(100 * time.Millisecond), Latency: time.Millisecond, Err: "NoSuchKey"})
		}
	}
	end := t0.Add(10*time.Second + 500*time.Millisecond)
	series := rec.Series(end)
	if len(series) != 11 {
		t.Fatalf("%d seconds, want 11", len(series))
	}
	for k := 0; k < 10; k++ {
		s := series[k]
		wantGets := int64(10 * (k + 1))
		if s.GetOps != wantGets || s.PutOps != 2 || s.Ops != wantGets+2 {
			t.Errorf("second %d: get %d put %d ops %d, want %d/2", k, s.GetOps, s.PutOps, s.Ops, wantGets)
		}
		if s.ReadBytes != wantGets<<20 || s.WriteBytes != 2*4096 || s.BytesPerSec != float64(wantGets<<20+8192) {
			t.Errorf("second %d: read %d write %d rate %v", k, s.ReadBytes, s.WriteBytes, s.BytesPerSec)
		}
		if !near(s.P50, float64(k+1), 0.01) || !near(s.Max, 50, 0.01) {
			t.Errorf("second %d: p50 %v max %v, want %d ms / 50 ms", k, s.P50, s.Max, k+1)
		}
		if wantErr := int64(map[bool]int{true: 1}[k == 3]); s.Errors != wantErr {
			t.Errorf("second %d: errors %d, want %d", k, s.Errors, wantErr)
		}
	}
	if last := series[10]; last.Dur != 0.5 || last.Ops != 0 {
		t.Errorf("last second = %+v, want dur 0.5 and no ops", last)
	}
	_, ops, errs := rec.Summary(end)
	if ops["GET"].Count != 550 || ops["GET"].Errors != 1 || ops["PUT"].Count != 20 || errs["NoSuchKey"] != 1 {
		t.Errorf("summary %+v errs %v", ops, errs)
	}
	if want := 550.0 / 10.5; !near(ops["GET"].OpsPerSec, want, 1e-9) {
		t.Errorf("GET ops/s %v, want %v", ops["GET"].OpsPerSec, want)
	}
	// Histograms round-trip through their encoding.
	hs, err := rec.Histograms()
	if err != nil {
		t.Fatal(err)
	}
	h, err := DecodeHistogram(hs["GET"])
	if err != nil {
		t.Fatal(err)
	}
	if h.TotalCount() != 550 || h.Max() < 9990 || h.Max() > 10010 {
		t.Errorf("decoded histogram count %d max %d", h.TotalCount(), h.Max())
	}
	if _, err := DecodeHistogram("!!"); err == nil {
		t.Error("bad histogram decoded")
	}
}

func TestRecorderLast(t *testing.T) {
	rec := NewRecorder(t0)
	if _, ok := rec.Last(t0.Add(500 * time.Millisecond)); ok {
		t.Fatal("a second reported before it ended")
	}
	for i := 0; i < 7; i++ {
		rec.Record(Sample{Op: OpGet, Start: t0.Add(100 * time.Millisecond), Latency: 2 * time.Millisecond, Bytes: 10})
	}
	s, ok := rec.Last(t0.Add(1500 * time.Millisecond))
	if !ok || s.OpsPerSec != 7 || s.BytesPerSec != 70 || !near(s.P50, 2, 0.01) {
		t.Fatalf("last = %+v ok=%v", s, ok)
	}
	if line := ProgressLine("x", 1500*time.Millisecond, s); !bytes.Contains([]byte(line), []byte("7 op/s")) {
		t.Fatalf("progress line %q", line)
	}
}

// TestPacer checks the rate limiter against a synthetic clock: n requests
// asked for at once start interval apart, and a late caller gets the slots
// of the schedule it missed (already due), not a schedule restarted from
// now.
func TestPacer(t *testing.T) {
	p := newPacer(10)
	var last time.Time
	for i := 0; i < 100; i++ {
		last = p.reserve(t0)
	}
	if want := t0.Add(9900 * time.Millisecond); !last.Equal(want) {
		t.Fatalf("100th start at %v, want %v", last.Sub(t0), want.Sub(t0))
	}
	late := t0.Add(time.Minute)
	if a, b := p.reserve(late), p.reserve(late); !a.Equal(t0.Add(10*time.Second)) || b.Sub(a) != 100*time.Millisecond {
		t.Fatalf("late caller: slots %v then %v, want 10s then 10.1s", a.Sub(t0), b.Sub(t0))
	}
	if newPacer(0) != nil {
		t.Fatal("rate 0 must mean no pacer")
	}
}

// fromSlot counts a late request from its slot: the wait is added to its
// latency and time to first byte, Service keeps the time from the send.
func TestFromSlot(t *testing.T) {
	sent := t0.Add(250 * time.Millisecond)
	s := Sample{Start: sent, Latency: 300 * time.Millisecond, TTFB: 10 * time.Millisecond, Service: 300 * time.Millisecond}
	fromSlot(&s, t0)
	if !s.Start.Equal(t0) || s.Latency != 550*time.Millisecond || s.TTFB != 260*time.Millisecond || s.Service != 300*time.Millisecond {
		t.Fatalf("late: %+v", s)
	}
	s = Sample{Start: t0, Latency: time.Millisecond}
	fromSlot(&s, t0)
	if !s.Start.Equal(t0) || s.Latency != time.Millisecond {
		t.Fatalf("on time: %+v", s)
	}
}

func TestPayload(t *testing.T) {
	block := newBlock(1)
	for _, size := range []int64{0, 1, 4095, blockSize, 3*blockSize + 17} {
		p := newPayload(block, size, 12345)
		a, err := io.ReadAll(p)
		if err != nil || int64(len(a)) != size {
			t.Fatalf("size %d: read %d, %v", size, len(a), err)
		}
		if _, err := p.Seek(0, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(p)
		if !bytes.Equal(a, b) {
			t.Fatalf("size %d: second read differs", size)
		}
		if n, _ := p.Seek(0, io.SeekEnd); n != size {
			t.Fatalf("seek end = %d", n)
		}
	}
	x, _ := io.ReadAll(newPayload(block, 4096, 1))
	y, _ := io.ReadAll(newPayload(block, 4096, 2))
	if bytes.Equal(x, y) {
		t.Fatal("payloads with different shifts are equal")
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{Endpoint: "http://127.0.0.1:1", Bucket: "b", Duration: time.Second}
	tests := []struct {
		name string
		mod  func(*Config)
		ok   bool
	}{
		{"ok", func(*Config) {}, true},
		{"no endpoint", func(c *Config) { c.Endpoint = "" }, false},
		{"bad scheme", func(c *Config) { c.Endpoint = "127.0.0.1:1" }, false},
		{"no bucket", func(c *Config) { c.Bucket = "" }, false},
		{"unbounded", func(c *Config) { c.Duration = 0 }, false},
		{"epochs only", func(c *Config) { c.Duration, c.Epochs = 0, 1 }, true},
		{"put pct", func(c *Config) { c.PutPercent = 101 }, false},
		{"loader id", func(c *Config) { c.LoaderID, c.LoaderCount = 2, 2 }, false},
		{"fill both", func(c *Config) { c.FillCount, c.FillBytes = 1, 1 }, false},
		{"size range", func(c *Config) { c.MinSize, c.MaxSize = 10, 5 }, true}, // Defaults raises MaxSize
	}
	for _, tc := range tests {
		c := ok
		tc.mod(&c)
		err := c.Defaults().Validate()
		if (err == nil) != tc.ok {
			t.Errorf("%s: err = %v", tc.name, err)
		}
	}
	c := Config{MinSize: 1000, MaxSize: 3000, FillBytes: 10000}.Defaults()
	if n := c.fillCount(); n != 5 {
		t.Errorf("fill count for 10000 B of 2000 B average = %d, want 5", n)
	}
}

// BenchmarkRecorder measures how many samples a second the recorder takes
// from parallel workers, to keep it far above any request rate.
func BenchmarkRecorder(b *testing.B) {
	rec := NewRecorder(time.Now())
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			rec.Record(Sample{Op: OpGet, Start: time.Now(), Latency: time.Duration(i%1000) * time.Microsecond, TTFB: time.Microsecond, Bytes: 4096})
		}
	})
}
