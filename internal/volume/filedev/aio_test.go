package filedev_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/slipstream-io/slipstream/internal/volume/filedev"
)

func alignedBuf(n int) []byte {
	b := make([]byte, n+4096)
	o := int(uintptr(unsafe.Pointer(&b[0])) % 4096)
	if o != 0 {
		o = 4096 - o
	}
	return b[o : o+n]
}

func TestRingConcurrentWrites(t *testing.T) {
	r, err := filedev.NewRing(64)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		t.Skipf("no O_DIRECT here: %v", err)
	}
	defer f.Close()
	const n = 512
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := alignedBuf(4096)
			for i := g; i < n; i += 16 {
				copy(p, fmt.Sprintf("block %d", i))
				if err := r.WriteAt(int(f.Fd()), p, int64(i)*4096); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	p := alignedBuf(4096)
	for i := 0; i < n; i++ {
		if n, err := r.ReadAt(int(f.Fd()), p, int64(i)*4096); err != nil || n != 4096 {
			t.Fatal(n, err)
		}
		if want := fmt.Sprintf("block %d", i); !bytes.HasPrefix(p, []byte(want)) {
			t.Fatalf("block %d reads %q", i, p[:16])
		}
	}
	// A read past the end is short, not an error.
	if n, err := r.ReadAt(int(f.Fd()), p, n*4096-4096+4096); err != nil || n != 0 {
		t.Errorf("read at EOF: %d %v", n, err)
	}
	// Misaligned I/O fails with EINVAL and the ring stays usable.
	if err := r.WriteAt(int(f.Fd()), p[:100], 0); err == nil {
		t.Error("misaligned O_DIRECT write succeeded")
	}
	if err := r.WriteAt(int(f.Fd()), p, 0); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if err := r.WriteAt(int(f.Fd()), p, 0); err != filedev.ErrRingClosed {
		t.Errorf("write after Close: %v", err)
	}
}

func TestDeviceReadWrite(t *testing.T) {
	d, err := filedev.Open(filepath.Join(t.TempDir(), "d"), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	a := alignedBuf(8192)
	for i := range a {
		a[i] = byte(i * 3)
	}
	if err := d.WriteAt(ctx, a, 4096, true); err != nil { // aligned: direct path
		t.Fatal(err)
	}
	if err := d.WriteAt(ctx, []byte("xyz"), 5000, false); err != nil { // unaligned: buffered
		t.Fatal(err)
	}
	copy(a[5000-4096:], "xyz")
	got := make([]byte, 8192)
	if err := d.ReadAt(ctx, got, 4096); err != nil || !bytes.Equal(got, a) {
		t.Fatalf("read back differs: %v", err)
	}
	if err := d.Trim(ctx, 4096, 4096); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteZeroes(ctx, 8192, 100, false, true); err != nil {
		t.Fatal(err)
	}
	if err := d.ReadAt(ctx, got, 4096); err != nil || !bytes.Equal(got[:4196], make([]byte, 4196)) || got[4196] != a[4196] {
		t.Fatalf("trim/zero wrong: %v", err)
	}
}
