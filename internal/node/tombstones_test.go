package node

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestTombstones(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tombstones")
	now := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	ts, err := openTombstones(path, time.Hour, clock)
	if err != nil {
		t.Fatal(err)
	}
	at := now.Add(-time.Minute)
	for _, r := range []tombRecord{
		{"bkt", "a/key with spaces", at},
		{"bkt", "a/key with spaces", at.Add(-time.Second)}, // older: ignored
		{"bkt", "old", now.Add(-2 * time.Hour)},            // expired: ignored
		{"other", "k", at.Add(time.Second)},
	} {
		if err := ts.add(r.Bucket, r.Key, r.Time); err != nil {
			t.Fatal(err)
		}
	}
	check := func(ts *tombstones, stage string) {
		t.Helper()
		for _, c := range []struct {
			bucket, key string
			want        time.Time
			ok          bool
		}{
			{"bkt", "a/key with spaces", at, true},
			{"other", "k", at.Add(time.Second), true},
			{"bkt", "old", time.Time{}, false},
			{"bkt", "never", time.Time{}, false},
			{"other", "a/key with spaces", time.Time{}, false},
		} {
			got, ok := ts.get(c.bucket, c.key)
			if ok != c.ok || !got.Equal(c.want) {
				t.Errorf("%s: get(%s, %s) = %v %v, want %v %v", stage, c.bucket, c.key, got, ok, c.want, c.ok)
			}
		}
	}
	check(ts, "live")
	if err := ts.close(); err != nil {
		t.Fatal(err)
	}
	// A crash left half a record at the end.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"b":"bkt","k":"torn","t":"2026-11-`)
	f.Close()
	ts, err = openTombstones(path, time.Hour, clock)
	if err != nil {
		t.Fatal(err)
	}
	check(ts, "reopened")
	if _, ok := ts.get("bkt", "torn"); ok {
		t.Error("a torn record was kept")
	}
	b, _ := os.ReadFile(path)
	if n := strings.Count(string(b), "\n"); n != 2 {
		t.Errorf("file after compaction has %d records, want 2:\n%s", n, b)
	}
	// Time passes: everything expires.
	now = now.Add(2 * time.Hour)
	if _, ok := ts.get("other", "k"); ok {
		t.Error("an expired delete is still remembered")
	}
	ts.close()
}

func TestRecentDeletes(t *testing.T) {
	now := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	ts, err := openTombstones(filepath.Join(t.TempDir(), "tombstones"), time.Hour, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	defer ts.close()
	if err := ts.add("bkt", "both", now.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	ts.noteDelete("bkt", "both", now)                // newer than the durable one: wins
	ts.noteDelete("bkt", "k", now)                   //
	ts.noteDelete("bkt", "k", now.Add(-time.Second)) // older: ignored
	for _, c := range []struct {
		key  string
		want time.Time
	}{{"both", now}, {"k", now}} {
		if got, ok := ts.get("bkt", c.key); !ok || !got.Equal(c.want) {
			t.Errorf("get(%s) = %v %v, want %v", c.key, got, ok, c.want)
		}
	}
	// Expiry by age: the durable tombstone remains.
	now = now.Add(recentRetention + time.Second)
	if got, ok := ts.get("bkt", "both"); !ok || !got.Equal(now.Add(-recentRetention-time.Second-time.Minute)) {
		t.Errorf("after the recent delete expired, get(both) = %v %v, want the durable tombstone", got, ok)
	}
	if _, ok := ts.get("bkt", "k"); ok {
		t.Error("a recent delete outlived recentRetention")
	}
	// Expiry by count: the oldest go first.
	for i := range recentMax + 10 {
		ts.noteDelete("many", fmt.Sprint(i), now)
	}
	if _, ok := ts.get("many", "0"); ok {
		t.Error("the oldest of too many recent deletes is still remembered")
	}
	if _, ok := ts.get("many", fmt.Sprint(recentMax+9)); !ok {
		t.Error("the newest recent delete is forgotten")
	}
	if len(ts.recent) > recentMax+1 || len(ts.recentQ) > recentMax+1 {
		t.Errorf("%d recent deletes kept (%d queued), want at most %d", len(ts.recent), len(ts.recentQ), recentMax+1)
	}
}
