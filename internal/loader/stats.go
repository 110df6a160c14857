package loader

import (
	"encoding/base64"
	"fmt"
	"sort"
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Op is a kind of S3 request.
type Op string

// Operations the loader issues.
const (
	OpGet    Op = "GET"
	OpPut    Op = "PUT"
	OpDelete Op = "DELETE"
)

// Histogram bounds: latencies are recorded in microseconds from 1 µs to 10
// minutes with 3 significant digits (total histograms) or 2 (per-second).
const (
	histMinUs     = 1
	histMaxUs     = int64(10 * time.Minute / time.Microsecond)
	histDigits    = 3
	secHistDigits = 2
	// openSeconds is how many of the latest seconds keep a histogram; older
	// seconds are closed and keep only their percentiles.
	openSeconds = 3
)

// Sample is one finished request.
type Sample struct {
	Op Op
	// Start is when the request was sent or, with a rate limit, the slot
	// the pacer assigned it (its intended start, at or before the send).
	Start   time.Time
	Latency time.Duration // from Start until the last byte (GET) or the response (PUT)
	TTFB    time.Duration // from Start until the first body byte; zero for requests without a body
	// Service is the time from the actual send to the end (Latency less
	// the wait for a late slot); informational, not in the histograms.
	Service time.Duration
	Bytes   int64  // payload bytes moved
	Err     string // error kind; empty on success
}

// Percentiles are latency figures in milliseconds.
type Percentiles struct {
	Count int64   `json:"count"`
	Min   float64 `json:"min_ms"`
	Mean  float64 `json:"mean_ms"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p99_9_ms"`
	Max   float64 `json:"max_ms"`
}

// OpSummary sums up one kind of request over a phase.
type OpSummary struct {
	Count       int64        `json:"count"` // successful requests
	Errors      int64        `json:"errors"`
	Bytes       int64        `json:"bytes"`
	OpsPerSec   float64      `json:"ops_per_sec"`
	BytesPerSec float64      `json:"bytes_per_sec"`
	Latency     Percentiles  `json:"latency"`
	TTFB        *Percentiles `json:"ttfb,omitempty"`
}

// Second is one second of a phase's time series; requests are counted in
// the second in which they completed.
type Second struct {
	T           float64 `json:"t"`   // start of the second, seconds since the phase began
	Dur         float64 `json:"dur"` // length covered (1, or less for the last second)
	Ops         int64   `json:"ops"`
	GetOps      int64   `json:"get_ops"`
	PutOps      int64   `json:"put_ops"`
	Errors      int64   `json:"errors"`
	Bytes       int64   `json:"bytes"`
	ReadBytes   int64   `json:"read_bytes"`
	WriteBytes  int64   `json:"write_bytes"`
	OpsPerSec   float64 `json:"ops_per_sec"`
	BytesPerSec float64 `json:"bytes_per_sec"`
	P50         float64 `json:"p50_ms"`
	P90         float64 `json:"p90_ms"`
	P99         float64 `json:"p99_ms"`
	P999        float64 `json:"p99_9_ms"`
	Max         float64 `json:"max_ms"`
	TTFBP50     float64 `json:"ttfb_p50_ms"`
	TTFBP99     float64 `json:"ttfb_p99_ms"`
}

type opAcc struct {
	lat, ttfb     *hdrhistogram.Histogram
	count, errors int64
	bytes         int64
}

type secAcc struct {
	Second
	lat, ttfb *hdrhistogram.Histogram // nil once closed
}

// Recorder accumulates Samples into total histograms per op, errors by
// kind, and a per-second series. It takes every time from its arguments, so
// tests drive it with a synthetic clock. It is safe for concurrent use.
type Recorder struct {
	mu    sync.Mutex
	start time.Time
	ops   map[Op]*opAcc
	errs  map[string]int64
	secs  []*secAcc
}

// NewRecorder starts a recorder whose series begins at start.
func NewRecorder(start time.Time) *Recorder {
	return &Recorder{start: start, ops: map[Op]*opAcc{}, errs: map[string]int64{}}
}

// Start returns the start of the series.
func (r *Recorder) Start() time.Time { return r.start }

func newHist(digits int) *hdrhistogram.Histogram {
	return hdrhistogram.New(histMinUs, histMaxUs, digits)
}

func micros(d time.Duration) int64 {
	us := d.Microseconds()
	if us < histMinUs {
		us = histMinUs
	}
	if us > histMaxUs {
		us = histMaxUs
	}
	return us
}

// Record adds one finished request.
func (r *Recorder) Record(s Sample) {
	end := s.Start.Add(s.Latency)
	idx := int(end.Sub(r.start) / time.Second)
	if idx < 0 {
		idx = 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.ops[s.Op]
	if a == nil {
		a = &opAcc{lat: newHist(histDigits), ttfb: newHist(histDigits)}
		r.ops[s.Op] = a
	}
	sec := r.second(idx)
	if s.Err != "" {
		a.errors++
		r.errs[s.Err]++
		sec.Errors++
		return
	}
	a.count++
	a.bytes += s.Bytes
	_ = a.lat.RecordValue(micros(s.Latency))
	if s.TTFB > 0 {
		_ = a.ttfb.RecordValue(micros(s.TTFB))
	}
	sec.Ops++
	sec.Bytes += s.Bytes
	switch s.Op {
	case OpGet:
		sec.GetOps++
		sec.ReadBytes += s.Bytes
	case OpPut:
		sec.PutOps++
		sec.WriteBytes += s.Bytes
	}
	if sec.lat != nil {
		_ = sec.lat.RecordValue(micros(s.Latency))
		if s.TTFB > 0 {
			_ = sec.ttfb.RecordValue(micros(s.TTFB))
		}
	}
}

// second returns bucket idx, growing the series and closing buckets that
// are openSeconds behind the newest. Caller holds r.mu.
func (r *Recorder) second(idx int) *secAcc {
	for len(r.secs) <= idx {
		n := len(r.secs)
		r.secs = append(r.secs, &secAcc{Second: Second{T: float64(n), Dur: 1},
			lat: newHist(secHistDigits), ttfb: newHist(secHistDigits)})
		if old := n - openSeconds; old >= 0 {
			closeSecond(r.secs[old])
		}
	}
	return r.secs[idx]
}

func closeSecond(s *secAcc) {
	if s.lat == nil {
		return
	}
	p := percentiles(s.lat)
	s.P50, s.P90, s.P99, s.P999, s.Max = p.P50, p.P90, p.P99, p.P999, p.Max
	if s.ttfb.TotalCount() > 0 {
		s.TTFBP50 = ms(s.ttfb.ValueAtQuantile(50))
		s.TTFBP99 = ms(s.ttfb.ValueAtQuantile(99))
	}
	s.lat, s.ttfb = nil, nil
}

func ms(us int64) float64 { return float64(us) / 1000 }

func percentiles(h *hdrhistogram.Histogram) Percentiles {
	if h.TotalCount() == 0 {
		return Percentiles{}
	}
	return Percentiles{
		Count: h.TotalCount(),
		Min:   ms(h.Min()),
		Mean:  h.Mean() / 1000,
		P50:   ms(h.ValueAtQuantile(50)),
		P90:   ms(h.ValueAtQuantile(90)),
		P99:   ms(h.ValueAtQuantile(99)),
		P999:  ms(h.ValueAtQuantile(99.9)),
		Max:   ms(h.Max()),
	}
}

// Series closes all seconds up to end and returns the per-second series.
// The last second's Dur is the part of it before end.
func (r *Recorder) Series(end time.Time) []Second {
	r.mu.Lock()
	defer r.mu.Unlock()
	total := end.Sub(r.start).Seconds()
	if total > 0 {
		r.second(int((end.Sub(r.start) - 1) / time.Second))
	}
	out := make([]Second, len(r.secs))
	for i, s := range r.secs {
		closeSecond(s)
		sec := s.Second
		if rest := total - sec.T; rest > 0 && rest < 1 {
			sec.Dur = rest
		}
		if sec.Dur > 0 {
			sec.OpsPerSec = float64(sec.Ops) / sec.Dur
			sec.BytesPerSec = float64(sec.Bytes) / sec.Dur
		}
		out[i] = sec
	}
	return out
}

// Last returns the newest second that is complete at now, for a progress
// line; ok is false before the first second has ended.
func (r *Recorder) Last(now time.Time) (s Second, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	idx := int(now.Sub(r.start)/time.Second) - 1
	if idx < 0 {
		return Second{}, false
	}
	if idx >= len(r.secs) {
		return Second{T: float64(idx), Dur: 1}, true
	}
	s = r.secs[idx].Second
	if h := r.secs[idx].lat; h != nil {
		p := percentiles(h)
		s.P50, s.P99, s.Max = p.P50, p.P99, p.Max
	}
	s.OpsPerSec, s.BytesPerSec = float64(s.Ops), float64(s.Bytes)
	return s, true
}

// Summary sums up each op over the interval [start, end] and in total.
func (r *Recorder) Summary(end time.Time) (total OpSummary, ops map[string]OpSummary, errs map[string]int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	secs := end.Sub(r.start).Seconds()
	all := &opAcc{lat: newHist(histDigits), ttfb: newHist(histDigits)}
	ops = map[string]OpSummary{}
	for op, a := range r.ops {
		ops[string(op)] = summarize(a, secs)
		all.lat.Merge(a.lat)
		all.ttfb.Merge(a.ttfb)
		all.count += a.count
		all.errors += a.errors
		all.bytes += a.bytes
	}
	errs = make(map[string]int64, len(r.errs))
	for k, v := range r.errs {
		errs[k] = v
	}
	return summarize(all, secs), ops, errs
}

func summarize(a *opAcc, secs float64) OpSummary {
	s := OpSummary{Count: a.count, Errors: a.errors, Bytes: a.bytes, Latency: percentiles(a.lat)}
	if secs > 0 {
		s.OpsPerSec = float64(a.count) / secs
		s.BytesPerSec = float64(a.bytes) / secs
	}
	if a.ttfb.TotalCount() > 0 {
		p := percentiles(a.ttfb)
		s.TTFB = &p
	}
	return s
}

// Histograms returns each op's latency histogram and, for ops with a body,
// its time-to-first-byte histogram under "OP/ttfb" (microseconds), in the
// HdrHistogram V2 compressed encoding, base64, so results of several loader
// processes can be merged exactly.
func (r *Recorder) Histograms() (map[string]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]string{}
	keys := make([]string, 0, len(r.ops))
	for op := range r.ops {
		keys = append(keys, string(op))
	}
	sort.Strings(keys)
	for _, k := range keys {
		a := r.ops[Op(k)]
		for name, h := range map[string]*hdrhistogram.Histogram{k: a.lat, k + ttfbSuffix: a.ttfb} {
			if h.TotalCount() == 0 && name != k {
				continue
			}
			enc, err := encodeHistogram(h)
			if err != nil {
				return nil, fmt.Errorf("loader: encode %s histogram: %w", name, err)
			}
			out[name] = enc
		}
	}
	return out, nil
}

// ttfbSuffix marks the time-to-first-byte histogram of an op in
// Phase.Histograms ("GET/ttfb").
const ttfbSuffix = "/ttfb"

func encodeHistogram(h *hdrhistogram.Histogram) (string, error) {
	b, err := h.Encode(hdrhistogram.V2CompressedEncodingCookieBase)
	if err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

// DecodeHistogram decodes one entry of Phase.Histograms.
func DecodeHistogram(s string) (*hdrhistogram.Histogram, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%w: histogram: %w", ErrResult, err)
	}
	h, err := hdrhistogram.Decode(b)
	if err != nil {
		return nil, fmt.Errorf("%w: histogram: %w", ErrResult, err)
	}
	return h, nil
}

// pacer spaces request starts to a fixed rate shared by all workers: an
// open-loop schedule that starts at the first reservation and never slips.
// A caller that falls behind (the target is slower than the rate) gets the
// slots it missed, already due, so it sends at once and catches up; the
// latency of such a request counts from its slot, not from the late send,
// so the queueing delay is measured (no coordinated omission).
type pacer struct {
	mu       sync.Mutex
	interval time.Duration
	first    time.Time // the first slot; zero until the first reservation
	next     time.Time // zero until the first reservation
}

func newPacer(perSecond float64) *pacer {
	if perSecond <= 0 {
		return nil
	}
	return &pacer{interval: time.Duration(float64(time.Second) / perSecond)}
}

// reserve returns the slot of the caller's request: the intended start, in
// the past when the schedule is behind now.
func (p *pacer) reserve(now time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.next.IsZero() {
		p.first, p.next = now, now
	}
	t := p.next
	p.next = p.next.Add(p.interval)
	return t
}

// due returns how many slots of the schedule fall before end, reserved or
// not: the requests an open-loop run at this rate owes by then.
func (p *pacer) due(end time.Time) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.first.IsZero() || !end.After(p.first) {
		return 0
	}
	d := end.Sub(p.first)
	return int64((d + p.interval - 1) / p.interval)
}
