// Package cli implements the subcommands of the slipstream binary. Each
// subcommand lives in its own file and only parses flags before calling into
// the package that does the work.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
)

// Env is what a subcommand gets: its arguments and where to write.
type Env struct {
	Args   []string
	Stdout io.Writer
	Stderr io.Writer
}

// Command is one subcommand.
type Command struct {
	Summary string
	Run     func(ctx context.Context, env Env) error
}

// errUsage marks an error that is the user's: print it with the usage, exit 2.
var errUsage = errors.New("usage")

func commands() map[string]Command {
	return map[string]Command{
		"node":    nodeCommand(),
		"up":      upCommand(),
		"demo":    demoCommand(),
		"load":    loadCommand(),
		"report":  reportCommand(),
		"volume":  volumeCommand(),
		"fabric":  fabricCommand(),
		"admin":   adminCommand(),
		"version": versionCommand(),
	}
}

// Main runs the subcommand named by args[0] and returns the exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr, cmds)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "slipstream: unknown command %q\n\n", args[0])
		usage(stderr, cmds)
		return 2
	}
	err := cmd.Run(ctx, Env{Args: args[1:], Stdout: stdout, Stderr: stderr})
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "slipstream %s: %v\n", args[0], err)
		return 2
	default:
		fmt.Fprintf(stderr, "slipstream %s: %v\n", args[0], err)
		return 1
	}
}

func usage(w io.Writer, cmds map[string]Command) {
	fmt.Fprintln(w, "usage: slipstream <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, cmds[n].Summary)
	}
}

// usagef returns an error that Main reports as a usage error (exit code 2).
func usagef(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, args...))
}
