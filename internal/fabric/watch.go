package fabric

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"
)

// ErrStopWatch, returned by a Watch callback, ends the watch without error.
var ErrStopWatch = errors.New("fabric: stop watching")

// WatchOptions tunes Watch.
type WatchOptions struct {
	// Interval between polls of the files' size and mtime (default 2s).
	Interval time.Duration
	// Diff options for the comparison with the previous dumps.
	Diff DiffOptions
}

// WatchEvent is one observation: the first load (Diff nil) or a change.
type WatchEvent struct {
	Time  time.Time
	Model *Model
	Diff  *Diff
	// Err is set when the rewritten dumps could not be loaded (the previous
	// model stays current).
	Err error
}

// signature lists name, size and mtime of the dump files of dir.
func signature(dir string) (string, error) {
	fs, err := FindFiles(dir)
	if err != nil {
		return "", err
	}
	var parts []string
	for _, p := range fs {
		st, err := os.Stat(p)
		if err != nil {
			return "", err
		}
		parts = append(parts, fmt.Sprintf("%s:%d:%d", p, st.Size(), st.ModTime().UnixNano()))
	}
	sort.Strings(parts)
	return strings.Join(parts, "|"), nil
}

// Watch loads dir, reports it, then polls the dump files and, whenever
// OpenSM has rewritten them (a changed size or mtime that stays the same
// for one more interval), reloads and reports the differences to the
// previous state. It returns when ctx ends or fn returns an error
// (ErrStopWatch: nil).
func Watch(ctx context.Context, dir string, o WatchOptions, fn func(WatchEvent) error) error {
	if o.Interval <= 0 {
		o.Interval = 2 * time.Second
	}
	emit := func(ev WatchEvent) error {
		if err := fn(ev); err != nil {
			if errors.Is(err, ErrStopWatch) {
				return errStop
			}
			return err
		}
		return nil
	}
	var prev *Model
	last := ""
	pending := ""
	load := func(sig string) error {
		m, err := Load(ctx, dir)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			last = sig
			return emit(WatchEvent{Time: time.Now(), Err: err})
		}
		ev := WatchEvent{Time: time.Now(), Model: m}
		if prev != nil {
			d, err := Compare(ctx, prev, m, o.Diff)
			if err != nil {
				return err
			}
			ev.Diff = d
		}
		prev, last = m, sig
		return emit(ev)
	}
	t := time.NewTicker(o.Interval)
	defer t.Stop()
	first := true
	for {
		sig, err := signature(dir)
		switch {
		case err != nil:
			if first {
				return err
			}
		case first:
			first = false
			if err := load(sig); err != nil {
				return stopNil(err)
			}
		case sig != last && sig == pending:
			if err := load(sig); err != nil {
				return stopNil(err)
			}
			pending = ""
		case sig != last:
			pending = sig
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

var errStop = errors.New("stop")

func stopNil(err error) error {
	if errors.Is(err, errStop) {
		return nil
	}
	return err
}
