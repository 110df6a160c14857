package cli

import (
	"context"
	"errors"
)

func loadCommand() Command {
	return Command{
		Summary: "S3 load generator",
		Run: func(ctx context.Context, env Env) error {
			return errors.New("not built yet")
		},
	}
}
