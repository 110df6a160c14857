package cli

import (
	"context"
	"errors"
)

func nodeCommand() Command {
	return Command{
		Summary: "run one cluster node from a config file",
		Run: func(ctx context.Context, env Env) error {
			return errors.New("not built yet")
		},
	}
}
