package tier_test

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/backend"
	"github.com/slipstream-io/slipstream/internal/backend/backendtest"
	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/tier"
)

// link models a slower link to the backend: every byte read from or
// written to it passes one shared token bucket.
type link struct {
	mu   sync.Mutex
	rate float64 // bytes per second
	next time.Time
}

func (l *link) take(n int) {
	l.mu.Lock()
	now := time.Now()
	if l.next.Before(now) {
		l.next = now
	}
	l.next = l.next.Add(time.Duration(float64(n) / l.rate * float64(time.Second)))
	wait := l.next.Sub(now)
	l.mu.Unlock()
	if wait > 2*time.Millisecond { // a small burst allowance keeps sleeps coarse
		time.Sleep(wait)
	}
}

type slowBackend struct {
	backend.Backend
	l *link
}

type slowReader struct {
	io.ReadCloser
	l *link
}

func (r slowReader) Read(p []byte) (int, error) {
	if len(p) > 256<<10 {
		p = p[:256<<10]
	}
	n, err := r.ReadCloser.Read(p)
	r.l.take(n)
	return n, err
}

func (s slowBackend) Get(ctx context.Context, key string, rng *object.Range) (io.ReadCloser, backend.Attrs, error) {
	rc, a, err := s.Backend.Get(ctx, key, rng)
	if err != nil {
		return nil, a, err
	}
	return slowReader{rc, s.l}, a, nil
}

func (s slowBackend) Put(ctx context.Context, key string, r io.Reader, size int64, pa backend.PutAttrs) (backend.Attrs, error) {
	return s.Backend.Put(ctx, key, slowReader{io.NopCloser(r), s.l}, size, pa)
}

// epoch reads every key with par readers and returns bytes per second.
func epoch(b *testing.B, keys []string, par int, get func(key string) (io.ReadCloser, error)) float64 {
	b.Helper()
	start := time.Now()
	var total int64
	var mu sync.Mutex
	ch := make(chan string)
	var wg sync.WaitGroup
	for i := 0; i < par; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range ch {
				r, err := get(k)
				if err != nil {
					b.Error(err)
					continue
				}
				n, err := io.Copy(io.Discard, r)
				r.Close()
				if err != nil {
					b.Error(err)
				}
				mu.Lock()
				total += n
				mu.Unlock()
			}
		}()
	}
	for _, k := range keys {
		ch <- k
	}
	close(ch)
	wg.Wait()
	return float64(total) / time.Since(start).Seconds()
}

// BenchmarkColdWarm: a cold epoch then a warm epoch over 10 MiB objects
// behind a 300 MiB/s link, against reading the backend directly over the
// same link. Reported as ratios measured in one run.
func BenchmarkColdWarm(b *testing.B) {
	for i := 0; i < b.N; i++ {
		e := newEnvB(b)
		l := &link{rate: 300 << 20}
		slow := slowBackend{e.raw, l}
		var keys []string
		for j := 0; j < 12; j++ {
			k := fmt.Sprintf("ds/%02d", j)
			body := backendtest.Body(int64(j), 10<<20)
			if _, err := e.raw.Put(context.Background(), k, bytesReader(body), int64(len(body)), backend.PutAttrs{}); err != nil {
				b.Fatal(err)
			}
			keys = append(keys, k)
		}
		tr, err := tier.New(context.Background(), tier.Config{SpoolDir: e.dir + "/spool"}, e.local)
		if err != nil {
			b.Fatal(err)
		}
		if err := tr.AddBucket("data", tier.Bucket{Mode: tier.ModeCache, Backend: slow}); err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		direct := epoch(b, keys, 4, func(k string) (io.ReadCloser, error) {
			rc, _, err := slow.Get(ctx, k, nil)
			return rc, err
		})
		get := func(k string) (io.ReadCloser, error) { return tr.Get(ctx, "data", k, nil) }
		cold := epoch(b, keys, 4, get)
		for _, k := range keys { // the last commits may trail the readers by an fsync
			if _, _, err := tr.Fill(ctx, "data", k); err != nil {
				b.Fatal(err)
			}
		}
		warm := epoch(b, keys, 4, get)
		tr.Close()
		b.ReportMetric(cold/direct, "cold/direct")
		b.ReportMetric(warm/cold, "warm/cold")
		b.ReportMetric(cold/(1<<20), "cold-MiB/s")
		b.Logf("direct %.0f MiB/s, cold %.0f MiB/s (%.2f of direct), warm %.0f MiB/s (%.1fx cold)",
			direct/(1<<20), cold/(1<<20), cold/direct, warm/(1<<20), warm/cold)
	}
}

// BenchmarkWriteBack: PUT throughput of 10 MiB objects, write-back with
// copies=1 and copies=2 (the peer is a second Tier and store in this
// process, on the same disk), and write-through over a 300 MiB/s link.
func BenchmarkWriteBack(b *testing.B) {
	for i := 0; i < b.N; i++ {
		body := backendtest.Body(1, 10<<20)
		run := func(mode string) float64 {
			owner, peer := newEnvB(b), newEnvB(b)
			l := &link{rate: 300 << 20}
			slow := slowBackend{owner.raw, l}
			p := &peers{tiers: map[string]*tier.Tier{}, order: []string{"A", "B"}}
			gate := make(chan struct{}) // keep destage out of the measurement
			held := &ctl{Backend: slow, gate: gate}
			ta, err := tier.New(context.Background(), tier.Config{NodeID: "A", Replicator: p, SpoolDir: owner.dir + "/spool", JournalDir: owner.dir + "/j"}, owner.local)
			if err != nil {
				b.Fatal(err)
			}
			tb, err := tier.New(context.Background(), tier.Config{NodeID: "B", Replicator: p, SpoolDir: peer.dir + "/spool", JournalDir: peer.dir + "/j"}, peer.local)
			if err != nil {
				b.Fatal(err)
			}
			p.set("A", ta)
			p.set("B", tb)
			bk := tier.Bucket{Mode: tier.ModeWriteback, Backend: held, Copies: 1}
			switch mode {
			case "copies=2":
				bk.Copies = 2
			case "write-through":
				bk = tier.Bucket{Mode: tier.ModeCache, Backend: slow}
			}
			_ = ta.AddBucket("data", bk)
			_ = tb.AddBucket("data", bk)
			start := time.Now()
			var wg sync.WaitGroup
			ch := make(chan int)
			for w := 0; w < 4; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for j := range ch {
						if _, err := ta.Put(context.Background(), "data", fmt.Sprintf("o%d", j), bytesReader(body), putOpts(len(body))); err != nil {
							b.Error(err)
						}
					}
				}()
			}
			const n = 16
			for j := 0; j < n; j++ {
				ch <- j
			}
			close(ch)
			wg.Wait()
			rate := float64(n*len(body)) / time.Since(start).Seconds()
			close(gate)
			ta.Close()
			tb.Close()
			return rate
		}
		c1, c2, wt := run("copies=1"), run("copies=2"), run("write-through")
		b.ReportMetric(c2/c1, "copies2/copies1")
		b.ReportMetric(c1/wt, "writeback/write-through")
		b.Logf("write-back copies=1 %.0f MiB/s, copies=2 %.0f MiB/s (%.2f), write-through %.0f MiB/s (write-back %.1fx)",
			c1/(1<<20), c2/(1<<20), c2/c1, wt/(1<<20), c1/wt)
	}
}
