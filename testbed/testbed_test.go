package testbed_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/netx"
	"github.com/slipstream-io/slipstream/testbed"
)

// The helpers below run in a namespace of the testbed: the test re-executes
// its own binary there with `ip netns exec NS /proc/self/exe -test.run=...`
// and an environment variable that names the role.
const (
	helperEnv = "SSTB_HELPER"
	port      = "9080"
	objSize   = 2 << 20
)

// rate per NIC; SSTB_RATE overrides (e.g. 1gbit on a quiet machine).
func rate() string {
	if r := os.Getenv("SSTB_RATE"); r != "" {
		return r
	}
	return "200mbit"
}

// TestHelperServer serves /obj (one file, through sendfile, with an ETag)
// and /healthz on every address of SSTB_ADDRS until stdin closes.
func TestHelperServer(t *testing.T) {
	if os.Getenv(helperEnv) != "server" {
		t.Skip("helper process for the testbed tests")
	}
	path := filepath.Join(t.TempDir(), "obj")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(f, rand.Reader, objSize); err != nil {
		t.Fatal(err)
	}
	f.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lns, err := netx.Listen(ctx, netx.SplitAddrs(os.Getenv("SSTB_ADDRS")))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("/obj", func(w http.ResponseWriter, r *http.Request) {
		f, err := os.Open(path)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		defer f.Close()
		w.Header().Set("ETag", `"obj-v1"`)
		http.ServeContent(w, r, "", time.Time{}, f)
	})
	go func() { io.Copy(io.Discard, os.Stdin); cancel() }()
	fmt.Println("ready")
	if err := netx.Serve(ctx, &http.Server{Handler: mux}, lns, time.Second); err != nil {
		t.Fatal(err)
	}
}

// loadResult is what TestHelperClient prints.
type loadResult struct {
	Bytes      int64             `json:"bytes"`
	Requests   int64             `json:"requests"`
	Errors     int64             `json:"errors"`
	FirstError string            `json:"first_error,omitempty"`
	Seconds    float64           `json:"seconds"`
	TickMS     int               `json:"tick_ms"`
	Series     []int64           `json:"series"` // bytes per tick
	Stats      []netx.IfaceStats `json:"stats"`
	Pairs      []netx.PairStats  `json:"pairs"`
}

// TestHelperClient GETs /obj from the peers of SSTB_PEERS with SSTB_WORKERS
// workers for SSTB_SECONDS through a netx.Transport bound to SSTB_LOCAL,
// prints "started", then one JSON loadResult.
func TestHelperClient(t *testing.T) {
	if os.Getenv(helperEnv) != "client" {
		t.Skip("helper process for the testbed tests")
	}
	var peers []netx.Peer
	if err := json.Unmarshal([]byte(os.Getenv("SSTB_PEERS")), &peers); err != nil {
		t.Fatal(err)
	}
	workers, _ := strconv.Atoi(os.Getenv("SSTB_WORKERS"))
	secs, _ := strconv.ParseFloat(os.Getenv("SSTB_SECONDS"), 64)
	tr, err := netx.NewTransport(netx.Config{
		LocalAddrs: netx.SplitAddrs(os.Getenv("SSTB_LOCAL")),
		ProbePath:  "/healthz",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	const tick = 250 * time.Millisecond
	dur := time.Duration(secs * float64(time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	var bytes, reqs, errs atomic.Int64
	var firstErr atomic.Value
	var series []int64
	done := make(chan struct{})
	go func() { // bytes per tick
		defer close(done)
		tk := time.NewTicker(tick)
		defer tk.Stop()
		var last int64
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
				b := bytes.Load()
				series = append(series, b-last)
				last = b
			}
		}
	}()
	fmt.Println("started")
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			buf := make([]byte, 64<<10)
			for i := 0; i < 100000 && ctx.Err() == nil; i++ {
				peer := peers[(w+i)%len(peers)]
				req, _ := http.NewRequest(http.MethodGet, "/obj", nil)
				n, err := fetch(ctx, tr, peer, req, buf, &bytes)
				if ctx.Err() != nil {
					return // cut by the end of the run: neither success nor error
				}
				if err == nil && n != objSize {
					err = fmt.Errorf("short body: %d bytes", n)
				}
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				reqs.Add(1)
			}
		}(w)
	}
	wg.Wait()
	<-done
	res := loadResult{Bytes: bytes.Load(), Requests: reqs.Load(), Errors: errs.Load(),
		Seconds: time.Since(start).Seconds(), TickMS: int(tick / time.Millisecond),
		Series: series, Stats: tr.Stats(), Pairs: tr.Pairs()}
	if s, ok := firstErr.Load().(string); ok {
		res.FirstError = s
	}
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
}

func fetch(ctx context.Context, tr *netx.Transport, peer netx.Peer, req *http.Request, buf []byte, total *atomic.Int64) (int64, error) {
	resp, err := tr.Do(ctx, peer, req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	var n int64
	for {
		m, err := resp.Body.Read(buf)
		n += int64(m)
		total.Add(int64(m))
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// helper is a re-executed test binary running inside a namespace.
type helper struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
}

func startHelper(t *testing.T, ctx context.Context, bed *testbed.Bed, host testbed.Host, role string, env ...string) *helper {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	name := map[string]string{"server": "^TestHelperServer$", "client": "^TestHelperClient$"}[role]
	cmd := bed.Command(ctx, host, self, "-test.run="+name, "-test.count=1")
	cmd.Env = append(append(os.Environ(), helperEnv+"="+role), env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	h.out.Buffer(make([]byte, 1<<20), 1<<20)
	t.Cleanup(func() { // closing stdin stops it (and it removes its temp dir); else kill it by its PID
		stdin.Close()
		if cmd.ProcessState != nil {
			return
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	return h
}

// expect reads stdout lines until one starts with prefix and returns it.
func (h *helper) expect(t *testing.T, prefix string) string {
	t.Helper()
	for h.out.Scan() {
		if line := h.out.Text(); strings.HasPrefix(line, prefix) {
			return line
		}
	}
	t.Fatalf("helper ended without a %q line: %v", prefix, h.out.Err())
	return ""
}

// setup builds a testbed of two storage hosts and one client, and starts
// a file server on both addresses of each storage host.
func setup(t *testing.T) (context.Context, *testbed.Bed) {
	t.Helper()
	if err := testbed.Available(); err != nil {
		t.Skipf("network-namespace testbed not available here: %v", err)
	}
	if testing.Short() {
		t.Skip("-short: skipping the network-namespace testbed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	bed, err := testbed.Up(ctx, testbed.Options{Nodes: 2, Clients: 1, Rate: rate()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := bed.Down(context.Background()); err != nil {
			t.Error(err)
		}
	})
	client := bed.Role("client")[0]
	for _, n := range bed.Role("storage") {
		h := startHelper(t, ctx, bed, n, "server", "SSTB_ADDRS="+strings.Join(withPort(n.Addrs), ","))
		h.expect(t, "ready")
		for _, a := range withPort(n.Addrs) {
			if err := bed.WaitTCP(ctx, client, a, 10*time.Second); err != nil {
				t.Fatal(err)
			}
		}
	}
	return ctx, bed
}

func withPort(addrs []string) []string {
	var out []string
	for _, a := range addrs {
		out = append(out, net.JoinHostPort(a, port))
	}
	return out
}

// runLoad runs the client helper and returns its result; at, if not nil,
// is called with the time the load started.
func runLoad(t *testing.T, ctx context.Context, bed *testbed.Bed, local []string, peers []netx.Peer, secs float64, at func(time.Time)) loadResult {
	t.Helper()
	pj, _ := json.Marshal(peers)
	h := startHelper(t, ctx, bed, bed.Role("client")[0], "client",
		"SSTB_LOCAL="+strings.Join(local, ","), "SSTB_PEERS="+string(pj),
		"SSTB_WORKERS=8", fmt.Sprintf("SSTB_SECONDS=%g", secs))
	h.expect(t, "started")
	if at != nil {
		at(time.Now())
	}
	var res loadResult
	if err := json.Unmarshal([]byte(h.expect(t, "{")), &res); err != nil {
		t.Fatal(err)
	}
	h.stdin.Close()
	if err := h.cmd.Wait(); err != nil {
		t.Fatalf("client helper: %v", err)
	}
	return res
}

func peersOf(bed *testbed.Bed, nics int, names ...string) []netx.Peer {
	var out []netx.Peer
	for _, n := range bed.Role("storage") {
		if len(names) > 0 && !contains(names, n.Name) {
			continue
		}
		out = append(out, netx.Peer{ID: n.Name, Addrs: withPort(n.Addrs[:nics])})
	}
	return out
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

func mbit(bytes int64, secs float64) float64 { return float64(bytes) * 8 / secs / 1e6 }

// TestTwoNICsDoubleThroughput: the client GETs from both storage hosts,
// first over one NIC on each side, then over both. With both, every NIC of
// every host carries a fair share, and the throughput is at least 1.8x.
func TestTwoNICsDoubleThroughput(t *testing.T) {
	ctx, bed := setup(t)
	client := bed.Role("client")[0]
	one := runLoad(t, ctx, bed, client.Addrs[:1], peersOf(bed, 1), 3, nil)
	before := map[string]map[string]testbed.Counters{}
	for _, h := range bed.Hosts {
		c, err := bed.Counters(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		before[h.Name] = c
	}
	two := runLoad(t, ctx, bed, client.Addrs, peersOf(bed, 2), 3, nil)
	for _, r := range []loadResult{one, two} {
		if r.Errors != 0 || r.Requests == 0 {
			t.Fatalf("load: %d requests, %d errors (first: %s)", r.Requests, r.Errors, r.FirstError)
		}
	}
	r1, r2 := mbit(one.Bytes, one.Seconds), mbit(two.Bytes, two.Seconds)
	ratio := r2 / r1
	t.Logf("rate per NIC %s: one NIC %.0f Mbit/s, two NICs %.0f Mbit/s, ratio %.2f", rate(), r1, r2, ratio)
	if ratio < 1.8 {
		t.Errorf("two NICs give %.2fx one NIC, want >= 1.8x", ratio)
	}
	for _, h := range bed.Hosts {
		after, err := bed.Counters(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		// Storage hosts send the objects, the client receives them.
		var per []float64
		var total float64
		for _, dev := range []string{"eth1", "eth2"} {
			d := float64(after[dev].TxBytes - before[h.Name][dev].TxBytes)
			if h.Role == "client" {
				d = float64(after[dev].RxBytes - before[h.Name][dev].RxBytes)
			}
			per = append(per, d)
			total += d
		}
		t.Logf("%s (%s): eth1 %.1f MB, eth2 %.1f MB", h.Name, h.Role, per[0]/1e6, per[1]/1e6)
		for i, d := range per {
			if total == 0 || d/total < 0.3 {
				t.Errorf("%s eth%d carried %.0f of %.0f bytes: traffic is not spread over both NICs", h.Name, i+1, d, total)
			}
		}
	}
	for _, s := range two.Stats {
		if s.Requests == 0 || s.BytesRecv == 0 {
			t.Errorf("client interface %s unused: %+v", s.Local, s)
		}
	}
}

// TestNICFailover: a GET load on one storage host over both NICs; one of
// its NICs goes down (at the switch) and comes back. The client sees no
// error, the throughput falls to about one NIC's worth while it is down and
// returns when it is back.
func TestNICFailover(t *testing.T) {
	ctx, bed := setup(t)
	client := bed.Role("client")[0]
	n1, _ := bed.Host("n1")
	const downAt, upAt, total = 3.0, 8.0, 12.0
	var wg sync.WaitGroup
	var linkErr error
	res := runLoad(t, ctx, bed, client.Addrs, peersOf(bed, 2, "n1"), total, func(start time.Time) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Until(start.Add(time.Duration(downAt * float64(time.Second)))))
			if linkErr = bed.SetLink(ctx, n1, "eth2", false); linkErr != nil {
				return
			}
			time.Sleep(time.Until(start.Add(time.Duration(upAt * float64(time.Second)))))
			linkErr = bed.SetLink(ctx, n1, "eth2", true)
		}()
	})
	wg.Wait()
	if linkErr != nil {
		t.Fatal(linkErr)
	}
	window := func(from, to float64) float64 {
		var sum int64
		tick := float64(res.TickMS) / 1000
		n := 0
		for i, b := range res.Series {
			if at := float64(i+1) * tick; at > from && at <= to {
				sum += b
				n++
			}
		}
		if n == 0 {
			return 0
		}
		return mbit(sum, float64(n)*tick)
	}
	before, down, after := window(0.75, downAt), window(downAt+2.5, upAt), window(upAt+2, total-0.25)
	var retries, ifErrs uint64
	for _, s := range res.Stats {
		retries += s.Retries
		ifErrs += s.Errors
	}
	t.Logf("rate per NIC %s: before %.0f Mbit/s, n1/eth2 down %.0f (%.2f), back up %.0f (%.2f); %d requests, %d client errors, %d interface errors, %d retries",
		rate(), before, down, down/before, after, after/before, res.Requests, res.Errors, ifErrs, retries)
	t.Logf("series (bytes per %d ms): %v", res.TickMS, res.Series)
	if res.Errors != 0 {
		t.Errorf("%d client-visible errors (first: %s)", res.Errors, res.FirstError)
	}
	if retries == 0 {
		t.Errorf("no retried requests: did the NIC really go down under load?")
	}
	if r := down / before; r < 0.3 || r > 0.7 {
		t.Errorf("throughput with one NIC down is %.2f of two NICs, want about 0.5", r)
	}
	if r := after / before; r < 0.75 {
		t.Errorf("throughput after the NIC came back is %.2f of before, want >= 0.75", r)
	}
}
