package cli

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/slipstream-io/slipstream/client"
	"github.com/slipstream-io/slipstream/internal/loader"
	"github.com/slipstream-io/slipstream/internal/netx"
)

func loadCommand() Command {
	return Command{
		Summary: "S3 load generator",
		Run:     runLoad,
	}
}

// loadEnv returns $name, or def when it is unset or empty.
func loadEnv(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func runLoad(ctx context.Context, env Env) error {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	var (
		cfg        loader.Config
		workload   = fs.String("workload", "get", "get, put or mixed")
		putPct     = fs.Int("put-pct", 30, "share of PUTs in percent for --workload mixed")
		size       = fs.String("size", "1MiB", "object size or MIN-MAX range for fill and PUT (binary units: 4K, 32KiB, 1MiB)")
		fillSize   = fs.String("fill-size", "", "fill phase: create this much data (e.g. 1GiB) before the main phase")
		stats      = fs.String("stats", "", "comma-separated node stats URLs (e.g. http://127.0.0.1:9100/slipstream/v1/stats), sampled every second")
		jsonOut    = fs.String("json", "", "write the result as JSON to this file (default: load-<label>-<time>.json in the current directory)")
		csvOut     = fs.String("csv", "", "write the per-second time series as CSV to this file")
		quiet      = fs.Bool("quiet", false, "no live progress line even on a terminal")
		noJSON     = fs.Bool("no-json", false, "do not write a result file")
		routerName = fs.String("router", "static", "request routing: static (every request to --endpoint)")
		smart      = fs.String("smart", "", "send each request straight to its object's owner over all of the owner's addresses; the value lists where to read the cluster map: nodes' S3 addresses (e.g. http://10.77.1.11:9000), intra-cluster base URLs (http://10.77.1.11:9100) or public map URLs (http://10.77.1.11:9000/_slipstream/map)")
		localAddrs = fs.String("local-addrs", "", "with --smart: comma-separated addresses of this host to send from, one per NIC")
	)
	fs.StringVar(&cfg.Endpoint, "endpoint", loadEnv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000"), "S3 endpoint URL")
	fs.StringVar(&cfg.Region, "region", loadEnv("AWS_REGION", "us-east-1"), "S3 region")
	fs.StringVar(&cfg.AccessKey, "access-key", os.Getenv("AWS_ACCESS_KEY_ID"), "access key (default $AWS_ACCESS_KEY_ID; empty = anonymous)")
	fs.StringVar(&cfg.SecretKey, "secret-key", os.Getenv("AWS_SECRET_ACCESS_KEY"), "secret key (default $AWS_SECRET_ACCESS_KEY)")
	fs.BoolVar(&cfg.InsecureTLS, "insecure", false, "do not verify the server's TLS certificate")
	fs.BoolVar(&cfg.SignPayload, "sign-payload", false, "sign PUT bodies (SHA-256) instead of UNSIGNED-PAYLOAD")
	fs.StringVar(&cfg.Bucket, "bucket", "", "bucket (required)")
	fs.StringVar(&cfg.Prefix, "prefix", "slipstream-load/", "object name prefix of the dataset")
	fs.BoolVar(&cfg.CreateBucket, "create-bucket", false, "create the bucket if it does not exist")
	fs.IntVar(&cfg.Workers, "workers", 8, "concurrent requests")
	fs.DurationVar(&cfg.Duration, "duration", 0, "run the main phase this long (e.g. 30s)")
	fs.IntVar(&cfg.Epochs, "epochs", 0, "run this many epochs (each reads every dataset object once, in random order)")
	fs.Int64Var(&cfg.MaxOps, "max-ops", 0, "stop after this many requests")
	fs.IntVar(&cfg.FillCount, "fill-count", 0, "fill phase: create this many objects before the main phase")
	fs.Float64Var(&cfg.RateLimit, "rate", 0, "limit to this many requests per second over all workers (0 = unlimited)")
	fs.DurationVar(&cfg.RequestTimeout, "request-timeout", loader.DefaultRequestTimeout, "give up on a request after this long and count it as a timeout error (negative = never)")
	fs.BoolVar(&cfg.Cleanup, "cleanup", false, "delete the objects this run created at the end")
	fs.IntVar(&cfg.LoaderID, "loader-id", 0, "this loader's number when several split one dataset")
	fs.IntVar(&cfg.LoaderCount, "loader-count", 1, "number of loaders splitting the dataset")
	fs.DurationVar(&cfg.StatsInterval, "stats-interval", time.Second, "node stats sampling interval")
	fs.StringVar(&cfg.Label, "label", "", "name of this run in tables and reports (default: the workload)")
	fs.Int64Var(&cfg.Seed, "seed", 0, "seed for object order, sizes and data (0 = from the clock)")
	fs.Usage = func() {
		fmt.Fprintln(env.Stderr, "usage: slipstream load --bucket B [--endpoint URL] [--fill-count N | --fill-size S] [--workload get|put|mixed] [--duration D] [--epochs N] [flags]")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, env.Args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	switch strings.ToLower(*workload) {
	case "get":
		cfg.PutPercent = 0
	case "put":
		cfg.PutPercent = 100
	case "mixed", "mix":
		cfg.PutPercent = *putPct
	default:
		return usagef("--workload %q: want get, put or mixed", *workload)
	}
	var err error
	if cfg.MinSize, cfg.MaxSize, err = loader.ParseSizeRange(*size); err != nil {
		return usagef("--size: %v", err)
	}
	if *fillSize != "" {
		if cfg.FillBytes, err = loader.ParseSize(*fillSize); err != nil {
			return usagef("--fill-size: %v", err)
		}
	}
	if *stats != "" {
		for _, u := range strings.Split(*stats, ",") {
			if u = strings.TrimSpace(u); u != "" {
				cfg.StatsURLs = append(cfg.StatsURLs, u)
			}
		}
	}
	if *routerName != "static" {
		return usagef("--router %q: only \"static\" is available", *routerName)
	}
	if *smart != "" {
		sc, err := client.New(ctx, client.Config{Seeds: netx.SplitAddrs(*smart), LocalAddrs: netx.SplitAddrs(*localAddrs),
			AccessKey: cfg.AccessKey, SecretKey: cfg.SecretKey, Region: cfg.Region})
		if err != nil {
			return err
		}
		defer sc.Close()
		cfg = sc.LoaderConfig(cfg)
	}
	if !*quiet && isTerminal(env.Stderr) {
		cfg.Progress = env.Stderr
	}
	if err := cfg.Defaults().Validate(); err != nil {
		return usagef("%v", err)
	}

	res, runErr := loader.Run(ctx, cfg)
	if res == nil || (res.Fill == nil && res.Main.Start.IsZero()) {
		return runErr // failed before measuring anything
	}
	if err := loader.PrintTable(env.Stdout, res); err != nil {
		return err
	}
	for _, n := range res.Nodes {
		if n.Errors > 0 {
			fmt.Fprintf(env.Stderr, "warning: stats %s: %d samples failed (last: %s), %d recorded\n", n.URL, n.Errors, n.LastError, len(n.Samples))
		}
	}
	if !*noJSON {
		path := *jsonOut
		if path == "" {
			path = fmt.Sprintf("load-%s-%s.json", loadFileSafe(res.Label), res.Start.UTC().Format("20060102-150405"))
		}
		if err := res.WriteJSON(path); err != nil {
			return err
		}
		abs, _ := filepath.Abs(path)
		fmt.Fprintf(env.Stdout, "result: %s\n", abs)
		if res.Partial {
			fmt.Fprintf(env.Stderr, "warning: the run ended early (%s); the result is marked partial\n", res.Error)
		}
	}
	if *csvOut != "" {
		f, err := os.Create(*csvOut)
		if err != nil {
			return err
		}
		if err := res.WriteCSV(f); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	return runErr
}

// loadFileSafe turns a label into something usable in a file name.
func loadFileSafe(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, s)
}
