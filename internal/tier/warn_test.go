package tier_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/tier"
)

// levels counts the log records of each level and message.
type levels struct {
	mu sync.Mutex
	n  map[string]int // "WARN msg"
}

func (l *levels) Enabled(context.Context, slog.Level) bool { return true }
func (l *levels) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n[r.Level.String()+" "+r.Message]++
	return nil
}
func (l *levels) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *levels) WithGroup(string) slog.Handler      { return l }

func (l *levels) count(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n[key]
}

// A backend that is down fails every object's destage at every retry:
// one warning says so (per bucket and 30 s), the others go to debug, and
// everything is destaged once the backend is back.
func TestDestageFailuresWarnOnce(t *testing.T) {
	e := newEnv(t, "fs")
	e.be.set(func(c *ctl) { c.failPuts = true })
	logs := &levels{n: map[string]int{}}
	tr := e.newTier(t, tier.Config{RetryBackoff: 5 * time.Millisecond, Log: slog.New(logs)},
		map[string]tier.Bucket{"wback": {Mode: tier.ModeWriteback}})
	ctx := context.Background()
	for i := range 20 {
		body := []byte(fmt.Sprintf("object %d", i))
		if _, err := tr.Put(ctx, "wback", fmt.Sprintf("k%d", i), bytesReader(body), object.PutOptions{Size: int64(len(body))}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "60 failed destage attempts", func() bool { return tr.Backlog().Failures >= 60 })
	const msg = "tier: destage failed, will retry"
	if w, d := logs.count("WARN "+msg), logs.count("DEBUG "+msg); w != 1 || d < 59 {
		t.Errorf("%d warnings and %d debug records of %d failed attempts; want 1 warning, the rest debug", w, d, tr.Backlog().Failures)
	}
	e.be.set(func(c *ctl) { c.failPuts = false })
	if _, err := e.destaged(t, tr, "k19"); err != nil {
		t.Fatal(err)
	}
}
