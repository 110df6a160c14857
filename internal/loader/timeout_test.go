package loader

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// stalledServer accepts requests and never answers them.
func stalledServer(t *testing.T) *httptest.Server {
	t.Helper()
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(block) })
	return srv
}

// Config.RequestTimeout bounds every request: a count-bounded run (MaxOps,
// no Duration) against a target that never answers ends once each request
// has timed out, and records every expiry as an error of kind "timeout".
func TestCountBoundedRunAgainstStalledTargetTimesOutRequests(t *testing.T) {
	if got := (Config{}).Defaults().RequestTimeout; got != DefaultRequestTimeout {
		t.Errorf("default request timeout %v, want %v", got, DefaultRequestTimeout)
	}
	srv := stalledServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type out struct {
		res *Result
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := Run(ctx, Config{Endpoint: srv.URL, Bucket: "b", PutPercent: 100, MaxOps: 2, Workers: 1,
			MinSize: 16, Seed: 1, RequestTimeout: 200 * time.Millisecond})
		done <- out{res, err}
	}()
	select {
	case o := <-done:
		if o.res == nil {
			t.Fatalf("no result: %v", o.err)
		}
		tot := o.res.Main.Total
		if tot.Errors != 2 || o.res.Main.Errors["timeout"] != 2 {
			t.Errorf("errors=%d by kind=%v, want 2 timeouts", tot.Errors, o.res.Main.Errors)
		}
	case <-time.After(5 * time.Second):
		cancel()
		<-done
		t.Fatal("count-bounded run against a stalled target still running after 5s with a 200ms request timeout")
	}
}

// In a timed run, the requests still in flight when the hard stop
// (Duration + hardStopGrace) cuts them off count as errors of kind "timeout",
// with their latency up to the cut; a stalled target does not give a clean,
// empty run. Waits hardStopGrace (~30s).
func TestDurationRunAgainstStalledTargetCountsCutOffRequestsAsTimeouts(t *testing.T) {
	if testing.Short() {
		t.Skip("waits hardStopGrace")
	}
	srv := stalledServer(t)
	res, err := Run(context.Background(), Config{Endpoint: srv.URL, Bucket: "b", PutPercent: 100,
		Duration: 200 * time.Millisecond, Workers: 2, MinSize: 16, Seed: 1})
	if res == nil {
		t.Fatalf("no result: %v", err)
	}
	tot := res.Main.Total
	t.Logf("err=%v count=%d errors=%d errs=%v", err, tot.Count, tot.Errors, res.Main.Errors)
	if tot.Errors != 2 || res.Main.Errors["timeout"] != 2 {
		t.Errorf("errors=%d by kind=%v, want the 2 cut-off requests as timeouts", tot.Errors, res.Main.Errors)
	}
	// Each error is placed at the time of the cut, not at the send.
	var late int64
	for _, sec := range res.Main.Series {
		if sec.T >= hardStopGrace.Seconds() {
			late += sec.Errors
		}
	}
	if late != 2 {
		t.Errorf("%d errors in the series at or after %v, want 2 (latency up to the cut)", late, hardStopGrace)
	}
}
