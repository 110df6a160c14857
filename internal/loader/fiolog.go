package loader

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// fio's latency histogram (stat.h): FIO_IO_U_PLAT_BITS 6, 29 groups of 64
// bins over nanoseconds.
const (
	fioPlatBits = 6
	fioPlatVal  = 1 << fioPlatBits
	fioPlatNR   = 29 * fioPlatVal
)

// fioBinValue is the latency in nanoseconds that histogram bin idx stands
// for: the middle of its range (fio's plat_idx_to_val).
func fioBinValue(idx int) float64 {
	if idx < fioPlatVal<<1 {
		return float64(idx)
	}
	errBits := idx>>fioPlatBits - 1
	base := math.Ldexp(1, errBits+fioPlatBits)
	k := float64(idx % fioPlatVal)
	return base + (k+0.5)*math.Ldexp(1, errBits)
}

// fioSecond gathers one second of fio's logs over the jobs of a result.
type fioSecond struct {
	ops, readOps, writeOps float64
	readBytes, writeBytes  float64
	hist                   []uint64
	rated                  bool // an iops or bw log has this second
}

// readFioLogs reads the per-second logs fio writes with
//
//	--write_iops_log=X --write_bw_log=X --write_hist_log=X --log_avg_msec=1000 --log_hist_msec=1000
//
// (X_iops.N.log, X_bw.N.log, X_clat_hist.N.log for job N) into the
// results' series: requests and bytes per second from the iops and
// bandwidth logs, latency percentiles per second from the histogram log.
// One result (--group_reporting) sums every job's logs; several results
// take job N's logs each. Without logs the results keep no series.
func readFioLogs(prefix string, rs []*Result) error {
	jobs := map[int]bool{}
	kinds := []string{"iops", "bw", "clat_hist"}
	for _, kind := range kinds {
		files, _ := filepath.Glob(globEscape(prefix) + "_" + kind + ".*.log")
		for _, f := range files {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(f, prefix+"_"+kind+"."), ".log"))
			if err == nil && n > 0 {
				jobs[n] = true
			}
		}
	}
	if len(jobs) == 0 {
		return nil
	}
	if len(rs) != 1 && len(rs) != len(jobs) {
		return fmt.Errorf("%w: %s: logs of %d fio jobs for %d results", ErrResult, prefix, len(jobs), len(rs))
	}
	nums := make([]int, 0, len(jobs))
	for n := range jobs {
		nums = append(nums, n)
	}
	sort.Ints(nums)
	secs := make([]map[int]*fioSecond, len(rs))
	for i, n := range nums {
		ri := 0
		if len(rs) > 1 {
			ri = i
		}
		if secs[ri] == nil {
			secs[ri] = map[int]*fioSecond{}
		}
		for _, kind := range kinds {
			if err := readFioLog(fmt.Sprintf("%s_%s.%d.log", prefix, kind, n), kind, secs[ri]); err != nil {
				return err
			}
		}
	}
	for i, r := range rs {
		for sec := range secs[i] {
			// Logged windows end within the job's run (plus its ramp).
			if float64(sec) > 2*r.Main.Seconds+60 {
				return fmt.Errorf("%w: %s: logs of %q run to %d s, the job ran %.0f s", ErrResult, prefix, r.Label, sec+1, r.Main.Seconds)
			}
		}
		r.Main.Series = fioSeries(secs[i])
	}
	return nil
}

// readFioLog adds one log file to secs; a missing file is no error.
func readFioLog(path, kind string, secs map[int]*fioSecond) error {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("loader: %w", err)
	}
	defer f.Close()
	return parseFioLog(f, path, kind, secs)
}

// parseFioLog adds the lines of a log of kind ("iops", "bw" or
// "clat_hist") to secs; errors name path and line.
func parseFioLog(r io.Reader, path, kind string, secs map[int]*fioSecond) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		fields := strings.Split(text, ",")
		bad := func(why string) error {
			return fmt.Errorf("%w: %s:%d: %s", ErrResult, path, line, why)
		}
		num := func(i int) (float64, error) {
			v, err := strconv.ParseFloat(strings.TrimSpace(fields[i]), 64)
			if err != nil || v < 0 || math.IsInf(v, 0) {
				return 0, bad(fmt.Sprintf("field %d is not a count: %q", i+1, fields[i]))
			}
			return v, nil
		}
		if len(fields) < 3 {
			return bad("want time, value or direction, ...")
		}
		msec, err := num(0)
		if err != nil {
			return err
		}
		// A window of --log_avg_msec=1000 is logged at its end, at about
		// 1000, 2000... ms.
		sec := max(0, int(math.Round(msec/1000))-1)
		if sec > 1<<20 {
			return bad("time beyond 12 days")
		}
		s := secs[sec]
		if s == nil {
			s = &fioSecond{}
			secs[sec] = s
		}
		if kind == "clat_hist" {
			// time, direction, block size, bins...
			if len(fields) != 3+fioPlatNR {
				return bad(fmt.Sprintf("%d histogram bins, want %d (fio's log_hist_coarseness must be 0)", len(fields)-3, fioPlatNR))
			}
			if s.hist == nil {
				s.hist = make([]uint64, fioPlatNR)
			}
			for i := range fioPlatNR {
				v, err := num(3 + i)
				if err != nil {
					return err
				}
				s.hist[i] += uint64(v)
			}
			continue
		}
		// time, value, direction, block size, offset[, priority]
		v, err := num(1)
		if err != nil {
			return err
		}
		dir := strings.TrimSpace(fields[2])
		s.rated = true
		switch kind {
		case "iops":
			s.ops += v
			switch dir {
			case "0":
				s.readOps += v
			case "1":
				s.writeOps += v
			}
		case "bw": // KiB/s
			switch dir {
			case "0":
				s.readBytes += v * 1024
			case "1":
				s.writeBytes += v * 1024
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrResult, path, err)
	}
	return nil
}

// fioSeries turns the gathered seconds into a phase's series.
func fioSeries(secs map[int]*fioSecond) []Second {
	last, rated := -1, false
	for k, s := range secs {
		last, rated = max(last, k), rated || s.rated
	}
	var out []Second
	for k := 0; k <= last; k++ {
		s := secs[k]
		if s == nil {
			s = &fioSecond{}
		}
		if rated && !s.rated {
			// The histogram log has a last, partial window the iops and
			// bandwidth logs leave out: its rate is unknown.
			continue
		}
		o := Second{T: float64(k), Dur: 1, Ops: int64(math.Round(s.ops)), GetOps: int64(math.Round(s.readOps)), PutOps: int64(math.Round(s.writeOps)),
			ReadBytes: int64(s.readBytes), WriteBytes: int64(s.writeBytes)}
		o.Bytes = o.ReadBytes + o.WriteBytes
		o.OpsPerSec, o.BytesPerSec = float64(o.Ops), float64(o.Bytes)
		if s.hist != nil {
			o.P50, o.P90, o.P99, o.P999, o.Max = histMS(s.hist, 0.5), histMS(s.hist, 0.9), histMS(s.hist, 0.99), histMS(s.hist, 0.999), histMS(s.hist, 1)
			if o.Ops == 0 { // no iops log: count the histogram's samples
				for _, c := range s.hist {
					o.Ops += int64(c)
				}
				o.OpsPerSec = float64(o.Ops)
			}
		}
		out = append(out, o)
	}
	return out
}

// histMS is the q-quantile of a fio histogram in milliseconds (q = 1: the
// highest non-empty bin).
func histMS(h []uint64, q float64) float64 {
	var total uint64
	for _, c := range h {
		total += c
	}
	if total == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(total)))
	var cum uint64
	for i, c := range h {
		cum += c
		if c > 0 && cum >= want {
			return fioBinValue(i) / 1e6
		}
	}
	return 0
}

// globEscape quotes the glob metacharacters of a literal path.
func globEscape(p string) string {
	var b strings.Builder
	for _, r := range p {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
