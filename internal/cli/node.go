package cli

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/slipstream-io/slipstream/internal/config"
	"github.com/slipstream-io/slipstream/internal/node"
)

func nodeCommand() Command {
	return Command{
		Summary: "run one cluster node from a config file",
		Run: func(ctx context.Context, env Env) error {
			fs := newFlagSet(env, "node", "--config FILE [--log-level L]")
			path := fs.String("config", "", "node config file (YAML)")
			level := fs.String("log-level", "info", "debug, info, warn or error")
			if err := parseFlags(fs, env.Args); err != nil {
				return err
			}
			if *path == "" {
				return usagef("--config is required")
			}
			cfg, err := config.Load(*path)
			if err != nil {
				return err
			}
			var lv slog.Level
			if err := lv.UnmarshalText([]byte(*level)); err != nil {
				return usagef("--log-level: %v", err)
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv}))
			n, err := node.New(ctx, cfg, node.Options{Log: log})
			if err != nil {
				return err
			}
			<-ctx.Done()
			log.Info("stopping")
			sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			return n.Close(sctx)
		},
	}
}
