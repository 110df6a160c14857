package cluster

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/slipstream-io/slipstream/internal/logthrottle"
)

// repeatWindow is how long raft's repeated warnings and errors (a
// heartbeat to a peer that is down fails twice a second) are counted
// instead of logged: one line per window says how many there were.
const repeatWindow = 30 * time.Second

// newHCLogger adapts slog to the hclog interface raft wants: raft's
// records become slog records of the same level, message and attributes
// (durations stay durations), and a warning or error repeated for the
// same peer is logged once per repeatWindow with the number left out.
func newHCLogger(l *slog.Logger) hclog.Logger {
	return &raftLog{l: l, name: "raft", level: hclog.Info, th: logthrottle.New(repeatWindow, nil)}
}

// raftLog is an hclog.Logger over slog. Loggers made by With and Named
// share their throttle.
type raftLog struct {
	l     *slog.Logger
	name  string
	args  []any
	level hclog.Level
	th    *logthrottle.Throttle
}

func (w *raftLog) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off || level < w.level {
		return
	}
	lvl := slog.LevelInfo
	switch {
	case level >= hclog.Error:
		lvl = slog.LevelError
	case level == hclog.Warn:
		lvl = slog.LevelWarn
	case level <= hclog.Debug:
		lvl = slog.LevelDebug
	}
	attrs := []any{"module", w.name}
	var peer any
	for _, kv := range [][]any{w.args, args} {
		for i := 0; i+1 < len(kv); i += 2 {
			k := strings.ReplaceAll(fmt.Sprint(kv[i]), " ", "_")
			v := hclogValue(kv[i+1])
			if k == "peer" {
				peer = v
			}
			attrs = append(attrs, k, v)
		}
	}
	if lvl >= slog.LevelWarn {
		ok, n := w.th.Allow(fmt.Sprint(lvl, "\x00", msg, "\x00", peer))
		if !ok {
			return
		}
		if n > 0 {
			attrs = append(attrs, "repeated", n)
		}
	}
	w.l.Log(context.Background(), lvl, msg, attrs...)
}

// hclogValue renders the values hclog formats itself: an error by its
// text, hclog.Fmt by its format, hclog.Hex and hclog.Octal in their
// bases.
func hclogValue(v any) any {
	switch v := v.(type) {
	case error:
		return v.Error()
	case hclog.Format:
		if len(v) == 0 {
			return ""
		}
		if f, ok := v[0].(string); ok {
			return fmt.Sprintf(f, v[1:]...)
		}
		return fmt.Sprint(v...)
	case hclog.Hex:
		return fmt.Sprintf("0x%x", int(v))
	case hclog.Octal:
		return fmt.Sprintf("0%o", int(v))
	}
	return v
}

func (w *raftLog) Trace(msg string, args ...any) { w.Log(hclog.Trace, msg, args...) }
func (w *raftLog) Debug(msg string, args ...any) { w.Log(hclog.Debug, msg, args...) }
func (w *raftLog) Info(msg string, args ...any)  { w.Log(hclog.Info, msg, args...) }
func (w *raftLog) Warn(msg string, args ...any)  { w.Log(hclog.Warn, msg, args...) }
func (w *raftLog) Error(msg string, args ...any) { w.Log(hclog.Error, msg, args...) }

func (w *raftLog) IsTrace() bool { return w.level <= hclog.Trace }
func (w *raftLog) IsDebug() bool { return w.level <= hclog.Debug }
func (w *raftLog) IsInfo() bool  { return w.level <= hclog.Info }
func (w *raftLog) IsWarn() bool  { return w.level <= hclog.Warn }
func (w *raftLog) IsError() bool { return w.level <= hclog.Error }

func (w *raftLog) ImpliedArgs() []any { return w.args }

func (w *raftLog) With(args ...any) hclog.Logger {
	c := *w
	c.args = append(append([]any{}, w.args...), args...)
	return &c
}

func (w *raftLog) Name() string { return w.name }

func (w *raftLog) Named(name string) hclog.Logger {
	c := *w
	c.name = w.name + "." + name
	return &c
}

func (w *raftLog) ResetNamed(name string) hclog.Logger {
	c := *w
	c.name = name
	return &c
}

func (w *raftLog) SetLevel(level hclog.Level) { w.level = level }
func (w *raftLog) GetLevel() hclog.Level      { return w.level }

func (w *raftLog) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(w.StandardWriter(opts), "", 0)
}

func (w *raftLog) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		w.Info(strings.TrimSpace(string(p)))
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
