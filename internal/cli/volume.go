package cli

import (
	"context"
	"errors"
)

func volumeCommand() Command {
	return Command{
		Summary: "create, list, resize and delete block volumes",
		Run: func(ctx context.Context, env Env) error {
			return errors.New("not built yet")
		},
	}
}
