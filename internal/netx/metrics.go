package netx

import "github.com/prometheus/client_golang/prometheus"

// Collector exports per-interface counters of a Transport (the sending
// side) and of counted listeners (the serving side) as Prometheus metrics.
// Register it once; wrap the registerer to add labels such as the node ID.
type Collector struct {
	tr  *Transport
	lns []*CountingListener

	sent, recv, reqs, errs, retries, inflight, pairs *prometheus.Desc
	lsent, lrecv, accepted, open                     *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector exports tr (may be nil) and lns.
func NewCollector(tr *Transport, lns ...*CountingListener) *Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("slipstream_net_"+name, help, labels, nil)
	}
	return &Collector{
		tr: tr, lns: lns,
		sent:     d("client_sent_bytes_total", "Bytes sent to peers from each local interface.", "local"),
		recv:     d("client_received_bytes_total", "Bytes received from peers on each local interface.", "local"),
		reqs:     d("client_requests_total", "Requests sent from each local interface.", "local"),
		errs:     d("client_errors_total", "Failed requests (dial, reset, stall) on each local interface.", "local"),
		retries:  d("client_retries_total", "Requests retried or resumed from each local interface.", "local"),
		inflight: d("client_in_flight", "Requests in flight on each local interface.", "local"),
		pairs:    d("client_pairs", "Interface pairs of each local interface by state.", "local", "state"),
		lsent:    d("server_sent_bytes_total", "Bytes sent by each listening address.", "addr"),
		lrecv:    d("server_received_bytes_total", "Bytes received by each listening address.", "addr"),
		accepted: d("server_accepted_total", "Connections accepted on each listening address.", "addr"),
		open:     d("server_open_connections", "Open connections on each listening address.", "addr"),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.sent, c.recv, c.reqs, c.errs, c.retries, c.inflight, c.pairs, c.lsent, c.lrecv, c.accepted, c.open} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	if c.tr != nil {
		for _, s := range c.tr.Stats() {
			local := s.Local
			if local == "" {
				local = "any"
			}
			counter(c.sent, s.BytesSent, local)
			counter(c.recv, s.BytesRecv, local)
			counter(c.reqs, s.Requests, local)
			counter(c.errs, s.Errors, local)
			counter(c.retries, s.Retries, local)
			gauge(c.inflight, float64(s.InFlight), local)
			gauge(c.pairs, float64(s.PairsUp), local, StateUp.String())
			gauge(c.pairs, float64(s.PairsDown), local, StateDown.String())
		}
	}
	for _, l := range c.lns {
		s := l.Stats()
		counter(c.lsent, s.BytesSent, s.Addr)
		counter(c.lrecv, s.BytesRecv, s.Addr)
		counter(c.accepted, s.Accepted, s.Addr)
		gauge(c.open, float64(s.Open), s.Addr)
	}
}
