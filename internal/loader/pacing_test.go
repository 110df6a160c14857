package loader

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// With a rate limit the run is open loop: requests keep the pacer's
// schedule, and latency counts from each request's slot, so a target slower
// than the rate shows its queueing delay instead of hiding it (coordinated
// omission). At 20 req/s against a 300 ms target with one worker, the slots
// are 0, 50, 100, 150 ms and the sends 0, 300, 600, 900 ms: the 4th request
// takes ~1050 ms from its slot. Service time keeps the ~300 ms per request.
func TestRateLimitedLatencyCountsFromScheduledStart(t *testing.T) {
	res, err := Run(context.Background(), Config{Endpoint: slowTarget(t, 300*time.Millisecond), Bucket: "b", PutPercent: 100, MaxOps: 4,
		Workers: 1, MinSize: 16, Seed: 1, RateLimit: 20})
	if err != nil {
		t.Fatal(err)
	}
	lat := res.Main.Total.Latency
	t.Logf("count=%d p50=%.1fms max=%.1fms", lat.Count, lat.P50, lat.Max)
	if lat.Count != 4 {
		t.Fatalf("%d requests, want 4", lat.Count)
	}
	if lat.Max < 900 {
		t.Errorf("max latency %.1fms at 20 req/s with a 300ms target, want ~1050ms counted from the 4th request's slot", lat.Max)
	}
}

// slowTarget serves PUTs, taking d for each; it stops when the test ends.
func slowTarget(t *testing.T, d time.Duration) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		time.Sleep(d)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// In a timed, rate-limited run the schedule owes rate × duration requests
// (open loop). Against a target slower than the rate, the slots that fell
// due before the end but were never sent (every worker was busy) are
// counted as Phase.Unsent and as failed requests (Total.Errors,
// Errors["unsent"]), shown by the table and the summary, and kept by Merge,
// so a saturated target does not look better than it is. A target that
// keeps up leaves (about) none unsent. At 20 req/s for 1s with one worker
// the schedule has 20 slots; a 200 ms target takes ~5 of them.
func TestTimedRateLimitedRunCountsUnsentSlots(t *testing.T) {
	tests := []struct {
		name                   string
		delay                  time.Duration
		minUnsent, maxUnsent   int64
		wantTable, wantSummary bool
	}{
		{"slow target", 200 * time.Millisecond, 10, 17, true, true},
		{"target keeps up", 0, 0, 1, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Run(context.Background(), Config{Endpoint: slowTarget(t, tc.delay), Bucket: "b", PutPercent: 100,
				Duration: time.Second, Workers: 1, MinSize: 16, Seed: 1, RateLimit: 20})
			if err != nil {
				t.Fatal(err)
			}
			m := res.Main
			sent := m.Total.Count + m.Total.Errors - m.Unsent
			t.Logf("sent=%d unsent=%d errors=%v", sent, m.Unsent, m.Errors)
			if m.Unsent < tc.minUnsent || m.Unsent > tc.maxUnsent {
				t.Errorf("unsent %d, want %d to %d", m.Unsent, tc.minUnsent, tc.maxUnsent)
			}
			// Every slot of the schedule is accounted for: sent or unsent
			// (20, or 19 when the run started late in its first slot).
			if n := sent + m.Unsent; n < 19 || n > 20 {
				t.Errorf("sent %d + unsent %d = %d, want the schedule's 20 slots", sent, m.Unsent, n)
			}
			if m.Errors["unsent"] != m.Unsent || m.Total.Errors < m.Unsent {
				t.Errorf("errors %d, by kind %v: want the %d unsent among them", m.Total.Errors, m.Errors, m.Unsent)
			}
			var table, summary strings.Builder
			if err := PrintTable(&table, res); err != nil {
				t.Fatal(err)
			}
			if err := PrintSummary(&summary, res); err != nil {
				t.Fatal(err)
			}
			line := fmt.Sprintf("%d paced requests unsent", m.Unsent)
			if got := strings.Contains(table.String(), line); got != tc.wantTable {
				t.Errorf("table shows %q: %v, want %v:\n%s", line, got, tc.wantTable, table.String())
			}
			// The summary's last two columns: unsent, errors.
			lines := strings.Split(strings.TrimSpace(summary.String()), "\n")
			head, row := strings.Fields(lines[0]), strings.Fields(lines[len(lines)-1])
			want := []string{"unsent", "errors", fmt.Sprint(m.Unsent), fmt.Sprint(m.Total.Errors)}
			if len(lines) != 2 || len(head) < 2 || len(row) < 2 ||
				head[len(head)-2] != want[0] || head[len(head)-1] != want[1] || row[len(row)-2] != want[2] || row[len(row)-1] != want[3] {
				t.Errorf("summary does not show %d unsent, %d errors:\n%s", m.Unsent, m.Total.Errors, summary.String())
			}
			merged, err := Merge("both", res, res)
			if err != nil {
				t.Fatal(err)
			}
			if merged.Main.Unsent != 2*m.Unsent || merged.Main.Total.Errors != 2*m.Total.Errors {
				t.Errorf("merged unsent %d errors %d, want %d and %d", merged.Main.Unsent, merged.Main.Total.Errors, 2*m.Unsent, 2*m.Total.Errors)
			}
		})
	}
}
