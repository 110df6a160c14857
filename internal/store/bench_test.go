package store

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/object"
)

const benchSize = 1 << 20

// rawPut is the floor a PUT cannot beat on this filesystem: write, fsync,
// rename and fsync the directory, without hashing or metadata.
func rawPut(dir string, i int, data []byte) error {
	f, err := os.CreateTemp(dir, "raw-*")
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	f.Close()
	if err := os.Rename(f.Name(), filepath.Join(dir, fmt.Sprintf("obj-%d", i%64))); err != nil {
		return err
	}
	return syncDir(dir)
}

// BenchmarkPut measures 1 MiB PUTs against rawPut in the same run and
// reports both rates and their ratio.
func BenchmarkPut(b *testing.B) {
	s := openTest(b, Config{})
	raw := b.TempDir()
	data := randBytes(1, benchSize)
	ctx := context.Background()
	var tStore, tRaw time.Duration
	b.SetBytes(benchSize)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := rawPut(raw, i, data); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := s.Put(ctx, "bench", fmt.Sprintf("obj-%d", i%64), bytes.NewReader(data), PutOptions{PutOptions: object.PutOptions{Size: benchSize}}); err != nil {
			b.Fatal(err)
		}
		tRaw += t1.Sub(t0)
		tStore += time.Since(t1)
	}
	report(b, tStore, tRaw)
}

// BenchmarkGet measures warm 1 MiB GETs (page cache) against reading the
// same kind of file directly, in the same run.
func BenchmarkGet(b *testing.B) {
	s := openTest(b, Config{})
	raw := b.TempDir()
	data := randBytes(2, benchSize)
	ctx := context.Background()
	for i := 0; i < 16; i++ {
		put(b, s, "bench", fmt.Sprintf("obj-%d", i), data)
		if err := rawPut(raw, i, data); err != nil {
			b.Fatal(err)
		}
	}
	var tStore, tRaw time.Duration
	b.SetBytes(benchSize)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		f, err := os.Open(filepath.Join(raw, fmt.Sprintf("obj-%d", i%16)))
		if err != nil {
			b.Fatal(err)
		}
		if n, err := io.Copy(io.Discard, f); err != nil || n != benchSize {
			b.Fatal(n, err)
		}
		f.Close()
		t1 := time.Now()
		r, err := s.Get(ctx, "bench", fmt.Sprintf("obj-%d", i%16), nil)
		if err != nil {
			b.Fatal(err)
		}
		if n, err := io.Copy(io.Discard, r); err != nil || n != benchSize {
			b.Fatal(n, err)
		}
		r.Close()
		tRaw += t1.Sub(t0)
		tStore += time.Since(t1)
	}
	report(b, tStore, tRaw)
}

func report(b *testing.B, tStore, tRaw time.Duration) {
	mb := float64(b.N) * benchSize / (1 << 20)
	b.ReportMetric(mb/tStore.Seconds(), "store-MiB/s")
	b.ReportMetric(mb/tRaw.Seconds(), "raw-MiB/s")
	b.ReportMetric(tRaw.Seconds()/tStore.Seconds(), "store/raw")
}

// BenchmarkList pages through a bucket of 200k objects (index only: the
// objects are entered directly, no files), with and without a delimiter.
func BenchmarkList(b *testing.B) {
	s := openTest(b, Config{})
	bi := s.bucket("bench", true)
	for i := 0; i < 200000; i++ {
		k := fmt.Sprintf("dir%03d/obj%06d", i%500, i)
		bi.set(k, newEntry(object.Info{Bucket: "bench", Key: k, Size: 1}, 0))
	}
	ctx := context.Background()
	for _, c := range []struct {
		name string
		opts object.ListOptions
	}{
		{"page", object.ListOptions{StartAfter: "dir250/"}},
		{"delimiter", object.ListOptions{Delimiter: "/"}},
		{"prefix", object.ListOptions{Prefix: "dir499/"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				res, err := s.List(ctx, "bench", c.opts)
				if err != nil || len(res.Objects)+len(res.CommonPrefixes) == 0 {
					b.Fatal(res, err)
				}
			}
		})
	}
}
