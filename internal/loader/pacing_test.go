package loader

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
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
