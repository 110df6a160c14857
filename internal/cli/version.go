package cli

import (
	"context"
	"fmt"
	"runtime/debug"
)

func versionCommand() Command {
	return Command{
		Summary: "print the version",
		Run: func(ctx context.Context, env Env) error {
			v := "devel"
			if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
				v = bi.Main.Version
			}
			fmt.Fprintln(env.Stdout, "slipstream", v)
			return nil
		},
	}
}
