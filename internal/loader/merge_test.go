package loader

import (
	"errors"
	"testing"
	"time"
)

func phaseOf(t *testing.T, start time.Time, lo, hi int) Phase {
	t.Helper()
	rec := NewRecorder(start)
	for i := lo; i <= hi; i++ {
		at := start.Add(time.Duration(i-lo) * 1900 * time.Millisecond / time.Duration(hi-lo+1)) // spread over 1.9 s
		rec.Record(Sample{Op: OpGet, Start: at, Latency: time.Duration(i) * time.Millisecond / 100, TTFB: time.Millisecond, Bytes: 10})
	}
	p, err := buildPhase("main", rec, start.Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestMerge: two loaders, one with latencies 0.01..5 ms and one with
// 5.01..10 ms, started one second apart. The merged percentiles are those
// of 0.01..10 ms; counts add; series line up on wall-clock seconds.
func TestMerge(t *testing.T) {
	a := &Result{Version: ResultVersion, Label: "a", Start: t0, End: t0.Add(2 * time.Second), Main: phaseOf(t, t0, 1, 500), Params: Params{Objects: 5}}
	t1 := t0.Add(time.Second)
	b := &Result{Version: ResultVersion, Label: "b", Start: t1, End: t1.Add(2 * time.Second), Main: phaseOf(t, t1, 501, 1000), Params: Params{Objects: 7}}
	m, err := Merge("ab", a, b)
	if err != nil {
		t.Fatal(err)
	}
	get := m.Main.Ops["GET"]
	if get.Count != 1000 || get.Bytes != 10000 || m.Params.Objects != 12 || m.Label != "ab" {
		t.Fatalf("merged %+v objects %d", get, m.Params.Objects)
	}
	if !near(get.Latency.P50, 5, 0.01) || !near(get.Latency.P99, 9.9, 0.01) || !near(get.Latency.Max, 10, 0.01) {
		t.Fatalf("merged latency %+v", get.Latency)
	}
	if get.TTFB == nil || !near(get.TTFB.P50, 1, 0.01) {
		t.Fatalf("merged ttfb %+v", get.TTFB)
	}
	if m.Main.Seconds != 3 || !near(get.OpsPerSec, 1000.0/3, 1e-9) {
		t.Fatalf("merged span %v s, %v ops/s", m.Main.Seconds, get.OpsPerSec)
	}
	if len(m.Main.Series) != 3 {
		t.Fatalf("%d merged seconds", len(m.Main.Series))
	}
	sa, sb, s := a.Main.Series, b.Main.Series, m.Main.Series
	if s[0].Ops != sa[0].Ops || s[1].Ops != sa[1].Ops+sb[0].Ops || s[2].Ops != sb[1].Ops || s[1].Ops == 0 {
		t.Fatalf("merged series ops %d %d %d from %d %d + %d %d", s[0].Ops, s[1].Ops, s[2].Ops, sa[0].Ops, sa[1].Ops, sb[0].Ops, sb[1].Ops)
	}
	if s[1].Max != max(sa[1].Max, sb[0].Max) {
		t.Fatalf("merged max %v", s[1].Max)
	}
	if m.Main.Total.Count != 1000 || !near(m.Main.Total.Latency.P50, 5, 0.01) {
		t.Fatalf("merged total %+v", m.Main.Total)
	}
	if _, err := Merge("x"); !errors.Is(err, ErrResult) {
		t.Fatalf("empty merge err = %v", err)
	}
	b.Main.Histograms = nil
	if _, err := Merge("x", a, b); !errors.Is(err, ErrResult) {
		t.Fatalf("merge without histograms err = %v", err)
	}
}

// Merging results where one loader's run is partial gives a partial result
// carrying that loader's error.
func TestMergeKeepsPartial(t *testing.T) {
	a := &Result{Version: ResultVersion, Label: "a", Start: t0, End: t0.Add(2 * time.Second), Main: phaseOf(t, t0, 1, 10)}
	b := &Result{Version: ResultVersion, Label: "b", Start: t0, End: t0.Add(2 * time.Second), Main: phaseOf(t, t0, 11, 20),
		Partial: true, Error: "context canceled"}
	m, err := Merge("ab", a, b)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Partial || m.Error != "context canceled" {
		t.Errorf("merged partial=%v error=%q, want true and b's error", m.Partial, m.Error)
	}
}
