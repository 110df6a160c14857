package netx

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/slipstream-io/slipstream/internal/testbin"
)

// startVersity starts a real S3 server (versitygw over a temp directory)
// listening on one port of each of the given loopback hosts, and stops it
// by PID at the end of the test.
func startVersity(t *testing.T, access, secret string, hosts ...string) []string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: starts an S3 server")
	}
	bin := testbin.Tool(t, "versitygw")
	var addrs []string
	for try := 0; ; try++ {
		l, err := net.Listen("tcp", hosts[0]+":0")
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(l.Addr().String())
		l.Close()
		addrs = addrs[:0]
		free := true
		for _, h := range hosts {
			a := net.JoinHostPort(h, port)
			if l, err := net.Listen("tcp", a); err != nil {
				free = false
			} else {
				l.Close()
			}
			addrs = append(addrs, a)
		}
		if free || try > 20 {
			break
		}
	}
	args := []string{"--access", access, "--secret", secret}
	for _, a := range addrs {
		args = append(args, "--port", a)
	}
	cmd := exec.Command(bin, append(args, "posix", t.TempDir())...)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start versitygw: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	deadline := time.Now().Add(15 * time.Second)
	for _, a := range addrs {
		for {
			c, err := net.DialTimeout("tcp", a, 200*time.Millisecond)
			if err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("versitygw did not listen on %s: %s", a, logs.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return addrs
}

// TestS3ClientSpreads: the AWS SDK's S3 client, given the transport as its
// HTTP client and a node's name as endpoint, spreads its requests over all
// of the node's addresses and both local interfaces, and SigV4 signatures
// (which cover the Host header) stay valid.
func TestS3ClientSpreads(t *testing.T) {
	const access, secret = "netxkey", "netxsecret"
	addrs := startVersity(t, access, secret, "127.0.0.2", "127.0.0.3")
	tr := newTestTransport(t, Config{LocalAddrs: []string{"127.0.0.5", "127.0.0.6"}})
	tr.SetPeers([]Peer{{ID: "node-a", Addrs: addrs}})
	cl := s3.New(s3.Options{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider(access, secret, ""),
		HTTPClient:   &http.Client{Transport: tr},
		BaseEndpoint: aws.String("http://node-a"),
		UsePathStyle: true,
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cl.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("spread")}); err != nil {
		t.Fatal(err)
	}
	body := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, 100<<10+i) }
	const objects = 8
	for i := 0; i < objects; i++ {
		if _, err := cl.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("spread"), Key: aws.String(fmt.Sprint("k", i)),
			Body: bytes.NewReader(body(i))}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for j := 0; j < 10; j++ {
				i := (w + j) % objects
				out, err := cl.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("spread"), Key: aws.String(fmt.Sprint("k", i))})
				if err != nil {
					t.Error(err)
					return
				}
				got, err := io.ReadAll(out.Body)
				out.Body.Close()
				if err != nil || !bytes.Equal(got, body(i)) {
					t.Errorf("k%d: %d bytes, err %v", i, len(got), err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	perRemote, perLocal := map[string]uint64{}, map[string]uint64{}
	for _, p := range tr.Pairs() {
		perRemote[p.Remote] += p.Requests
		perLocal[p.Local] += p.Requests
		if p.Errors != 0 {
			t.Errorf("pair errors: %+v", p)
		}
	}
	t.Logf("requests per address %v, per local interface %v", perRemote, perLocal)
	for _, a := range addrs {
		if perRemote[a] < 10 {
			t.Errorf("address %s got %d requests", a, perRemote[a])
		}
	}
	for _, l := range []string{"127.0.0.5", "127.0.0.6"} {
		if perLocal[l] < 10 {
			t.Errorf("local %s sent %d requests", l, perLocal[l])
		}
	}
}
