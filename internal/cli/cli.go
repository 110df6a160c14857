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
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"golang.org/x/sys/unix"
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

// errReported marks an error already shown to the user (the flag package
// prints its parse errors with the usage): Main only sets the exit code.
var errReported = errors.New("reported")

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
	if len(args) == 0 || isHelpArg(args[0]) {
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
	code := 1
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		code = 2
	}
	if !errors.Is(err, errReported) {
		fmt.Fprintf(stderr, "slipstream %s: %s\n", args[0], cleanMessage(err.Error()))
	}
	return code
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
	fmt.Fprintln(w, "\nRun \"slipstream <command> --help\" for a command's usage.")
}

// usagef returns an error that Main reports as a usage error (exit code 2).
func usagef(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, args...))
}

// isHelpArg reports whether a command word asks for help.
func isHelpArg(s string) bool {
	return s == "-h" || s == "-help" || s == "--help" || s == "help"
}

// reportedUsage is a usage error the flag package has already printed.
type reportedUsage struct{ err error }

func (e reportedUsage) Error() string        { return e.err.Error() }
func (e reportedUsage) Unwrap() error        { return e.err }
func (e reportedUsage) Is(target error) bool { return target == errUsage || target == errReported }

// parseFlags parses args into fs. The flag package prints a bad flag with
// the usage itself: the error returned for it only makes Main exit 2,
// without printing it a second time.
func parseFlags(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	return reportedUsage{err}
}

// parseInterspersed parses args with fs, flags before, between and after
// the positional arguments, which it returns.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
}

// newFlagSet returns a flag set for "slipstream NAME" whose usage shows
// synopsis (the arguments) and then the flags.
func newFlagSet(env Env, name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), strings.TrimSpace("usage: slipstream "+name+" "+synopsis))
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			fmt.Fprintln(fs.Output(), "\nflags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

// subcommand is one command of a command group (admin, admin bucket,
// volume).
type subcommand struct {
	name     string
	aliases  []string
	synopsis string // arguments, shown after the name
	summary  string
	run      func(ctx context.Context, env Env, args []string) error
}

// group runs the subcommand args[0] of "slipstream prefix": with no
// command it prints the usage and fails, with -h, --help or help it prints
// the usage (help CMD: CMD's) and succeeds.
func group(ctx context.Context, env Env, prefix, footer string, subs []subcommand, args []string) error {
	if len(args) == 0 {
		groupUsage(env.Stderr, prefix, footer, subs)
		return usagef("missing %s command", prefix)
	}
	sub, rest := args[0], args[1:]
	if isHelpArg(sub) {
		if sub == "help" && len(rest) > 0 {
			return group(ctx, env, prefix, footer, subs, []string{rest[0], "--help"})
		}
		groupUsage(env.Stderr, prefix, footer, subs)
		return flag.ErrHelp
	}
	for _, s := range subs {
		if s.name == sub || slices.Contains(s.aliases, sub) {
			return s.run(ctx, env, rest)
		}
	}
	return usagef("unknown %s command %q (see slipstream %s --help)", prefix, sub, prefix)
}

func groupUsage(w io.Writer, prefix, footer string, subs []subcommand) {
	fmt.Fprintf(w, "usage: slipstream %s <command> [flags]\n\ncommands:\n", prefix)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, s := range subs {
		name := strings.Join(append([]string{s.name}, s.aliases...), "|")
		fmt.Fprintf(tw, "  %s %s\t%s\n", name, s.synopsis, s.summary)
	}
	_ = tw.Flush()
	if footer != "" {
		fmt.Fprintln(w, "\n"+footer)
	}
	fmt.Fprintf(w, "\nRun \"slipstream %s <command> --help\" for a command's flags.\n", prefix)
}

// internalLabels are the package names that label error texts ("object:
// no such key"), which mean nothing to a user.
var internalLabels = []string{"object", "loader", "localcluster", "peer", "store", "tier", "netx", "cluster", "volume"}

// cleanMessage makes an error text fit for users: it drops the internal
// package labels that start its parts, and a part (or run of parts)
// repeated right after itself: "object: no such key: object: no such key:
// b/k" becomes "no such key: b/k".
func cleanMessage(s string) string {
	lines := strings.Split(s, "\n")
	for li, line := range lines {
		parts := strings.Split(line, ": ")
		out := make([]string, 0, len(parts))
		for i, p := range parts {
			if i < len(parts)-1 && slices.Contains(internalLabels, p) {
				continue
			}
			out = append(out, p)
		}
		for n := 1; n <= 3; n++ {
			for i := 0; i+2*n <= len(out); {
				if slices.Equal(out[i:i+n], out[i+n:i+2*n]) {
					out = slices.Delete(out, i+n, i+2*n)
					continue
				}
				i++
			}
		}
		lines[li] = strings.Join(out, ": ")
	}
	return strings.Join(lines, "\n")
}

// isTerminal reports whether w is a terminal.
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// plural returns "1 object", "2 objects" (or the given plural form).
func plural(n int, one string, many ...string) string {
	if n == 1 {
		return "1 " + one
	}
	if len(many) > 0 {
		return fmt.Sprintf("%d %s", n, many[0])
	}
	return fmt.Sprintf("%d %ss", n, one)
}
