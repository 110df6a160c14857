package fs_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slipstream-io/slipstream/internal/backend"
	"github.com/slipstream-io/slipstream/internal/backend/fs"
)

func newFS(t *testing.T) (*fs.Backend, string, string) {
	t.Helper()
	top := t.TempDir()
	root := filepath.Join(top, "root")
	b, err := fs.New(backend.Spec{Kind: "fs", Path: root})
	if err != nil {
		t.Fatal(err)
	}
	return b, root, top
}

// A listing prefix, like a key, stays inside the directory and out of the
// backend's reserved directory: a prefix with a ".." segment or one naming
// the reserved directory lists nothing.
func TestListPrefixStaysInDirectory(t *testing.T) {
	b, _, top := newFS(t)
	ctx := context.Background()
	if err := os.WriteFile(filepath.Join(top, "secret.txt"), []byte("outside"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(ctx, "k", strings.NewReader("v"), 1, backend.PutAttrs{}); err != nil {
		t.Fatal(err)
	}
	for _, prefix := range []string{"../", "../../", ".slipstream/", ".slipstream/meta/"} {
		page, err := b.List(ctx, backend.ListOptions{Prefix: prefix})
		if err != nil {
			continue // refusing is fine
		}
		for _, o := range page.Objects {
			t.Errorf("List(prefix %q) shows %q (size %d), which is not an object of the backend", prefix, o.Key, o.Size)
		}
	}
}

// A symlink in the directory that leads outside it is not followed: Get and
// List through it find nothing.
func TestSymlinkOutOfDirectoryIsNotFollowed(t *testing.T) {
	b, root, top := newFS(t)
	ctx := context.Background()
	outside := filepath.Join(top, "private")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "key.pem"), []byte("PRIVATE KEY"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	rc, _, err := b.Get(ctx, "link/key.pem", nil)
	if err == nil {
		data, _ := io.ReadAll(rc)
		rc.Close()
		t.Errorf("Get through a symlink out of the directory returned %q", data)
	}
	page, err := b.List(ctx, backend.ListOptions{Prefix: "link/"})
	if err == nil && len(page.Objects) > 0 {
		t.Errorf("List(prefix link/) walks the symlink's target: %+v", page.Objects)
	}
	page, err = b.List(ctx, backend.ListOptions{})
	if err != nil || len(page.Objects) != 0 {
		t.Errorf("root listing: %+v, %v; want no objects", page.Objects, err)
	}
}

// Keys a and a.json/b are both objects (the files DIR/a and DIR/a.json/b
// coexist on the filesystem), in either order of writing: their sidecars
// have distinct names, and each keeps its MD5 ETag and content type.
func TestSidecarNamesDoNotCollide(t *testing.T) {
	for _, order := range [][]string{{"a", "a.json/b"}, {"a.json/b", "a"}} {
		b, _, _ := newFS(t)
		ctx := context.Background()
		for _, k := range order {
			if _, err := b.Put(ctx, k, strings.NewReader("v-"+k), int64(len("v-"+k)), backend.PutAttrs{ContentType: "t/" + k}); err != nil {
				t.Errorf("after putting %q, Put %q: %v", order[0], k, err)
			}
		}
		for _, k := range order {
			checkSidecar(t, b, k, "v-"+k, "t/"+k)
		}
	}
}

func checkSidecar(t *testing.T, b *fs.Backend, key, body, contentType string) {
	t.Helper()
	a, err := b.Stat(context.Background(), key)
	if err != nil {
		t.Fatalf("Stat %q: %v", key, err)
	}
	if sum := md5.Sum([]byte(body)); a.ETag != hex.EncodeToString(sum[:]) || a.ContentType != contentType {
		t.Errorf("Stat %q: ETag %s, content type %q; want the body's MD5 and %q", key, a.ETag, a.ContentType, contentType)
	}
}

// A key may have a path component as long as the filesystem allows (255
// bytes here); its sidecar still has room.
func TestLongKeyComponent(t *testing.T) {
	b, _, _ := newFS(t)
	ctx := context.Background()
	for _, n := range []int{250, 251, 255} {
		k := "d/" + strings.Repeat("x", n)
		if _, err := b.Put(ctx, k, strings.NewReader("long"), 4, backend.PutAttrs{ContentType: "t/long"}); err != nil {
			t.Fatalf("Put of a key with a %d-byte component: %v", n, err)
		}
		checkSidecar(t, b, k, "long", "t/long")
		if err := b.Delete(ctx, k); err != nil {
			t.Fatalf("Delete: %v", err)
		}
	}
}

// Sidecars written in the earlier layout (a tree under .slipstream/meta
// mirroring the keys) are still read, and a new write of the key replaces
// one: its ETag then is the new body's.
func TestLegacySidecarRead(t *testing.T) {
	b, root, _ := newFS(t)
	ctx := context.Background()
	data := filepath.Join(root, "dir", "k")
	if err := os.MkdirAll(filepath.Dir(data), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(data, []byte("old body"), 0o644); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(data)
	if err != nil {
		t.Fatal(err)
	}
	legacy := filepath.Join(root, ".slipstream", "meta", "dir", "k.json")
	if err := os.MkdirAll(filepath.Dir(legacy), 0o755); err != nil {
		t.Fatal(err)
	}
	sc := fmt.Sprintf(`{"etag":"0123456789abcdef0123456789abcdef","size":8,"mtime":%d,"contentType":"t/old"}`, fi.ModTime().UnixNano())
	if err := os.WriteFile(legacy, []byte(sc), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := b.Stat(ctx, "dir/k")
	if err != nil || a.ETag != "0123456789abcdef0123456789abcdef" || a.ContentType != "t/old" {
		t.Fatalf("Stat with a legacy sidecar: %+v, %v", a, err)
	}
	if _, err := b.Put(ctx, "dir/k", strings.NewReader("new"), 3, backend.PutAttrs{ContentType: "t/new"}); err != nil {
		t.Fatal(err)
	}
	checkSidecar(t, b, "dir/k", "new", "t/new")
	if _, err := os.Stat(legacy); !os.IsNotExist(err) {
		t.Errorf("the legacy sidecar is still there after a write: %v", err)
	}
}

type gatedReader struct {
	r       io.Reader
	started chan struct{}
	gate    chan struct{}
	once    bool
}

func (g *gatedReader) Read(p []byte) (int, error) {
	if !g.once {
		g.once = true
		close(g.started)
		<-g.gate
	}
	return g.r.Read(p)
}

// A Put of d/new succeeds while d/old, the last file of d, is deleted, even
// though the Delete removes the directory d that the Put is about to rename
// into.
func TestPutRacingSiblingDelete(t *testing.T) {
	b, _, _ := newFS(t)
	ctx := context.Background()
	if _, err := b.Put(ctx, "d/old", strings.NewReader("old"), 3, backend.PutAttrs{}); err != nil {
		t.Fatal(err)
	}
	body := []byte("new object")
	gr := &gatedReader{r: bytes.NewReader(body), started: make(chan struct{}), gate: make(chan struct{})}
	errc := make(chan error, 1)
	go func() {
		_, err := b.Put(ctx, "d/new", gr, int64(len(body)), backend.PutAttrs{})
		errc <- err
	}()
	<-gr.started // Put has made d/ and is reading the body
	if err := b.Delete(ctx, "d/old"); err != nil {
		t.Fatal(err)
	}
	close(gr.gate)
	if err := <-errc; err != nil {
		t.Fatalf("Put of d/new failed because a sibling was deleted meanwhile: %v", err)
	}
	rc, _, err := b.Get(ctx, "d/new", nil)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(data, body) {
		t.Errorf("d/new holds %q", data)
	}
}

// Concurrent Puts of one key all succeed (the last one wins), and the
// object keeps the MD5 ETag of the Put that won.
func TestConcurrentPutsOfOneKey(t *testing.T) {
	b, _, _ := newFS(t)
	ctx := context.Background()
	var fails, etagLost int
	for round := 0; round < 100; round++ {
		errc := make(chan error, 2)
		for g := 0; g < 2; g++ {
			body := []byte(strings.Repeat(string(rune('a'+g)), 1000+g))
			go func() {
				_, err := b.Put(ctx, "same", bytes.NewReader(body), int64(len(body)), backend.PutAttrs{})
				errc <- err
			}()
		}
		for g := 0; g < 2; g++ {
			if err := <-errc; err != nil {
				fails++
				if fails == 1 {
					t.Logf("first failure: %v", err)
				}
			}
		}
		if a, err := b.Stat(ctx, "same"); err == nil && len(a.ETag) != 32 {
			etagLost++
		}
	}
	if fails > 0 || etagLost > 0 {
		t.Errorf("of 100 rounds of 2 concurrent Puts: %d Puts failed, %d times the object lost its MD5 ETag", fails, etagLost)
	}
}
