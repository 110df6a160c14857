package s3

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/backend"
	"github.com/slipstream-io/slipstream/internal/object"
)

// stallingRemote answers every GET with 100 bytes declared, sends the
// first 10 and then the rest only once more is closed (or never).
func stallingRemote(t *testing.T, more <-chan struct{}) *Backend {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.Header().Set("ETag", `"0123456789abcdef0123456789abcdef"`)
		w.WriteHeader(http.StatusOK)
		w.Write(make([]byte, 10))
		w.(http.Flusher).Flush()
		select {
		case <-more:
			w.Write(make([]byte, 90))
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	b, err := New(context.Background(), backend.Spec{Kind: "s3", Endpoint: srv.URL, Bucket: "remote", PathStyle: true,
		AccessKey: "k", SecretKey: "s"})
	if err != nil {
		t.Fatal(err)
	}
	b.readIdle = 300 * time.Millisecond
	return b
}

// A remote that stalls in the middle of a body fails the read after the
// idle timeout, as a backend error, instead of holding it for ever.
func TestStalledBodyFails(t *testing.T) {
	b := stallingRemote(t, make(chan struct{}))
	rc, _, err := b.Get(context.Background(), "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	start := time.Now()
	n, err := io.Copy(io.Discard, rc)
	if !errors.Is(err, object.ErrBackend) || n != 10 {
		t.Fatalf("read of a stalled body: %d bytes, %v; want 10 and a backend error", n, err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("the stall was noticed after %s", el)
	}
}

// Time the consumer spends between reads does not count: a slow reader of
// a healthy remote gets the whole body.
func TestSlowReaderNotCutOff(t *testing.T) {
	more := make(chan struct{})
	b := stallingRemote(t, more)
	rc, _, err := b.Get(context.Background(), "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := io.ReadFull(rc, make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * b.readIdle) // the consumer is busy; the remote waits for it
	close(more)
	if n, err := io.Copy(io.Discard, rc); err != nil || n != 90 {
		t.Fatalf("rest of the body: %d bytes, %v; want 90", n, err)
	}
}
