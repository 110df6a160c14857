// Package logthrottle keeps a repeated log line from flooding the log: a
// line under a key (a message and what it is about) is let through once
// per interval, and the next one let through says how many were held back.
// A peer that is down, or a remote backend that is, makes the same
// failure every second for every request; one line per interval says as
// much.
package logthrottle

import (
	"maps"
	"sync"
	"time"
)

// maxKeys bounds the keys remembered; past it, keys not seen for an
// interval are forgotten.
const maxKeys = 1024

// Throttle lets one line per key through per Every. The zero value is not
// usable: make one with New.
type Throttle struct {
	every time.Duration
	now   func() time.Time

	mu   sync.Mutex
	seen map[string]*entry
}

type entry struct {
	logged time.Time // when a line was last let through
	held   int       // lines held back since
}

// New returns a Throttle that lets a key's line through once per every,
// by the clock now (nil: time.Now).
func New(every time.Duration, now func() time.Time) *Throttle {
	if now == nil {
		now = time.Now
	}
	return &Throttle{every: every, now: now, seen: map[string]*entry{}}
}

// Allow reports whether the line under key is let through now and, if
// it is, how many lines under key were held back since the last one.
func (t *Throttle) Allow(key string) (ok bool, held int) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.seen[key]
	if e != nil && now.Sub(e.logged) < t.every {
		e.held++
		return false, 0
	}
	if e == nil {
		if len(t.seen) >= maxKeys {
			maps.DeleteFunc(t.seen, func(_ string, e *entry) bool { return now.Sub(e.logged) >= t.every })
		}
		e = &entry{}
		t.seen[key] = e
	}
	held = e.held
	e.logged, e.held = now, 0
	return true, held
}
