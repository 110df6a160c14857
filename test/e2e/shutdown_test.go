package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/slipstream-io/slipstream/internal/localcluster"
)

// qemuWriter is one qemu-io process writing a volume through NBD: command
// i writes block i%blocks of its region with a byte that tells the round
// (i/blocks) apart, one command at a time.
type qemuWriter struct {
	base, block int64
	blocks, n   int
	g           int
}

func (w qemuWriter) offset(i int) int64 { return w.base + int64(i%w.blocks)*w.block }
func (w qemuWriter) pattern(i int) byte { return byte(1 + (i/w.blocks*3+w.g)%250) }

func (w qemuWriter) args(uri string) []string {
	args := []string{"-f", "raw"}
	for i := range w.n {
		args = append(args, "-c", fmt.Sprintf("write -P 0x%02x %d %d", w.pattern(i), w.offset(i), w.block))
	}
	return append(args, uri)
}

// acked reads qemu-io's output: one "wrote" or "write failed" line per
// command, in order. It returns which commands were acknowledged.
func (w qemuWriter) acked(out []byte) ([]bool, error) {
	ok := make([]bool, w.n)
	i := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() && i < w.n {
		switch line := sc.Text(); {
		case strings.HasPrefix(line, "wrote "):
			if want := fmt.Sprintf("wrote %d/%d bytes at offset %d", w.block, w.block, w.offset(i)); line != want {
				return nil, fmt.Errorf("qemu-io output out of step at command %d: %q, want %q", i, line, want)
			}
			ok[i] = true
			i++
		case strings.HasPrefix(line, "write failed"):
			i++
		}
	}
	return ok, sc.Err()
}

// check compares the volume's bytes with what was acknowledged: each block
// holds the last acknowledged write to it (zeros if none was), or one sent
// after it and not acknowledged (it may have landed), nothing older.
func (w qemuWriter) check(t *testing.T, vol []byte, ok []bool) {
	t.Helper()
	for b := range w.blocks {
		want, next := byte(0), b
		for i := b; i < w.n; i += w.blocks {
			if ok[i] {
				want, next = w.pattern(i), i+w.blocks
			}
		}
		allowed := map[byte]bool{want: true}
		for i := next; i < w.n; i += w.blocks {
			allowed[w.pattern(i)] = true
		}
		got := vol[w.offset(b) : w.offset(b)+w.block]
		if !allowed[got[0]] || !bytes.Equal(got, bytes.Repeat(got[:1], len(got))) {
			t.Errorf("writer %d, block %d (offset %d): holds 0x%02x…, want the last acknowledged write 0x%02x or one after it",
				w.g, b, w.offset(b), got[0], want)
			return
		}
	}
}

// TestGracefulStopDuringWrites: a node stopped with SIGTERM while clients
// write through it stops by itself, in time, and every write it
// acknowledged is read back through another node. The clients are real:
// qemu-io writing a mirrored volume over NBD (one write in flight each, so
// the write cut by the stop is known), and S3 PUTs into a bucket with
// copies=2. The node's NBD server stops first and answers the requests in
// flight while the cluster transport and the store still run.
func TestGracefulStopDuringWrites(t *testing.T) {
	if _, err := exec.LookPath("qemu-io"); err != nil {
		t.Fatal("qemu-io is not installed; run scripts/setup.sh")
	}
	c := startCluster(t, localcluster.Spec{})
	ctx := context.Background()
	volumeCmd(t, c, 0, "create", "gstop", "--size", "64MiB", "--copies", "2", "--chunk", "1MiB")
	admin(t, c, 0, "bucket", "create", "gstop", "--copies", "2")
	uri := fmt.Sprintf("nbd://%s/gstop", c.Configs[0].NBD[0])

	writers := make([]qemuWriter, 3)
	outs := make([][]byte, len(writers))
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		acked = map[string][]byte{}
	)
	qctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for g := range writers {
		writers[g] = qemuWriter{base: int64(g) * 16 << 20, block: 64 << 10, blocks: 64, n: 6000, g: g}
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			cmd := exec.CommandContext(qctx, "qemu-io", writers[g].args(uri)...)
			cmd.Dir = t.TempDir()
			outs[g], _ = cmd.CombinedOutput() // it fails once the node is gone
		}(g)
	}
	stopPuts := make(chan struct{})
	for g := range 2 {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			cl := s3Client(c, c.Endpoint(0))
			for i := range 2000 { // bounded; ends soon after the stop
				select {
				case <-stopPuts:
					return
				default:
				}
				key := fmt.Sprintf("g%d/%04d", g, i)
				body := randomBytes(int64(g*10000+i), 256<<10)
				if err := putObject(ctx, cl, "gstop", key, body); err == nil {
					mu.Lock()
					acked[key] = body
					mu.Unlock()
				}
			}
		}(g)
	}
	time.Sleep(3 * time.Second)
	start := time.Now()
	stopErr := c.StopNode(0)
	took := time.Since(start)
	close(stopPuts)
	wg.Wait()
	if stopErr != nil {
		t.Errorf("SIGTERM during writes: %v (after %v)", stopErr, took)
	}
	t.Logf("node1 stopped in %v", took.Round(time.Millisecond))

	// Read the volume through node2, which never served a write.
	dump := filepath.Join(t.TempDir(), "dump")
	runTool(t, "nbdcopy", fmt.Sprintf("nbd://%s/gstop", c.Configs[1].NBD[0]), dump)
	vol, err := os.ReadFile(dump)
	if err != nil || len(vol) != 64<<20 {
		t.Fatalf("nbdcopy of the volume through node2: %d bytes, %v", len(vol), err)
	}
	cut := 0
	for g, w := range writers {
		ok, err := w.acked(outs[g])
		if err != nil {
			t.Fatalf("writer %d: %v", g, err)
		}
		n := 0
		for _, a := range ok {
			if a {
				n++
			}
		}
		if n < w.blocks {
			t.Fatalf("writer %d: only %d writes acknowledged before the stop; the test exercised nothing\n%s", g, n, lastLines(outs[g], 5))
		}
		if n < w.n {
			cut++
		}
		t.Logf("writer %d: %d of %d writes acknowledged", g, n, w.n)
		w.check(t, vol, ok)
	}
	if cut == 0 {
		t.Fatal("every qemu-io writer finished before the stop; the stop cut no write")
	}

	if len(acked) < 5 {
		t.Fatalf("only %d PUTs acknowledged before the stop", len(acked))
	}
	r := s3Client(c, c.Endpoint(1))
	for key, body := range acked {
		got, err := getObject(ctx, r, "gstop", key)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("PUT %s acknowledged before the stop: GET through node2 gives %d bytes, %v", key, len(got), err)
		}
	}
	t.Logf("%d acknowledged PUTs intact", len(acked))
	if _, err := r.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String("gstop")}); err != nil {
		t.Fatalf("bucket after the stop: %v", err)
	}
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
