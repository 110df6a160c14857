// Package loader is Slipstream's S3 load generator (in the class of
// aisloader and warp). It talks plain S3 to any endpoint through the AWS SDK
// for Go v2: a fill phase creates a dataset, then workers run GET, PUT or a
// mix for a duration and/or a number of epochs (an epoch reads every object
// of the dataset once, in random order, each worker taking the next object).
// It records HDR latency histograms, time to first byte, errors by kind and
// a per-second time series, samples the nodes' stats endpoints while it
// runs, and writes everything into one Result.
package loader

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Sentinel errors.
var (
	// ErrConfig reports an invalid Config.
	ErrConfig = errors.New("loader: bad config")
	// ErrNoDataset reports a read workload with no objects to read.
	ErrNoDataset = errors.New("loader: no dataset")
	// ErrResult reports an unreadable result file.
	ErrResult = errors.New("loader: bad result")
	// ErrTooManyErrors stops a run whose requests keep failing.
	ErrTooManyErrors = errors.New("loader: too many errors")
)

// DefaultRequestTimeout is the default Config.RequestTimeout.
const DefaultRequestTimeout = 60 * time.Second

// Clock tells the time; tests substitute a synthetic one.
type Clock interface {
	Now() time.Time
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Config describes one run. Zero values get defaults (see Defaults).
type Config struct {
	// Endpoint is the S3 base URL, e.g. "http://127.0.0.1:9000".
	Endpoint  string
	Region    string // default "us-east-1"
	AccessKey string // empty: anonymous requests
	SecretKey string
	// InsecureTLS skips verification of the server's certificate.
	InsecureTLS bool
	// SignPayload computes the SHA-256 of each PUT body for SigV4 instead of
	// sending UNSIGNED-PAYLOAD (costs a pass over the data on the client).
	SignPayload bool

	Bucket       string
	Prefix       string // object names start with this; default "slipstream-load/"
	CreateBucket bool   // create the bucket if it does not exist

	Workers    int     // concurrent requests; default 8
	PutPercent int     // 0 = GET only, 100 = PUT only, else a mix
	MinSize    int64   // object size range for fill and PUT; default 1 MiB
	MaxSize    int64   // default MinSize
	RateLimit  float64 // requests per second over all workers; 0 = unlimited

	// RequestTimeout bounds each request (fill and main phase), body
	// transfer included; an expiry is recorded as an error of kind
	// "timeout". Default 60s; negative disables.
	RequestTimeout time.Duration

	// The main phase ends at the first of Duration, Epochs and MaxOps that
	// is set and reached; at least one must be set.
	Duration time.Duration
	Epochs   int
	MaxOps   int64

	// Fill phase: create FillCount objects, or FillBytes worth of objects of
	// the average size, before the main phase. With neither, the dataset is
	// the objects already under Prefix (listed).
	FillCount int
	FillBytes int64

	// Cleanup deletes the objects this run created (fill and PUTs).
	Cleanup bool

	// LoaderID and LoaderCount split one dataset among several loader
	// processes: this one fills and reads every LoaderCount-th object.
	LoaderID    int
	LoaderCount int // default 1

	// StatsURLs are node stats endpoints (sysstat JSON), sampled every
	// StatsInterval (default 1s) for the whole run.
	StatsURLs     []string
	StatsInterval time.Duration

	// MaxErrorRate stops the run with ErrTooManyErrors when, after 100
	// requests, more than this fraction failed; default 0.5, negative
	// disables.
	MaxErrorRate float64

	Label string // name of the run in tables and plots
	Seed  int64  // seeds object order, sizes and data; 0 = from the clock

	// Router picks the endpoint per request; nil = Endpoint for everything.
	Router Router
	// HTTPClient overrides the tuned client built from Workers.
	HTTPClient *http.Client
	// Progress, if set, gets a live progress line once a second (the CLI
	// sets it only when stderr is a terminal).
	Progress io.Writer
	// Clock defaults to the wall clock.
	Clock Clock
}

// Defaults returns c with zero fields set to their defaults.
func (c Config) Defaults() Config {
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	if c.Prefix == "" {
		c.Prefix = "slipstream-load/"
	}
	if c.Workers <= 0 {
		c.Workers = 8
	}
	if c.MinSize <= 0 {
		c.MinSize = 1 << 20
	}
	if c.MaxSize < c.MinSize {
		c.MaxSize = c.MinSize
	}
	if c.LoaderCount <= 0 {
		c.LoaderCount = 1
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.StatsInterval <= 0 {
		c.StatsInterval = time.Second
	}
	if c.MaxErrorRate == 0 {
		c.MaxErrorRate = 0.5
	}
	if c.Seed == 0 {
		c.Seed = time.Now().UnixNano()
	}
	if c.Clock == nil {
		c.Clock = realClock{}
	}
	if c.Label == "" {
		c.Label = c.Workload()
	}
	return c
}

// Validate reports the first problem with c (after Defaults).
func (c Config) Validate() error {
	switch {
	case c.Endpoint == "" && c.Router == nil:
		return fmt.Errorf("%w: no endpoint", ErrConfig)
	case c.Endpoint != "" && !strings.HasPrefix(c.Endpoint, "http://") && !strings.HasPrefix(c.Endpoint, "https://"):
		return fmt.Errorf("%w: endpoint %q must start with http:// or https://", ErrConfig, c.Endpoint)
	case c.Bucket == "":
		return fmt.Errorf("%w: no bucket", ErrConfig)
	case c.PutPercent < 0 || c.PutPercent > 100:
		return fmt.Errorf("%w: put percent %d not in 0..100", ErrConfig, c.PutPercent)
	case c.MinSize < 0 || c.MaxSize < c.MinSize:
		return fmt.Errorf("%w: size range %d..%d", ErrConfig, c.MinSize, c.MaxSize)
	case c.Duration <= 0 && c.Epochs <= 0 && c.MaxOps <= 0:
		return fmt.Errorf("%w: set a duration, a number of epochs or a maximum op count", ErrConfig)
	case c.Duration < 0 || c.Epochs < 0 || c.MaxOps < 0 || c.FillCount < 0 || c.FillBytes < 0 || c.RateLimit < 0:
		return fmt.Errorf("%w: negative duration, epochs, ops, fill or rate", ErrConfig)
	case c.LoaderID < 0 || c.LoaderID >= c.LoaderCount:
		return fmt.Errorf("%w: loader id %d not in 0..%d", ErrConfig, c.LoaderID, c.LoaderCount-1)
	case c.FillCount > 0 && c.FillBytes > 0:
		return fmt.Errorf("%w: set fill count or fill bytes, not both", ErrConfig)
	}
	return nil
}

// Workload names the request mix: "GET", "PUT" or "MIX(30% PUT)".
func (c Config) Workload() string {
	switch c.PutPercent {
	case 0:
		return "GET"
	case 100:
		return "PUT"
	}
	return fmt.Sprintf("MIX(%d%% PUT)", c.PutPercent)
}

// fillCount is the number of objects in the whole dataset (all loaders).
func (c Config) fillCount() int {
	if c.FillCount > 0 {
		return c.FillCount
	}
	if c.FillBytes > 0 {
		avg := (c.MinSize + c.MaxSize) / 2
		if avg <= 0 {
			return 1
		}
		n := int((c.FillBytes + avg - 1) / avg)
		return max(n, 1)
	}
	return 0
}
