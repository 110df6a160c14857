package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/localcluster"
	"github.com/slipstream-io/slipstream/internal/placement"
)

// TestWritesGoOnWhenANodeDies: right after a node is SIGKILLed, before
// the health checks would mark it down, PUTs whose copies it was to hold
// succeed at the first attempt, in a local bucket and in a writeback one
// (copies=2 both), node3 the owner or a replica: the node writing the
// copies finds node3 refusing connections, the leader confirms it and
// marks it down, and the copy goes to the next node. Those copies are
// real: with the owner killed as well, the third node serves every
// object. A write-back owner's replica goes to the third node, not to the
// owner itself. DELETEs go on the same way, and stay done once node3 is
// back; so does a PUT to a cache bucket whose owner, node3, was just
// killed: the node that takes its place writes it through to the backend.
func TestWritesGoOnWhenANodeDies(t *testing.T) {
	c := startCluster(t, localcluster.Spec{})
	ctx := context.Background()
	admin(t, c, 0, "bucket", "create", "two", "--copies", "2")
	remote := filepath.Join(t.TempDir(), "remote")
	if err := os.MkdirAll(remote, 0o755); err != nil {
		t.Fatal(err)
	}
	admin(t, c, 0, "bucket", "create", "staged", "--copies", "2", "--mode", "writeback", "--backend", "fs", "--path", remote)
	cacheRemote := filepath.Join(t.TempDir(), "cache-remote")
	if err := os.MkdirAll(cacheRemote, 0o755); err != nil {
		t.Fatal(err)
	}
	admin(t, c, 0, "bucket", "create", "cached", "--copies", "2", "--mode", "cache", "--validate", "always", "--backend", "fs", "--path", cacheRemote)

	ids := clusterMap(t, c, 0).NodeIDs()
	// Keys owned by node1 whose second node is node3, in both buckets;
	// keys node3 owns with node1 second; and such keys of the cache bucket.
	keys := placedKeys(ids, "k", 6, "node1", "node3", "two", "staged")
	owned := placedKeys(ids, "o", 4, "node3", "node1", "two", "staged")
	cachedKeys := placedKeys(ids, "c", 2, "node3", "node1", "cached")
	noRetry := s3.New(s3.Options{
		BaseEndpoint: aws.String(c.Endpoint(0)), Region: "us-east-1", UsePathStyle: true,
		Credentials: s3Client(c, c.Endpoint(0)).Options().Credentials,
		Retryer:     aws.NopRetryer{},
	})

	// The first PUT after the kill finds node3 gone: a write-back owner's
	// replica, which must go to node2 and not to node1 itself.
	c.Kill(2)
	start := time.Now()
	for _, bucket := range []string{"staged", "two"} {
		for i, k := range keys {
			if err := putObject(ctx, noRetry, bucket, k, randomBytes(int64(i), 300<<10)); err != nil {
				t.Fatalf("PUT %s/%s %v after node3 was killed, at the first attempt: %v", bucket, k, time.Since(start), err)
			}
		}
	}
	for _, bucket := range []string{"two", "staged"} {
		for i, k := range owned {
			if err := putObject(ctx, noRetry, bucket, k, randomBytes(int64(100+i), 300<<10)); err != nil {
				t.Fatalf("PUT %s/%s (owned by node3) %v after node3 was killed, at the first attempt: %v", bucket, k, time.Since(start), err)
			}
		}
	}
	t.Logf("%d PUTs with node3 just killed took %v", 2*(len(keys)+len(owned)), time.Since(start))
	if st := clusterMap(t, c, 0).Nodes["node3"].State; st != cluster.StateDown {
		t.Errorf("node3 is %s in the map after writes found it gone", st)
	}
	// The first PUT found node3 gone; the later ones were placed without it.
	if n := metric(t, c, 0, "slipstream_copies_redirected_total"); n < 1 {
		t.Errorf("node1 counts %v copies redirected, want at least 1", n)
	}

	c.Kill(0)
	r := s3Client(c, c.Endpoint(1))
	for _, bucket := range []string{"two", "staged"} {
		for i, k := range owned {
			if got, err := getObject(ctx, r, bucket, k); err != nil || !bytes.Equal(got, randomBytes(int64(100+i), 300<<10)) {
				t.Fatalf("GET %s/%s from node2 with node1 and node3 dead: %d bytes, %v", bucket, k, len(got), err)
			}
		}
	}
	for _, bucket := range []string{"two", "staged"} {
		for i, k := range keys {
			got, err := getObject(ctx, r, bucket, k)
			if err != nil || !bytes.Equal(got, randomBytes(int64(i), 300<<10)) {
				t.Fatalf("GET %s/%s from node2 with node1 and node3 dead: %d bytes, %v", bucket, k, len(got), err)
			}
		}
	}

	// Deletes too: with node1 and node3 back, and node3 killed again, a
	// DELETE of keys node3 holds or owns succeeds at the first attempt,
	// and stays done once node3 is back.
	for _, i := range []int{0, 2} {
		if err := c.StartNode(i); err != nil {
			t.Fatal(err)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := c.WaitReady(rctx, 3); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the map to show every node up", func() bool {
		for _, n := range clusterMap(t, c, 0).Nodes {
			if n.State != cluster.StateUp {
				return false
			}
		}
		return true
	})
	c.Kill(2)
	gone := map[string][]string{"two": {owned[0], keys[0]}, "staged": {owned[0], keys[0]}}
	for bucket, ks := range gone {
		for _, k := range ks {
			if _, err := noRetry.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(k)}); err != nil {
				t.Fatalf("DELETE %s/%s just after node3 was killed, at the first attempt: %v", bucket, k, err)
			}
		}
	}
	if err := c.StartNode(2); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(rctx, 3); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "node3 to be up in the map", func() bool { return clusterMap(t, c, 0).Nodes["node3"].State == cluster.StateUp })
	for _, ep := range []int{2, 0} {
		r := s3Client(c, c.Endpoint(ep))
		for bucket, ks := range gone {
			for _, k := range ks {
				if _, err := getObject(ctx, r, bucket, k); apiCode(err) != "NoSuchKey" {
					t.Fatalf("GET %s/%s through %s after its delete and node3's return: %v, want NoSuchKey", bucket, k, c.Configs[ep].ID, err)
				}
			}
		}
	}

	// A cache bucket's owner killed: the node that takes its place writes
	// the object through to the backend, at the first attempt.
	c.Kill(2)
	for i, k := range cachedKeys {
		data := randomBytes(int64(200+i), 200<<10)
		if err := putObject(ctx, noRetry, "cached", k, data); err != nil {
			t.Fatalf("PUT cached/%s (owned by node3) just after node3 was killed, at the first attempt: %v", k, err)
		}
		if got, err := os.ReadFile(filepath.Join(cacheRemote, k)); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("the backend has %d bytes of cached/%s after its PUT was acknowledged (%v), want %d", len(got), k, err, len(data))
		}
		if got, err := getObject(ctx, s3Client(c, c.Endpoint(1)), "cached", k); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("GET cached/%s from node2 with node3 dead: %d bytes, %v", k, len(got), err)
		}
	}
	// node1's copy is a replica, and the first under the map with node3
	// down: it was told the backend version, so it is validated (the
	// bucket's validate=always) and a change in the backend is served.
	k := cachedKeys[0]
	changed := randomBytes(300, 100<<10)
	if err := os.WriteFile(filepath.Join(cacheRemote, k), changed, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := getObject(ctx, s3Client(c, c.Endpoint(1)), "cached", k); err != nil || !bytes.Equal(got, changed) {
		t.Fatalf("GET cached/%s after it changed in the backend, its owner dead: %d bytes (%d written to the backend), %v", k, len(got), len(changed), err)
	}
}

// TestDeleteGoesOnWhenANodeHangs: a node that hangs (SIGSTOP: its
// connections are accepted, nothing answers) is passed over by reads. It
// is not marked down on a report, since the leader cannot tell it from a
// partition; a DELETE that finds it waits for the health checks to mark
// it down and is then done, at the first attempt, and stays done once the
// node wakes up. Once node1's paths to it are down, PUTs of objects it
// owns succeed at the first attempt too.
func TestDeleteGoesOnWhenANodeHangs(t *testing.T) {
	c := startCluster(t, localcluster.Spec{})
	ctx := context.Background()
	admin(t, c, 0, "bucket", "create", "two", "--copies", "2")
	ids := clusterMap(t, c, 0).NodeIDs()
	var keys, first []string // first: keys whose first holder is node3
	for i := 0; len(keys) < 3 || len(first) < 3; i++ {
		k := fmt.Sprintf("h%03d", i)
		switch order := placement.Order(ids, placement.ObjectName("two", k)); {
		case order[0] == "node3" && len(first) < 3:
			first = append(first, k)
		case (order[0] == "node3" || order[1] == "node3") && len(keys) < 3:
			keys = append(keys, k)
		}
	}
	w := s3Client(c, c.Endpoint(0))
	for i, k := range append(slices.Clone(keys), first...) {
		if err := putObject(ctx, w, "two", k, randomBytes(int64(i), 64<<10)); err != nil {
			t.Fatal(err)
		}
	}
	noRetry := s3.New(s3.Options{
		BaseEndpoint: aws.String(c.Endpoint(0)), Region: "us-east-1", UsePathStyle: true,
		Credentials: w.Options().Credentials,
		Retryer:     aws.NopRetryer{},
	})
	pid := c.PID(2)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	woken := false
	wake := func() {
		if !woken {
			woken = true
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(wake)
	start := time.Now()
	for _, k := range keys {
		if _, err := noRetry.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("two"), Key: aws.String(k)}); err != nil {
			t.Fatalf("DELETE two/%s %v after node3 hung, at the first attempt: %v", k, time.Since(start), err)
		}
	}
	t.Logf("%d DELETEs with node3 hung took %v", len(keys), time.Since(start))
	wake()
	waitFor(t, 30*time.Second, "node3 to be up in the map again", func() bool { return clusterMap(t, c, 0).Nodes["node3"].State == cluster.StateUp })
	for _, ep := range []int{2, 1} {
		r := s3Client(c, c.Endpoint(ep))
		for _, k := range keys {
			if _, err := getObject(ctx, r, "two", k); apiCode(err) != "NoSuchKey" {
				t.Fatalf("GET two/%s through %s after its delete and node3's return: %v, want NoSuchKey", k, c.Configs[ep].ID, err)
			}
		}
	}

	// Reads: a first holder that hangs is passed over for the next, also
	// while node1's paths to it still count as up.
	waitFor(t, 30*time.Second, "node1's paths to node3 up", func() bool {
		n := 0
		for _, p := range nodeStatus(t, c, 0).Extra.Interfaces.Paths {
			if slices.Contains(c.Configs[2].Intra, p.Remote) {
				if p.State != "up" {
					return false
				}
				n++
			}
		}
		return n > 0
	})
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	woken = false
	start = time.Now()
	gctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for i, k := range first {
		want := randomBytes(int64(len(keys)+i), 64<<10)
		t0 := time.Now()
		if got, err := getObject(gctx, noRetry, "two", k); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("GET two/%s %v after node3 hung, at the first attempt: %d bytes, %v", k, time.Since(start), len(got), err)
		}
		t.Logf("GET %s took %v", k, time.Since(t0))
	}
	t.Logf("%d GETs with node3 hung took %v", len(first), time.Since(start))

	// Writes of objects node3 owns: its paths are down, so each PUT asks
	// whether it is gone before its body flows (or finds it marked down)
	// and succeeds at the first attempt, its copies on the other nodes.
	start = time.Now()
	for i, k := range first {
		if err := putObject(gctx, noRetry, "two", k, randomBytes(int64(50+i), 64<<10)); err != nil {
			t.Fatalf("PUT two/%s %v after node3 hung, at the first attempt: %v", k, time.Since(start), err)
		}
	}
	t.Logf("%d PUTs with node3 hung took %v", len(first), time.Since(start))
	for i, k := range first {
		if got, err := getObject(gctx, s3Client(c, c.Endpoint(1)), "two", k); err != nil || !bytes.Equal(got, randomBytes(int64(50+i), 64<<10)) {
			t.Fatalf("GET two/%s through node2 after its PUT with node3 hung: %d bytes, %v", k, len(got), err)
		}
	}
}

// placedKeys returns n keys, named prefix and a number, whose HRW order
// over ids starts with first and then second in every one of buckets.
func placedKeys(ids []string, prefix string, n int, first, second string, buckets ...string) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		k := fmt.Sprintf("%s%03d", prefix, i)
		if !slices.ContainsFunc(buckets, func(b string) bool {
			order := placement.Order(ids, placement.ObjectName(b, k))
			return order[0] != first || order[1] != second
		}) {
			keys = append(keys, k)
		}
	}
	return keys
}
