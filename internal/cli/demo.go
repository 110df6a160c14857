package cli

import (
	"context"
	"errors"
)

func demoCommand() Command {
	return Command{
		Summary: "run the main job end to end: cluster, cold and warm epochs, report",
		Run: func(ctx context.Context, env Env) error {
			return errors.New("not built yet")
		},
	}
}
