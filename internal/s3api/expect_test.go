package s3api_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestRefusedUploadWithExpectContinue: a PUT with Expect: 100-continue
// that is refused before its body is read (here: no such bucket) is
// answered at once with the error, not with 100 Continue, which would
// have the client send the whole body only for it to be thrown away.
func TestRefusedUploadWithExpectContinue(t *testing.T) {
	e := newEnv(t, envOpts{})
	body := make([]byte, 1<<20)
	r := e.rawRequest(http.MethodPut, "/nosuchbucket/k", "", body, "UNSIGNED-PAYLOAD", map[string]string{"Expect": "100-continue"})
	c, err := net.Dial("tcp", strings.TrimPrefix(e.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var b strings.Builder
	fmt.Fprintf(&b, "PUT %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n", r.URL.RequestURI(), r.Host, len(body))
	for k, vs := range r.Header {
		for _, v := range vs {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	b.WriteString("\r\n")
	if _, err := c.Write([]byte(b.String())); err != nil {
		t.Fatal(err)
	}
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
