package loader

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// listedTarget serves a bucket holding the given object sizes under
// slipstream-load/: ListObjectsV2 and GET.
func listedTarget(t *testing.T, sizes ...int64) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.URL.Path, "/b/")
		if r.Method == http.MethodGet && (r.URL.Path == "/b" || r.URL.Path == "/b/") {
			var b strings.Builder
			b.WriteString(`<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name><Prefix>slipstream-load/</Prefix>`)
			fmt.Fprintf(&b, "<KeyCount>%d</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>", len(sizes))
			for i, s := range sizes {
				fmt.Fprintf(&b, "<Contents><Key>slipstream-load/obj%d</Key><Size>%d</Size><ETag>\"x\"</ETag><LastModified>2024-01-01T00:00:00.000Z</LastModified></Contents>", i, s)
			}
			b.WriteString("</ListBucketResult>")
			w.Header().Set("Content-Type", "application/xml")
			_, _ = w.Write([]byte(b.String()))
			return
		}
		var i int
		if _, err := fmt.Sscanf(key, "slipstream-load/obj%d", &i); err != nil || r.Method != http.MethodGet || i >= len(sizes) {
			http.Error(w, "unexpected request", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(sizes[i]))
		_, _ = w.Write(make([]byte, sizes[i]))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// A GET run over an existing dataset reports the size of the objects it
// read, not the --size default (which only applies to fill and PUT): in
// its parameters (so in the result JSON and the report) and its table.
func TestListedRunReportsObjectSizes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		sizes  []int64
		put    int
		lo, hi int64
		table  string
	}{
		{"same size", []int64{256 << 10, 256 << 10, 256 << 10}, 0, 256 << 10, 256 << 10, "256.0 KiB"},
		{"mixed sizes", []int64{4 << 10, 64 << 10, 16 << 10}, 0, 4 << 10, 64 << 10, "4.0 KiB-64.0 KiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Run(context.Background(), Config{Endpoint: listedTarget(t, tc.sizes...), Bucket: "b", Epochs: 2,
				Workers: 2, MinSize: 1 << 20, MaxSize: 1 << 20, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			if res.Params.MinSize != tc.lo || res.Params.MaxSize != tc.hi {
				t.Errorf("params size %d-%d, want %d-%d", res.Params.MinSize, res.Params.MaxSize, tc.lo, tc.hi)
			}
			var want int64
			for _, s := range tc.sizes {
				want += 2 * s
			}
			if got := res.Main.Total.Bytes; got != want {
				t.Errorf("main phase read %d bytes, want %d", got, want)
			}
			var b strings.Builder
			if err := PrintTable(&b, res); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.String(), tc.table) || strings.Contains(b.String(), " 1.0 MiB ") { // the --size default as a column, not "31.0 MiB/s"
				t.Errorf("table does not show the objects' size %s:\n%s", tc.table, b.String())
			}
		})
	}
}

// In a mixed run over a listed dataset the range covers the objects read
// and the PUTs' sizes.
func TestRunSizesMixed(t *testing.T) {
	objs := []object{{size: 256 << 10}, {size: 128 << 10}}
	if lo, hi := runSizes(Config{PutPercent: 30, MinSize: 1 << 20, MaxSize: 1 << 20}, objs); lo != 128<<10 || hi != 1<<20 {
		t.Errorf("mixed: %d-%d, want %d-%d", lo, hi, 128<<10, 1<<20)
	}
	if lo, hi := runSizes(Config{PutPercent: 100, MinSize: 1 << 20, MaxSize: 1 << 20}, objs); lo != 1<<20 || hi != 1<<20 {
		t.Errorf("put: %d-%d, want the PUT size", lo, hi)
	}
}
