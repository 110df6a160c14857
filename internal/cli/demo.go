package cli

import (
	"context"
	"os"
	"time"

	"github.com/slipstream-io/slipstream/internal/demo"
)

func demoCommand() Command {
	return Command{
		Summary: "run the main job end to end: cluster, cold and warm epochs, report",
		Run: func(ctx context.Context, env Env) error {
			fs := newFlagSet(env, "demo", "[flags]")
			var cfg demo.Config
			fs.StringVar(&cfg.Report, "report", "slipstream-report", "directory for the report (index.html, PNGs, result JSON)")
			fs.StringVar(&cfg.WorkDir, "work", "", "directory for cluster and remote data (default: a temporary directory, removed at the end)")
			fs.BoolVar(&cfg.Keep, "keep", false, "keep the work directory")
			fs.IntVar(&cfg.Objects, "objects", 128, "objects in the dataset that fits the cache (the default takes half of it)")
			size := fs.Int64("object-size", 1<<20, "object size in bytes")
			cache := fs.Int64("cache", 256<<20, "cluster cache size in bytes, all nodes together")
			rate := fs.Int64("remote-rate", 64<<20, "remote link bandwidth in bytes/s")
			fs.DurationVar(&cfg.Latency, "remote-latency", 25*time.Millisecond, "remote time to first byte")
			fs.IntVar(&cfg.Workers, "workers", 8, "loader workers")
			fs.IntVar(&cfg.BigFactor, "big-factor", 2, "the large dataset is this many times the cache")
			fs.StringVar(&cfg.Policy, "policy", "s3fifo", "eviction policy of the nodes: s3fifo or lru")
			if err := parseFlags(fs, env.Args); err != nil {
				return err
			}
			cfg.ObjectSize, cfg.CacheBytes, cfg.RemoteRate = *size, *cache, *rate
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			cfg.Binary, cfg.Out = bin, env.Stdout
			_, err = demo.Run(ctx, cfg)
			return err
		},
	}
}
