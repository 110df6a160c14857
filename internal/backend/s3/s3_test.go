package s3_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/slipstream-io/slipstream/internal/backend"
	"github.com/slipstream-io/slipstream/internal/backend/backendtest"
	s3backend "github.com/slipstream-io/slipstream/internal/backend/s3"
	"github.com/slipstream-io/slipstream/internal/backend/s3/s3test"
)

func TestConformance(t *testing.T) {
	srv := s3test.Start(t)
	var n atomic.Int64
	for _, prefix := range []string{"", "pre/fix/"} {
		t.Run(fmt.Sprintf("prefix=%q", prefix), func(t *testing.T) {
			backendtest.Run(t, func(t *testing.T) backend.Backend {
				bucket := fmt.Sprintf("conf-%d", n.Add(1))
				srv.CreateBucket(t, bucket)
				spec := srv.Spec(bucket, prefix)
				spec.PartSize = 5 << 20
				b, err := s3backend.New(context.Background(), spec)
				if err != nil {
					t.Fatal(err)
				}
				return b
			}, backendtest.Options{LargeSize: 11 << 20})
		})
	}
}

// TestMultipartReachesServer checks, on the server's own files, that a large
// object arrived whole and that its ETag is a multipart one, and that its
// stored headers went with the upload.
func TestMultipartReachesServer(t *testing.T) {
	srv := s3test.Start(t)
	srv.CreateBucket(t, "multipart")
	spec := srv.Spec("multipart", "")
	spec.PartSize = 5 << 20
	b, err := s3backend.New(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	body := backendtest.Body(9, 12<<20)
	hdrs := map[string]string{"Cache-Control": "no-cache", "Content-Encoding": "gzip", "Expires": "Wed, 02 Jan 2030 03:04:05 GMT"}
	a, err := b.Put(context.Background(), "big", struct{ io.Reader }{bytes.NewReader(body)}, -1, backend.PutAttrs{Headers: hdrs})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := b.Stat(context.Background(), "big"); err != nil || !maps.Equal(st.Headers, hdrs) {
		t.Errorf("headers of the multipart upload: %v %v, want %v", st.Headers, err, hdrs)
	}
	if a.ETag[len(a.ETag)-2:] != "-3" {
		t.Errorf("ETag %q, want a 3-part multipart ETag", a.ETag)
	}
	fi, err := os.Stat(filepath.Join(srv.Dir, "multipart", "big"))
	if err != nil || fi.Size() != int64(len(body)) {
		t.Fatalf("server file: %v %v", fi, err)
	}
}
