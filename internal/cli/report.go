package cli

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/slipstream-io/slipstream/internal/loader"
	"github.com/slipstream-io/slipstream/internal/report"
)

func reportCommand() Command {
	return Command{
		Summary: "render result files (of load, or fio's JSON output) into plots and an HTML page",
		Run:     runReport,
	}
}

func runReport(ctx context.Context, env Env) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	out := fs.String("o", "report", "output directory")
	table := fs.Bool("table", true, "also print the summary table")
	merge := fs.String("merge", "", "merge all result files (loaders that ran together) into one run with this label")
	fs.Usage = func() {
		fmt.Fprintln(env.Stderr, "usage: slipstream report RESULT.json [RESULT.json...] [-o DIR] [-merge LABEL]")
		fmt.Fprintln(env.Stderr, "RESULT.json: a result of slipstream load, or fio --output-format=json output (labelled by file name)")
		fs.PrintDefaults()
	}
	// Flags may come before or after the result files.
	var paths []string
	args := env.Args
	for {
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		paths = append(paths, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(paths) == 0 {
		return usagef("no result files given")
	}
	var results []*loader.Result
	for _, p := range paths {
		rs, err := loader.ReadResults(p)
		if err != nil {
			return err
		}
		results = append(results, rs...)
	}
	if *merge != "" {
		m, err := loader.Merge(*merge, results...)
		if err != nil {
			return err
		}
		results = []*loader.Result{m}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	sections, err := report.RenderSections(results, *out)
	if err != nil {
		return err
	}
	if *table {
		if err := loader.PrintTable(env.Stdout, results...); err != nil {
			return err
		}
	}
	n := 0
	var names []string
	for _, s := range sections {
		n += len(s.Charts)
		names = append(names, s.Title)
	}
	abs, _ := filepath.Abs(filepath.Join(*out, "index.html"))
	fmt.Fprintf(env.Stdout, "report: %d charts (%s)\n%s\n", n, strings.Join(names, "; "), abs)
	return nil
}
