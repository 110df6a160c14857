package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/config"
	"github.com/slipstream-io/slipstream/internal/localcluster"
	"github.com/slipstream-io/slipstream/internal/placement"
	"github.com/slipstream-io/slipstream/internal/remotesim"
)

// startRemote runs a real S3 server behind a slow link as the remote
// bucket "remote".
func startRemote(t *testing.T, cfg remotesim.Config) (*remotesim.Remote, *s3.Client) {
	t.Helper()
	cfg.Dir = t.TempDir()
	r, err := remotesim.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	if err := r.CreateBucket("remote"); err != nil {
		t.Fatal(err)
	}
	direct := s3.New(s3.Options{
		BaseEndpoint: aws.String(r.DirectEndpoint), Region: "us-east-1", UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(r.AccessKey, r.SecretKey, ""),
	})
	return r, direct
}

// tieredBucket creates a bucket of the given mode over the remote.
func tieredBucket(t *testing.T, c *localcluster.Cluster, r *remotesim.Remote, name, mode string, extra ...string) {
	t.Helper()
	args := append([]string{"bucket", "create", name, "--mode", mode, "--backend", "s3", "--endpoint", r.Endpoint,
		"--remote-bucket", "remote", "--prefix", name + "/", "--access-key", r.AccessKey, "--secret-key", r.SecretKey}, extra...)
	admin(t, c, 0, args...)
}

func clusterMap(t *testing.T, c *localcluster.Cluster, i int) *cluster.Map {
	t.Helper()
	resp, err := c.IntraClient().Get(c.IntraURL(i) + "/cluster/map")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m cluster.Map
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	return &m
}

// nodeIndex maps a node ID ("node2") to its index in the local cluster.
func nodeIndex(c *localcluster.Cluster, id string) int {
	for i, cfg := range c.Configs {
		if cfg.ID == id {
			return i
		}
	}
	return -1
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestCacheBucket covers the read path over a remote bucket: cold then
// warm, single flight, range on a cold object, listing the remote, write-
// through, and staleness after a remote overwrite.
func TestCacheBucket(t *testing.T) {
	r, direct := startRemote(t, remotesim.Config{Rate: 200 << 20, Latency: 30 * time.Millisecond})
	c := startCluster(t, localcluster.Spec{})
	ctx := context.Background()
	tieredBucket(t, c, r, "cached", "cache")
	tieredBucket(t, c, r, "fresh", "cache", "--validate", "always")
	objs := map[string][]byte{}
	for i := 0; i < 6; i++ {
		key := fmt.Sprintf("cached/ds/%02d", i)
		objs[key] = randomBytes(int64(100+i), 3<<20)
		if err := putObject(ctx, direct, "remote", key, objs[key]); err != nil {
			t.Fatal(err)
		}
	}
	cl := s3Client(c, c.Endpoint(1))

	t.Run("cold then warm", func(t *testing.T) {
		before := r.ObjectGets()
		for i := 0; i < 6; i++ {
			got, err := getObject(ctx, cl, "cached", fmt.Sprintf("ds/%02d", i))
			if err != nil || !bytes.Equal(got, objs[fmt.Sprintf("cached/ds/%02d", i)]) {
				t.Fatalf("cold GET ds/%02d: %v", i, err)
			}
		}
		cold := r.ObjectGets() - before
		if cold < 6 {
			t.Fatalf("6 cold GETs made %d backend GETs", cold)
		}
		for _, ep := range c.Endpoints() {
			for i := 0; i < 6; i++ {
				got, err := getObject(ctx, s3Client(c, ep), "cached", fmt.Sprintf("ds/%02d", i))
				if err != nil || !bytes.Equal(got, objs[fmt.Sprintf("cached/ds/%02d", i)]) {
					t.Fatalf("warm GET ds/%02d via %s: %v", i, ep, err)
				}
			}
		}
		if warm := r.ObjectGets() - before - cold; warm != 0 {
			t.Fatalf("warm GETs went to the backend %d times", warm)
		}
	})

	t.Run("single flight", func(t *testing.T) {
		body := randomBytes(7, 24<<20)
		if err := putObject(ctx, direct, "remote", "cached/big", body); err != nil {
			t.Fatal(err)
		}
		before := r.ObjectGets()
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				got, err := getObject(ctx, s3Client(c, c.Endpoints()[i%len(c.Endpoints())]), "cached", "big")
				if err == nil && !bytes.Equal(got, body) {
					err = fmt.Errorf("reader %d got wrong bytes", i)
				}
				errs <- err
			}(i)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if n := r.ObjectGets() - before; n != 1 {
			t.Fatalf("8 concurrent cold GETs of one object made %d backend GETs, want 1", n)
		}
	})

	t.Run("range on cold object", func(t *testing.T) {
		body := randomBytes(8, 10<<20)
		if err := putObject(ctx, direct, "remote", "cached/ranged", body); err != nil {
			t.Fatal(err)
		}
		out, err := cl.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("cached"), Key: aws.String("ranged"), Range: aws.String("bytes=5000000-5000099")})
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		buf.ReadFrom(out.Body)
		out.Body.Close()
		if !bytes.Equal(buf.Bytes(), body[5000000:5000100]) {
			t.Fatal("range of a cold object returned wrong bytes")
		}
		// The whole object is filled in the background: soon a full GET
		// needs no backend request.
		time.Sleep(2 * time.Second)
		before := r.ObjectGets()
		got, err := getObject(ctx, cl, "cached", "ranged")
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("full GET after the range: %v", err)
		}
		if n := r.ObjectGets() - before; n != 0 {
			t.Errorf("the background fill did not land: a full GET made %d backend GETs", n)
		}
	})

	t.Run("list shows the remote", func(t *testing.T) {
		if err := putObject(ctx, direct, "remote", "cached/never-read", []byte("x")); err != nil {
			t.Fatal(err)
		}
		out, err := cl.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("cached")})
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, o := range out.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
		if !strings.Contains(strings.Join(keys, ","), "never-read") || len(keys) < 9 {
			t.Fatalf("listing of the cache bucket: %v", keys)
		}
	})

	t.Run("write through", func(t *testing.T) {
		if err := putObject(ctx, cl, "cached", "written", []byte("through")); err != nil {
			t.Fatal(err)
		}
		got, err := getObject(ctx, direct, "remote", "cached/written")
		if err != nil || string(got) != "through" {
			t.Fatalf("write-through PUT is not in the backend when acknowledged: %q %v", got, err)
		}
	})

	t.Run("delete", func(t *testing.T) {
		if err := putObject(ctx, cl, "cached", "gone", []byte("written, then deleted")); err != nil {
			t.Fatal(err)
		}
		before := r.ObjectDeletes()
		if _, err := cl.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("cached"), Key: aws.String("gone")}); err != nil {
			t.Fatal(err)
		}
		// The owner deletes the backend's copy; the other nodes only theirs.
		if n := r.ObjectDeletes() - before; n != 1 {
			t.Errorf("one DELETE made %d backend DELETEs, want 1", n)
		}
		if _, err := getObject(ctx, direct, "remote", "cached/gone"); err == nil {
			t.Error("deleted object still in the backend")
		}
		for _, ep := range c.Endpoints() {
			if _, err := getObject(ctx, s3Client(c, ep), "cached", "gone"); err == nil {
				t.Errorf("deleted object served via %s", ep)
			}
		}
	})

	t.Run("stale after remote overwrite", func(t *testing.T) {
		if err := putObject(ctx, direct, "remote", "fresh/obj", []byte("version one")); err != nil {
			t.Fatal(err)
		}
		if got, err := getObject(ctx, cl, "fresh", "obj"); err != nil || string(got) != "version one" {
			t.Fatalf("first GET: %q %v", got, err)
		}
		if err := putObject(ctx, direct, "remote", "fresh/obj", []byte("version two!")); err != nil {
			t.Fatal(err)
		}
		if got, err := getObject(ctx, cl, "fresh", "obj"); err != nil || string(got) != "version two!" {
			t.Fatalf("GET after a remote overwrite with validate=always: %q %v", got, err)
		}
	})
}

// TestWritebackSurvivesOwnerDeath writes back with copies=2 while the
// remote is unreachable, kills the owner of an object, restores the link,
// and waits for the replica holder to destage it.
func TestWritebackSurvivesOwnerDeath(t *testing.T) {
	r, direct := startRemote(t, remotesim.Config{})
	c := startCluster(t, localcluster.Spec{})
	ctx := context.Background()
	tieredBucket(t, c, r, "wback", "writeback", "--copies", "2")
	r.SetDown(true)
	cl := s3Client(c, c.Endpoint(0))
	// A key whose owner is not node1 (the node the client talks to).
	key, owner := keyNotOwnedBy(clusterMap(t, c, 0), "wback", "node1")
	body := randomBytes(99, 2<<20)
	if err := putObject(ctx, cl, "wback", key, body); err != nil {
		t.Fatalf("writeback PUT with the remote down: %v", err)
	}
	if _, err := getObject(ctx, direct, "remote", "wback/"+key); err == nil {
		t.Fatal("the object reached the remote while its link was down")
	}
	c.Kill(nodeIndex(c, owner))
	r.SetDown(false)
	waitFor(t, 60*time.Second, "the replica holder to destage "+key, func() bool {
		got, err := getObject(ctx, direct, "remote", "wback/"+key)
		return err == nil && bytes.Equal(got, body)
	})
	// And the cluster still serves it.
	got, err := getObject(ctx, cl, "wback", key)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("GET after the owner died: %v", err)
	}

	// The key is rewritten while the owner is down; then the owner comes
	// back with its old journal and its old copy. The remote keeps the
	// newer write and the cluster serves it.
	waitFor(t, 30*time.Second, "the map to mark "+owner+" down", func() bool {
		return clusterMap(t, c, 0).Nodes[owner].State == cluster.StateDown
	})
	newer := randomBytes(100, 1<<20)
	if err := putObject(ctx, cl, "wback", key, newer); err != nil {
		t.Fatalf("PUT while the owner is down: %v", err)
	}
	waitFor(t, 60*time.Second, "the newer write to reach the remote", func() bool {
		got, err := getObject(ctx, direct, "remote", "wback/"+key)
		return err == nil && bytes.Equal(got, newer)
	})
	if err := c.StartNode(nodeIndex(c, owner)); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx, 3); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, owner+" to work through its old backlog", func() bool {
		return destageBacklog(t, c, nodeIndex(c, owner)) == 0
	})
	if got, err := getObject(ctx, direct, "remote", "wback/"+key); err != nil || !bytes.Equal(got, newer) {
		t.Fatalf("the returning owner rolled the remote back (%v)", err)
	}
	if got, err := getObject(ctx, cl, "wback", key); err != nil || !bytes.Equal(got, newer) {
		t.Fatalf("GET after the owner returned: %d bytes, %v; want the newer write", len(got), err)
	}
}

// keyNotOwnedBy picks a key of bucket whose first owner in m is not node,
// and returns it with that owner.
func keyNotOwnedBy(m *cluster.Map, bucket, node string) (key, owner string) {
	for i := 0; ; i++ {
		key = fmt.Sprintf("obj-%d", i)
		if owner = placement.Order(m.NodeIDs(), placement.ObjectName(bucket, key))[0]; owner != node {
			return key, owner
		}
	}
}

// destageBacklog is the number of write-back operations node i has not
// destaged yet.
func destageBacklog(t *testing.T, c *localcluster.Cluster, i int) int {
	return nodeStatus(t, c, i).Extra.Destage.Objects
}

// TestWritebackJournalSurvivesRestart acknowledges write-back PUTs while
// the remote is down, restarts every node, and checks that the journal
// destages them, in order, once the link is back.
func TestWritebackJournalSurvivesRestart(t *testing.T) {
	r, direct := startRemote(t, remotesim.Config{})
	c := startCluster(t, localcluster.Spec{})
	ctx := context.Background()
	tieredBucket(t, c, r, "jrnl", "writeback")
	r.SetDown(true)
	cl := s3Client(c, c.Endpoint(0))
	for i := 0; i < 6; i++ {
		if err := putObject(ctx, cl, "jrnl", fmt.Sprintf("k%d", i), []byte(fmt.Sprintf("first %d", i))); err != nil {
			t.Fatal(err)
		}
	}
	// Overwrite k0, delete k1: the backend must end with the last write.
	if err := putObject(ctx, cl, "jrnl", "k0", []byte("second 0")); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("jrnl"), Key: aws.String("k1")}); err != nil {
		t.Fatal(err)
	}
	for i := range c.Configs {
		if err := c.StopNode(i); err != nil {
			t.Error(err)
		}
	}
	for i := range c.Configs {
		if err := c.StartNode(i); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.WaitReady(ctx, 3); err != nil {
		t.Fatal(err)
	}
	r.SetDown(false)
	waitFor(t, 60*time.Second, "the journal to destage after restart", func() bool {
		for i := 2; i < 6; i++ {
			if got, err := getObject(ctx, direct, "remote", fmt.Sprintf("jrnl/k%d", i)); err != nil || string(got) != fmt.Sprintf("first %d", i) {
				return false
			}
		}
		got, err := getObject(ctx, direct, "remote", "jrnl/k0")
		return err == nil && string(got) == "second 0"
	})
	if _, err := getObject(ctx, direct, "remote", "jrnl/k1"); apiCode(err) != "NoSuchKey" {
		t.Fatalf("a delete was not destaged as a delete: %v", err)
	}
}

// TestDirtyCapBackPressure caps dirty bytes: with the remote down, PUTs
// beyond the cap are refused with SlowDown instead of filling the disks.
func TestDirtyCapBackPressure(t *testing.T) {
	r, _ := startRemote(t, remotesim.Config{})
	c := startCluster(t, localcluster.Spec{Nodes: 3, ExtraConfig: func(i int, n *config.Node) {
		n.Tier.DirtyCap = 3 << 20
		n.Tier.DirtyWait = time.Second
	}})
	ctx := context.Background()
	tieredBucket(t, c, r, "capped", "writeback")
	r.SetDown(true)
	cl := s3.New(s3.Options{
		BaseEndpoint: aws.String(c.Endpoint(0)), Region: "us-east-1", UsePathStyle: true,
		Credentials:      credentials.NewStaticCredentialsProvider(c.Spec.AccessKey, c.Spec.SecretKey, ""),
		RetryMaxAttempts: 1,
	})
	ok, slow := 0, 0
	for i := 0; i < 20 && slow == 0; i++ {
		err := putObject(ctx, cl, "capped", fmt.Sprintf("o%d", i), make([]byte, 1<<20))
		switch {
		case err == nil:
			ok++
		case apiCode(err) == "SlowDown":
			slow++
		default:
			t.Fatalf("PUT %d: %v", i, err)
		}
	}
	// 3 nodes with a 3 MiB cap each hold at most 9 MiB of dirty data.
	if slow == 0 || ok > 9 || ok == 0 {
		t.Fatalf("dirty cap: %d PUTs accepted, %d refused with SlowDown", ok, slow)
	}
}

// TestCacheEviction reads a dataset three times the size of the cache; the
// store evicts clean objects and every GET still succeeds.
func TestCacheEviction(t *testing.T) {
	r, direct := startRemote(t, remotesim.Config{})
	c := startCluster(t, localcluster.Spec{MaxBytes: 12 << 20}) // 3 nodes x 2 mountpaths x 12 MiB = 72 MiB
	ctx := context.Background()
	tieredBucket(t, c, r, "evicting", "cache")
	const n = 50 // 50 x 4 MiB = 200 MiB
	for i := 0; i < n; i++ {
		if err := putObject(ctx, direct, "remote", fmt.Sprintf("evicting/o%02d", i), randomBytes(int64(i), 4<<20)); err != nil {
			t.Fatal(err)
		}
	}
	cl := s3Client(c, c.Endpoint(0))
	for pass := 0; pass < 2; pass++ {
		for i := 0; i < n; i++ {
			got, err := getObject(ctx, cl, "evicting", fmt.Sprintf("o%02d", i))
			if err != nil || !bytes.Equal(got, randomBytes(int64(i), 4<<20)) {
				t.Fatalf("pass %d GET o%02d: %v", pass, i, err)
			}
		}
	}
	out := admin(t, c, 0, "status", "--json")
	var st []struct {
		Status struct {
			Mountpaths []struct {
				Path  string
				Bytes int64
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("admin status --json: %v\n%s", err, out)
	}
	for _, s := range st {
		for _, mp := range s.Status.Mountpaths {
			if mp.Bytes > 12<<20 {
				t.Errorf("mountpath %s holds %d bytes, over its 12 MiB cap", mp.Path, mp.Bytes)
			}
		}
	}
}

// TestPrefetchAndEvict fills a cache bucket with the admin prefetch job
// (every node fills the keys it owns), reads it without touching the
// remote, then evicts it.
func TestPrefetchAndEvict(t *testing.T) {
	r, direct := startRemote(t, remotesim.Config{})
	c := startCluster(t, localcluster.Spec{})
	ctx := context.Background()
	tieredBucket(t, c, r, "prefetched", "cache")
	for i := 0; i < 12; i++ {
		if err := putObject(ctx, direct, "remote", fmt.Sprintf("prefetched/p/%02d", i), randomBytes(int64(i), 512<<10)); err != nil {
			t.Fatal(err)
		}
	}
	if err := putObject(ctx, direct, "remote", "prefetched/other", []byte("not in the prefix")); err != nil {
		t.Fatal(err)
	}
	out := admin(t, c, 1, "prefetch", "prefetched", "--prefix", "p/")
	if !strings.Contains(out, "12 objects (12 fetched") {
		t.Fatalf("prefetch output: %s", out)
	}
	before := r.ObjectGets()
	cl := s3Client(c, c.Endpoint(2))
	for i := 0; i < 12; i++ {
		if got, err := getObject(ctx, cl, "prefetched", fmt.Sprintf("p/%02d", i)); err != nil || !bytes.Equal(got, randomBytes(int64(i), 512<<10)) {
			t.Fatalf("GET p/%02d after prefetch: %v", i, err)
		}
	}
	if n := r.ObjectGets() - before; n != 0 {
		t.Fatalf("GETs after prefetch went to the remote %d times", n)
	}
	out = admin(t, c, 0, "evict", "prefetched", "--prefix", "p/")
	if !strings.Contains(out, "evicted 12 objects") {
		t.Fatalf("evict output: %s", out)
	}
	if _, err := getObject(ctx, cl, "prefetched", "p/00"); err != nil {
		t.Fatal(err)
	}
	if n := r.ObjectGets() - before; n != 1 {
		t.Fatalf("a GET after evict made %d remote GETs, want 1", n)
	}
}

// TestWritebackListingHidesPendingDeletes deletes keys of a write-back
// bucket while the remote refuses writes, so the deletes stay pending on
// their owners, and lists the bucket through every node: no node lists a
// deleted key, or a "folder" whose every key is deleted, whichever node
// owns the delete. Paged listings do not skip keys either.
func TestWritebackListingHidesPendingDeletes(t *testing.T) {
	r, direct := startRemote(t, remotesim.Config{})
	c := startCluster(t, localcluster.Spec{})
	ctx := context.Background()
	tieredBucket(t, c, r, "lst", "writeback")
	for _, k := range []string{"dir/only", "gone", "half/a", "half/b", "kept", "more/x"} {
		if err := putObject(ctx, direct, "remote", "lst/"+k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	r.SetReadOnly(true)
	cl := s3Client(c, c.Endpoint(0))
	m := clusterMap(t, c, 0)
	owners := map[string]bool{}
	for _, k := range []string{"dir/only", "gone", "half/a", "more/x"} {
		owners[placement.Order(m.NodeIDs(), placement.ObjectName("lst", k))[0]] = true
		if _, err := cl.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("lst"), Key: aws.String(k)}); err != nil {
			t.Fatalf("DELETE %s with the remote refusing writes: %v", k, err)
		}
	}
	if err := putObject(ctx, cl, "lst", "more/y", []byte("new")); err != nil {
		t.Fatal(err)
	}
	if len(owners) < 2 {
		t.Logf("the deletes have %d owner(s)", len(owners))
	}
	check := func(when string) {
		t.Helper()
		for i := range c.Configs {
			ci := s3Client(c, c.Endpoint(i))
			out, err := ci.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("lst"), Delimiter: aws.String("/")})
			if err != nil {
				t.Fatalf("%s: list through node %d: %v", when, i, err)
			}
			var objs, pfx []string
			for _, o := range out.Contents {
				objs = append(objs, aws.ToString(o.Key))
			}
			for _, p := range out.CommonPrefixes {
				pfx = append(pfx, aws.ToString(p.Prefix))
			}
			if strings.Join(objs, ",") != "kept" || strings.Join(pfx, ",") != "half/,more/" {
				t.Errorf("%s: delimited listing through node %d: objects %q, prefixes %q; want [kept] and [half/ more/]", when, i, objs, pfx)
			}
			var all []string
			p := s3.NewListObjectsV2Paginator(ci, &s3.ListObjectsV2Input{Bucket: aws.String("lst"), MaxKeys: aws.Int32(1)})
			for pages := 0; p.HasMorePages() && pages < 20; pages++ {
				page, err := p.NextPage(ctx)
				if err != nil {
					t.Fatalf("%s: paged listing through node %d: %v", when, i, err)
				}
				for _, o := range page.Contents {
					all = append(all, aws.ToString(o.Key))
				}
			}
			if strings.Join(all, ",") != "half/b,kept,more/y" {
				t.Errorf("%s: paged listing through node %d: %q; want half/b,kept,more/y", when, i, all)
			}
		}
	}
	check("deletes pending")
	if n := destageBacklogAll(t, c); n == 0 {
		t.Fatal("nothing pending while the remote refused writes: the test did not test pending deletes")
	}
	r.SetReadOnly(false)
	waitFor(t, 60*time.Second, "the deletes to reach the remote", func() bool { return destageBacklogAll(t, c) == 0 })
	check("deletes destaged")
}

// destageBacklogAll is the number of write-back operations not destaged,
// over every node.
func destageBacklogAll(t *testing.T, c *localcluster.Cluster) int {
	n := 0
	for i := range c.Configs {
		n += destageBacklog(t, c, i)
	}
	return n
}

// TestRemoteRefusingCredentials: a cache bucket whose remote refuses the
// cluster's credentials answers clients 403 AccessDenied, which they do
// not retry, rather than a 503 that tells them to retry for ever.
func TestRemoteRefusingCredentials(t *testing.T) {
	r, direct := startRemote(t, remotesim.Config{})
	c := startCluster(t, localcluster.Spec{})
	ctx := context.Background()
	if err := putObject(ctx, direct, "remote", "denied/k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	// Such a bucket is refused at creation (its backend cannot be listed);
	// here the remote stops taking the key later, as when it is rotated.
	bucket := cluster.BucketProps{Name: "denied", Mode: cluster.ModeCache, Copies: 1, Backend: cluster.BackendSpec{Kind: "s3",
		Endpoint: r.Endpoint, Bucket: "remote", Prefix: "denied/", PathStyle: true, AccessKey: r.AccessKey, SecretKey: "not-the-secret"}}
	body, _ := json.Marshal(bucket)
	create := func() int {
		req, _ := http.NewRequest(http.MethodPost, c.IntraURL(0)+"/admin/v1/buckets", bytes.NewReader(body))
		req.Header.Set("X-Slipstream-Secret", c.Configs[0].Secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := create(); code != http.StatusBadRequest {
		t.Fatalf("creating a bucket whose remote refuses the credentials: HTTP %d, want 400", code)
	}
	admin(t, c, 0, "bucket", "create", "denied", "--no-check", "--mode", "cache", "--backend", "s3", "--endpoint", r.Endpoint,
		"--remote-bucket", "remote", "--prefix", "denied/", "--access-key", r.AccessKey, "--secret-key", "not-the-secret")
	cl := s3Client(c, c.Endpoint(0))
	waitFor(t, 10*time.Second, "node 1's map to hold the bucket", func() bool {
		_, err := cl.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String("denied")})
		return err == nil
	})
	_, err := getObject(ctx, cl, "denied", "k")
	var re *awshttp.ResponseError
	var ae smithy.APIError
	if !errors.As(err, &re) || re.HTTPStatusCode() != http.StatusForbidden || !errors.As(err, &ae) || ae.ErrorCode() != "AccessDenied" {
		t.Fatalf("GET through a remote that refuses the credentials: %v; want 403 AccessDenied", err)
	}
	if _, err := cl.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("denied")}); !errors.As(err, &ae) || ae.ErrorCode() != "AccessDenied" {
		t.Fatalf("listing through a remote that refuses the credentials: %v; want AccessDenied", err)
	}
}

// TestStoredHeaders: Cache-Control, Content-Disposition, Content-Encoding,
// Content-Language and Expires stay with an object on every path: a local
// bucket's copies on other nodes, a write-back PUT destaged to the remote,
// and a cold GET of an object the remote has with them.
func TestStoredHeaders(t *testing.T) {
	c := startCluster(t, localcluster.Spec{})
	r, direct := startRemote(t, remotesim.Config{})
	ctx := t.Context()
	exp := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	put := func(cl *s3.Client, bucket, key string) {
		t.Helper()
		if _, err := cl.PutObject(ctx, &s3.PutObjectInput{
			Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader("gzipped bytes"),
			ContentEncoding: aws.String("gzip"), CacheControl: aws.String("max-age=3600"),
			ContentDisposition: aws.String(`attachment; filename="page.html"`), ContentLanguage: aws.String("de"),
			Expires: aws.Time(exp),
		}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string, cl *s3.Client, bucket, key string) {
		t.Helper()
		h, err := cl.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		body, err := io.ReadAll(h.Body)
		h.Body.Close()
		if err != nil || string(body) != "gzipped bytes" {
			t.Errorf("%s: body %q, %v", what, body, err)
		}
		got := []string{aws.ToString(h.ContentEncoding), aws.ToString(h.CacheControl), aws.ToString(h.ContentDisposition),
			aws.ToString(h.ContentLanguage), aws.ToString(h.ExpiresString)}
		want := []string{"gzip", "max-age=3600", `attachment; filename="page.html"`, "de", exp.Format(http.TimeFormat)}
		if !slices.Equal(got, want) {
			t.Errorf("%s: headers %q, want %q", what, got, want)
		}
	}

	admin(t, c, 0, "bucket", "create", "loc", "--copies", "3")
	put(s3Client(c, c.Endpoint(0)), "loc", "k")
	for i := range 3 {
		check(fmt.Sprintf("local bucket through node%d", i+1), s3Client(c, c.Endpoint(i)), "loc", "k")
	}

	tieredBucket(t, c, r, "wbk", "writeback", "--copies", "2")
	put(s3Client(c, c.Endpoint(1)), "wbk", "k")
	waitFor(t, 30*time.Second, "the write-back PUT to reach the remote", func() bool {
		_, err := direct.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("remote"), Key: aws.String("wbk/k")})
		return err == nil
	})
	check("the destaged copy in the remote", direct, "remote", "wbk/k")

	tieredBucket(t, c, r, "cch", "cache")
	put(direct, "remote", "cch/k")
	check("a cold GET of a cache bucket", s3Client(c, c.Endpoint(2)), "cch", "k")
	check("a warm GET of a cache bucket", s3Client(c, c.Endpoint(2)), "cch", "k")
}

// TestCacheMultipartCompletion: an object uploaded in parts into a cache
// bucket (by the AWS CLI, which cuts files over 8 MiB into parts) is in
// the remote when the completion is acknowledged. A completion that the
// remote refuses fails, and nothing changes: the client completes the same
// upload again once the remote takes writes, and gets the object.
func TestCacheMultipartCompletion(t *testing.T) {
	if _, err := exec.LookPath("aws"); err != nil {
		t.Fatal("the AWS CLI is not installed; run scripts/setup.sh")
	}
	r, direct := startRemote(t, remotesim.Config{})
	c := startCluster(t, localcluster.Spec{})
	ctx := context.Background()
	tieredBucket(t, c, r, "cached", "cache")

	dir := t.TempDir()
	src := filepath.Join(dir, "big.bin")
	data := randomBytes(11, 20<<20+7)
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cli := exec.Command("aws", "s3", "cp", "--no-progress", src, "s3://cached/big.bin")
	cli.Env = awsEnv(c, 1)
	if out, err := cli.CombinedOutput(); err != nil {
		t.Fatalf("aws s3 cp: %v\n%s", err, out)
	}
	if got, err := getObject(ctx, direct, "remote", "cached/big.bin"); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the remote after aws s3 cp: %d bytes, %v", len(got), err)
	}

	cl := s3Client(c, c.Endpoint(0))
	up, err := cl.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("cached"), Key: aws.String("retried")})
	if err != nil {
		t.Fatal(err)
	}
	body := randomBytes(12, 5<<20+100<<10)
	var parts []types.CompletedPart
	for i, p := range [][]byte{body[:5<<20], body[5<<20:]} {
		out, err := cl.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("cached"), Key: aws.String("retried"), UploadId: up.UploadId,
			PartNumber: aws.Int32(int32(i + 1)), Body: bytes.NewReader(p), ContentLength: aws.Int64(int64(len(p)))})
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, types.CompletedPart{PartNumber: aws.Int32(int32(i + 1)), ETag: out.ETag})
	}
	complete := func() error {
		_, err := cl.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("cached"), Key: aws.String("retried"),
			UploadId: up.UploadId, MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}})
		return err
	}
	r.SetReadOnly(true)
	if err := complete(); err == nil {
		t.Fatal("the completion was acknowledged while the remote refused writes")
	}
	if _, err := getObject(ctx, cl, "cached", "retried"); err == nil {
		t.Fatal("the object of a failed completion is served")
	}
	r.SetReadOnly(false)
	if err := complete(); err != nil {
		t.Fatalf("completing the same upload again: %v", err)
	}
	for _, s3c := range []*s3.Client{direct, cl} {
		bucket, key := "cached", "retried"
		if s3c == direct {
			bucket, key = "remote", "cached/retried"
		}
		if got, err := getObject(ctx, s3c, bucket, key); err != nil || !bytes.Equal(got, body) {
			t.Fatalf("%s/%s after the completion: %d bytes, %v", bucket, key, len(got), err)
		}
	}
}

// TestClusterEndpointsNeedTheSecret: the intra-cluster map endpoint shows
// the backends' secret keys only to requests with the cluster secret, and
// a join or a change without it is refused: anyone who can reach an intra
// address must not read the remote's credentials or add a node.
func TestClusterEndpointsNeedTheSecret(t *testing.T) {
	r, _ := startRemote(t, remotesim.Config{})
	c := startCluster(t, localcluster.Spec{})
	tieredBucket(t, c, r, "cached", "cache")
	get := func(secret string) string {
		req, _ := http.NewRequest(http.MethodGet, c.IntraURL(1)+cluster.PathMap, nil)
		if secret != "" {
			req.Header.Set("X-Slipstream-Secret", secret)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET map: %d %s", resp.StatusCode, b)
		}
		return string(b)
	}
	waitFor(t, 10*time.Second, "node 2's map to hold the bucket", func() bool { return strings.Contains(get(""), `"cached"`) })
	if m := get(""); strings.Contains(m, r.SecretKey) || !strings.Contains(m, `"secretKey":"***"`) {
		t.Errorf("the map without the cluster secret shows the backend's secret key or no redaction:\n%s", m)
	}
	if m := get(c.Configs[0].Secret); !strings.Contains(m, r.SecretKey) {
		t.Errorf("the map with the cluster secret lacks the backend's secret key")
	}
	for path, body := range map[string]string{
		cluster.PathJoin:  `{"id":"intruder","raftAddr":"127.0.0.1:1","intraAddrs":["127.0.0.1:2"]}`,
		cluster.PathApply: `{"op":"bucket.create","bucket":{"name":"intruded","copies":1,"mode":"local","validate":"never"}}`,
		cluster.PathLeave: `{"id":"node3"}`,
	} {
		resp, err := http.Post(c.IntraURL(0)+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("POST %s without the cluster secret: %d, want 403", path, resp.StatusCode)
		}
	}
	// Nor are volume chunks read or written without it.
	resp, err := http.Get(c.IntraURL(0) + "/volume/v@1/0?off=0&n=16")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET of a volume chunk without the cluster secret: %d, want 403", resp.StatusCode)
	}
}
