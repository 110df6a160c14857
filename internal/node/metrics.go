package node

import (
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// httpMetrics counts S3 requests by method and status and measures their
// latency and bytes.
type httpMetrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	bytesIn  prometheus.Counter
	bytesOut prometheus.Counter
}

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slipstream_s3_requests_total", Help: "S3 requests by method and status code.",
		}, []string{"method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "slipstream_s3_request_seconds",
			Help:    "S3 request latency (until the handler returns) by method.",
			Buckets: prometheus.ExponentialBuckets(0.0002, 2, 18),
		}, []string{"method"}),
		bytesIn: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slipstream_s3_received_bytes_total", Help: "Request body bytes received.",
		}),
		bytesOut: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slipstream_s3_sent_bytes_total", Help: "Response body bytes sent.",
		}),
	}
	reg.MustRegister(m.requests, m.latency, m.bytesIn, m.bytesOut)
	return m
}

func (m *httpMetrics) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(rw, r)
		m.requests.WithLabelValues(r.Method, strconv.Itoa(rw.code)).Inc()
		m.latency.WithLabelValues(r.Method).Observe(time.Since(start).Seconds())
		if r.ContentLength > 0 {
			m.bytesIn.Add(float64(r.ContentLength))
		}
		m.bytesOut.Add(float64(rw.n))
	})
}

// statusWriter records the status and body size. It forwards ReadFrom so
// that sendfile still reaches the connection.
type statusWriter struct {
	http.ResponseWriter
	code int
	n    int64
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	w.n += int64(n)
	return n, err
}

func (w *statusWriter) ReadFrom(r io.Reader) (int64, error) {
	n, err := io.Copy(w.ResponseWriter, r) // the ResponseWriter's own ReadFrom: sendfile for files
	w.n += n
	return n, err
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// rebalanceCollector exports the rebalance passes' totals.
type rebalanceCollector struct {
	status                                        func() RebalanceStatus
	running, passes, sent, bytes, dropped, failed *prometheus.Desc
}

func newRebalanceCollector(status func() RebalanceStatus) *rebalanceCollector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &rebalanceCollector{
		status:  status,
		running: d("slipstream_rebalance_running", "1 while a rebalance pass runs on this node."),
		passes:  d("slipstream_rebalance_passes_total", "Rebalance passes finished since start."),
		sent:    d("slipstream_rebalance_copies_sent_total", "Copies sent to the nodes HRW places them on."),
		bytes:   d("slipstream_rebalance_sent_bytes_total", "Bytes of the copies sent."),
		dropped: d("slipstream_rebalance_copies_dropped_total", "Copies removed here once their nodes held them."),
		failed:  d("slipstream_rebalance_failures_total", "Copies a pass could not place."),
	}
}

func (c *rebalanceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.running, c.passes, c.sent, c.bytes, c.dropped, c.failed} {
		ch <- d
	}
}

func (c *rebalanceCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.status()
	running := 0.0
	if st.Running {
		running = 1
	}
	ch <- prometheus.MustNewConstMetric(c.running, prometheus.GaugeValue, running)
	for _, m := range []struct {
		d *prometheus.Desc
		v float64
	}{
		{c.passes, float64(st.Passes)}, {c.sent, float64(st.Total.Sent)}, {c.bytes, float64(st.Total.Bytes)},
		{c.dropped, float64(st.Total.Dropped)}, {c.failed, float64(st.Total.Failed)},
	} {
		ch <- prometheus.MustNewConstMetric(m.d, prometheus.CounterValue, m.v)
	}
}
