package backend_test

import (
	"context"
	"errors"
	"testing"

	"github.com/slipstream-io/slipstream/internal/backend"
	"github.com/slipstream-io/slipstream/internal/backend/open"
	"github.com/slipstream-io/slipstream/internal/object"
)

func TestSpecValidate(t *testing.T) {
	cases := []struct {
		name string
		spec backend.Spec
		ok   bool
	}{
		{"s3", backend.Spec{Kind: "s3", Bucket: "b"}, true},
		{"s3 no bucket", backend.Spec{Kind: "s3"}, false},
		{"s3 half credentials", backend.Spec{Kind: "s3", Bucket: "b", AccessKey: "a"}, false},
		{"s3 tiny parts", backend.Spec{Kind: "s3", Bucket: "b", PartSize: 1 << 20}, false},
		{"fs", backend.Spec{Kind: "fs", Path: "/x"}, true},
		{"fs no path", backend.Spec{Kind: "fs"}, false},
		{"unknown", backend.Spec{Kind: "gcs"}, false},
	}
	for _, c := range cases {
		err := c.spec.Validate()
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, backend.ErrInvalidSpec)) {
			t.Errorf("%s: err %v, ok want %v", c.name, err, c.ok)
		}
	}
}

func TestOpen(t *testing.T) {
	b, err := open.New(context.Background(), backend.Spec{Kind: "fs", Path: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Stat(context.Background(), "nothing"); !errors.Is(err, object.ErrNotFound) {
		t.Errorf("Stat: %v", err)
	}
	if _, err := open.New(context.Background(), backend.Spec{Kind: "nope"}); !errors.Is(err, backend.ErrInvalidSpec) {
		t.Errorf("bad kind: %v", err)
	}
}

func TestIsMD5ETag(t *testing.T) {
	for etag, want := range map[string]bool{
		"d41d8cd98f00b204e9800998ecf8427e":   true,
		"d41d8cd98f00b204e9800998ecf8427e-2": false,
		"D41D8CD98F00B204E9800998ECF8427E":   false,
		"":                                   false,
	} {
		if got := backend.IsMD5ETag(etag); got != want {
			t.Errorf("IsMD5ETag(%q) = %v", etag, got)
		}
	}
}
