package multihome

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"
)

// testRate is the per-NIC rate of the CI test (MH_TEST_RATE overrides):
// low enough that two shared cores are not the bottleneck.
func testRate() string {
	if r := os.Getenv("MH_TEST_RATE"); r != "" {
		return r
	}
	return "200mbit"
}

// TestMultihoming starts a three-node cluster on the shaped testbed with two
// client hosts and checks, with the smart client's GET load, that both NICs
// of every host carry traffic and that a NIC of a storage node pulled
// during the load costs no client-visible error.
func TestMultihoming(t *testing.T) {
	c := startCluster(t, options{clients: 2, rate: testRate()})
	start := time.Now()
	fill := c.fill(t, 24, 1<<20)
	t.Logf("filled %d objects in %v; owners %v", len(fill.Keys), time.Since(start).Round(time.Millisecond), fill.Owners)
	for _, h := range c.bed.Role("storage") {
		if fill.Owners[h.Name] == 0 {
			t.Fatalf("%s owns none of the objects: %v", h.Name, fill.Owners)
		}
	}

	t.Run("EveryNIC", func(t *testing.T) {
		before := c.counters(t)
		res := c.load(t, c.bed.Role("client"), 2, fill.Keys, "", 8, 4, nil)
		after := c.counters(t)
		var total float64
		for i, r := range res {
			if r.Errors != 0 || r.Requests == 0 {
				t.Fatalf("client %d: %d requests, %d errors (first: %s)", i+1, r.Requests, r.Errors, r.FirstError)
			}
			total += mbit(r.Bytes, r.Seconds)
		}
		t.Logf("rate per NIC %s: %d client hosts read %.0f Mbit/s together", testRate(), len(res), total)
		for _, h := range c.bed.Hosts {
			var per [2]float64
			var sum float64
			for k, dev := range []string{"eth1", "eth2"} {
				a, b := after[h.Name][dev], before[h.Name][dev]
				d := float64(a.TxBytes - b.TxBytes) // storage hosts send the objects
				if h.Role == "client" {
					d = float64(a.RxBytes - b.RxBytes)
				}
				per[k] = d
				sum += d
			}
			t.Logf("%s (%s): eth1 %.1f MB, eth2 %.1f MB", h.Name, h.Role, per[0]/1e6, per[1]/1e6)
			if sum < 4<<20 {
				t.Errorf("%s moved only %.0f bytes", h.Name, sum)
				continue
			}
			for k, d := range per {
				if d/sum < 0.3 {
					t.Errorf("%s eth%d carried %.0f of %.0f bytes: traffic is not spread over both NICs", h.Name, k+1, d, sum)
				}
			}
		}
		for i, r := range res {
			for _, s := range r.Stats {
				if s.Requests == 0 || s.BytesRecv == 0 {
					t.Errorf("client %d: interface %s unused: %+v", i+1, s.Local, s)
				}
			}
		}
	})

	t.Run("NICFailover", func(t *testing.T) {
		n1, err := c.bed.Host("n1")
		if err != nil {
			t.Fatal(err)
		}
		const downAt, upAt, total = 3.0, 8.0, 12
		var wg sync.WaitGroup
		var linkErr error
		ctx := context.Background()
		res := c.load(t, c.bed.Role("client")[:1], 2, fill.Keys, "n1", 8, total, func(start time.Time) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Until(start.Add(time.Duration(downAt * float64(time.Second)))))
				if linkErr = c.bed.SetLink(ctx, n1, "eth2", false); linkErr != nil {
					return
				}
				time.Sleep(time.Until(start.Add(time.Duration(upAt * float64(time.Second)))))
				linkErr = c.bed.SetLink(ctx, n1, "eth2", true)
			}()
		})[0]
		wg.Wait()
		if linkErr != nil {
			t.Fatal(linkErr)
		}
		before := rate(res.Series, res.TickMS, 0.75, downAt)
		down := rate(res.Series, res.TickMS, downAt+2.5, upAt)
		after := rate(res.Series, res.TickMS, upAt+2, total-0.25)
		var retries, ifErrs uint64
		for _, s := range res.Stats {
			retries += s.Retries
			ifErrs += s.Errors
		}
		t.Logf("rate per NIC %s, reading n1's objects: before %.0f Mbit/s, n1/eth2 down %.0f (%.2f), back up %.0f (%.2f); %d requests, %d client errors, %d interface errors, %d retries",
			testRate(), before, down, down/before, after, after/before, res.Requests, res.Errors, ifErrs, retries)
		t.Logf("series (bytes per %d ms): %v", res.TickMS, res.Series)
		if res.Errors != 0 {
			t.Errorf("%d client-visible errors (first: %s)", res.Errors, res.FirstError)
		}
		if retries == 0 {
			t.Errorf("no retried requests: did the NIC really go down under load?")
		}
		if r := down / before; r < 0.3 || r > 0.7 {
			t.Errorf("throughput with one of n1's NICs down is %.2f of two NICs, want about 0.5", r)
		}
		if r := after / before; r < 0.75 {
			t.Errorf("throughput after the NIC came back is %.2f of before, want >= 0.75", r)
		}
	})
}
