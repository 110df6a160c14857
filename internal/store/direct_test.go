package store

import (
	"bytes"
	"os"
	"testing"
)

// TestDirectFileWrites writes bodies of awkward sizes in awkward pieces
// (aligned and unaligned buffers, partial blocks) and reads back exactly
// what was written.
func TestDirectFileWrites(t *testing.T) {
	dir := t.TempDir()
	probe, err := createWorkFile(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	probe.Close()
	if _, ok := probe.(*directFile); !ok {
		t.Skipf("%s has no O_DIRECT", dir)
	}
	aligned := make([]byte, 1<<20) // a large allocation: page aligned
	for i := range aligned {
		aligned[i] = byte(i*7 + i>>12)
	}
	for _, tc := range []struct {
		name   string
		pieces []int // lengths written in turn; negative: from an unaligned buffer
	}{
		{"nothing", nil},
		{"one byte", []int{1}},
		{"one block less a byte", []int{4095}},
		{"one block", []int{4096}},
		{"block and a byte", []int{4097}},
		{"buffers then a tail", []int{256 << 10, 256 << 10, 5}},
		{"unaligned buffer first", []int{-8192, 4096}},
		{"tail in the middle", []int{4096, 100, 4096, 8192}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := createWorkFile(dir, true)
			if err != nil {
				t.Fatal(err)
			}
			defer os.Remove(f.Name())
			var want []byte
			for _, n := range tc.pieces {
				var p []byte
				if n < 0 {
					p = aligned[1 : 1-n]
				} else {
					p = aligned[:n]
				}
				if k, err := f.Write(p); err != nil || k != len(p) {
					t.Fatalf("Write(%d bytes) = %d, %v", len(p), k, err)
				}
				want = append(want, p...)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(f.Name())
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("read back %d bytes (%v), wrote %d", len(got), err, len(want))
			}
		})
	}
}
