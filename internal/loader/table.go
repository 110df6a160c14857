package loader

import (
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
)

// HumanBytes formats a byte count with a binary unit.
func HumanBytes(b float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for b >= 1024 && i < len(units)-1 {
		b /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.0f %s", b, units[i])
	}
	return fmt.Sprintf("%.1f %s", b, units[i])
}

// SizeRange formats the object size range of p.
func (p Params) SizeRange() string {
	if p.MinSize == p.MaxSize {
		return HumanBytes(float64(p.MinSize))
	}
	return HumanBytes(float64(p.MinSize)) + "-" + HumanBytes(float64(p.MaxSize))
}

// tableLabel is the label of r in tables, marked when the run is partial.
func tableLabel(r *Result) string {
	if r.Partial {
		return r.Label + " (partial)"
	}
	return r.Label
}

// PrintTable writes a human-readable table with one row per result, phase
// and op: throughput, latency percentiles, time to first byte and errors.
func PrintTable(w io.Writer, results ...*Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tphase\top\tsize\tworkers\tsecs\tops\tops/s\tthroughput\tavg ms\tp50 ms\tp90 ms\tp99 ms\tp99.9 ms\tmax ms\tttfb p50\terrors\t")
	for _, r := range results {
		for _, ph := range []*Phase{r.Fill, &r.Main} {
			if ph == nil {
				continue
			}
			names := make([]string, 0, len(ph.Ops))
			for op := range ph.Ops {
				names = append(names, op)
			}
			sort.Strings(names)
			for _, op := range names {
				s := ph.Ops[op]
				ttfb := "-"
				if s.TTFB != nil {
					ttfb = fmt.Sprintf("%.2f", s.TTFB.P50)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%.1f\t%d\t%.1f\t%s/s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t%d\t\n",
					tableLabel(r), ph.Name, op, r.Params.SizeRange(), r.Params.Workers, ph.Seconds, s.Count, s.OpsPerSec,
					HumanBytes(s.BytesPerSec), s.Latency.Mean, s.Latency.P50, s.Latency.P90, s.Latency.P99,
					s.Latency.P999, s.Latency.Max, ttfb, s.Errors)
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range results {
		for _, ph := range []*Phase{r.Fill, &r.Main} {
			if ph != nil && ph.Unsent > 0 {
				fmt.Fprintf(w, "%s %s: %d paced requests unsent (the target fell behind the rate; counted as errors)\n",
					tableLabel(r), ph.Name, ph.Unsent)
			}
		}
	}
	for _, r := range results {
		for _, ph := range []*Phase{r.Fill, &r.Main} {
			if ph != nil && len(ph.Errors) > 0 {
				fmt.Fprintf(w, "%s %s errors:", r.Label, ph.Name)
				kinds := make([]string, 0, len(ph.Errors))
				for k := range ph.Errors {
					kinds = append(kinds, k)
				}
				sort.Strings(kinds)
				for _, k := range kinds {
					fmt.Fprintf(w, " %s=%d", k, ph.Errors[k])
				}
				fmt.Fprintln(w)
			}
		}
	}
	return nil
}

// PrintSummary writes one line per result with the main phase's totals:
// throughput, requests per second, mean, p50 and p99 latency, paced
// requests left unsent and errors (unsent ones included). It is the short
// "direct / cold / warm" comparison.
func PrintSummary(w io.Writer, results ...*Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tworkload\tsize\tthroughput\treq/s\tavg ms\tp50 ms\tp99 ms\tunsent\terrors\t")
	for _, r := range results {
		t := r.Main.Total
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s/s\t%.1f\t%.2f\t%.2f\t%.2f\t%d\t%d\t\n", r.Label, r.Params.Workload, r.Params.SizeRange(),
			HumanBytes(t.BytesPerSec), t.OpsPerSec, t.Latency.Mean, t.Latency.P50, t.Latency.P99, r.Main.Unsent, t.Errors)
	}
	return tw.Flush()
}
