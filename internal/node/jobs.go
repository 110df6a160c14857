package node

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slipstream-io/slipstream/internal/tier"
)

// Progress is one line of a prefetch job's NDJSON progress stream.
type Progress struct {
	Node    string `json:"node"`
	Listed  int    `json:"listed"`
	Filled  int    `json:"filled"`
	Warm    int    `json:"warm"`
	Failed  int    `json:"failed"`
	Bytes   int64  `json:"bytes"`
	Done    bool   `json:"done"`
	LastErr string `json:"lastError,omitempty"`
}

// Add adds o's counts to p.
func (p *Progress) Add(o Progress) {
	p.Listed += o.Listed
	p.Filled += o.Filled
	p.Warm += o.Warm
	p.Failed += o.Failed
	p.Bytes += o.Bytes
	if o.LastErr != "" {
		p.LastErr = o.LastErr
	}
}

// EvictResult is a node's answer to an evict job.
type EvictResult struct {
	Node    string `json:"node"`
	Objects int    `json:"objects"`
	Bytes   int64  `json:"bytes"`
}

// registerJobs adds the tier jobs to the admin API: each node prefetches the
// keys it owns (the CLI starts the job on every node and adds up the
// progress) and evicts its own clean copies.
func (n *Node) registerJobs() {
	n.adminExtras["POST "+AdminPrefix+"prefetch"] = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		bucket := q.Get("bucket")
		progress := newNDJSON(w)
		send := func(p tier.PrefetchProgress, force bool) {
			out := Progress{Node: n.cfg.ID, Listed: p.Listed, Filled: p.Filled, Warm: p.Warm, Failed: p.Failed, Bytes: p.Bytes, Done: p.Done}
			if p.LastErr != nil {
				out.LastErr = p.LastErr.Error()
			}
			progress.send(out, force)
		}
		owns := func(key string) bool {
			m := n.cluster.Map()
			up, _ := placementOf(m, bucket, key)
			return len(up) > 0 && up[0] == n.cfg.ID
		}
		var p tier.PrefetchProgress
		err := n.local.registered(r.Context(), bucket)
		if err == nil {
			p, err = n.tier.Prefetch(r.Context(), bucket, tier.PrefetchOptions{
				Prefix: q.Get("prefix"), Filter: owns, Progress: func(p tier.PrefetchProgress) { send(p, false) },
			})
		}
		if err != nil && p.LastErr == nil {
			p.LastErr = err
		}
		p.Done = true
		send(p, true)
	})
	n.adminExtras["POST "+AdminPrefix+"evict"] = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		var objs int
		var bytes int64
		err := n.local.registered(r.Context(), q.Get("bucket"))
		if err == nil {
			objs, bytes, err = n.tier.Evict(r.Context(), q.Get("bucket"), q.Get("prefix"))
		}
		writeAdmin(w, EvictResult{Node: n.cfg.ID, Objects: objs, Bytes: bytes}, err)
	})
}

// ndjson streams progress lines, at most five a second unless forced.
type ndjson struct {
	mu      sync.Mutex
	enc     *json.Encoder
	flusher http.Flusher
	last    time.Time
}

func newNDJSON(w http.ResponseWriter) *ndjson {
	w.Header().Set("Content-Type", "application/x-ndjson")
	f, _ := w.(http.Flusher)
	return &ndjson{enc: json.NewEncoder(w), flusher: f}
}

func (j *ndjson) send(v any, force bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !force && time.Since(j.last) < 200*time.Millisecond {
		return
	}
	j.last = time.Now()
	_ = j.enc.Encode(v)
	if j.flusher != nil {
		j.flusher.Flush()
	}
}

// registerRebalance adds the rebalance job to the admin API: the node
// makes a pass over its copies (of one bucket, or all) and streams its
// progress; the CLI starts it on every node.
func (n *Node) registerRebalance(rb *rebalancer) {
	n.adminExtras["POST "+AdminPrefix+"rebalance"] = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		progress := newNDJSON(w)
		p := rb.run(r.Context(), r.URL.Query().Get("bucket"), func(p RebalanceProgress) { progress.send(p, false) })
		progress.send(p, true)
	})
	n.statusFill = append(n.statusFill, func(s *Sections) { s.Rebalance, s.Down = rb.passes.status(), rb.downNodes() })
	n.reg.MustRegister(newRebalanceCollector(rb.passes.status))
}

// registerScrub adds the scrub job to the admin API, like rebalance.
func (n *Node) registerScrub(sc *scrubber) {
	n.adminExtras["POST "+AdminPrefix+"scrub"] = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		progress := newNDJSON(w)
		p := sc.run(r.Context(), r.URL.Query().Get("bucket"), func(p ScrubProgress) { progress.send(p, false) })
		progress.send(p, true)
	})
	n.statusFill = append(n.statusFill, func(s *Sections) { s.Scrub = sc.passes.status() })
	n.reg.MustRegister(newScrubCollector(sc.passes.status))
}

// tierCollector exports the tier's GET counters and destage backlog.
type tierCollector struct {
	t                                   *tier.Tier
	warm, cold                          *prometheus.Desc
	objects, bytes, oldest, replicaObjs *prometheus.Desc
	notices                             *prometheus.Desc
	destaged, failures                  *prometheus.Desc
	cutBytes, cutRegions                *prometheus.Desc
}

func newTierCollector(t *tier.Tier) *tierCollector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &tierCollector{
		t:           t,
		warm:        d("slipstream_tier_warm_hits_total", "GETs served from a local copy."),
		cold:        d("slipstream_tier_cold_hits_total", "GETs served while fetching from the backend."),
		objects:     d("slipstream_destage_backlog_objects", "Write-back operations not yet in the backend."),
		bytes:       d("slipstream_destage_backlog_bytes", "Dirty bytes not yet in the backend."),
		oldest:      d("slipstream_destage_backlog_oldest_seconds", "Age of the oldest operation not yet destaged."),
		replicaObjs: d("slipstream_destage_replica_objects", "Replicas held for other owners, not yet destaged by them."),
		notices:     d("slipstream_destage_undelivered_notices", "Notices replica holders missed, to be sent again."),
		destaged:    d("slipstream_destaged_total", "Operations destaged since start."),
		failures:    d("slipstream_destage_failures_total", "Failed destage attempts since start."),
		cutBytes:    d("slipstream_destage_journal_cut_bytes", "Damaged bytes the write-back journal's replay cut out at start (kept in journal.cut-<time>)."),
		cutRegions:  d("slipstream_destage_journal_cut_regions", "Damaged regions the write-back journal's replay cut out at start; more than one, or one not at the end, means records were skipped."),
	}
}

func (c *tierCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.warm, c.cold, c.objects, c.bytes, c.oldest, c.replicaObjs, c.notices, c.destaged, c.failures, c.cutBytes, c.cutRegions} {
		ch <- d
	}
}

func (c *tierCollector) Collect(ch chan<- prometheus.Metric) {
	k := c.t.Counters()
	b := c.t.Backlog()
	ch <- prometheus.MustNewConstMetric(c.warm, prometheus.CounterValue, float64(k.WarmHits))
	ch <- prometheus.MustNewConstMetric(c.cold, prometheus.CounterValue, float64(k.ColdHits))
	ch <- prometheus.MustNewConstMetric(c.objects, prometheus.GaugeValue, float64(b.Objects))
	ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(b.Bytes))
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, b.Oldest.Seconds())
	ch <- prometheus.MustNewConstMetric(c.replicaObjs, prometheus.GaugeValue, float64(b.ReplicaObjects))
	ch <- prometheus.MustNewConstMetric(c.notices, prometheus.GaugeValue, float64(b.Notices))
	ch <- prometheus.MustNewConstMetric(c.destaged, prometheus.CounterValue, float64(b.Destaged))
	ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(b.Failures))
	ch <- prometheus.MustNewConstMetric(c.cutBytes, prometheus.GaugeValue, float64(b.JournalCutBytes))
	ch <- prometheus.MustNewConstMetric(c.cutRegions, prometheus.GaugeValue, float64(b.JournalCutRegions))
}

// statsCounters are the node counters the stats endpoint adds to disk and
// NIC samples (the load generator records them).
func (n *Node) statsCounters() map[string]float64 {
	k := n.tier.Counters()
	b := n.tier.Backlog()
	c := n.httpm.counters()
	c["warm_hits"], c["cold_hits"] = float64(k.WarmHits), float64(k.ColdHits)
	c["destage_backlog_objects"], c["destage_backlog_bytes"] = float64(b.Objects), float64(b.Bytes)
	return c
}
