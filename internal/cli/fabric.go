package cli

import (
	"context"
	"errors"
)

func fabricCommand() Command {
	return Command{
		Summary: "InfiniBand route analysis over OpenSM dumps",
		Run: func(ctx context.Context, env Env) error {
			return errors.New("not built yet")
		},
	}
}
