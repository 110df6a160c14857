package loader

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// fio's JSON output (fio --output-format=json), the parts a report uses.
type fioDoc struct {
	Version     string            `json:"fio version"`
	TimestampMS int64             `json:"timestamp_ms"`
	Global      map[string]string `json:"global options"`
	Jobs        []struct {
		Name      string            `json:"jobname"`
		Error     int               `json:"error"`
		Options   map[string]string `json:"job options"`
		RuntimeMS float64           `json:"job_runtime"`
		Read      fioSide           `json:"read"`
		Write     fioSide           `json:"write"`
		Trim      fioSide           `json:"trim"`
	} `json:"jobs"`
}

type fioSide struct {
	IOBytes  int64   `json:"io_bytes"`
	BW       float64 `json:"bw_bytes"`
	IOPS     float64 `json:"iops"`
	TotalIOs int64   `json:"total_ios"`
	Clat     struct {
		Min, Max, Mean float64
		Percentile     map[string]float64 `json:"percentile"`
	} `json:"clat_ns"`
}

// IsFio reports whether b looks like fio's JSON output: a JSON object
// with a "fio version" key, after any lines an I/O engine printed first.
func IsFio(b []byte) bool {
	i := bytes.IndexByte(b, '{')
	return i >= 0 && bytes.Contains(b[i:min(len(b), i+256)], []byte(`"fio version"`))
}

// ParseFio turns fio's JSON output into one Result per job (one in all
// with --group_reporting), so that fio runs go into the same tables and
// comparison charts as load runs. name labels the results (job names are
// appended when there are several). Latency is fio's completion latency
// (clat); a job that reads and writes gets the larger of the two
// percentiles in its total. fio's JSON has no per-second series:
// ReadResults takes them from fio's logs.
func ParseFio(b []byte, name string) ([]*Result, error) {
	i := bytes.IndexByte(b, '{')
	if i < 0 {
		return nil, fmt.Errorf("%w: %s: no JSON in fio output", ErrResult, name)
	}
	var doc fioDoc
	if err := json.NewDecoder(bytes.NewReader(b[i:])).Decode(&doc); err != nil {
		return nil, fmt.Errorf("%w: %s: fio JSON: %w", ErrResult, name, err)
	}
	if doc.Version == "" || len(doc.Jobs) == 0 {
		return nil, fmt.Errorf("%w: %s: not fio JSON output (no \"fio version\" or no jobs)", ErrResult, name)
	}
	end := time.UnixMilli(doc.TimestampMS).UTC()
	names := map[string]int{}
	for _, j := range doc.Jobs {
		names[j.Name]++
	}
	seen := map[string]int{}
	var out []*Result
	for _, j := range doc.Jobs {
		opt := func(k string) string {
			if v, ok := j.Options[k]; ok {
				return v
			}
			return doc.Global[k]
		}
		// With --group_reporting job_runtime is the sum over the group's
		// jobs; fio's own rate (I/Os over IOPS) gives the wall time.
		secs := 0.0
		for _, s := range []fioSide{j.Read, j.Write, j.Trim} {
			if s.IOPS > 0 {
				secs = max(secs, float64(s.TotalIOs)/s.IOPS)
			}
		}
		if secs == 0 {
			secs = j.RuntimeMS / 1000
		}
		if secs <= 0 || math.IsNaN(secs) || math.IsInf(secs, 0) {
			return nil, fmt.Errorf("%w: %s: job %q ran for %v ms", ErrResult, name, j.Name, j.RuntimeMS)
		}
		label := name
		if len(doc.Jobs) > 1 {
			label += "/" + j.Name
		}
		if names[j.Name] > 1 {
			seen[j.Name]++
			label += "." + strconv.Itoa(seen[j.Name])
		}
		bs := fioSize(opt("bs"))
		// --group_reporting folds a job's numjobs clones into one entry;
		// without it every clone is an entry of its own.
		workers := fioInt(opt("numjobs"))
		if names[j.Name] > 1 {
			workers = 1
		}
		r := &Result{Version: ResultVersion, Label: label, Start: end.Add(-time.Duration(secs * float64(time.Second))), End: end,
			Params: Params{Workload: "fio " + opt("rw") + " iodepth " + orOne(opt("iodepth")), Workers: workers, MinSize: bs, MaxSize: bs}}
		r.Main = Phase{Name: "main", Start: r.Start, End: end, Seconds: secs, Ops: map[string]OpSummary{}}
		for _, s := range []struct {
			op   string
			side fioSide
		}{{"read", j.Read}, {"write", j.Write}, {"trim", j.Trim}} {
			if s.side.TotalIOs == 0 {
				continue
			}
			o := s.side.summary()
			r.Main.Ops[s.op] = o
			t := &r.Main.Total
			t.Count += o.Count
			t.Bytes += o.Bytes
			t.OpsPerSec += o.OpsPerSec
			t.BytesPerSec += o.BytesPerSec
			t.Latency = worse(t.Latency, o.Latency)
		}
		if j.Error != 0 {
			r.Main.Total.Errors = 1
			r.Main.Errors = map[string]int64{"fio error " + strconv.Itoa(j.Error): 1}
		}
		out = append(out, r)
	}
	return out, nil
}

// ReadResults reads a result file of `slipstream load` or fio's JSON
// output; results are labelled by file name. fio's per-second logs next to
// X.json (see readFioLogs) become the results' time series.
func ReadResults(path string) ([]*Result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("loader: %w", err)
	}
	if IsFio(b) {
		rs, err := ParseFio(b, strings.TrimSuffix(filepath.Base(path), filepath.Ext(path)))
		if err != nil {
			return nil, err
		}
		if err := readFioLogs(strings.TrimSuffix(path, filepath.Ext(path)), rs); err != nil {
			return nil, err
		}
		return rs, nil
	}
	r, err := ReadResult(path)
	if err != nil {
		return nil, err
	}
	return []*Result{r}, nil
}

func (s fioSide) summary() OpSummary {
	ms := func(ns float64) float64 { return ns / 1e6 }
	pct := func(k string) float64 { return ms(s.Clat.Percentile[k]) }
	return OpSummary{Count: s.TotalIOs, Bytes: s.IOBytes, OpsPerSec: s.IOPS, BytesPerSec: s.BW,
		Latency: Percentiles{Count: s.TotalIOs, Min: ms(s.Clat.Min), Mean: ms(s.Clat.Mean), Max: ms(s.Clat.Max),
			P50: pct("50.000000"), P90: pct("90.000000"), P99: pct("99.000000"), P999: pct("99.900000")}}
}

// worse combines the latency of two kinds of request: counts add, the
// mean is weighted, percentiles and extremes take the worse side.
func worse(a, b Percentiles) Percentiles {
	if a.Count == 0 {
		return b
	}
	n := a.Count + b.Count
	return Percentiles{Count: n, Min: math.Min(a.Min, b.Min), Max: math.Max(a.Max, b.Max),
		Mean: (a.Mean*float64(a.Count) + b.Mean*float64(b.Count)) / float64(n),
		P50:  math.Max(a.P50, b.P50), P90: math.Max(a.P90, b.P90), P99: math.Max(a.P99, b.P99), P999: math.Max(a.P999, b.P999)}
}

// fioSize parses a block size option such as "4k", "1m" or "4096" (fio's
// units are powers of two); a range or a list yields its first size.
func fioSize(s string) int64 {
	s = strings.ToLower(strings.TrimSpace(s))
	if i := strings.IndexAny(s, "-:,/"); i >= 0 {
		s = s[:i]
	}
	s = strings.TrimSuffix(strings.TrimSuffix(s, "b"), "i")
	mult := int64(1)
	if n := len(s); n > 0 {
		if k := strings.IndexByte("kmgt", s[n-1]); k >= 0 {
			mult, s = int64(1)<<(10*(k+1)), s[:n-1]
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 || v > math.MaxInt64/mult {
		return 0
	}
	return v * mult
}

func fioInt(s string) int {
	v, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || v < 1 {
		return 1
	}
	return v
}

func orOne(s string) string {
	if s == "" {
		return "1"
	}
	return s
}
