package e2e

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/localcluster"
	"github.com/slipstream-io/slipstream/internal/node"
	"github.com/slipstream-io/slipstream/internal/peer"
	"github.com/slipstream-io/slipstream/internal/placement"
	"github.com/slipstream-io/slipstream/internal/sysstat"
)

func randomBytes(seed int64, n int) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

func md5hex(b []byte) string {
	s := md5.Sum(b)
	return hex.EncodeToString(s[:])
}

func putObject(ctx context.Context, c *s3.Client, bucket, key string, body []byte) error {
	_, err := c.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body))),
	})
	return err
}

func getObject(ctx context.Context, c *s3.Client, bucket, key string) ([]byte, error) {
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		return nil, err
	}
	defer out.Body.Close()
	return io.ReadAll(out.Body)
}

func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// TestAnyNodeServesAnyObject writes through one node and reads every
// object back through every public address of every node (the gateway
// forwards to the owner; boto3-like clients do not follow redirects).
func TestAnyNodeServesAnyObject(t *testing.T) {
	c := startCluster(t, localcluster.Spec{})
	ctx := context.Background()
	w := s3Client(c, c.Endpoint(0))
	if _, err := w.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("anynode")}); err != nil {
		t.Fatal(err)
	}
	const n = 30
	for i := 0; i < n; i++ {
		if err := putObject(ctx, w, "anynode", fmt.Sprintf("obj/%03d", i), randomBytes(int64(i), 1000+i*997)); err != nil {
			t.Fatal(err)
		}
	}
	for _, ep := range c.Endpoints() {
		r := s3Client(c, ep)
		for i := 0; i < n; i++ {
			got, err := getObject(ctx, r, "anynode", fmt.Sprintf("obj/%03d", i))
			if err != nil {
				t.Fatalf("GET obj/%03d via %s: %v", i, ep, err)
			}
			if want := randomBytes(int64(i), 1000+i*997); !bytes.Equal(got, want) {
				t.Fatalf("GET obj/%03d via %s: wrong content", i, ep)
			}
		}
		list, err := r.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("anynode"), MaxKeys: aws.Int32(7)})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Contents) != 7 || !aws.ToBool(list.IsTruncated) {
			t.Fatalf("list via %s: %d objects, truncated=%v", ep, len(list.Contents), aws.ToBool(list.IsTruncated))
		}
	}
	// Paging through the merged listing returns every key exactly once.
	p := s3.NewListObjectsV2Paginator(w, &s3.ListObjectsV2Input{Bucket: aws.String("anynode"), MaxKeys: aws.Int32(4)})
	var keys []string
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
	}
	if len(keys) != n {
		t.Fatalf("paged listing returned %d keys, want %d", len(keys), n)
	}
	for i, k := range keys {
		if k != fmt.Sprintf("obj/%03d", i) {
			t.Fatalf("key %d is %s", i, k)
		}
	}
	// Node 1 served n PUTs and n GETs: its stats, which its live page
	// charts, count them, and it serves that page.
	var snap sysstat.Snapshot
	resp, err := http.Get(c.Endpoint(0) + sysstat.Path)
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&snap)
	resp.Body.Close()
	if err != nil || snap.Counters["s3_put_requests"] < n || snap.Counters["s3_get_requests"] < n || snap.Counters["s3_received_bytes"] < 1000*n {
		t.Errorf("node 1's stats after %d PUTs and GETs: %v (%v)", n, snap.Counters, err)
	}
	resp, err = http.Get(c.Endpoint(0) + sysstat.PagePath)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(page, []byte(sysstat.Path)) {
		t.Errorf("live page: %d, %d bytes", resp.StatusCode, len(page))
	}
}

// TestAWSCLI drives the cluster with the AWS CLI: mb, cp (multipart), ls,
// cp back, rm, rb.
func TestAWSCLI(t *testing.T) {
	if _, err := exec.LookPath("aws"); err != nil {
		t.Fatal("the AWS CLI is not installed; run scripts/setup.sh")
	}
	c := startCluster(t, localcluster.Spec{})
	dir := t.TempDir()
	src := filepath.Join(dir, "big.bin")
	data := randomBytes(42, 23<<20+12345) // multipart with the CLI's 8 MiB parts
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(node int, args ...string) string {
		t.Helper()
		cmd := exec.Command("aws", args...)
		cmd.Env = awsEnv(c, node)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("aws %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	run(0, "s3", "mb", "s3://cli-bucket")
	run(1, "s3", "cp", "--no-progress", src, "s3://cli-bucket/dir/big.bin")
	out := run(2, "s3", "ls", "s3://cli-bucket", "--recursive")
	if !strings.Contains(out, fmt.Sprint(len(data))) || !strings.Contains(out, "dir/big.bin") {
		t.Fatalf("ls does not show the object: %s", out)
	}
	back := filepath.Join(dir, "back.bin")
	run(2, "s3", "cp", "--no-progress", "s3://cli-bucket/dir/big.bin", back)
	got, err := os.ReadFile(back)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("downloaded copy differs (%v)", err)
	}
	out = run(0, "s3api", "head-object", "--bucket", "cli-bucket", "--key", "dir/big.bin")
	if !strings.Contains(out, `-3\"`) {
		t.Fatalf("multipart ETag should end in -3: %s", out)
	}
	run(1, "s3", "rm", "s3://cli-bucket/dir/big.bin")
	out = run(0, "s3", "ls", "s3://cli-bucket", "--recursive")
	if strings.TrimSpace(out) != "" {
		t.Fatalf("bucket not empty after rm: %q", out)
	}
	run(0, "s3", "rb", "s3://cli-bucket")
}

// TestBoto3 runs a boto3 script that exercises the S3 API through
// different nodes and checks every answer itself.
func TestBoto3(t *testing.T) {
	c := startCluster(t, localcluster.Spec{})
	cmd := exec.Command("python3", "boto3_check.py")
	cmd.Env = append(awsEnv(c, 0), "SECOND_ENDPOINT="+c.Endpoint(2))
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("boto3 checks failed: %v", err)
	}
	if !strings.Contains(string(out), "boto3 checks: all passed") {
		t.Fatal("boto3 script did not report success")
	}
}

// TestCopiesSurviveNodeLoss keeps 2 copies, kills one node with SIGKILL
// and reads every object without a single error.
func TestCopiesSurviveNodeLoss(t *testing.T) {
	c := startCluster(t, localcluster.Spec{})
	ctx := context.Background()
	admin(t, c, 0, "bucket", "create", "two", "--copies", "2")
	w := s3Client(c, c.Endpoint(0))
	const n = 40
	for i := 0; i < n; i++ {
		if err := putObject(ctx, w, "two", fmt.Sprintf("k%02d", i), randomBytes(int64(i), 64<<10)); err != nil {
			t.Fatal(err)
		}
	}
	c.Kill(1) // node2: owner or replica of about two thirds of the objects
	r := s3Client(c, c.Endpoint(2))
	for i := 0; i < n; i++ {
		got, err := getObject(ctx, r, "two", fmt.Sprintf("k%02d", i))
		if err != nil {
			t.Fatalf("GET k%02d with node2 dead: %v", i, err)
		}
		if !bytes.Equal(got, randomBytes(int64(i), 64<<10)) {
			t.Fatalf("GET k%02d with node2 dead: wrong content", i)
		}
	}
	// Writes go on once the cluster has marked the node down.
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := putObject(ctx, w, "two", "after-loss", []byte("still writable"))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("PUT with one node dead: %v", err)
		}
		time.Sleep(300 * time.Millisecond)
	}

	// Most keys are overwritten, and a few deleted, while node2 is down;
	// then it comes back with its old copies. It must drop the overwritten
	// and deleted ones (and only those), and no read may return an old
	// version or a deleted object.
	const overwritten, deleted = 30, 35
	waitFor(t, 30*time.Second, "the map to mark node2 down", func() bool {
		return clusterMap(t, c, 0).Nodes["node2"].State == cluster.StateDown
	})
	for i := 0; i < overwritten; i++ {
		if err := putObject(ctx, w, "two", fmt.Sprintf("k%02d", i), randomBytes(int64(n+i), 64<<10)); err != nil {
			t.Fatalf("overwrite with node2 down: %v", err)
		}
	}
	for i := overwritten; i < deleted; i++ {
		if _, err := w.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("two"), Key: aws.String(fmt.Sprintf("k%02d", i))}); err != nil {
			t.Fatalf("DELETE with node2 down: %v", err)
		}
	}
	if err := c.StartNode(1); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx, 3); err != nil {
		t.Fatal(err)
	}
	m := clusterMap(t, c, 0)
	kept := 0 // keys node2 held and nobody overwrote or deleted
	for i := deleted; i < n; i++ {
		if slices.Contains(placement.Order(m.NodeIDs(), placement.ObjectName("two", fmt.Sprintf("k%02d", i)))[:2], "node2") {
			kept++
		}
	}
	waitFor(t, 30*time.Second, "node2 to drop its overwritten and deleted copies", func() bool {
		return nodeObjects(t, c, 1) == kept
	})
	for _, ep := range []int{1, 0} {
		r := s3Client(c, c.Endpoint(ep))
		for i := 0; i < n; i++ {
			want := randomBytes(int64(i), 64<<10)
			if i < overwritten {
				want = randomBytes(int64(n+i), 64<<10)
			}
			if i >= overwritten && i < deleted {
				if _, err := getObject(ctx, r, "two", fmt.Sprintf("k%02d", i)); apiCode(err) != "NoSuchKey" {
					t.Fatalf("GET of deleted k%02d through %s after node2 came back: %v", i, c.Configs[ep].ID, err)
				}
				continue
			}
			if got, err := getObject(ctx, r, "two", fmt.Sprintf("k%02d", i)); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("GET k%02d through %s after node2 came back: %d bytes, %v; want the last write", i, c.Configs[ep].ID, len(got), err)
			}
		}
	}
}

// nodeObjects is the number of objects node i's store holds.
func nodeObjects(t *testing.T, c *localcluster.Cluster, i int) int {
	return nodeStatus(t, c, i).objects()
}

// TestKillNineDuringPuts SIGKILLs a node while clients PUT, restarts it,
// and checks that every acknowledged object is intact and that no torn
// object is visible anywhere.
func TestKillNineDuringPuts(t *testing.T) {
	c := startCluster(t, localcluster.Spec{})
	ctx := context.Background()
	w := s3Client(c, c.Endpoint(0))
	if _, err := w.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("crash")}); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		acked = map[string]string{} // key -> md5
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			cl := s3Client(c, c.Endpoint(0))
			for i := 0; i < 400; i++ { // bounded
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("g%d/obj%04d", g, i)
				body := randomBytes(int64(g*100000+i), 256<<10)
				if err := putObject(ctx, cl, "crash", key, body); err == nil {
					mu.Lock()
					acked[key] = md5hex(body)
					mu.Unlock()
				}
			}
		}(g)
	}
	time.Sleep(1500 * time.Millisecond)
	c.Kill(1)
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	if err := c.StartNode(1); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := c.WaitReady(rctx, 3); err != nil {
		t.Fatal(err)
	}
	if len(acked) < 10 {
		t.Fatalf("only %d PUTs were acknowledged before the kill; the test did not exercise anything", len(acked))
	}
	r := s3Client(c, c.Endpoint(2))
	for key, sum := range acked {
		got, err := getObject(ctx, r, "crash", key)
		if err != nil {
			t.Fatalf("acknowledged %s lost after kill -9 and restart: %v", key, err)
		}
		if md5hex(got) != sum {
			t.Fatalf("acknowledged %s corrupted after kill -9 and restart", key)
		}
	}
	// Every listed object is whole: its size and content match its ETag.
	p := s3.NewListObjectsV2Paginator(r, &s3.ListObjectsV2Input{Bucket: aws.String("crash")})
	listed := 0
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Contents {
			listed++
			got, err := getObject(ctx, r, "crash", aws.ToString(o.Key))
			if err != nil {
				t.Fatalf("listed %s cannot be read: %v", aws.ToString(o.Key), err)
			}
			if int64(len(got)) != aws.ToInt64(o.Size) || `"`+md5hex(got)+`"` != aws.ToString(o.ETag) {
				t.Fatalf("torn object %s visible: %d bytes, listed %d", aws.ToString(o.Key), len(got), aws.ToInt64(o.Size))
			}
		}
	}
	t.Logf("%d acknowledged PUTs intact, %d objects listed", len(acked), listed)
	// No work files are left behind on the killed node after its restart.
	if tmps := workFiles(c.Configs[1].Mountpaths[0]); len(tmps) > 0 {
		t.Fatalf("work files left after restart: %v", tmps)
	}
}

// TestBadInput checks that malformed requests get clear S3 errors and
// leave nothing behind.
func TestBadInput(t *testing.T) {
	c := startCluster(t, localcluster.Spec{MaxBytes: 8 << 20})
	ctx := context.Background()
	w := s3Client(c, c.Endpoint(0))
	if _, err := w.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("bad")}); err != nil {
		t.Fatal(err)
	}
	t.Run("bad keys", func(t *testing.T) {
		for _, key := range []string{"../etc/passwd", "a/../../b", "a//b", "nul\x00byte", strings.Repeat("k", 1025)} {
			err := putObject(ctx, w, "bad", key, []byte("x"))
			if err == nil {
				t.Errorf("PUT %q accepted", key)
			}
		}
	})
	t.Run("bad bucket name", func(t *testing.T) {
		_, err := w.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("Bad_Name")})
		if apiCode(err) != "InvalidBucketName" {
			t.Errorf("CreateBucket Bad_Name: %v", err)
		}
	})
	t.Run("wrong secret", func(t *testing.T) {
		bad := s3.New(s3.Options{
			BaseEndpoint: aws.String(c.Endpoint(1)), Region: "us-east-1", UsePathStyle: true,
			Credentials: credentials.NewStaticCredentialsProvider(c.Spec.AccessKey, "wrong", ""),
		})
		_, err := getObject(ctx, bad, "bad", "x")
		if apiCode(err) != "SignatureDoesNotMatch" {
			t.Errorf("wrong secret: %v", err)
		}
	})
	t.Run("bad digest", func(t *testing.T) {
		_, err := w.PutObject(ctx, &s3.PutObjectInput{
			Bucket: aws.String("bad"), Key: aws.String("digest"), Body: bytes.NewReader([]byte("hello")),
			ContentMD5: aws.String("XrY7u+Ae7tCTyyK7j1rNww=="), // MD5 of "hello world"
		})
		if apiCode(err) != "BadDigest" {
			t.Errorf("bad Content-MD5: %v", err)
		}
		if _, err := getObject(ctx, w, "bad", "digest"); apiCode(err) != "NoSuchKey" {
			t.Errorf("object stored despite bad digest: %v", err)
		}
	})
	t.Run("truncated body", func(t *testing.T) {
		// A client that promises 1 MiB, sends 1000 bytes and hangs up.
		conn, err := net.Dial("tcp", strings.TrimPrefix(c.Endpoint(0), "http://"))
		if err != nil {
			t.Fatal(err)
		}
		req := presignedPut(t, c, "bad", "truncated", 1<<20)
		fmt.Fprintf(conn, "PUT %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n", req.path, req.host, 1<<20)
		conn.Write(make([]byte, 1000))
		conn.Close()
		time.Sleep(500 * time.Millisecond)
		if _, err := getObject(ctx, w, "bad", "truncated"); apiCode(err) != "NoSuchKey" {
			t.Errorf("truncated upload left an object: %v", err)
		}
		for _, cfg := range c.Configs {
			for _, mp := range cfg.Mountpaths {
				if tmps := workFiles(mp); len(tmps) > 0 {
					t.Errorf("work files left on %s: %v", mp, tmps)
				}
			}
		}
	})
	t.Run("mountpath full", func(t *testing.T) {
		// 8 MiB per mountpath: a 20 MiB object cannot fit anywhere.
		err := putObject(ctx, w, "bad", "huge", make([]byte, 20<<20))
		if err == nil {
			t.Fatal("a 20 MiB object fit in 8 MiB mountpaths")
		}
		if code := apiCode(err); code != "EntityTooLarge" && code != "InsufficientStorage" && code != "ServiceUnavailable" && code != "SlowDown" {
			t.Errorf("full mountpath answered %q (%v)", code, err)
		}
		if err := putObject(ctx, w, "bad", "small", []byte("fits")); err != nil {
			t.Errorf("a small PUT failed after the big one: %v", err)
		}
	})
	t.Run("local bucket full", func(t *testing.T) {
		// A local bucket's objects exist nowhere else: filling the drives
		// (6 mountpaths of 8 MiB) must end in an error, never in evictions.
		var acked []string
		var last error
		for i := 0; i < 60 && last == nil; i++ { // bounded: 60 MiB cannot fit in 48
			key := fmt.Sprintf("fill-%02d", i)
			if last = putObject(ctx, w, "bad", key, bytes.Repeat([]byte{byte(i)}, 1<<20)); last == nil {
				acked = append(acked, key)
			}
		}
		if code := apiCode(last); code != "InsufficientStorage" {
			t.Fatalf("filling a local bucket ended with %q (%v) after %d PUTs", code, last, len(acked))
		}
		for i, key := range acked {
			got, err := getObject(ctx, w, "bad", key)
			if err != nil || !bytes.Equal(got, bytes.Repeat([]byte{byte(i)}, 1<<20)) {
				t.Fatalf("acknowledged %s lost after the drives filled (%d bytes): %v", key, len(got), err)
			}
		}
		t.Logf("%d objects of 1 MiB acknowledged before InsufficientStorage, all intact", len(acked))
	})
}

type rawRequest struct{ host, path string }

// presignedPut returns the request line target of a presigned PUT, for
// tests that write raw HTTP.
func presignedPut(t *testing.T, c *localcluster.Cluster, bucket, key string, size int64) rawRequest {
	t.Helper()
	ps := s3.NewPresignClient(s3Client(c, c.Endpoint(0)))
	req, err := ps.PresignPutObject(context.Background(), &s3.PutObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(key), ContentLength: aws.Int64(size),
	})
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(req.URL)
	if err != nil {
		t.Fatal(err)
	}
	return rawRequest{host: u.Host, path: u.RequestURI()}
}

// workFiles lists the files under a mountpath's tmp/ (its work directories
// stay; what a PUT leaves in them must not).
func workFiles(mp string) []string {
	var out []string
	filepath.WalkDir(filepath.Join(mp, "tmp"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// TestAdminBucketUpdate: an update through the admin API that does not
// send the bucket's creation time (the CLI does; other callers may not)
// changes the bucket and answers with it as stored, creation time kept.
func TestAdminBucketUpdate(t *testing.T) {
	c := startCluster(t, localcluster.Spec{})
	admin(t, c, 0, "bucket", "create", "upd", "--copies", "1")
	before, ok := clusterMap(t, c, 0).Buckets["upd"]
	if !ok {
		t.Fatal("bucket upd not in the map")
	}
	req, err := http.NewRequest(http.MethodPost, c.IntraURL(1)+node.AdminPrefix+"buckets?update=true", strings.NewReader(`{"name":"upd","copies":2}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(peer.SecretHeader, "local-cluster-secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got cluster.BucketProps
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("update: %s %v", resp.Status, err)
	}
	if got.Copies != 2 || !got.Created.Equal(before.Created) {
		t.Errorf("update answered copies %d created %v; want 2, %v (the stored creation time)", got.Copies, got.Created, before.Created)
	}

	// The mode of a bucket that holds objects does not change: a local
	// bucket's objects were never uploaded, and a tiered mode would drop
	// them as clean copies.
	ctx := context.Background()
	if err := putObject(ctx, s3Client(c, c.Endpoint(0)), "upd", "k", []byte("only here")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "admin", "bucket", "set", "upd", "--mode", "cache", "--backend", "fs", "--path", t.TempDir())
	cmd.Env = append(os.Environ(), "SLIPSTREAM_NODE="+c.IntraURL(0), "SLIPSTREAM_SECRET=local-cluster-secret")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "holds objects") {
		t.Fatalf("changing the mode of a bucket with objects: %v\n%s", err, out)
	}
	if got, err := getObject(ctx, s3Client(c, c.Endpoint(1)), "upd", "k"); err != nil || string(got) != "only here" {
		t.Fatalf("the object after the refused change: %q %v", got, err)
	}
}

// TestPartNumberReads: an object the AWS CLI uploads in parts into a
// bucket with copies=2 is read by part number (as the transfer managers
// that download by part do) from either copy: each copy keeps how the
// upload cut the object. Each node in turn is down while another serves.
func TestPartNumberReads(t *testing.T) {
	if _, err := exec.LookPath("aws"); err != nil {
		t.Fatal("the AWS CLI is not installed; run scripts/setup.sh")
	}
	c := startCluster(t, localcluster.Spec{})
	admin(t, c, 0, "bucket", "create", "parts", "--copies", "2")
	dir := t.TempDir()
	src := filepath.Join(dir, "big.bin")
	data := randomBytes(7, 20<<20+999) // the CLI's 8 MiB parts: 8, 8, 4 MiB + 999
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cli := exec.Command("aws", "s3", "cp", "--no-progress", src, "s3://parts/big.bin")
	cli.Env = awsEnv(c, 1)
	if out, err := cli.CombinedOutput(); err != nil {
		t.Fatalf("aws s3 cp: %v\n%s", err, out)
	}
	// The CLI reads part 2 back.
	back := filepath.Join(dir, "part2")
	cli = exec.Command("aws", "s3api", "get-object", "--bucket", "parts", "--key", "big.bin", "--part-number", "2", back)
	cli.Env = awsEnv(c, 2)
	out, err := cli.CombinedOutput()
	if err != nil {
		t.Fatalf("aws s3api get-object --part-number 2: %v\n%s", err, out)
	}
	if got, _ := os.ReadFile(back); !bytes.Equal(got, data[8<<20:16<<20]) || !strings.Contains(string(out), `"PartsCount": 3`) {
		t.Fatalf("part 2 through the CLI: %d bytes\n%s", len(got), out)
	}
	ctx := context.Background()
	for down := range 3 {
		c.Kill(down)
		cl := s3Client(c, c.Endpoint((down+1)%3))
		for n, want := range [][]byte{data[:8<<20], data[8<<20 : 16<<20], data[16<<20:]} {
			o, err := cl.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("parts"), Key: aws.String("big.bin"), PartNumber: aws.Int32(int32(n + 1))})
			if err != nil {
				t.Fatalf("node%d down: GET part %d: %v", down+1, n+1, err)
			}
			got, err := io.ReadAll(o.Body)
			o.Body.Close()
			if err != nil || !bytes.Equal(got, want) || aws.ToInt32(o.PartsCount) != 3 {
				t.Fatalf("node%d down: GET part %d: %d bytes (want %d), parts count %v, %v", down+1, n+1, len(got), len(want), o.PartsCount, err)
			}
		}
		if err := c.StartNode(down); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitReady(ctx, 3); err != nil {
			t.Fatal(err)
		}
	}
}
