package loader

import (
	"fmt"
	"sync"
	"time"
)

// progress prints a live line to cfg.Progress once a second until the
// returned stop function is called. Without a Progress writer it does
// nothing.
func (r *runner) progress(label string, rec *Recorder) (stop func()) {
	w := r.cfg.Progress
	if w == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		printed := false
		for {
			select {
			case <-done:
				if printed {
					fmt.Fprint(w, "\n")
				}
				return
			case <-t.C:
				now := r.clock.Now()
				if s, ok := rec.Last(now); ok {
					fmt.Fprint(w, ProgressLine(label, now.Sub(rec.Start()), s))
					printed = true
				}
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// ProgressLine formats one progress update (carriage return, no newline).
func ProgressLine(label string, elapsed time.Duration, s Second) string {
	return fmt.Sprintf("\r%-10s %6s %8.0f op/s %9.1f MiB/s  p50 %7.2f ms  p99 %7.2f ms  errors %d\x1b[K",
		label, elapsed.Truncate(time.Second), s.OpsPerSec, s.BytesPerSec/(1<<20), s.P50, s.P99, s.Errors)
}
