package s3api_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/s3api"
	"github.com/slipstream-io/slipstream/internal/s3api/s3mem"
)

// sendHead dials e's server and sends the head of the PUT r, whose body
// of n bytes the caller sends (or not); the connection closes with the
// test.
func sendHead(t *testing.T, e *env, r *http.Request, n int) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(e.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var b strings.Builder
	fmt.Fprintf(&b, "PUT %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n", r.URL.RequestURI(), r.Host, n)
	for k, vs := range r.Header {
		for _, v := range vs {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	b.WriteString("\r\n")
	if _, err := c.Write([]byte(b.String())); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRefusedUploadWithExpectContinue: a PUT with Expect: 100-continue
// that is refused before its body is read (here: no such bucket) is
// answered at once with the error, not with 100 Continue, which would
// have the client send the whole body only for it to be thrown away.
func TestRefusedUploadWithExpectContinue(t *testing.T) {
	e := newEnv(t, envOpts{})
	body := make([]byte, 1<<20)
	r := e.rawRequest(http.MethodPut, "/nosuchbucket/k", "", body, "UNSIGNED-PAYLOAD", map[string]string{"Expect": "100-continue"})
	c := sendHead(t, e, r, len(body))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), r)
	if err != nil {
		t.Fatalf("no answer before the body was sent: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("answer to a refused upload with Expect: 100-continue: %s, want 404 NoSuchBucket before any body", resp.Status)
	}
}

// refusingPuts is an Objects whose PUTs read some of the body, as a
// gateway forwarding it to the owner does, and then fail: the owner is
// out of space.
type refusingPuts struct{ s3api.Objects }

func (r refusingPuts) PutObject(_ context.Context, _, _ string, body io.Reader, _ object.PutOptions) (object.Info, error) {
	if _, err := io.CopyN(io.Discard, body, 64<<10); err != nil {
		return object.Info{}, err
	}
	return object.Info{}, fmt.Errorf("owner: %w", object.ErrNoSpace)
}

// TestRefusedUploadAfterContinue: a PUT with Expect: 100-continue whose
// body the handler began to read (so 100 Continue went out and the client
// sends it) and then refused is drained before the error is sent: the
// client sends its whole body and reads 507 InsufficientStorage, rather
// than have its connection reset under it, which SDKs report without the
// error.
func TestRefusedUploadAfterContinue(t *testing.T) {
	e := newEnv(t, envOpts{objects: func(s *s3mem.Store) s3api.Objects { return refusingPuts{s} }})
	if err := e.store.CreateBucket(context.Background(), "full"); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 8<<20)
	r := e.rawRequest(http.MethodPut, "/full/k", "", body, "UNSIGNED-PAYLOAD", map[string]string{"Expect": "100-continue"})
	c := sendHead(t, e, r, len(body))
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	cont, err := http.ReadResponse(br, r)
	if err != nil || cont.StatusCode != http.StatusContinue {
		t.Fatalf("interim answer: %v %v, want 100 Continue", cont, err)
	}
	sent := make(chan error, 1)
	go func() { _, err := c.Write(body); sent <- err }()
	resp, rerr := http.ReadResponse(br, r)
	if werr := <-sent; werr != nil {
		t.Errorf("sending the body after 100 Continue: %v (the server closed the connection without reading it)", werr)
	}
	if rerr != nil {
		t.Fatalf("no answer: %v", rerr)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusInsufficientStorage {
		t.Errorf("answer: %s, want 507 InsufficientStorage", resp.Status)
	}
}
