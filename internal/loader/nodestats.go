package loader

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/slipstream-io/slipstream/internal/sysstat"
)

// statsPoller samples each node's stats endpoint every interval.
type statsPoller struct {
	client   *http.Client
	interval time.Duration
	nodes    []NodeStats
	mu       sync.Mutex
}

func newStatsPoller(urls []string, interval time.Duration) *statsPoller {
	p := &statsPoller{client: &http.Client{Timeout: interval}, interval: interval}
	for _, u := range urls {
		p.nodes = append(p.nodes, NodeStats{URL: u})
	}
	return p
}

// run samples until ctx ends, then once more so the last interval is closed.
func (p *statsPoller) run(ctx context.Context) {
	if len(p.nodes) == 0 {
		return
	}
	p.sampleAll(context.WithoutCancel(ctx))
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			p.sampleAll(context.WithoutCancel(ctx))
			return
		case <-t.C:
			p.sampleAll(ctx)
		}
	}
}

func (p *statsPoller) sampleAll(ctx context.Context) {
	var wg sync.WaitGroup
	for i := range p.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			snap, err := p.fetch(ctx, p.nodes[i].URL)
			p.mu.Lock()
			defer p.mu.Unlock()
			if err != nil {
				p.nodes[i].Errors++
				p.nodes[i].LastError = err.Error()
				return
			}
			p.nodes[i].Samples = append(p.nodes[i].Samples, snap)
			p.nodes[i].Received = append(p.nodes[i].Received, time.Now())
		}()
	}
	wg.Wait()
}

func (p *statsPoller) fetch(ctx context.Context, url string) (sysstat.Snapshot, error) {
	var snap sysstat.Snapshot
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return snap, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return snap, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return snap, fmt.Errorf("stats %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&snap); err != nil {
		return snap, fmt.Errorf("stats %s: %w", url, err)
	}
	return snap, nil
}

func (p *statsPoller) result() []NodeStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]NodeStats(nil), p.nodes...)
}
