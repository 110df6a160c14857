package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sync/errgroup"

	"github.com/slipstream-io/slipstream/internal/object"
)

func TestList(t *testing.T) {
	s := openTest(t, Config{})
	ctx := context.Background()
	keys := []string{"a", "a/1", "a/2", "a/b/1", "a/b/2", "b", "b/", "b/x", "c/d/e", "c0", "photos/2024/jan.jpg", "photos/2024/feb.jpg", "photos/2025/mar.jpg", "z"}
	for _, k := range keys {
		put(t, s, "bkt", k, []byte(k))
	}
	put(t, s, "other", "a/9", []byte("x"))
	type want struct {
		objs      []string
		prefixes  []string
		truncated bool
		next      string
	}
	cases := []struct {
		name string
		opts object.ListOptions
		want want
	}{
		{"all", object.ListOptions{}, want{objs: sorted(keys)}},
		{"prefix", object.ListOptions{Prefix: "a/"}, want{objs: []string{"a/1", "a/2", "a/b/1", "a/b/2"}}},
		{"prefix no match", object.ListOptions{Prefix: "q"}, want{}},
		{"delimiter at root", object.ListOptions{Delimiter: "/"}, want{objs: []string{"a", "b", "c0", "z"}, prefixes: []string{"a/", "b/", "c/", "photos/"}}},
		{"prefix and delimiter", object.ListOptions{Prefix: "a/", Delimiter: "/"}, want{objs: []string{"a/1", "a/2"}, prefixes: []string{"a/b/"}}},
		{"folder marker is an object under its prefix", object.ListOptions{Prefix: "b/", Delimiter: "/"}, want{objs: []string{"b/", "b/x"}}},
		{"nested prefixes", object.ListOptions{Prefix: "photos/", Delimiter: "/"}, want{prefixes: []string{"photos/2024/", "photos/2025/"}}},
		{"multi-char delimiter", object.ListOptions{Delimiter: "/b/"}, want{objs: []string{"a", "a/1", "a/2", "b", "b/", "b/x", "c/d/e", "c0", "photos/2024/feb.jpg", "photos/2024/jan.jpg", "photos/2025/mar.jpg", "z"}, prefixes: []string{"a/b/"}}},
		{"start-after", object.ListOptions{StartAfter: "b/"}, want{objs: []string{"b/x", "c/d/e", "c0", "photos/2024/feb.jpg", "photos/2024/jan.jpg", "photos/2025/mar.jpg", "z"}}},
		{"start-after before prefix", object.ListOptions{Prefix: "c", StartAfter: "a"}, want{objs: []string{"c/d/e", "c0"}}},
		{"start-after past everything", object.ListOptions{StartAfter: "zz"}, want{}},
		{"start-after inside a common prefix", object.ListOptions{Delimiter: "/", StartAfter: "a/1"}, want{objs: []string{"b", "c0", "z"}, prefixes: []string{"a/", "b/", "c/", "photos/"}}},
		{"start-after equal to a common prefix skips it", object.ListOptions{Delimiter: "/", StartAfter: "a/"}, want{objs: []string{"b", "c0", "z"}, prefixes: []string{"b/", "c/", "photos/"}}},
		{"max-keys", object.ListOptions{MaxKeys: 3}, want{objs: []string{"a", "a/1", "a/2"}, truncated: true, next: "a/2"}},
		{"max-keys exact fit is not truncated", object.ListOptions{Prefix: "a/b/", MaxKeys: 2}, want{objs: []string{"a/b/1", "a/b/2"}}},
		{"max-keys counts prefixes", object.ListOptions{Delimiter: "/", MaxKeys: 2}, want{objs: []string{"a"}, prefixes: []string{"a/"}, truncated: true, next: "a/"}},
		{"max-keys ends on a prefix", object.ListOptions{Delimiter: "/", MaxKeys: 5, StartAfter: "a/"}, want{objs: []string{"b", "c0"}, prefixes: []string{"b/", "c/", "photos/"}, truncated: true, next: "photos/"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := s.List(ctx, "bkt", c.opts)
			if err != nil {
				t.Fatal(err)
			}
			var objs []string
			for _, o := range res.Objects {
				objs = append(objs, o.Key)
				if o.Bucket != "bkt" || o.Size != int64(len(o.Key)) || o.ETag != md5hex([]byte(o.Key)) {
					t.Fatalf("object info %+v", o)
				}
			}
			if !slices.Equal(objs, c.want.objs) || !slices.Equal(res.CommonPrefixes, c.want.prefixes) ||
				res.IsTruncated != c.want.truncated || res.NextMarker != c.want.next {
				t.Fatalf("List(%+v)\n got objs=%q prefixes=%q truncated=%v next=%q\nwant objs=%q prefixes=%q truncated=%v next=%q",
					c.opts, objs, res.CommonPrefixes, res.IsTruncated, res.NextMarker,
					c.want.objs, c.want.prefixes, c.want.truncated, c.want.next)
			}
		})
	}
	if _, err := s.List(ctx, "Bad_Bucket", object.ListOptions{}); !errors.Is(err, object.ErrInvalidBucketName) {
		t.Fatalf("List(bad bucket) = %v", err)
	}
	if res, err := s.List(ctx, "empty-bucket", object.ListOptions{}); err != nil || len(res.Objects) != 0 {
		t.Fatalf("List(unknown bucket) = %+v, %v", res, err)
	}
}

func sorted(s []string) []string { s = slices.Clone(s); sort.Strings(s); return s }

// TestListPaging pages through thousands of objects with and without a
// delimiter, feeding NextMarker back as StartAfter.
func TestListPaging(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 3000 objects")
	}
	s := openTest(t, Config{})
	ctx := context.Background()
	var keys []string
	for i := 0; i < 3000; i++ {
		keys = append(keys, fmt.Sprintf("d%02d/f%04d", i%30, i))
	}
	// Parallel PUTs: each costs two fsyncs, which overlap.
	var g errgroup.Group
	g.SetLimit(32)
	for _, k := range keys {
		g.Go(func() error {
			_, err := s.Put(ctx, "bkt", k, strings.NewReader(k), PutOptions{PutOptions: object.PutOptions{Size: -1}})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	sort.Strings(keys)
	var got []string
	opts := object.ListOptions{MaxKeys: 333}
	pages := 0
	for {
		res, err := s.List(ctx, "bkt", opts)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, o := range res.Objects {
			got = append(got, o.Key)
		}
		if !res.IsTruncated {
			break
		}
		opts.StartAfter = res.NextMarker
	}
	if !slices.Equal(got, keys) || pages != 10 {
		t.Fatalf("paged listing: %d keys in %d pages, want %d in 10", len(got), pages, len(keys))
	}
	var prefixes []string
	opts = object.ListOptions{Delimiter: "/", MaxKeys: 7}
	for {
		res, err := s.List(ctx, "bkt", opts)
		if err != nil {
			t.Fatal(err)
		}
		prefixes = append(prefixes, res.CommonPrefixes...)
		if !res.IsTruncated {
			break
		}
		opts.StartAfter = res.NextMarker
	}
	if len(prefixes) != 30 || prefixes[0] != "d00/" || prefixes[29] != "d29/" || !slices.IsSorted(prefixes) {
		t.Fatalf("paged prefixes: %q", prefixes)
	}
	var walked []string
	if err := s.Walk(ctx, "", func(i object.Info) error { walked = append(walked, i.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(sorted(walked), keys) {
		t.Fatalf("Walk saw %d keys", len(walked))
	}
}

func TestWalkAndDeleteBucket(t *testing.T) {
	s := openTest(t, Config{})
	ctx := context.Background()
	put(t, s, "one", "x/1", []byte("1"))
	put(t, s, "one", "x/2", []byte("2"))
	put(t, s, "two", "y", []byte("3"))
	seen := map[string]bool{}
	if err := s.Walk(ctx, "", func(i object.Info) error { seen[i.Bucket+"/"+i.Key] = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 3 || !seen["one/x/1"] || !seen["two/y"] {
		t.Fatalf("Walk all = %v", seen)
	}
	n := 0
	if err := s.Walk(ctx, "one", func(i object.Info) error {
		if i.Bucket != "one" {
			t.Errorf("Walk(one) gave %s", i.Bucket)
		}
		n++
		return nil
	}); err != nil || n != 2 {
		t.Fatalf("Walk(one) = %d, %v", n, err)
	}
	stop := errors.New("stop")
	n = 0
	if err := s.Walk(ctx, "", func(object.Info) error { n++; return stop }); !errors.Is(err, stop) || n != 1 {
		t.Fatalf("Walk stopping = %d, %v", n, err)
	}
	if err := s.DeleteBucket(ctx, "one"); !errors.Is(err, object.ErrBucketNotEmpty) {
		t.Fatalf("DeleteBucket(non-empty) = %v", err)
	}
	id, err := s.CreateUpload(ctx, "three", "k", UploadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteBucket(ctx, "three"); !errors.Is(err, object.ErrBucketNotEmpty) {
		t.Fatalf("DeleteBucket(with upload) = %v", err)
	}
	if err := s.AbortUpload(ctx, "three", "k", id); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"x/1", "x/2"} {
		if err := s.Delete(ctx, "one", k); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range []string{"one", "three", "never-used"} {
		if err := s.DeleteBucket(ctx, b); err != nil {
			t.Fatalf("DeleteBucket(%s) = %v", b, err)
		}
	}
	for _, mp := range s.mps {
		for _, d := range []string{mp.objDir, mp.mpuDir} {
			for _, b := range []string{"one", "three"} {
				if _, err := osStat(d + "/" + b); err == nil {
					t.Fatalf("%s/%s still exists", d, b)
				}
			}
		}
	}
	// The bucket is usable again.
	put(t, s, "one", "again", []byte("a"))
	if err := s.DeleteBucket(ctx, "bad..name"); !errors.Is(err, object.ErrInvalidBucketName) {
		t.Fatalf("DeleteBucket(bad name) = %v", err)
	}
}
