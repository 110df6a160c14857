package store

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/slipstream-io/slipstream/internal/object"
)

func TestPutGetStatDelete(t *testing.T) {
	s := openTest(t, Config{})
	ctx := context.Background()
	cases := []struct {
		name, key string
		size      int
	}{
		{"empty", "empty", 0},
		{"small", "a/b/c.txt", 100},
		{"one buffer", "one", bufSize},
		{"several buffers", "dir/several", 3*bufSize + 17},
		{"unicode key", "données/été 🚀.bin", 1000},
		{"folder marker", "folder/", 0},
		{"dots in names", "a/.../..b/c..", 5},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data := randBytes(uint64(i), c.size)
			info := put(t, s, "bkt", c.key, data)
			if info.Size != int64(c.size) || info.ETag != md5hex(data) || info.Bucket != "bkt" || info.Key != c.key {
				t.Fatalf("Put info = %+v", info)
			}
			got, ginfo := get(t, s, "bkt", c.key, nil)
			if !bytes.Equal(got, data) {
				t.Fatalf("Get returned %d bytes, want %d (content differs)", len(got), len(data))
			}
			if ginfo.ETag != info.ETag || ginfo.Checksum != info.Checksum {
				t.Fatalf("Get info %+v, Put info %+v", ginfo, info)
			}
			st, err := s.Stat(ctx, "bkt", c.key)
			if err != nil || st.ETag != info.ETag || st.Size != info.Size {
				t.Fatalf("Stat = %+v, %v", st, err)
			}
			if err := s.Delete(ctx, "bkt", c.key); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			if _, err := s.Stat(ctx, "bkt", c.key); !errors.Is(err, object.ErrNotFound) {
				t.Fatalf("Stat after Delete: %v, want ErrNotFound", err)
			}
			if _, err := s.Get(ctx, "bkt", c.key, nil); !errors.Is(err, object.ErrNotFound) {
				t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
			}
			if err := s.Delete(ctx, "bkt", c.key); !errors.Is(err, object.ErrNotFound) {
				t.Fatalf("second Delete: %v, want ErrNotFound", err)
			}
		})
	}
	if f := files(t, s, "obj"); len(f) != 0 {
		t.Fatalf("files left after deletes: %v", f)
	}
}
