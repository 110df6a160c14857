package loader

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/slipstream-io/slipstream/internal/sysstat"
)

// ResultVersion is the version of the result file format.
const ResultVersion = 1

// Result is everything one run measured; it is what the JSON result file
// holds and what reports are rendered from.
type Result struct {
	Version int       `json:"version"`
	Label   string    `json:"label"`
	Params  Params    `json:"params"`
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
	Fill    *Phase    `json:"fill,omitempty"`
	Main    Phase     `json:"main"`
	// Nodes holds the raw snapshots of each stats endpoint, one a second,
	// over the whole run (fill included); sysstat.Rates turns them into
	// throughput and utilisation.
	Nodes   []NodeStats `json:"nodes,omitempty"`
	Cleanup *Cleanup    `json:"cleanup,omitempty"`
	// Partial marks a run that ended early (interrupted, failed, too many
	// errors): the figures cover only what it measured. Error is the reason.
	Partial bool   `json:"partial,omitempty"`
	Error   string `json:"error,omitempty"`
}

// Params records the run's configuration (without credentials).
type Params struct {
	Endpoint   string `json:"endpoint"`
	Bucket     string `json:"bucket"`
	Prefix     string `json:"prefix"`
	Workload   string `json:"workload"`
	PutPercent int    `json:"put_percent"`
	Workers    int    `json:"workers"`
	// MinSize and MaxSize are the object size range of the run: that of
	// its fill and PUTs, or, over a dataset it listed, that of the objects
	// it read (widened by its PUTs' range in a mixed run).
	MinSize     int64    `json:"min_size"`
	MaxSize     int64    `json:"max_size"`
	Duration    string   `json:"duration,omitempty"`
	Epochs      int      `json:"epochs,omitempty"`
	MaxOps      int64    `json:"max_ops,omitempty"`
	RateLimit   float64  `json:"rate_limit,omitempty"`
	Objects     int      `json:"objects"` // dataset objects this loader used
	LoaderID    int      `json:"loader_id"`
	LoaderCount int      `json:"loader_count"`
	Router      string   `json:"router"`
	StatsURLs   []string `json:"stats_urls,omitempty"`
	Seed        int64    `json:"seed"`
	Host        string   `json:"host,omitempty"`

	// RequestTimeout is Config.RequestTimeout ("" = none).
	RequestTimeout string `json:"request_timeout,omitempty"`
}

// Phase is the measurement of one phase (fill or main).
type Phase struct {
	Name    string               `json:"name"`
	Start   time.Time            `json:"start"`
	End     time.Time            `json:"end"`
	Seconds float64              `json:"seconds"`
	Epochs  int                  `json:"epochs_done,omitempty"`
	Total   OpSummary            `json:"total"`
	Ops     map[string]OpSummary `json:"ops"`
	Errors  map[string]int64     `json:"errors,omitempty"`
	// Unsent counts the slots of a rate-limited (open-loop) schedule that
	// fell due before the phase's end (its Duration, or the moment it was
	// interrupted or stopped) but were never sent, because every worker was
	// still busy with a slow target. The run being open loop, each is a
	// request the target failed to take: it is counted as a failed request,
	// in Total.Errors and as Errors["unsent"], so the error rate shows the
	// saturation (the ops per second count successes only, so they are
	// not inflated either). Unsent slots have no op and no completion time,
	// so they are in neither Ops nor Series. Zero without a rate limit, and
	// when the phase ended by its count (MaxOps reached, Epochs done).
	Unsent int64    `json:"unsent,omitempty"`
	Series []Second `json:"series"`
	// Histograms are the per-op latency histograms, HdrHistogram V2
	// compressed, base64, in microseconds (see DecodeHistogram).
	Histograms map[string]string `json:"histograms,omitempty"`
}

// NodeStats is what one stats endpoint returned during the run.
type NodeStats struct {
	URL     string             `json:"url"`
	Samples []sysstat.Snapshot `json:"samples"`
	// Received is when each sample arrived, on the loader's clock, so
	// charts stay aligned with the request series when a node's clock
	// differs.
	Received  []time.Time `json:"received,omitempty"`
	Errors    int         `json:"errors,omitempty"`
	LastError string      `json:"last_error,omitempty"`
}

// Rates returns the per-second rates between consecutive samples. Each
// rate's Time is the end of its interval on the loader's clock when
// arrival times were recorded, else on the node's.
func (n NodeStats) Rates() []sysstat.Rate {
	var out []sysstat.Rate
	aligned := len(n.Received) == len(n.Samples)
	for i := 1; i < len(n.Samples); i++ {
		r := sysstat.Rates(n.Samples[i-1], n.Samples[i])
		if r.Interval <= 0 {
			continue
		}
		if aligned {
			r.Time = n.Received[i]
		}
		out = append(out, r)
	}
	return out
}

// Cleanup reports the deletion of what the run created.
type Cleanup struct {
	Deleted int `json:"deleted"`
	Errors  int `json:"errors"`
}

// CounterDelta sums, over the nodes, how much the node counter name grew
// from the first sample of the run to the last (0 without samples).
func (r *Result) CounterDelta(name string) float64 {
	var d float64
	for _, n := range r.Nodes {
		if len(n.Samples) > 1 {
			d += n.Samples[len(n.Samples)-1].Counters[name] - n.Samples[0].Counters[name]
		}
	}
	return d
}

// WriteJSON writes r to path, indented, atomically: it writes a temporary
// file in the same directory and renames it to path, so path never holds a
// truncated result.
func (r *Result) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("loader: encode result: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("loader: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("loader: write result: %w", err)
	}
	return nil
}

// ReadResult reads a result file written by WriteJSON.
func ReadResult(path string) (*Result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("loader: %w", err)
	}
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrResult, path, err)
	}
	if r.Version != ResultVersion {
		return nil, fmt.Errorf("%w: %s: version %d, want %d", ErrResult, path, r.Version, ResultVersion)
	}
	return &r, nil
}

var csvHeader = []string{"phase", "t", "dur", "ops", "get_ops", "put_ops", "errors", "bytes", "read_bytes", "write_bytes",
	"ops_per_sec", "bytes_per_sec", "p50_ms", "p90_ms", "p99_ms", "p99_9_ms", "max_ms", "ttfb_p50_ms", "ttfb_p99_ms"}

// WriteCSV writes the per-second series of every phase as CSV.
func (r *Result) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader); err != nil {
		return err
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	n := func(v int64) string { return strconv.FormatInt(v, 10) }
	phases := []*Phase{r.Fill, &r.Main}
	for _, p := range phases {
		if p == nil {
			continue
		}
		for _, s := range p.Series {
			if err := cw.Write([]string{p.Name, f(s.T), f(s.Dur), n(s.Ops), n(s.GetOps), n(s.PutOps), n(s.Errors),
				n(s.Bytes), n(s.ReadBytes), n(s.WriteBytes), f(s.OpsPerSec), f(s.BytesPerSec),
				f(s.P50), f(s.P90), f(s.P99), f(s.P999), f(s.Max), f(s.TTFBP50), f(s.TTFBP99)}); err != nil {
				return err
			}
		}
	}
	cw.Flush()
	return cw.Error()
}
