package store

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slipstream-io/slipstream/internal/object"
)

func openTest(t testing.TB, cfg Config) *Store {
	t.Helper()
	if len(cfg.Mountpaths) == 0 {
		dir := t.TempDir()
		cfg.Mountpaths = []string{filepath.Join(dir, "mp1"), filepath.Join(dir, "mp2")}
	}
	s, err := Open(context.Background(), cfg, nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

func md5hex(b []byte) string { s := md5.Sum(b); return hex.EncodeToString(s[:]) }

func put(t testing.TB, s *Store, bucket, key string, data []byte) object.Info {
	t.Helper()
	info, err := s.Put(context.Background(), bucket, key, bytes.NewReader(data), PutOptions{PutOptions: object.PutOptions{Size: int64(len(data))}})
	if err != nil {
		t.Fatalf("Put %s/%s: %v", bucket, key, err)
	}
	return info
}

func get(t testing.TB, s *Store, bucket, key string, rng *object.Range) ([]byte, object.Info) {
	t.Helper()
	r, err := s.Get(context.Background(), bucket, key, rng)
	if err != nil {
		t.Fatalf("Get %s/%s: %v", bucket, key, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read %s/%s: %v", bucket, key, err)
	}
	return b, r.Info()
}

// files lists every regular file under the mountpaths' tmp/, obj/ and mpu/.
func files(t testing.TB, s *Store, sub string) []string {
	t.Helper()
	var out []string
	for _, mp := range s.mps {
		for _, p := range filesUnder(filepath.Join(mp.root, sub)) {
			out = append(out, strings.TrimPrefix(p, mp.root))
		}
	}
	return out
}

// filesUnder lists the files (not directories) under root.
func filesUnder(root string) []string {
	var out []string
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func osStat(p string) (os.FileInfo, error) { return os.Stat(p) }

// objectFile is the path of a committed object.
func (s *Store) objectFile(bucket, key string) string {
	e := s.lookup(bucket, key)
	if e == nil {
		return ""
	}
	_, f := s.mps[e.mp].objectPath(bucket, key)
	return f
}
