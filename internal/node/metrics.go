package node

import (
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// httpMetrics counts S3 requests by method and status and measures their
// latency and bytes, for Prometheus and (as plain counters) for the stats
// snapshot behind the live page.
type httpMetrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	bytesIn  prometheus.Counter
	bytesOut prometheus.Counter

	gets, puts, others, serverErrors, received, sent atomic.Int64
}

// counters returns the plain counters, named as the stats snapshot names
// them.
func (m *httpMetrics) counters() map[string]float64 {
	return map[string]float64{
		"s3_get_requests": float64(m.gets.Load()), "s3_put_requests": float64(m.puts.Load()),
		"s3_other_requests": float64(m.others.Load()), "s3_server_errors": float64(m.serverErrors.Load()),
		"s3_received_bytes": float64(m.received.Load()), "s3_sent_bytes": float64(m.sent.Load()),
	}
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
			m.received.Add(r.ContentLength)
		}
		m.bytesOut.Add(float64(rw.n))
		m.sent.Add(rw.n)
		switch r.Method {
		case http.MethodGet:
			m.gets.Add(1)
		case http.MethodPut:
			m.puts.Add(1)
		default:
			m.others.Add(1)
		}
		if rw.code >= 500 {
			m.serverErrors.Add(1)
		}
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

// passCollector exports a background job's passes: whether one runs, how
// many finished, and its counters summed over every pass.
type passCollector struct {
	running, passes *prometheus.Desc
	counters        []*prometheus.Desc
	read            func() (running bool, passes int, counts []float64)
}

// newPassCollector names the metrics slipstream_<job>_running,
// slipstream_<job>_passes_total and slipstream_<job>_<name> for each
// counter (name, help); read returns the counters in that order.
func newPassCollector(job string, counters [][2]string, read func() (bool, int, []float64)) *passCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("slipstream_"+job+"_"+name, help, nil, nil)
	}
	c := &passCollector{
		running: d("running", "1 while a "+job+" pass runs on this node."),
		passes:  d("passes_total", job+" passes finished since start."),
		read:    read,
	}
	for _, nh := range counters {
		c.counters = append(c.counters, d(nh[0], nh[1]))
	}
	return c
}

func (c *passCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.running
	ch <- c.passes
	for _, d := range c.counters {
		ch <- d
	}
}

func (c *passCollector) Collect(ch chan<- prometheus.Metric) {
	running, passes, counts := c.read()
	r := 0.0
	if running {
		r = 1
	}
	ch <- prometheus.MustNewConstMetric(c.running, prometheus.GaugeValue, r)
	ch <- prometheus.MustNewConstMetric(c.passes, prometheus.CounterValue, float64(passes))
	for i, d := range c.counters {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, counts[i])
	}
}

func newRebalanceCollector(status func() RebalanceStatus) *passCollector {
	return newPassCollector("rebalance", [][2]string{
		{"copies_sent_total", "Copies sent to the nodes HRW places them on."},
		{"sent_bytes_total", "Bytes of the copies sent."},
		{"copies_dropped_total", "Copies removed here once their nodes held them."},
		{"failures_total", "Copies a pass could not place."},
	}, func() (bool, int, []float64) {
		st := status()
		t := st.Total
		return st.Running, st.Passes, []float64{float64(t.Sent), float64(t.Bytes), float64(t.Dropped), float64(t.Failed)}
	})
}

func newScrubCollector(status func() ScrubStatus) *passCollector {
	return newPassCollector("scrub", [][2]string{
		{"checked_total", "Copies read back and checked against their checksum."},
		{"checked_bytes_total", "Bytes read back."},
		{"corrupt_total", "Copies found damaged or unreadable."},
		{"repaired_total", "Damaged copies rewritten from another node (or dropped, in tiered buckets)."},
		{"unrepaired_total", "Damaged copies no other node could supply."},
	}, func() (bool, int, []float64) {
		st := status()
		t := st.Total
		return st.Running, st.Passes, []float64{float64(t.Checked), float64(t.Bytes), float64(t.Corrupt), float64(t.Repaired), float64(t.Unrepaired)}
	})
}
