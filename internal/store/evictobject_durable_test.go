package store

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slipstream-io/slipstream/internal/object"
)

const evictObjectChildEnv = "SLIPSTREAM_STORE_EVICTOBJECT_CHILD"

// TestEvictObjectDurableChild (child of TestEvictObjectIsDurable)
// stores a clean copy, evicts it with EvictObject and writes the copy's
// file and directory to the file "paths".
func TestEvictObjectDurableChild(t *testing.T) {
	dir := os.Getenv(evictObjectChildEnv)
	if dir == "" {
		t.Skip("child of TestEvictObjectIsDurable")
	}
	ctx := context.Background()
	s, err := Open(ctx, Config{Mountpaths: []string{filepath.Join(dir, "mp")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Put(ctx, "bkt", "stale", bytes.NewReader(make([]byte, 4096)), PutOptions{PutOptions: object.PutOptions{Size: 4096}}); err != nil {
		t.Fatal(err)
	}
	file := s.objectFile("bkt", "stale")
	if err := os.WriteFile(filepath.Join(dir, "paths"), []byte(file+"\n"+filepath.Dir(file)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.EvictObject(ctx, "bkt", "stale"); err != nil {
		t.Fatal(err)
	}
}

// TestEvictObjectIsDurable: EvictObject (admin evict, and the tier
// dropping a copy the backend deleted or holds a newer version of) makes
// the removal durable like an eviction pass does: a copy that came back
// after a crash would be served, clean and out of date.
func TestEvictObjectIsDurable(t *testing.T) {
	dir := t.TempDir()
	trace := straceChild(t, "TestEvictObjectDurableChild", evictObjectChildEnv, dir)
	pb, err := os.ReadFile(filepath.Join(dir, "paths"))
	if err != nil {
		t.Fatal(err)
	}
	paths := strings.Split(strings.TrimSpace(string(pb)), "\n")
	file, fdir := paths[0], paths[1]
	unlinkAt, syncAt := -1, -1
	for n, line := range trace {
		switch {
		case unlinkAt < 0 && strings.Contains(line, "unlink") && strings.Contains(line, filepath.Base(file)):
			unlinkAt = n
		case unlinkAt >= 0 && syncAt < 0 && strings.Contains(line, "fsync(") && strings.Contains(line, "<"+fdir+">"):
			syncAt = n
		}
	}
	if unlinkAt < 0 {
		t.Fatalf("evicted copy %s never unlinked", file)
	}
	if syncAt < 0 {
		t.Errorf("the directory %s of the copy EvictObject removed was not fsynced after its unlink", fdir)
	}
}
