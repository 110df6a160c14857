package logthrottle

import (
	"fmt"
	"testing"
	"time"
)

func TestAllow(t *testing.T) {
	now := time.Unix(1000, 0)
	th := New(30*time.Second, func() time.Time { return now })
	steps := []struct {
		after time.Duration
		key   string
		ok    bool
		held  int
	}{
		{0, "a", true, 0},                 // the first line of a key goes through
		{time.Second, "a", false, 0},      // then it is held back
		{time.Second, "b", true, 0},       // another key is not
		{27 * time.Second, "a", false, 0}, // 29 s after the first
		{time.Second, "a", true, 2},       // 30 s: through, saying 2 were held
		{time.Second, "a", false, 0},
		{time.Hour, "a", true, 1},
	}
	for i, s := range steps {
		now = now.Add(s.after)
		if ok, held := th.Allow(s.key); ok != s.ok || held != s.held {
			t.Errorf("step %d (%s): ok %v held %d, want %v %d", i, s.key, ok, held, s.ok, s.held)
		}
	}
}

// Keys not seen for an interval are forgotten once there are many.
func TestAllowForgets(t *testing.T) {
	now := time.Unix(1000, 0)
	th := New(time.Second, func() time.Time { return now })
	for i := range maxKeys {
		th.Allow(fmt.Sprint(i))
	}
	now = now.Add(2 * time.Second)
	th.Allow("new")
	if n := len(th.seen); n != 1 {
		t.Errorf("%d keys remembered, want only the new one", n)
	}
}
