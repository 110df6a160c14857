package store

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/slipstream-io/slipstream/internal/object"
)

const xmpOrderEnv = "SLIPSTREAM_STORE_XMP_CHILD"

// TestXMPOrderChild (child of TestCrossMountpathOverwriteOrder): an
// object written when the node had one drive is overwritten after a second
// drive was added and HRW moved the key there. It writes the old copy's
// file and the new copy's directory to the file "paths".
func TestXMPOrderChild(t *testing.T) {
	dir := os.Getenv(xmpOrderEnv)
	if dir == "" {
		t.Skip("child of TestCrossMountpathOverwriteOrder")
	}
	ctx := context.Background()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	s, err := Open(ctx, Config{Mountpaths: []string{a}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for i := 0; i < 64; i++ {
		k := "k" + string(rune('A'+i%26)) + strings.Repeat("x", i/26)
		keys = append(keys, k)
		if _, err := s.Put(ctx, "bkt", k, bytes.NewReader([]byte("old")), PutOptions{PutOptions: object.PutOptions{Size: 3}}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	s, err = Open(ctx, Config{Mountpaths: []string{a, b}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, k := range keys {
		if s.mountpathFor("bkt", k).idx != 1 {
			continue
		}
		old := s.objectFile("bkt", k)
		newDir, _ := s.mps[1].objectPath("bkt", k)
		if err := os.WriteFile(filepath.Join(dir, "paths"), []byte(old+"\n"+newDir+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Put(ctx, "bkt", k, bytes.NewReader([]byte("new")), PutOptions{PutOptions: object.PutOptions{Size: 3}}); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatal("no key moved")
}

// TestCrossMountpathOverwriteOrder: when an overwrite lands on another
// mountpath than the old copy (a drive was added, or one failed), the
// directory holding the new copy's rename is fsynced before the old copy
// is unlinked. The drives are separate file systems (one's fsync does not
// commit the other's journal), so the other order would let a crash in
// between lose both versions. Checked on the system calls, with strace.
func TestCrossMountpathOverwriteOrder(t *testing.T) {
	dir := t.TempDir()
	trace := straceChild(t, "TestXMPOrderChild", xmpOrderEnv, dir)
	pb, err := os.ReadFile(filepath.Join(dir, "paths"))
	if err != nil {
		t.Fatal(err)
	}
	paths := strings.Split(strings.TrimSpace(string(pb)), "\n")
	oldFile, newDir := paths[0], paths[1]
	unlinkAt, newSyncAt := -1, -1
	for n, line := range trace {
		switch {
		case unlinkAt < 0 && strings.Contains(line, "unlink") && strings.Contains(line, filepath.Base(oldFile)):
			unlinkAt = n
		case newSyncAt < 0 && strings.Contains(line, "fsync(") && strings.Contains(line, "<"+newDir+">"):
			newSyncAt = n
		}
	}
	switch {
	case unlinkAt < 0:
		t.Fatalf("old copy %s never unlinked", oldFile)
	case newSyncAt < 0:
		t.Errorf("the new copy's directory %s was never fsynced", newDir)
	case newSyncAt > unlinkAt:
		t.Errorf("old copy unlinked (trace line %d) before the new copy's directory %s was fsynced (trace line %d): a crash in between leaves neither version", unlinkAt, newDir, newSyncAt)
	}
}

const firstOpenEnv = "SLIPSTREAM_STORE_FIRST_OPEN_CHILD"

// TestFirstOpenChild (child of TestFirstOpenSyncsDirectories) opens a
// store on a mountpath that does not exist yet.
func TestFirstOpenChild(t *testing.T) {
	dir := os.Getenv(firstOpenEnv)
	if dir == "" {
		t.Skip("child of TestFirstOpenSyncsDirectories")
	}
	s, err := Open(context.Background(), Config{Mountpaths: []string{filepath.Join(dir, "new", "mp")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}

// TestFirstOpenSyncsDirectories: a mountpath's directories are durable
// once Open returns: every directory it creates has its parent fsynced
// (commits fsync only up to obj/, so a crash must not lose obj/ itself).
func TestFirstOpenSyncsDirectories(t *testing.T) {
	dir := t.TempDir()
	trace := straceChild(t, "TestFirstOpenChild", firstOpenEnv, dir)
	root := filepath.Join(dir, "new", "mp")
	for _, made := range []string{filepath.Join(dir, "new"), root, filepath.Join(root, "obj"), filepath.Join(root, "tmp"), filepath.Join(root, "mpu")} {
		parent := filepath.Dir(made)
		synced := slices.ContainsFunc(trace, func(l string) bool {
			return strings.Contains(l, "fsync(") && strings.Contains(l, "<"+parent+">")
		})
		if !synced {
			t.Errorf("%s was made but %s never fsynced", made, parent)
		}
	}
}

// straceChild runs the test named child in a child process under strace
// with env set to dir, and returns the trace of its unlink and fsync calls
// (file descriptors shown with their paths).
func straceChild(t *testing.T, child, env, dir string) []string {
	t.Helper()
	if _, err := exec.LookPath("strace"); err != nil {
		t.Skip("needs strace (scripts/setup.sh installs it)")
	}
	out := filepath.Join(t.TempDir(), "trace")
	cmd := exec.Command("strace", "-f", "-y", "-o", out, "-e", "trace=unlinkat,unlink,fsync,fdatasync",
		os.Args[0], "-test.run=^"+child+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env+"="+dir)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(string(b), "\n")
}

const evictEnv = "SLIPSTREAM_STORE_EVICT_CHILD"

// TestEvictChild (child of TestEvictionIsDurable) fills a small mountpath
// with clean copies until a PUT evicts the first one, and writes that
// copy's file and directory to the file "paths".
func TestEvictChild(t *testing.T) {
	dir := os.Getenv(evictEnv)
	if dir == "" {
		t.Skip("child of TestEvictionIsDurable")
	}
	ctx := context.Background()
	const chunk = 64 << 10
	s, err := Open(ctx, Config{Mountpaths: []string{filepath.Join(dir, "mp")}, MaxBytes: 2*chunk + 1, HighWatermark: 100, LowWatermark: 99, Policy: "lru"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, k := range []string{"first", "second"} {
		if _, err := s.Put(ctx, "bkt", k, bytes.NewReader(make([]byte, chunk)), PutOptions{PutOptions: object.PutOptions{Size: chunk}}); err != nil {
			t.Fatal(err)
		}
	}
	file := s.objectFile("bkt", "first")
	if err := os.WriteFile(filepath.Join(dir, "paths"), []byte(file+"\n"+filepath.Dir(file)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "bkt", "third", bytes.NewReader(make([]byte, chunk)), PutOptions{PutOptions: object.PutOptions{Size: chunk}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stat(ctx, "bkt", "first"); err == nil {
		t.Fatal("nothing evicted")
	}
}

// TestEvictionIsDurable: an evicted copy's removal is fsynced (once per
// directory and eviction pass): after a crash it does not come back, to be
// served although its key was deleted or rewritten elsewhere since.
func TestEvictionIsDurable(t *testing.T) {
	dir := t.TempDir()
	trace := straceChild(t, "TestEvictChild", evictEnv, dir)
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
		t.Errorf("the directory %s of the evicted copy was not fsynced after its unlink", fdir)
	}
}
