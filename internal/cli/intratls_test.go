package cli

import (
	"context"
	"flag"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/slipstream-io/slipstream/internal/seclink"
)

// intraServer serves "ok" on loopback, over a secure link with secret
// when one is given, else over plain HTTP; it returns the base URL.
func intraServer(t *testing.T, secret string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var l net.Listener = ln
	if secret != "" {
		k, err := seclink.New(secret, "intra")
		if err != nil {
			t.Fatal(err)
		}
		l = k.Listen(ln, seclink.ListenOptions{})
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

func TestAdminClientIntraTLS(t *testing.T) {
	for _, tt := range []struct {
		name         string
		serverSecret string // "" = plain HTTP
		args         []string
		want         string // in the error; "" = success
	}{
		{"secure link", "s3cret", []string{"--secret", "s3cret", "--intra-tls"}, ""},
		{"plain", "", []string{"--secret", "s3cret"}, ""},
		{"plain client, secure node", "s3cret", []string{"--secret", "s3cret"}, "add --intra-tls"},
		{"secure client, plain node", "", []string{"--secret", "s3cret", "--intra-tls"}, "does not run intra_tls"},
		{"wrong secret", "s3cret", []string{"--secret", "other", "--intra-tls"}, "check --secret"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("SLIPSTREAM_INTRA_TLS", "")
			fs := flag.NewFlagSet("admin", flag.ContinueOnError)
			mk := newAdminClient(fs)
			if err := fs.Parse(append(tt.args, "--node", intraServer(t, tt.serverSecret))); err != nil {
				t.Fatal(err)
			}
			a := mk()
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, a.base+"/health", nil)
			resp, err := a.hc.Do(req)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(b) != "ok" {
					t.Fatalf("answer %q", b)
				}
				return
			}
			if err == nil {
				resp.Body.Close()
				t.Fatal("the request succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not say %q", err, tt.want)
			}
		})
	}
}
