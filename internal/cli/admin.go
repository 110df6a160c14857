package cli

import (
	"context"
	"errors"
)

func adminCommand() Command {
	return Command{
		Summary: "cluster status, buckets, evict, prefetch, destage backlog",
		Run: func(ctx context.Context, env Env) error {
			return errors.New("not built yet")
		},
	}
}
