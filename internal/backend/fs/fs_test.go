package fs_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/slipstream-io/slipstream/internal/backend"
	"github.com/slipstream-io/slipstream/internal/backend/backendtest"
	"github.com/slipstream-io/slipstream/internal/backend/fs"
	"github.com/slipstream-io/slipstream/internal/object"
)

func TestConformance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		b, err := fs.New(backend.Spec{Kind: "fs", Path: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}, backendtest.Options{})
}

func TestConformancePrefix(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		b, err := fs.New(backend.Spec{Kind: "fs", Path: t.TempDir(), Prefix: "tenant/"})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}, backendtest.Options{LargeSize: 1 << 20})
}

func TestForeignFilesAndReservedNames(t *testing.T) {
	dir := t.TempDir()
	b, err := fs.New(backend.Spec{Kind: "fs", Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// A file written by another tool is an object with a derived ETag.
	if err := os.MkdirAll(filepath.Join(dir, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "x", "y"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := b.Stat(ctx, "x/y")
	if err != nil || a.Size != 5 || a.ETag == "" {
		t.Fatalf("foreign file: %+v %v", a, err)
	}
	// Rewriting it changes the ETag even though the sidecar is absent.
	if err := os.WriteFile(filepath.Join(dir, "x", "y"), []byte("hello!"), 0o644); err != nil {
		t.Fatal(err)
	}
	a2, _ := b.Stat(ctx, "x/y")
	if a2.ETag == a.ETag {
		t.Errorf("ETag did not change after a foreign rewrite: %s", a.ETag)
	}
	for _, k := range []string{".slipstream/meta/x", "folder/"} {
		if _, err := b.Put(ctx, k, nil, 0, backend.PutAttrs{}); !errors.Is(err, object.ErrInvalidKey) {
			t.Errorf("Put %q: err %v, want ErrInvalidKey", k, err)
		}
	}
	page, err := b.List(ctx, backend.ListOptions{})
	if err != nil || len(page.Objects) != 1 || page.Objects[0].Key != "x/y" {
		t.Errorf("list shows internal files: %+v %v", page, err)
	}
}
