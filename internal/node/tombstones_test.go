package node

import (
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
