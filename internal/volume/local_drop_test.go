package volume

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDeleteKeepsFilesInUse: a chunk file a mutation is still using
// (WriteAt submits AIO and fdatasyncs on its raw descriptor) is not closed
// under it by Delete or Close; its descriptor number could otherwise be
// reused by another file opened meanwhile and take the write.
func TestDeleteKeepsFilesInUse(t *testing.T) {
	for _, how := range []string{"delete", "close"} {
		t.Run(how, func(t *testing.T) {
			l, err := NewLocal(LocalConfig{Mountpaths: []string{filepath.Join(t.TempDir(), "mp")}})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			of, err := l.open("v", 0, true) // as WriteAt holds it
			if err != nil {
				t.Fatal(err)
			}
			if how == "delete" {
				err = l.Delete(context.Background(), "v")
			} else {
				err = l.Close()
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := unix.Fdatasync(int(of.f.Fd())); err != nil {
				t.Fatalf("descriptor of a chunk file in use closed by %s: %v", how, err)
			}
			l.release(of)
			if _, err := of.f.Stat(); err == nil {
				t.Fatalf("chunk file left open after its last user released it")
			}
		})
	}
}

// TestCheckRangeOverflow: a range whose end overflows int64 (a bad peer
// request) is out of range, not passed on to the file system.
func TestCheckRangeOverflow(t *testing.T) {
	l, err := NewLocal(LocalConfig{Mountpaths: []string{filepath.Join(t.TempDir(), "mp")}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, r := range [][2]int64{{1 << 62, 1 << 62}, {0, -1}, {-1, 1}, {l.cfg.MaxChunkSize, 1}, {l.cfg.MaxChunkSize + 1, 0}} {
		if err := l.check(r[0], r[1]); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("check(%d, %d) = %v, want ErrOutOfRange", r[0], r[1], err)
		}
	}
	if err := l.check(0, l.cfg.MaxChunkSize); err != nil {
		t.Errorf("a whole chunk: %v", err)
	}
}
