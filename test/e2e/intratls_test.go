package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/slipstream-io/slipstream/client"
	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/config"
	"github.com/slipstream-io/slipstream/internal/localcluster"
	"github.com/slipstream-io/slipstream/internal/peer"
	"github.com/slipstream-io/slipstream/internal/remotesim"
)

// TestIntraTLS runs a cluster whose intra-cluster traffic is encrypted and
// admits only nodes that prove the secret (intra_tls): a plain request to
// an intra address gets no HTTP answer, while objects, write-back replicas
// (destaged by the replica holder after the owner is killed), volume
// chunks, the admin CLI and the smart client, which follows the map on the
// public addresses, all work across nodes. The owner, restarted, serves
// the cluster's map from its first answer.
func TestIntraTLS(t *testing.T) {
	r, direct := startRemote(t, remotesim.Config{})
	c := startCluster(t, localcluster.Spec{IntraTLS: true})
	ctx := context.Background()

	// A plain HTTP client reaches an intra address and gets nothing.
	conn, err := net.DialTimeout("tcp", c.Configs[1].Intra[0], 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(conn, "GET /cluster/map HTTP/1.1\r\nHost: x\r\n\r\n")
	_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	if b, _ := io.ReadAll(conn); bytes.Contains(b, []byte("HTTP/1.1")) {
		t.Fatalf("a plain request to an intra address got an HTTP answer: %q", b)
	}
	conn.Close()
	// Write-back with copies=2: a key owned by another node than the one
	// the client talks to goes through node1 to its owner, and from the
	// owner to a replica holder.
	tieredBucket(t, c, r, "wbk", "writeback", "--copies", "2")

	// The public map needs neither TLS nor the secret, and never shows
	// the backend's secret key, even to a request that has the secret.
	var raw []byte
	waitFor(t, 10*time.Second, "node3's public map to list the bucket", func() bool {
		req, _ := http.NewRequest(http.MethodGet, c.Endpoint(2)+cluster.PublicMapPath, nil)
		req.Header.Set(peer.SecretHeader, "local-cluster-secret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		pm := cluster.NewMap()
		if err := json.Unmarshal(raw, pm); err != nil || len(pm.Nodes) != 3 {
			t.Fatalf("public map: %v, %d nodes", err, len(pm.Nodes))
		}
		_, ok := pm.Bucket("wbk")
		return ok
	})
	if !bytes.Contains(raw, []byte(r.AccessKey)) || bytes.Contains(raw, []byte(r.SecretKey)) {
		t.Fatalf("the public map does not show the backend's access key, or shows its secret key:\n%s", raw)
	}
	r.SetDown(true)
	cl := s3Client(c, c.Endpoint(0))
	key, owner := keyNotOwnedBy(clusterMap(t, c, 0), "wbk", "node1")
	body := randomBytes(5, 3<<20)
	if err := putObject(ctx, cl, "wbk", key, body); err != nil {
		t.Fatalf("write-back PUT: %v", err)
	}
	if got, err := getObject(ctx, s3Client(c, c.Endpoint(2)), "wbk", key); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("GET through node3: %v", err)
	}
	c.Kill(nodeIndex(c, owner))
	r.SetDown(false)
	waitFor(t, 60*time.Second, "the replica holder to destage "+key, func() bool {
		got, err := getObject(ctx, direct, "remote", "wbk/"+key)
		return err == nil && bytes.Equal(got, body)
	})
	if err := c.StartNode(nodeIndex(c, owner)); err != nil {
		t.Fatal(err)
	}
	// The restarted node has applied no map until the leader reaches it;
	// the first public map it answers with is the cluster's all the same.
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		pm, err := cluster.FetchMap(ctx, nil, c.Endpoint(nodeIndex(c, owner))+cluster.PublicMapPath, 0, 0)
		if err == nil {
			if len(pm.Nodes) != 3 {
				t.Fatalf("the first public map of the restarted %s: version %d, %d nodes", owner, pm.Version, len(pm.Nodes))
			}
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("the restarted %s does not serve its public map: %v", owner, err)
		}
	}
	if err := c.WaitReady(ctx, 3); err != nil {
		t.Fatal(err)
	}

	// The smart client, seeded with a public map only, routes to owners.
	sc, err := client.New(ctx, client.Config{
		Seeds:     []string{c.Endpoint(1) + cluster.PublicMapPath},
		AccessKey: c.Spec.AccessKey, SecretKey: c.Spec.SecretKey,
	})
	if err != nil {
		t.Fatalf("smart client from the public map: %v", err)
	}
	defer sc.Close()
	if _, err := sc.S3().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("wbk"), Key: aws.String("smart"), Body: bytes.NewReader(body[:1<<20])}); err != nil {
		t.Fatalf("smart client PUT: %v", err)
	}
	if got, err := getObject(ctx, cl, "wbk", "smart"); err != nil || !bytes.Equal(got, body[:1<<20]) {
		t.Fatalf("GET of the smart client's object: %v", err)
	}

	// A mirrored volume: written through node1, read back through node2;
	// every chunk has a copy on another node than the one serving it.
	volumeCmd(t, c, 0, "create", "sv", "--size", "8MiB", "--copies", "2", "--chunk", "1MiB")
	img := filepath.Join(t.TempDir(), "img")
	data := randomBytes(8, 8<<20)
	if err := os.WriteFile(img, data, 0o644); err != nil {
		t.Fatal(err)
	}
	runTool(t, "nbdcopy", img, fmt.Sprintf("nbd://%s/sv", c.Configs[0].NBD[0]))
	back := filepath.Join(t.TempDir(), "back")
	runTool(t, "nbdcopy", fmt.Sprintf("nbd://%s/sv", c.Configs[1].NBD[0]), back)
	if got, err := os.ReadFile(back); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("volume read back through node2: %v", err)
	}
	if out := volumeCmd(t, c, 0, "info", "sv"); !strings.Contains(out, c.Configs[2].NBD[0]) {
		t.Fatalf("volume info does not list node3's NBD address:\n%s", out)
	}
}

// TestIntraTLSRollingEnable turns intra_tls on in a running cluster one
// node at a time, with no moment at which the cluster stops serving:
// first every node moves to intra_tls with intra_tls_migrate (secure links
// where the other end has them, plain where it does not), then every node
// drops intra_tls_migrate. Objects written before and during the change,
// with two copies on different nodes, are read back through every node at
// every step.
func TestIntraTLSRollingEnable(t *testing.T) {
	c := startCluster(t, localcluster.Spec{})
	ctx := context.Background()
	admin(t, c, 0, "bucket", "create", "rolling", "--copies", "2")
	bodies := map[string][]byte{}
	step := 0
	check := func(what string) {
		t.Helper()
		step++
		key := fmt.Sprintf("step-%d", step)
		body := randomBytes(int64(step), 1<<20+step)
		if err := putObject(ctx, s3Client(c, c.Endpoint(step%3)), "rolling", key, body); err != nil {
			t.Fatalf("%s: PUT through node%d: %v", what, step%3+1, err)
		}
		bodies[key] = body
		for i := range c.Configs {
			for k, want := range bodies {
				if got, err := getObject(ctx, s3Client(c, c.Endpoint(i)), "rolling", k); err != nil || !bytes.Equal(got, want) {
					t.Fatalf("%s: GET %s through node%d: %v", what, k, i+1, err)
				}
			}
		}
	}
	check("plain cluster")
	for _, migrate := range []bool{true, false} {
		for i := range c.Configs {
			if err := c.StopNode(i); err != nil {
				t.Fatal(err)
			}
			if err := c.Reconfigure(i, func(n *config.Node) { n.IntraTLS, n.IntraTLSMigrate = true, migrate }); err != nil {
				t.Fatal(err)
			}
			if err := c.StartNode(i); err != nil {
				t.Fatal(err)
			}
			if err := c.WaitReady(ctx, 3); err != nil {
				t.Fatal(err)
			}
			check(fmt.Sprintf("node%d with intra_tls (migrate %v)", i+1, migrate))
		}
	}
	// Every node is secure now: plain requests get nothing.
	for i := range c.Configs {
		conn, err := net.DialTimeout("tcp", c.Configs[i].Intra[0], 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(conn, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
		_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
		b, _ := io.ReadAll(conn)
		conn.Close()
		if bytes.Contains(b, []byte("HTTP/1.1")) {
			t.Fatalf("node%d still answers plain HTTP on its intra address: %q", i+1, b)
		}
	}
}
