package cli

import (
	"context"
	"errors"
)

func reportCommand() Command {
	return Command{
		Summary: "render result files into plots and an HTML page",
		Run: func(ctx context.Context, env Env) error {
			return errors.New("not built yet")
		},
	}
}
