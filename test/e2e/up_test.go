package e2e

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/slipstream-io/slipstream/internal/localcluster"
)

// TestUpWithRemote runs `slipstream up --remote` as a user would: the
// writeback bucket's objects reach the remote stand-in's files, the cache
// bucket serves what was put straight into the remote, and Ctrl-C stops
// the nodes and the remote.
func TestUpWithRemote(t *testing.T) {
	port, err := localcluster.FreeBasePort("127.0", 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "up", "--remote", "--nodes", "2", "--addrs", "1", "--mountpaths", "1",
		"--port", strconv.Itoa(port), "--data", t.TempDir())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited, stopped := make(chan error, 1), false
	defer func() {
		if !stopped {
			_ = cmd.Process.Signal(syscall.SIGINT)
			<-exited
		}
	}()

	// The banner, up to "Press Ctrl-C", says where everything is.
	var banner strings.Builder
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		banner.WriteString(lines.Text() + "\n")
		if strings.HasPrefix(lines.Text(), "Press Ctrl-C") {
			break
		}
	}
	go func() { _, _ = io.Copy(io.Discard, stdout); exited <- cmd.Wait() }()
	find := func(re string) string {
		t.Helper()
		m := regexp.MustCompile(re).FindStringSubmatch(banner.String())
		if m == nil {
			t.Fatalf("up's banner does not match %s:\n%s\nstderr:\n%s", re, banner.String(), stderr.String())
		}
		return m[1]
	}
	endpoint := find(`AWS_ENDPOINT_URL=(\S+)`)
	root := find(`its objects are the files under (\S+)\)`)
	direct := find(`direct endpoint \(no slow link\): (\S+)`)
	if !strings.Contains(banner.String(), "staged (writeback, copies=2") {
		t.Errorf("the writeback bucket does not keep 2 copies on 2 nodes:\n%s", banner.String())
	}
	client := func(endpoint, key, secret string) *s3.Client {
		return s3.New(s3.Options{BaseEndpoint: aws.String(endpoint), Region: "us-east-1", UsePathStyle: true,
			Credentials: credentials.NewStaticCredentialsProvider(key, secret, "")})
	}
	cl := client(endpoint, "slipstream", "slipstream-secret")
	remote := client(direct, find(`remote credentials: AWS_ACCESS_KEY_ID=(\S+)`), find(`AWS_SECRET_ACCESS_KEY=(\S+); direct`))

	// A write-back PUT is destaged into the remote bucket's files.
	staged := bytes.Repeat([]byte("staged "), 150000)
	if _, err := cl.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("staged"), Key: aws.String("a/obj"), Body: bytes.NewReader(staged)}); err != nil {
		t.Fatalf("PUT to the writeback bucket: %v", err)
	}
	waitFor(t, 30*time.Second, "the write-back object in the remote's files", func() bool {
		b, err := os.ReadFile(filepath.Join(root, "staged", "a", "obj"))
		return err == nil && bytes.Equal(b, staged)
	})

	// An object put straight into the remote is served by the cache bucket.
	cached := bytes.Repeat([]byte("cached "), 150000)
	if _, err := remote.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("remote"), Key: aws.String("cached/b"), Body: bytes.NewReader(cached)}); err != nil {
		t.Fatalf("PUT into the remote: %v", err)
	}
	got, err := cl.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("cached"), Key: aws.String("b")})
	if err != nil {
		t.Fatalf("GET through the cache bucket: %v", err)
	}
	b, err := io.ReadAll(got.Body)
	got.Body.Close()
	if err != nil || !bytes.Equal(b, cached) {
		t.Fatalf("GET through the cache bucket: %d bytes, %v; want the remote's %d", len(b), err, len(cached))
	}

	// Ctrl-C stops the cluster and the remote.
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Fatalf("up after Ctrl-C: %v\n%s", err, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("up did not stop within 60 s of Ctrl-C")
	}
	for _, u := range []string{endpoint, direct} {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		if c, err := net.DialTimeout("tcp", pu.Host, time.Second); err == nil {
			c.Close()
			t.Errorf("%s still answers after up stopped", u)
		}
	}
}
