// Package backendtest is the conformance suite every backend.Backend
// implementation passes. Call Run from the implementation's tests with a
// function that returns an empty backend.
package backendtest

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/backend"
	"github.com/slipstream-io/slipstream/internal/object"
)

// Options describe what the backend under test can do.
type Options struct {
	// LargeSize is the size of the "large object" case; pick it above the
	// backend's multipart threshold. 0 = 11 MiB.
	LargeSize int
}

// Body returns deterministic pseudo-random content.
func Body(seed int64, n int) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

func md5hex(b []byte) string { s := md5.Sum(b); return hex.EncodeToString(s[:]) }

// onlyReader hides any io.Seeker or WriterTo so the backend sees a pure stream.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

func put(t *testing.T, b backend.Backend, key string, body []byte, size int64, pa backend.PutAttrs) backend.Attrs {
	t.Helper()
	a, err := b.Put(context.Background(), key, onlyReader{bytes.NewReader(body)}, size, pa)
	if err != nil {
		t.Fatalf("Put %q: %v", key, err)
	}
	return a
}

func get(t *testing.T, b backend.Backend, key string, rng *object.Range) ([]byte, backend.Attrs) {
	t.Helper()
	rc, a, err := b.Get(context.Background(), key, rng)
	if err != nil {
		t.Fatalf("Get %q %+v: %v", key, rng, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("Get %q read: %v", key, err)
	}
	return data, a
}

// Run runs the suite. newBackend returns a fresh, empty backend each call.
func Run(t *testing.T, newBackend func(t *testing.T) backend.Backend, opts Options) {
	if opts.LargeSize == 0 {
		opts.LargeSize = 11 << 20
	}
	ctx := context.Background()

	t.Run("RoundTrip", func(t *testing.T) {
		b := newBackend(t)
		cases := []struct {
			key  string
			size int
			decl bool // declare the size
		}{
			{"empty", 0, true},
			{"small", 1000, true},
			{"unknown-size", 4097, false},
			{"dir/sub/nested key with spaces", 123, true},
			{"unicode/ключ-键", 17, true},
		}
		for i, c := range cases {
			body := Body(int64(i), c.size)
			size := int64(c.size)
			if !c.decl {
				size = -1
			}
			pa := backend.PutAttrs{ContentType: "application/x-test", UserMeta: map[string]string{"origin": "suite"},
				Headers: map[string]string{"Cache-Control": "max-age=60", "Content-Disposition": `attachment; filename="a.bin"`,
					"Content-Encoding": "gzip", "Content-Language": "de", "Expires": "Wed, 02 Jan 2030 03:04:05 GMT"}}
			a := put(t, b, c.key, body, size, pa)
			if a.Size != int64(c.size) || a.ETag == "" {
				t.Errorf("%s: Put attrs %+v", c.key, a)
			}
			st, err := b.Stat(ctx, c.key)
			if err != nil {
				t.Fatalf("%s: Stat: %v", c.key, err)
			}
			if st.Size != int64(c.size) || st.ETag != a.ETag || st.Key != c.key {
				t.Errorf("%s: Stat %+v, Put %+v", c.key, st, a)
			}
			if !maps.Equal(st.Headers, pa.Headers) {
				t.Errorf("%s: stored headers %v, want %v", c.key, st.Headers, pa.Headers)
			}
			if st.ContentType != pa.ContentType || st.UserMeta["origin"] != "suite" {
				t.Errorf("%s: metadata not kept: %+v", c.key, st)
			}
			if backend.IsMD5ETag(st.ETag) && st.ETag != md5hex(body) {
				t.Errorf("%s: ETag %s is not the body's MD5 %s", c.key, st.ETag, md5hex(body))
			}
			data, ga := get(t, b, c.key, nil)
			if !bytes.Equal(data, body) {
				t.Errorf("%s: Get returned %d bytes, want %d (content differs)", c.key, len(data), len(body))
			}
			if ga.Size != int64(c.size) || ga.ETag != a.ETag {
				t.Errorf("%s: Get attrs %+v", c.key, ga)
			}
		}
	})

	t.Run("Large", func(t *testing.T) {
		b := newBackend(t)
		body := Body(7, opts.LargeSize)
		for _, size := range []int64{int64(len(body)), -1} {
			a := put(t, b, "large", body, size, backend.PutAttrs{})
			if a.Size != int64(len(body)) {
				t.Fatalf("size %d: Put attrs %+v", size, a)
			}
			data, _ := get(t, b, "large", nil)
			if !bytes.Equal(data, body) {
				t.Fatalf("size %d: large object content differs", size)
			}
		}
		part, _ := get(t, b, "large", &object.Range{Offset: int64(len(body)) - 100, Length: 1000})
		if !bytes.Equal(part, body[len(body)-100:]) {
			t.Fatal("range at the end of a large object differs")
		}
	})

	t.Run("WrongSize", func(t *testing.T) {
		b := newBackend(t)
		body := Body(3, 100)
		if _, err := b.Put(ctx, "short", onlyReader{bytes.NewReader(body)}, 200, backend.PutAttrs{}); !errors.Is(err, object.ErrIncompleteBody) {
			t.Errorf("short body: err %v, want ErrIncompleteBody", err)
		}
		if _, err := b.Put(ctx, "long", onlyReader{bytes.NewReader(body)}, 50, backend.PutAttrs{}); !errors.Is(err, object.ErrTooLarge) {
			t.Errorf("long body: err %v, want ErrTooLarge", err)
		}
		for _, k := range []string{"short", "long"} {
			if _, err := b.Stat(ctx, k); !errors.Is(err, backend.ErrNotFound) {
				t.Errorf("%s: failed put left an object (Stat err %v)", k, err)
			}
		}
	})

	t.Run("Ranges", func(t *testing.T) {
		b := newBackend(t)
		body := Body(5, 10000)
		put(t, b, "r", body, int64(len(body)), backend.PutAttrs{})
		cases := []struct {
			rng        object.Range
			start, end int
		}{
			{object.Range{Offset: 0, Length: 1}, 0, 1},
			{object.Range{Offset: 100, Length: 900}, 100, 1000},
			{object.Range{Offset: 9000, Length: -1}, 9000, 10000},
			{object.Range{Offset: 9990, Length: 100}, 9990, 10000},
			{object.Range{Suffix: 10}, 9990, 10000},
			{object.Range{Suffix: 20000}, 0, 10000},
		}
		for _, c := range cases {
			rng := c.rng
			data, a := get(t, b, "r", &rng)
			if !bytes.Equal(data, body[c.start:c.end]) {
				t.Errorf("range %+v: got %d bytes, want [%d,%d)", c.rng, len(data), c.start, c.end)
			}
			if a.Size != int64(len(body)) {
				t.Errorf("range %+v: Attrs.Size %d, want the whole size %d", c.rng, a.Size, len(body))
			}
		}
		if _, _, err := b.Get(ctx, "r", &object.Range{Offset: 10000, Length: 1}); !errors.Is(err, object.ErrInvalidRange) {
			t.Errorf("range past the end: err %v, want ErrInvalidRange", err)
		}
	})

	t.Run("NotFound", func(t *testing.T) {
		b := newBackend(t)
		if _, err := b.Stat(ctx, "missing"); !errors.Is(err, backend.ErrNotFound) || !errors.Is(err, object.ErrNotFound) {
			t.Errorf("Stat: %v", err)
		}
		if _, _, err := b.Get(ctx, "missing", nil); !errors.Is(err, backend.ErrNotFound) {
			t.Errorf("Get: %v", err)
		}
		if _, _, err := b.Get(ctx, "dir/missing", &object.Range{Offset: 1, Length: 1}); !errors.Is(err, backend.ErrNotFound) {
			t.Errorf("Get range: %v", err)
		}
		if err := b.Delete(ctx, "missing"); err != nil {
			t.Errorf("Delete of a missing key: %v", err)
		}
	})

	t.Run("OverwriteDelete", func(t *testing.T) {
		b := newBackend(t)
		a1 := put(t, b, "k/o", Body(1, 300), 300, backend.PutAttrs{})
		time.Sleep(10 * time.Millisecond)
		body2 := Body(2, 301)
		a2 := put(t, b, "k/o", body2, 301, backend.PutAttrs{})
		if a1.ETag == a2.ETag {
			t.Errorf("overwrite kept the ETag %s", a1.ETag)
		}
		st, err := b.Stat(ctx, "k/o")
		if err != nil || st.ETag != a2.ETag || st.Size != 301 {
			t.Errorf("after overwrite: %+v %v", st, err)
		}
		if data, _ := get(t, b, "k/o", nil); !bytes.Equal(data, body2) {
			t.Error("after overwrite: old content")
		}
		if err := b.Delete(ctx, "k/o"); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Stat(ctx, "k/o"); !errors.Is(err, backend.ErrNotFound) {
			t.Errorf("after delete: %v", err)
		}
		page, err := b.List(ctx, backend.ListOptions{})
		if err != nil || len(page.Objects)+len(page.CommonPrefixes) != 0 {
			t.Errorf("after delete the listing is %+v (%v)", page, err)
		}
	})

	t.Run("List", func(t *testing.T) {
		b := newBackend(t)
		var keys []string
		for i := 0; i < 7; i++ {
			keys = append(keys, fmt.Sprintf("data/part-%02d", i))
		}
		keys = append(keys, "data/sub/x", "data/sub/y", "data-other", "top", "data/zz/a")
		for i, k := range keys {
			put(t, b, k, Body(int64(i), i+1), int64(i+1), backend.PutAttrs{})
		}
		sort.Strings(keys)
		// Paging without a delimiter returns every key once, in order.
		var got []string
		start := ""
		for pages := 0; ; pages++ {
			if pages > 20 {
				t.Fatal("listing does not end")
			}
			page, err := b.List(ctx, backend.ListOptions{StartAfter: start, Limit: 3})
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range page.Objects {
				got = append(got, o.Key)
				if o.Size <= 0 || o.ETag == "" {
					t.Errorf("list entry %+v lacks size or ETag", o)
				}
			}
			if !page.Truncated {
				break
			}
			if len(page.Objects) == 0 || page.Next == "" {
				t.Fatalf("truncated page without progress: %+v", page)
			}
			start = page.Next
		}
		if strings.Join(got, ",") != strings.Join(keys, ",") {
			t.Errorf("paged listing\n got %v\nwant %v", got, keys)
		}
		// Prefix and delimiter.
		page, err := b.List(ctx, backend.ListOptions{Prefix: "data/", Delimiter: "/"})
		if err != nil {
			t.Fatal(err)
		}
		var objs []string
		for _, o := range page.Objects {
			objs = append(objs, o.Key)
		}
		if len(objs) != 7 || objs[0] != "data/part-00" || strings.Join(page.CommonPrefixes, ",") != "data/sub/,data/zz/" || page.Truncated {
			t.Errorf("delimiter listing: objects %v prefixes %v truncated %v", objs, page.CommonPrefixes, page.Truncated)
		}
		// Paging through common prefixes.
		var seen []string
		start = ""
		for pages := 0; pages < 20; pages++ {
			page, err := b.List(ctx, backend.ListOptions{Prefix: "data/", Delimiter: "/", StartAfter: start, Limit: 2})
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range page.Objects {
				seen = append(seen, o.Key)
			}
			seen = append(seen, page.CommonPrefixes...)
			if !page.Truncated {
				break
			}
			start = page.Next
		}
		sort.Strings(seen)
		if len(seen) != 9 || seen[7] != "data/sub/" || seen[8] != "data/zz/" {
			t.Errorf("paged delimiter listing: %v", seen)
		}
		// Top level with delimiter.
		page, err = b.List(ctx, backend.ListOptions{Delimiter: "/"})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Objects) != 2 || strings.Join(page.CommonPrefixes, ",") != "data/" {
			t.Errorf("top level: %+v", page)
		}
	})

	t.Run("Canceled", func(t *testing.T) {
		b := newBackend(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := b.Put(cctx, "c", onlyReader{bytes.NewReader(Body(1, 10))}, 10, backend.PutAttrs{}); err == nil {
			t.Error("Put with a canceled context succeeded")
		}
		if _, err := b.Stat(ctx, "c"); !errors.Is(err, backend.ErrNotFound) {
			t.Errorf("canceled Put left an object: %v", err)
		}
	})
}
