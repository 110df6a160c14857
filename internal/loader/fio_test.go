package loader

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The testdata files are real fio 3.33 output and logs
// (L = --log_avg_msec=1000 --log_hist_msec=1000). fio-randwrite.*:
//
//	fio --name=bench --ioengine=nbd --uri=nbd+unix:///?socket=S --rw=randwrite --bs=4k --iodepth=8 --numjobs=2
//	    --size=16m --offset_increment=16m --group_reporting --output-format=json --runtime=3 --time_based
//	    --write_iops_log=fio-randwrite --write_bw_log=fio-randwrite --write_hist_log=fio-randwrite L
//
// against nbdkit memory (the nbd engine prints lines before the JSON);
// fio-randrw.*, reported per job:
//
//	fio --name=mixed --filename=F --rw=randrw --bs=64k --iodepth=4 --ioengine=libaio --direct=1 --numjobs=2
//	    --size=16m --output-format=json --runtime=2 --time_based
//	    --write_iops_log=fio-randrw --write_bw_log=fio-randrw --write_hist_log=fio-randrw L
func TestParseFio(t *testing.T) {
	for _, tc := range []struct {
		file    string
		results int
		ops     []string
		bs      int64
		workers int
	}{
		{"fio-randwrite.json", 1, []string{"write"}, 4 << 10, 2},
		{"fio-randrw.json", 2, []string{"read", "write"}, 64 << 10, 1},
	} {
		t.Run(tc.file, func(t *testing.T) {
			rs, err := ReadResults(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if len(rs) != tc.results {
				t.Fatalf("%d results, want %d", len(rs), tc.results)
			}
			labels := map[string]bool{}
			for _, r := range rs {
				if labels[r.Label] {
					t.Errorf("label %q twice", r.Label)
				}
				labels[r.Label] = true
				m := r.Main
				if r.Params.MinSize != tc.bs || r.Params.Workers != tc.workers {
					t.Errorf("%s: bs %d workers %d, want %d %d", r.Label, r.Params.MinSize, r.Params.Workers, tc.bs, tc.workers)
				}
				if len(m.Ops) != len(tc.ops) {
					t.Errorf("%s: ops %v, want %v", r.Label, m.Ops, tc.ops)
				}
				var ios, bytes int64
				for _, op := range tc.ops {
					o, ok := m.Ops[op]
					if !ok || o.Count == 0 || o.OpsPerSec <= 0 {
						t.Fatalf("%s: no %s ops: %+v", r.Label, op, o)
					}
					if o.Bytes != o.Count*tc.bs {
						t.Errorf("%s %s: %d bytes for %d I/Os of %d", r.Label, op, o.Bytes, o.Count, tc.bs)
					}
					l := o.Latency
					if !(l.Min <= l.P50 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max && l.Min > 0) {
						t.Errorf("%s %s: latency out of order: %+v", r.Label, op, l)
					}
					ios += o.Count
					bytes += o.Bytes
					if m.Total.Latency.P99 < l.P99 {
						t.Errorf("%s: total p99 %v below %s's %v", r.Label, m.Total.Latency.P99, op, l.P99)
					}
				}
				if m.Total.Count != ios || m.Total.Bytes != bytes {
					t.Errorf("%s: total %d I/Os %d bytes, want %d %d", r.Label, m.Total.Count, m.Total.Bytes, ios, bytes)
				}
				// fio's IOPS is its I/O count over its runtime.
				if got := float64(m.Total.Count) / m.Seconds; math.Abs(got-m.Total.OpsPerSec)/got > 0.05 {
					t.Errorf("%s: %.0f ops/s from counts, fio says %.0f", r.Label, got, m.Total.OpsPerSec)
				}
				if !r.End.After(r.Start) || m.Total.Errors != 0 {
					t.Errorf("%s: start %v end %v errors %d", r.Label, r.Start, r.End, m.Total.Errors)
				}
			}
		})
	}
}

func TestParseFioErrors(t *testing.T) {
	for _, tc := range []struct{ name, in string }{
		{"empty", ""},
		{"text", "connected to NBD server\n"},
		{"truncated", `{"fio version": "fio-3.33", "jobs": [{"jobname": "a"`},
		{"no jobs", `{"fio version": "fio-3.33", "jobs": []}`},
		{"not fio", `{"version": 1, "jobs": [{"jobname": "a", "job_runtime": 1000}]}`},
		{"no runtime", `{"fio version": "fio-3.33", "jobs": [{"jobname": "a", "job_runtime": 0}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseFio([]byte(tc.in), "x"); !errors.Is(err, ErrResult) {
				t.Fatalf("error %v, want ErrResult", err)
			}
		})
	}
	// A fio error (errno) is kept, not dropped.
	rs, err := ParseFio([]byte(`{"fio version": "fio-3.33", "jobs": [{"jobname": "a", "error": 5, "job_runtime": 500,
		"write": {"io_bytes": 4096, "total_ios": 1, "iops": 2, "clat_ns": {"min": 10, "max": 10, "mean": 10}}}]}`), "x")
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Main.Total.Errors != 1 || rs[0].Main.Errors["fio error 5"] != 1 {
		t.Fatalf("errors %+v", rs[0].Main)
	}
}

func TestFioSize(t *testing.T) {
	for in, want := range map[string]int64{"4k": 4096, "4K": 4096, "4KiB": 4096, "1m": 1 << 20, "512": 512, "64k-128k": 64 << 10,
		"4k,8k": 4096, "": 0, "x": 0, "-1": 0, "99999999999999t": 0} {
		if got := fioSize(in); got != want {
			t.Errorf("fioSize(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestIsFio(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "fio-randwrite.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !IsFio(b) || IsFio([]byte(`{"version": 1, "label": "x"}`)) || IsFio(nil) {
		t.Fatal("IsFio is wrong")
	}
}

// The testdata runs also wrote fio's per-second logs (--write_iops_log,
// --write_bw_log, --write_hist_log, 1 s windows): they become the series.
func TestFioLogs(t *testing.T) {
	for _, tc := range []struct {
		file string
		ops  []string
	}{{"fio-randwrite.json", []string{"write"}}, {"fio-randrw.json", []string{"read", "write"}}} {
		t.Run(tc.file, func(t *testing.T) {
			rs, err := ReadResults(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				if len(r.Main.Series) == 0 {
					t.Fatalf("%s: no series", r.Label)
				}
				tot := r.Main.Total
				for _, s := range r.Main.Series {
					// Each logged second runs at about the job's average rate.
					if s.Ops <= 0 || math.Abs(float64(s.Ops)-tot.OpsPerSec)/tot.OpsPerSec > 0.5 {
						t.Errorf("%s second %v: %d ops, the run averaged %.0f/s", r.Label, s.T, s.Ops, tot.OpsPerSec)
					}
					if s.Bytes != s.ReadBytes+s.WriteBytes || math.Abs(float64(s.Bytes)-tot.BytesPerSec)/tot.BytesPerSec > 0.5 {
						t.Errorf("%s second %v: %d bytes (%d read, %d written), the run averaged %.0f/s", r.Label, s.T, s.Bytes, s.ReadBytes, s.WriteBytes, tot.BytesPerSec)
					}
					for _, op := range tc.ops {
						if op == "read" && s.ReadBytes == 0 || op == "write" && s.WriteBytes == 0 {
							t.Errorf("%s second %v: no %s bytes", r.Label, s.T, op)
						}
					}
					if !(s.P50 > 0 && s.P50 <= s.P90 && s.P90 <= s.P99 && s.P99 <= s.P999 && s.P999 <= s.Max) {
						t.Errorf("%s second %v: percentiles out of order: %+v", r.Label, s.T, s)
					}
					// fio's bins are within 1/64 of the value: per-second
					// medians sit near the run's.
					if s.P50 < tot.Latency.P50/3 || s.P50 > tot.Latency.P50*3 {
						t.Errorf("%s second %v: p50 %.3f ms, the run's %.3f", r.Label, s.T, s.P50, tot.Latency.P50)
					}
				}
			}
		})
	}
}

func TestFioBinValue(t *testing.T) {
	for idx, want := range map[int]float64{0: 0, 5: 5, 127: 127, 128: 129, 191: 255, 192: 258, 255: 510} {
		if got := fioBinValue(idx); got != want {
			t.Errorf("fioBinValue(%d) = %v, want %v", idx, got, want)
		}
	}
	for i := 1; i < fioPlatNR; i++ {
		if fioBinValue(i) <= fioBinValue(i-1) {
			t.Fatalf("bin %d (%v) not above bin %d (%v)", i, fioBinValue(i), i-1, fioBinValue(i-1))
		}
	}
	h := make([]uint64, fioPlatNR)
	h[10], h[100], h[200] = 50, 49, 1 // 10 ns, 100 ns, ~ 516 ns
	for q, want := range map[float64]float64{0.5: 10, 0.9: 100, 0.99: 100, 0.999: fioBinValue(200), 1: fioBinValue(200)} {
		if got := histMS(h, q) * 1e6; math.Abs(got-want) > 1e-6 {
			t.Errorf("q %v: %v ns, want %v", q, got, want)
		}
	}
	if histMS(make([]uint64, fioPlatNR), 0.5) != 0 {
		t.Error("empty histogram has a median")
	}
}

func TestFioLogErrors(t *testing.T) {
	js, err := os.ReadFile(filepath.Join("testdata", "fio-randwrite.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, log, want string }{
		{"x_iops.1.log", "1000, many, 1, 0, 0\n", "x_iops.1.log:1: field 2"},
		{"x_bw.1.log", "1000, 5, 1, 0, 0\n1000\n", "x_bw.1.log:2:"},
		{"x_clat_hist.1.log", "1000, 1, 4096, 1, 2, 3\n", "3 histogram bins"},
		{"x_iops.1.log", "-5, 1, 1, 0, 0\n", "field 1"},
		{"x_iops.1.log", "900000, 1, 1, 0, 0\n", "run to 900 s"},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "x.json"), js, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, tc.name), []byte(tc.log), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := ReadResults(filepath.Join(dir, "x.json"))
		if !errors.Is(err, ErrResult) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %q: error %v, want ErrResult with %q", tc.name, tc.log, err, tc.want)
		}
	}
	// Logs of three jobs for a result of per-job entries (two) do not add up.
	dir := t.TempDir()
	rw, err := os.ReadFile(filepath.Join("testdata", "fio-randrw.json"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "y.json"), rw, 0o644)
	for n := 1; n <= 3; n++ {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("y_iops.%d.log", n)), []byte("1000, 5, 1, 0, 0\n"), 0o644)
	}
	if _, err := ReadResults(filepath.Join(dir, "y.json")); !errors.Is(err, ErrResult) {
		t.Errorf("3 job logs for 2 results: %v", err)
	}
}

// fio output and logs come from files users pass: any input gives results
// or ErrResult, never a panic or a result without a duration.
func FuzzParseFio(f *testing.F) {
	for _, name := range []string{"fio-randwrite.json", "fio-randrw.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "")
	}
	f.Add([]byte(`{"fio version": "3", "jobs": [{"jobname": "a", "job_runtime": 1}]}`), "1000, 5, 1, 0, 0\n2000, x")
	f.Fuzz(func(t *testing.T, js []byte, log string) {
		rs, err := ParseFio(js, "x")
		if err != nil {
			if !errors.Is(err, ErrResult) {
				t.Fatalf("error %v is not ErrResult", err)
			}
			return
		}
		for _, r := range rs {
			if !(r.Main.Seconds > 0) || r.Main.Total.Count < 0 {
				t.Fatalf("result %+v", r.Main)
			}
		}
		for _, kind := range []string{"iops", "bw", "clat_hist"} {
			secs := map[int]*fioSecond{}
			if err := parseFioLog(strings.NewReader(log), "x.log", kind, secs); err != nil {
				if !errors.Is(err, ErrResult) {
					t.Fatalf("log error %v is not ErrResult", err)
				}
				continue
			}
			for _, s := range fioSeries(secs) {
				if s.Ops < 0 || s.Bytes < 0 || s.P50 > s.Max {
					t.Fatalf("second %+v", s)
				}
			}
		}
	})
}
