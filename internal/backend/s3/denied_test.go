package s3_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
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

// An upload the remote no longer knows (aborted under the PUT by a
// lifecycle rule or another client: 404 NoSuchUpload) fails the PUT as a
// backend failure, which clients retry, never as "object not found"; the
// upload is still aborted.
func TestLostUploadIsBackendError(t *testing.T) {
	var aborts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/xml")
		q := r.URL.Query()
		switch {
		case r.Method == http.MethodPost && q.Has("uploads"):
			io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><InitiateMultipartUploadResult><Bucket>remote</Bucket><Key>k</Key><UploadId>u1</UploadId></InitiateMultipartUploadResult>`)
		case r.Method == http.MethodDelete && q.Has("uploadId"):
			aborts.Add(1)
			w.WriteHeader(http.StatusNoContent)
		default:
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchUpload</Code><Message>gone</Message></Error>`)
		}
	}))
	defer srv.Close()
	b, err := s3backend.New(context.Background(), backend.Spec{Kind: "s3", Endpoint: srv.URL, Bucket: "remote",
		PathStyle: true, AccessKey: "k", SecretKey: "s", PartSize: object.MinPartSize})
	if err != nil {
		t.Fatal(err)
	}
	body := bytes.NewReader(make([]byte, object.MinPartSize+1))
	_, err = b.Put(context.Background(), "k", body, -1, backend.PutAttrs{})
	if !errors.Is(err, object.ErrBackend) || errors.Is(err, object.ErrNotFound) {
		t.Errorf("Put whose upload vanished: %v; want object.ErrBackend, not object.ErrNotFound", err)
	}
	if aborts.Load() == 0 {
		t.Error("the upload was not aborted")
	}
}
