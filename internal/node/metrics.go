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
