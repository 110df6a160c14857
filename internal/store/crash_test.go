package store

import (
	"bufio"
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/object"
)

const crashEnv = "SLIPSTREAM_STORE_CRASH_CHILD"

// TestCrashChild is the child of TestCrashSafety: it PUTs (and sometimes
// overwrites and deletes) objects until it is killed, printing one line per
// acknowledged operation. It does nothing when run normally.
func TestCrashChild(t *testing.T) {
	spec := os.Getenv(crashEnv)
	if spec == "" {
		t.Skip("child of TestCrashSafety")
	}
	round, dirs, _ := strings.Cut(spec, ":")
	s, err := Open(context.Background(), Config{Mountpaths: strings.Split(dirs, ",")}, nil)
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	ctx := context.Background()
	out := bufio.NewWriter(os.Stdout)
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	pool := randBytes(r.Uint64(), 8<<20) // bodies are slices of it: the child spends its time in Put
	for i := 0; ; i++ {
		size := r.IntN(4 << 20)
		off := r.IntN(len(pool) - size)
		data := pool[off : off+size]
		key := fmt.Sprintf("r%s/u%05d", round, i) // unique
		if r.IntN(3) == 0 {
			key = fmt.Sprintf("shared/%d", r.IntN(5)) // overwritten across rounds
		}
		var info object.Info
		var err error
		if r.IntN(6) == 0 {
			info, err = crashMultipart(ctx, s, key, pool[:object.MinPartSize], data)
		} else {
			info, err = s.Put(ctx, "crash", key, bytes.NewReader(data), PutOptions{PutOptions: object.PutOptions{Size: int64(size)}})
		}
		if err != nil {
			fmt.Fprintln(out, "ERR", err)
			out.Flush()
			os.Exit(3)
		}
		fmt.Fprintln(out, "PUT", key, info.ETag)
		out.Flush()
		if r.IntN(4) == 0 {
			v := fmt.Sprint("v", i)
			if _, err := s.UpdateMeta(ctx, "crash", key, func(in *object.Info) error { in.BackendVersion = v; return nil }); err == nil {
				fmt.Fprintln(out, "META", key, v)
			}
		}
		if r.IntN(10) == 0 {
			// Announced first: a kill after the delete but before its
			// acknowledgement leaves either state.
			fmt.Fprintln(out, "DELETING", key)
			out.Flush()
			if err := s.Delete(ctx, "crash", key); err == nil {
				fmt.Fprintln(out, "DEL", key)
			}
		}
		out.Flush()
	}
}

// crashMultipart uploads key as two parts (first of the minimum size).
func crashMultipart(ctx context.Context, s *Store, key string, p1, p2 []byte) (object.Info, error) {
	id, err := s.CreateUpload(ctx, "crash", key, UploadOptions{})
	if err != nil {
		return object.Info{}, err
	}
	var parts []object.CompletePart
	for i, p := range [][]byte{p1, p2} {
		pi, err := s.PutPart(ctx, "crash", key, id, i+1, bytes.NewReader(p), object.PutOptions{Size: int64(len(p))})
		if err != nil {
			return object.Info{}, err
		}
		parts = append(parts, object.CompletePart{PartNumber: pi.PartNumber, ETag: pi.ETag})
	}
	return s.CompleteUpload(ctx, "crash", key, id, parts)
}

// TestCrashSafety kills a child doing PUTs with SIGKILL at random moments,
// several times, and checks after each restart that every acknowledged
// object is intact, that every visible object matches its ETag and
// checksum, and that no work file survives.
func TestCrashSafety(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns and kills child processes")
	}
	dir := t.TempDir()
	mps := []string{filepath.Join(dir, "mp1"), filepath.Join(dir, "mp2")}
	acked := map[string]string{} // key -> ETag of the last acknowledged PUT ("" = deleted)
	meta := map[string]string{}  // key -> BackendVersion of the last acknowledged UpdateMeta
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	leftovers := 0
	for round := 0; round < 6; round++ {
		cmd := exec.Command(exe, "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d:%s", crashEnv, round, strings.Join(mps, ",")))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		// Kill after a random number of acknowledged operations, at a
		// random moment (most likely inside a PUT: writing or fsyncing).
		target := 8 + rand.IntN(10)
		n := 0
		timeout := time.After(60 * time.Second)
	read:
		for n < target {
			select {
			case l, ok := <-lines:
				if !ok {
					break read
				}
				f := strings.Fields(l)
				switch f[0] {
				case "PUT":
					acked[f[1]] = f[2]
					n++
				case "DEL":
					acked[f[1]] = ""
				case "DELETING":
					acked[f[1]] = maybeDeleted
				case "META":
					meta[f[1]] = f[2]
				default:
					t.Fatalf("child: %s", l)
				}
			case <-timeout:
				break read
			}
		}
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		// Whatever the child acknowledged before dying counts too.
		for l := range lines {
			f := strings.Fields(l)
			switch {
			case len(f) == 3 && f[0] == "PUT":
				acked[f[1]] = f[2]
			case len(f) == 2 && f[0] == "DEL":
				acked[f[1]] = ""
			case len(f) == 2 && f[0] == "DELETING":
				acked[f[1]] = maybeDeleted
			case len(f) == 3 && f[0] == "META":
				meta[f[1]] = f[2]
			}
		}
		cmd.Wait()
		if n < target {
			t.Fatalf("round %d: child acknowledged only %d operations", round, n)
		}
		leftovers += verifyAfterCrash(t, mps, acked, meta)
	}
	if leftovers == 0 {
		t.Fatal("no kill landed inside a PUT (no work file was left to recover); the test proved nothing")
	}
}

// maybeDeleted marks a key whose delete began but was not acknowledged.
const maybeDeleted = "?"

// verifyAfterCrash reopens the store, checks it and returns how many work
// files of interrupted PUTs Open had to remove.
func verifyAfterCrash(t *testing.T, mps []string, acked, meta map[string]string) int {
	t.Helper()
	leftovers := 0
	for _, mp := range mps {
		leftovers += len(filesUnder(filepath.Join(mp, "tmp")))
	}
	s, err := Open(context.Background(), Config{Mountpaths: mps}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if f := files(t, s, "tmp"); len(f) != 0 {
		t.Fatalf("work files survived Open: %v", f)
	}
	ctx := context.Background()
	seen := map[string]bool{}
	err = s.Walk(ctx, "crash", func(info object.Info) error {
		seen[info.Key] = true
		r, err := s.Get(ctx, "crash", info.Key, nil)
		if err != nil {
			return err
		}
		defer r.Close()
		h, c := md5.New(), crc32.New(object.Castagnoli)
		n, err := io.Copy(io.MultiWriter(h, c), r)
		if err != nil {
			return err
		}
		md5OK := hex.EncodeToString(h.Sum(nil)) == info.ETag || strings.Contains(info.ETag, "-") // multipart: checksum only
		if n != info.Size || !md5OK || checksumString(c.Sum32()) != info.Checksum {
			return fmt.Errorf("torn object %s: %d bytes, md5 %x, metadata %+v", info.Key, n, h.Sum(nil), info)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for k, etag := range acked {
		if strings.HasPrefix(k, "shared/") || etag == maybeDeleted {
			continue // a later, unacknowledged overwrite or delete may have won
		}
		info, err := s.Stat(ctx, "crash", k)
		switch {
		case etag == "" && err == nil:
			t.Fatalf("deleted %s is back", k)
		case etag != "" && err != nil:
			t.Fatalf("acknowledged %s lost: %v", k, err)
		case etag != "" && info.ETag != etag:
			t.Fatalf("acknowledged %s has ETag %s, want %s", k, info.ETag, etag)
		case etag != "" && meta[k] != "" && info.BackendVersion != meta[k]:
			t.Fatalf("acknowledged metadata update of %s lost: BackendVersion %q, want %q", k, info.BackendVersion, meta[k])
		}
	}
	t.Logf("after crash: %d work files of interrupted PUTs removed, %d objects, %d acknowledged keys", leftovers, len(seen), len(acked))
	return leftovers
}
