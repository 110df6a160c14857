package node

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/volume/nbd"
)

// nbdOps names the NBD commands for metrics, by command number; others
// count as "other".
var nbdOps = [...]string{
	nbd.CmdRead: "read", nbd.CmdWrite: "write", nbd.CmdDisc: "disconnect", nbd.CmdFlush: "flush",
	nbd.CmdTrim: "trim", nbd.CmdCache: "cache", nbd.CmdWriteZeroes: "write_zeroes", nbd.CmdBlockStatus: "block_status",
}

// nbdMetrics measures the NBD server's requests (nbd.Config.Observe). The
// label children are resolved once, so a request costs two atomic adds
// and a histogram observation.
type nbdMetrics struct {
	ok, failed [len(nbdOps) + 1]prometheus.Counter
	latency    [len(nbdOps) + 1]prometheus.Observer
	bytes      [len(nbdOps) + 1]prometheus.Counter
}

func newNBDMetrics(reg prometheus.Registerer) *nbdMetrics {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "slipstream_nbd_requests_total", Help: "NBD requests answered, by command and result (ok, or the error value sent).",
	}, []string{"op", "result"})
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "slipstream_nbd_request_seconds",
		Help:    "NBD request latency, from dispatch until the reply is queued, by command.",
		Buckets: prometheus.ExponentialBuckets(0.00002, 2, 18),
	}, []string{"op"})
	bytes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "slipstream_nbd_bytes_total", Help: "Bytes of NBD requests answered without error (read, written, trimmed, zeroed), by command.",
	}, []string{"op"})
	reg.MustRegister(requests, latency, bytes)
	m := &nbdMetrics{}
	for i := range m.ok {
		op := "other"
		if i < len(nbdOps) && nbdOps[i] != "" {
			op = nbdOps[i]
		}
		m.ok[i] = requests.WithLabelValues(op, "ok")
		m.failed[i] = requests.WithLabelValues(op, "error")
		m.latency[i] = latency.WithLabelValues(op)
		m.bytes[i] = bytes.WithLabelValues(op)
	}
	return m
}

// observe implements nbd.Config.Observe.
func (m *nbdMetrics) observe(cmd uint16, length uint32, took time.Duration, errno uint32) {
	i := min(int(cmd), len(nbdOps))
	m.latency[i].Observe(took.Seconds())
	if errno != 0 {
		m.failed[i].Inc()
		return
	}
	m.ok[i].Inc()
	if length > 0 {
		m.bytes[i].Add(float64(length))
	}
}

// volumeCollector reports the state of the volumes: from the map, on
// every node, what each volume lacks (lost chunks, a re-placement in
// progress); from the volumes this node has open, their mirrors' state as
// it sees it; and the NBD connections it serves.
type volumeCollector struct {
	vs                                    *volumes
	lost, replacing, stale, down, copying *prometheus.Desc
	degraded, unavailable                 *prometheus.Desc
	conns                                 *prometheus.Desc

	// The chunks a copy short and those without a copy on a node that is
	// up, per volume, for the map version at: placing every chunk takes
	// time in proportion to the volumes' sizes, and only a new map
	// changes them.
	mu     sync.Mutex
	at     uint64
	health map[string][2]int64
}

func newVolumeCollector(vs *volumes) *volumeCollector {
	return &volumeCollector{
		vs: vs,
		lost: prometheus.NewDesc("slipstream_volume_lost_chunks",
			"Chunks of the volume with no copy left (see volume info; volume accept-loss).", []string{"volume"}, nil),
		replacing: prometheus.NewDesc("slipstream_volume_replacing",
			"1 while the volume's chunks are re-placed after a node was removed.", []string{"volume"}, nil),
		stale: prometheus.NewDesc("slipstream_volume_stale_chunks",
			"Chunks a mirror missed, not yet resynchronised, as this node knows them (volumes it has open).", []string{"volume", "mirror"}, nil),
		down: prometheus.NewDesc("slipstream_volume_mirrors_down",
			"Mirrors this node cannot reach (volumes it has open).", []string{"volume"}, nil),
		copying: prometheus.NewDesc("slipstream_volume_replacement_copies_left",
			"Chunk copies a re-placement has still to make, on the node making them.", []string{"volume"}, nil),
		degraded: prometheus.NewDesc("slipstream_volume_degraded_chunks",
			"Chunks of the volume with a copy on a node that is not up (down, or gone from the cluster).", []string{"volume"}, nil),
		unavailable: prometheus.NewDesc("slipstream_volume_unavailable_chunks",
			"Chunks of the volume with no copy on a node that is up: their reads and writes fail.", []string{"volume"}, nil),
		conns: prometheus.NewDesc("slipstream_nbd_connections", "NBD connections open.", nil, nil),
	}
}

// volumeHealth returns, per volume, the chunks a copy short and those
// with no copy on a node that is up, as of map m.
func (c *volumeCollector) volumeHealth(m *cluster.Map) map[string][2]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.health == nil || c.at != m.Version {
		c.health, c.at = map[string][2]int64{}, m.Version
		for _, name := range m.VolumeNames() {
			v, _ := m.Volume(name)
			info := volumeInfo(m, v, nil, 0)
			c.health[name] = [2]int64{info.Degraded, info.Unavailable}
		}
	}
	return c.health
}

func (c *volumeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.lost, c.replacing, c.stale, c.down, c.copying, c.degraded, c.unavailable, c.conns} {
		ch <- d
	}
}

func (c *volumeCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.vs.meta.Map()
	health := c.volumeHealth(m)
	for _, name := range m.VolumeNames() {
		v, _ := m.Volume(name)
		ch <- prometheus.MustNewConstMetric(c.lost, prometheus.GaugeValue, float64(len(v.Lost)), name)
		ch <- prometheus.MustNewConstMetric(c.replacing, prometheus.GaugeValue, b2f(v.Prev != nil), name)
		ch <- prometheus.MustNewConstMetric(c.degraded, prometheus.GaugeValue, float64(health[name][0]), name)
		ch <- prometheus.MustNewConstMetric(c.unavailable, prometheus.GaugeValue, float64(health[name][1]), name)
	}
	for name, st := range c.vs.states() {
		for mirror, n := range st.Stale {
			ch <- prometheus.MustNewConstMetric(c.stale, prometheus.GaugeValue, float64(n), name, mirror)
		}
		ch <- prometheus.MustNewConstMetric(c.down, prometheus.GaugeValue, float64(len(st.Down)), name)
		ch <- prometheus.MustNewConstMetric(c.copying, prometheus.GaugeValue, float64(st.Copying), name)
	}
	c.vs.mu.Lock()
	srv := c.vs.server
	c.vs.mu.Unlock()
	if srv != nil {
		ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, float64(srv.Conns()))
	}
}

// b2f is 1 for true, 0 for false.
func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
