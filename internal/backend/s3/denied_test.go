package s3_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/slipstream-io/slipstream/internal/backend"
	s3backend "github.com/slipstream-io/slipstream/internal/backend/s3"
	"github.com/slipstream-io/slipstream/internal/object"
)

// A remote that refuses the cluster's credentials is object.ErrBackendDenied
// (which clients are not told to retry), for a HEAD without an error body
// too; a remote that fails otherwise is a plain object.ErrBackend.
func TestRemoteRefusalIsDenied(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		code   string
		denied bool
	}{
		{"access denied", http.StatusForbidden, "AccessDenied", true},
		{"unknown access key", http.StatusForbidden, "InvalidAccessKeyId", true},
		{"bad signature", http.StatusForbidden, "SignatureDoesNotMatch", true},
		{"not implemented (not retried)", http.StatusNotImplemented, "NotImplemented", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/xml")
				w.WriteHeader(tc.status)
				if r.Method != http.MethodHead {
					io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>`+tc.code+`</Code><Message>no</Message></Error>`)
				}
			}))
			defer srv.Close()
			b, err := s3backend.New(context.Background(), backend.Spec{Kind: "s3", Endpoint: srv.URL, Bucket: "remote",
				PathStyle: true, AccessKey: "k", SecretKey: "s"})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			_, _, gerr := b.Get(ctx, "k", nil)
			_, serr := b.Stat(ctx, "k")
			_, lerr := b.List(ctx, backend.ListOptions{})
			for op, err := range map[string]error{"Get": gerr, "Stat": serr, "List": lerr} {
				if !errors.Is(err, object.ErrBackend) || errors.Is(err, object.ErrBackendDenied) != tc.denied {
					t.Errorf("%s: %v; want ErrBackend, denied %v", op, err, tc.denied)
				}
			}
		})
	}
}
