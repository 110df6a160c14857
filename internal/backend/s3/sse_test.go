package s3_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/slipstream-io/slipstream/internal/backend"
	s3backend "github.com/slipstream-io/slipstream/internal/backend/s3"
)

// The ETag of an object encrypted with SSE-KMS or SSE-C is not the MD5 of
// its body, though it has the same form; Stat and Get say so from the
// response's encryption headers, so that a fill does not verify the body
// against it. SSE-S3 (AES256) keeps MD5 ETags.
func TestEncryptedObjectETagNotMD5(t *testing.T) {
	for _, tc := range []struct {
		name    string
		headers map[string]string
		notMD5  bool
	}{
		{"plain", nil, false},
		{"sse-s3", map[string]string{"x-amz-server-side-encryption": "AES256"}, false},
		{"sse-kms", map[string]string{"x-amz-server-side-encryption": "aws:kms"}, true},
		{"dsse-kms", map[string]string{"x-amz-server-side-encryption": "aws:kms:dsse"}, true},
		{"sse-c", map[string]string{"x-amz-server-side-encryption-customer-algorithm": "AES256"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tc.headers {
					w.Header().Set(k, v)
				}
				w.Header().Set("ETag", `"0123456789abcdef0123456789abcdef"`)
				w.Header().Set("Content-Length", "5")
				w.WriteHeader(http.StatusOK)
				if r.Method == http.MethodGet {
					io.WriteString(w, "hello")
				}
			}))
			defer srv.Close()
			b, err := s3backend.New(context.Background(), backend.Spec{Kind: "s3", Endpoint: srv.URL, Bucket: "remote",
				PathStyle: true, AccessKey: "k", SecretKey: "s"})
			if err != nil {
				t.Fatal(err)
			}
			st, err := b.Stat(context.Background(), "k")
			if err != nil {
				t.Fatal(err)
			}
			rc, ga, err := b.Get(context.Background(), "k", nil)
			if err != nil {
				t.Fatal(err)
			}
			rc.Close()
			for op, a := range map[string]backend.Attrs{"Stat": st, "Get": ga} {
				if a.ETagNotMD5 != tc.notMD5 || a.HasBodyMD5() == tc.notMD5 {
					t.Errorf("%s: ETagNotMD5 %v, HasBodyMD5 %v; want ETagNotMD5 %v", op, a.ETagNotMD5, a.HasBodyMD5(), tc.notMD5)
				}
			}
		})
	}
}
