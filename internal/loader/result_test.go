package loader

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/slipstream-io/slipstream/internal/netx"
	"github.com/slipstream-io/slipstream/internal/sysstat"
)

// TestPickerEpochs: concurrent workers taking objects read each object
// exactly once per epoch, in a different order each epoch.
func TestPickerEpochs(t *testing.T) {
	var objs []object
	for i := 0; i < 100; i++ {
		objs = append(objs, object{key: fmt.Sprint(i)})
	}
	p := &picker{objs: objs, epochs: 3, seed: 9, perms: map[int][]int32{}}
	var mu sync.Mutex
	count := map[string]int{}
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				o, ok := p.next()
				if !ok {
					return
				}
				mu.Lock()
				count[o.key]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(count) != 100 {
		t.Fatalf("%d distinct objects read", len(count))
	}
	for k, n := range count {
		if n != 3 {
			t.Fatalf("object %s read %d times in 3 epochs", k, n)
		}
	}
	q := &picker{objs: objs, seed: 9, perms: map[int][]int32{}}
	a, b := q.perm(0), q.perm(1)
	if fmt.Sprint(a) == fmt.Sprint(b) {
		t.Fatal("two epochs in the same order")
	}
	inOrder := true
	for i, v := range a {
		inOrder = inOrder && int(v) == i
	}
	if inOrder {
		t.Fatal("epoch not shuffled")
	}
}

func TestErrorKind(t *testing.T) {
	resp := func(code int) error {
		return &awshttp.ResponseError{ResponseError: &smithyhttp.ResponseError{
			Response: &smithyhttp.Response{Response: &http.Response{StatusCode: code}}, Err: errors.New("x")}}
	}
	tests := []struct {
		err  error
		want string
	}{
		{nil, ""},
		{&smithy.GenericAPIError{Code: "NoSuchKey"}, "NoSuchKey"},
		{fmt.Errorf("op: %w", &smithy.GenericAPIError{Code: "SlowDown"}), "SlowDown"},
		{resp(503), "http-503"},
		{context.DeadlineExceeded, "timeout"},
		{fmt.Errorf("get: %w", context.Canceled), "canceled"},
		{&net.OpError{Op: "dial", Err: errors.New("refused")}, "connection"},
		{fmt.Errorf("send: %w", fmt.Errorf("%w: GET 10.0.0.2:9000: %w", netx.ErrUnreachable, netx.ErrPairDown)), "unreachable"},
		{kindError{"short-read", errors.New("3 of 4")}, "short-read"},
		{errors.New("strange"), "other"},
	}
	for _, tc := range tests {
		if got := ErrorKind(tc.err); got != tc.want {
			t.Errorf("ErrorKind(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

func sampleResult() *Result {
	rec := NewRecorder(t0)
	for i := 0; i < 50; i++ {
		rec.Record(Sample{Op: OpGet, Start: t0.Add(time.Duration(i) * 40 * time.Millisecond), Latency: 5 * time.Millisecond, TTFB: time.Millisecond, Bytes: 1 << 20})
	}
	rec.Record(Sample{Op: OpPut, Start: t0, Latency: time.Millisecond, Err: "SlowDown"})
	ph, err := buildPhase("main", rec, t0.Add(2*time.Second))
	if err != nil {
		panic(err)
	}
	return &Result{Version: ResultVersion, Label: "cold", Start: t0, End: t0.Add(2 * time.Second), Main: ph,
		Params: Params{Workload: "GET", Workers: 4, MinSize: 1 << 20, MaxSize: 1 << 20}}
}

func TestResultRoundTripAndCSV(t *testing.T) {
	r := sampleResult()
	path := filepath.Join(t.TempDir(), "r.json")
	if err := r.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	back, err := ReadResult(path)
	if err != nil {
		t.Fatal(err)
	}
	if back.Main.Ops["GET"].Count != 50 || back.Main.Errors["SlowDown"] != 1 || len(back.Main.Series) != 2 {
		t.Fatalf("round trip lost data: %+v", back.Main)
	}
	if back.Main.Ops["GET"].Latency.P99 != r.Main.Ops["GET"].Latency.P99 {
		t.Fatal("percentiles changed in the round trip")
	}
	var buf bytes.Buffer
	if err := back.WriteCSV(&buf); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || rows[0][0] != "phase" || rows[1][0] != "main" || rows[1][3] != "25" || rows[2][3] != "25" {
		t.Fatalf("csv rows %v", rows)
	}
	var out bytes.Buffer
	if err := PrintTable(&out, back); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"cold", "GET", "1.0 MiB", "25.0 MiB/s", "5.00", "SlowDown=1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := PrintSummary(&out, back, back); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], "25.0 MiB/s") || !strings.Contains(lines[1], "cold") || !strings.HasSuffix(lines[1], "1") {
		t.Errorf("summary:\n%s", out.String())
	}
}

func TestNodeRatesUseArrivalTimes(t *testing.T) {
	skew := 10 * time.Minute // the node's clock runs ahead
	n := NodeStats{
		Samples: []sysstat.Snapshot{
			{Time: t0.Add(skew), Disks: []sysstat.DiskStat{{Device: "vda", ReadBytes: 0}}},
			{Time: t0.Add(skew + 2*time.Second), Disks: []sysstat.DiskStat{{Device: "vda", ReadBytes: 2000}}},
		},
	}
	if r := n.Rates(); len(r) != 1 || !r[0].Time.Equal(t0.Add(skew+2*time.Second)) || r[0].Disks[0].ReadBps != 1000 {
		t.Fatalf("without arrival times: %+v", r)
	}
	n.Received = []time.Time{t0, t0.Add(2 * time.Second)}
	if r := n.Rates(); len(r) != 1 || !r[0].Time.Equal(t0.Add(2*time.Second)) || r[0].Disks[0].ReadBps != 1000 {
		t.Fatalf("with arrival times: %+v", r)
	}
}

func TestCounterDelta(t *testing.T) {
	snap := func(warm float64) sysstat.Snapshot {
		return sysstat.Snapshot{Counters: map[string]float64{"warm_hits": warm}}
	}
	r := &Result{Nodes: []NodeStats{
		{Samples: []sysstat.Snapshot{snap(10), snap(12), snap(40)}},
		{Samples: []sysstat.Snapshot{snap(0), snap(5)}},
		{Samples: []sysstat.Snapshot{snap(7)}}, // one sample: no interval
		{},
	}}
	if got := r.CounterDelta("warm_hits"); got != 35 {
		t.Errorf("warm_hits delta %v, want 35", got)
	}
	if got := r.CounterDelta("cold_hits"); got != 0 {
		t.Errorf("missing counter delta %v, want 0", got)
	}
}
