package s3_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/slipstream-io/slipstream/internal/backend"
	"github.com/slipstream-io/slipstream/internal/backend/backendtest"
	s3backend "github.com/slipstream-io/slipstream/internal/backend/s3"
	"github.com/slipstream-io/slipstream/internal/backend/s3/s3test"
	"github.com/slipstream-io/slipstream/internal/object"
)

// StartAfter is "keys strictly greater than this". Listing a folder with
// delimiter "/" and StartAfter set to the folder marker (the way a browser
// skips the marker, or the continuation after a page that ended with it)
// returns the folder's keys.
func TestListStartAfterFolderMarker(t *testing.T) {
	srv := s3test.Start(t)
	srv.CreateBucket(t, "marker")
	b, err := s3backend.New(context.Background(), srv.Spec("marker", ""))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, k := range []string{"dir/", "dir/a", "dir/b"} {
		if _, err := b.Put(ctx, k, strings.NewReader(""), 0, backend.PutAttrs{}); err != nil {
			t.Fatal(err)
		}
	}
	// Page 1 with one entry: the marker.
	p1, err := b.List(ctx, backend.ListOptions{Prefix: "dir/", Delimiter: "/", Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(p1.Objects) != 1 || p1.Objects[0].Key != "dir/" || !p1.Truncated {
		t.Fatalf("page 1: %+v", p1)
	}
	p2, err := b.List(ctx, backend.ListOptions{Prefix: "dir/", Delimiter: "/", StartAfter: p1.Next})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range p2.Objects {
		keys = append(keys, o.Key)
	}
	if strings.Join(keys, ",") != "dir/a,dir/b" {
		t.Errorf("page 2 after %q: objects %q prefixes %q, want dir/a,dir/b", p1.Next, keys, p2.CommonPrefixes)
	}
}

// Put's size is the exact length of r, for size 0 too: a longer body is
// object.ErrTooLarge and stores nothing.
func TestPutSizeZeroWithBodyIsTooLarge(t *testing.T) {
	srv := s3test.Start(t)
	srv.CreateBucket(t, "zero")
	b, err := s3backend.New(context.Background(), srv.Spec("zero", ""))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, err := b.Put(ctx, "z", strings.NewReader("not empty"), 0, backend.PutAttrs{})
	if !errors.Is(err, object.ErrTooLarge) {
		t.Errorf("Put of 9 bytes declared as 0: attrs %+v, err %v; want object.ErrTooLarge", a, err)
	}
	if _, err := b.Stat(ctx, "z"); err == nil {
		t.Error("an object was stored")
	}
}

// A body of unknown size that fails with io.ErrUnexpectedEOF (an HTTP body
// cut short, a peer's reader missing bytes) is a failed read, not the end
// of the object: Put fails, stores nothing and leaves no multipart upload,
// whether what arrived fits in one part or spans several.
func TestPutUnknownSizeCutShort(t *testing.T) {
	srv := s3test.Start(t)
	srv.CreateBucket(t, "cut")
	spec := srv.Spec("cut", "")
	spec.PartSize = 5 << 20
	b, err := s3backend.New(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, n := range []int{1000, 5 << 20, 7 << 20} {
		key := fmt.Sprintf("cut-%d", n)
		body := io.MultiReader(bytes.NewReader(backendtest.Body(int64(n), n)), iotest.ErrReader(io.ErrUnexpectedEOF))
		a, err := b.Put(ctx, key, body, -1, backend.PutAttrs{})
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("Put of %d bytes then io.ErrUnexpectedEOF: attrs %+v, err %v; want io.ErrUnexpectedEOF", n, a, err)
		}
		if _, err := b.Stat(ctx, key); !errors.Is(err, backend.ErrNotFound) {
			t.Errorf("%d bytes cut short: an object was stored (stat: %v)", n, err)
		}
	}
	ups, err := b.Client().ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String("cut")})
	if err != nil {
		t.Fatal(err)
	}
	if len(ups.Uploads) != 0 {
		t.Errorf("%d multipart uploads left behind", len(ups.Uploads))
	}
}
