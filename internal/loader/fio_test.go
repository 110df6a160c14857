package loader

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// The testdata files are real fio 3.33 output. fio-randwrite.json:
//
//	fio --name=bench --ioengine=nbd --uri=nbd+unix:///?socket=S --rw=randwrite --bs=4k --iodepth=8 --numjobs=2
//	    --size=16m --offset_increment=16m --group_reporting --output-format=json --runtime=1 --time_based
//
// against nbdkit memory (the nbd engine prints lines before the JSON);
// fio-randrw.json, reported per job:
//
//	fio --name=mixed --filename=F --rw=randrw --bs=64k --iodepth=4 --ioengine=libaio --direct=1 --numjobs=2
//	    --size=16m --output-format=json --runtime=1 --time_based
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
