package loader

import (
	"fmt"
	"math"
	"sort"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Merge combines the results of loaders that ran at the same time (for
// example one dataset split with LoaderID/LoaderCount) into one result
// labelled label. Counts and bytes add up; latency and time-to-first-byte
// percentiles come from the merged HDR histograms, so they are exact; the
// per-second series are aligned on wall-clock seconds from the earliest
// start, and a second's percentiles are the largest of the loaders' (an
// upper bound). Node stats are taken from the first result that has them.
func Merge(label string, rs ...*Result) (*Result, error) {
	if len(rs) == 0 {
		return nil, fmt.Errorf("%w: nothing to merge", ErrResult)
	}
	if len(rs) == 1 {
		c := *rs[0]
		c.Label = label
		return &c, nil
	}
	out := &Result{Version: ResultVersion, Label: label, Params: rs[0].Params, Start: rs[0].Start, End: rs[0].End}
	out.Params.Objects = 0
	var fills []*Phase
	mains := make([]*Phase, 0, len(rs))
	for _, r := range rs {
		if r.Start.Before(out.Start) {
			out.Start = r.Start
		}
		if r.End.After(out.End) {
			out.End = r.End
		}
		out.Params.Objects += r.Params.Objects
		// Loaders that split a listed dataset each saw their share's sizes.
		out.Params.MinSize = min(out.Params.MinSize, r.Params.MinSize)
		out.Params.MaxSize = max(out.Params.MaxSize, r.Params.MaxSize)
		if r.Fill != nil {
			fills = append(fills, r.Fill)
		}
		mains = append(mains, &r.Main)
		if out.Nodes == nil && len(r.Nodes) > 0 {
			out.Nodes = r.Nodes
		}
		if r.Partial && !out.Partial {
			out.Partial, out.Error = true, r.Error
		}
		if r.Cleanup != nil {
			if out.Cleanup == nil {
				out.Cleanup = &Cleanup{}
			}
			out.Cleanup.Deleted += r.Cleanup.Deleted
			out.Cleanup.Errors += r.Cleanup.Errors
		}
	}
	var err error
	if len(fills) > 0 {
		var f Phase
		if f, err = mergePhases(fills); err != nil {
			return nil, err
		}
		out.Fill = &f
	}
	if out.Main, err = mergePhases(mains); err != nil {
		return nil, err
	}
	return out, nil
}

func mergePhases(ps []*Phase) (Phase, error) {
	m := Phase{Name: ps[0].Name, Start: ps[0].Start, End: ps[0].End, Epochs: ps[0].Epochs, Ops: map[string]OpSummary{}}
	for _, p := range ps {
		if p.Start.Before(m.Start) {
			m.Start = p.Start
		}
		if p.End.After(m.End) {
			m.End = p.End
		}
		m.Epochs = min(m.Epochs, p.Epochs)
	}
	m.Seconds = m.End.Sub(m.Start).Seconds()

	// Histograms, by name, merged exactly.
	hists := map[string]*hdrhistogram.Histogram{}
	for _, p := range ps {
		for name, enc := range p.Histograms {
			h, err := DecodeHistogram(enc)
			if err != nil {
				return Phase{}, fmt.Errorf("%w: %s histogram %s", err, p.Name, name)
			}
			if hists[name] == nil {
				hists[name] = newHist(histDigits)
			}
			hists[name].Merge(h)
		}
		for k, v := range p.Errors {
			if m.Errors == nil {
				m.Errors = map[string]int64{}
			}
			m.Errors[k] += v
		}
		m.Unsent += p.Unsent
	}
	all, allTTFB := newHist(histDigits), newHist(histDigits)
	for _, p := range ps {
		for op, s := range p.Ops {
			if _, ok := p.Histograms[op]; !ok && s.Count > 0 {
				return Phase{}, fmt.Errorf("%w: %s phase has no %s histogram to merge", ErrResult, p.Name, op)
			}
			a := m.Ops[op]
			a.Count += s.Count
			a.Errors += s.Errors
			a.Bytes += s.Bytes
			m.Ops[op] = a
		}
	}
	for op, a := range m.Ops {
		if h := hists[op]; h != nil {
			a.Latency = percentiles(h)
			all.Merge(h)
		}
		if h := hists[op+ttfbSuffix]; h != nil && h.TotalCount() > 0 {
			p := percentiles(h)
			a.TTFB = &p
			allTTFB.Merge(h)
		}
		if m.Seconds > 0 {
			a.OpsPerSec = float64(a.Count) / m.Seconds
			a.BytesPerSec = float64(a.Bytes) / m.Seconds
		}
		m.Ops[op] = a
		m.Total.Count += a.Count
		m.Total.Errors += a.Errors
		m.Total.Bytes += a.Bytes
	}
	m.Total.Errors += m.Unsent // failed requests of no op (see Phase.Unsent)
	m.Total.Latency = percentiles(all)
	if allTTFB.TotalCount() > 0 {
		p := percentiles(allTTFB)
		m.Total.TTFB = &p
	}
	if m.Seconds > 0 {
		m.Total.OpsPerSec = float64(m.Total.Count) / m.Seconds
		m.Total.BytesPerSec = float64(m.Total.Bytes) / m.Seconds
	}
	m.Histograms = map[string]string{}
	names := make([]string, 0, len(hists))
	for n := range hists {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		enc, err := encodeHistogram(hists[n])
		if err != nil {
			return Phase{}, fmt.Errorf("loader: encode %s histogram: %w", n, err)
		}
		m.Histograms[n] = enc
	}
	m.Series = mergeSeries(m.Start, ps)
	return m, nil
}

func mergeSeries(start time.Time, ps []*Phase) []Second {
	var out []Second
	for _, p := range ps {
		off := int(math.Round(p.Start.Sub(start).Seconds()))
		for _, s := range p.Series {
			k := off + int(s.T)
			for len(out) <= k {
				out = append(out, Second{T: float64(len(out))})
			}
			o := &out[k]
			o.Dur = math.Max(o.Dur, s.Dur)
			o.Ops += s.Ops
			o.GetOps += s.GetOps
			o.PutOps += s.PutOps
			o.Errors += s.Errors
			o.Bytes += s.Bytes
			o.ReadBytes += s.ReadBytes
			o.WriteBytes += s.WriteBytes
			o.P50, o.P90, o.P99 = math.Max(o.P50, s.P50), math.Max(o.P90, s.P90), math.Max(o.P99, s.P99)
			o.P999, o.Max = math.Max(o.P999, s.P999), math.Max(o.Max, s.Max)
			o.TTFBP50, o.TTFBP99 = math.Max(o.TTFBP50, s.TTFBP50), math.Max(o.TTFBP99, s.TTFBP99)
		}
	}
	for i := range out {
		if out[i].Dur == 0 {
			out[i].Dur = 1
		}
		out[i].OpsPerSec = float64(out[i].Ops) / out[i].Dur
		out[i].BytesPerSec = float64(out[i].Bytes) / out[i].Dur
	}
	return out
}
