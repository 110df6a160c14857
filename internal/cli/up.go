package cli

import (
	"context"
	"errors"
)

func upCommand() Command {
	return Command{
		Summary: "start the embedded default local cluster",
		Run: func(ctx context.Context, env Env) error {
			return errors.New("not built yet")
		},
	}
}
