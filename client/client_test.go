package client_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/slipstream-io/slipstream/client"
	"github.com/slipstream-io/slipstream/internal/loader"
	"github.com/slipstream-io/slipstream/internal/localcluster"
)

func newClient(t *testing.T, c *localcluster.Cluster, seeds ...string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := client.New(ctx, client.Config{
		Seeds:     seeds,
		AccessKey: c.Spec.AccessKey,
		SecretKey: c.Spec.SecretKey,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	// The seed may not have applied the last admissions yet: the long poll
	// brings them.
	deadline := time.Now().Add(10 * time.Second)
	for {
		up := 0
		for _, n := range cl.Nodes() {
			if n.State == "up" {
				up++
			}
		}
		if up == len(c.Configs) {
			return cl
		}
		if time.Now().After(deadline) {
			t.Fatalf("the client's map lists %d of %d nodes up: %+v", up, len(c.Configs), cl.Nodes())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestNewNeedsAMap(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := client.New(ctx, client.Config{}); !errors.Is(err, client.ErrNoSeeds) {
		t.Errorf("no seeds: got %v, want ErrNoSeeds", err)
	}
	// Nothing listens on this loopback address.
	if _, err := client.New(ctx, client.Config{Seeds: []string{"http://127.60.255.254:1"}}); !errors.Is(err, client.ErrNoMap) {
		t.Errorf("dead seed: got %v, want ErrNoMap", err)
	}
}

// TestS3GoesToOwners: objects written and read through the client's S3
// client are served by their owners' public addresses, both of them, and
// never forwarded between nodes.
func TestS3GoesToOwners(t *testing.T) {
	c := startCluster(t)
	// A dead seed first: the client moves on to the next one.
	cl := newClient(t, c, "http://127.60.255.254:1", c.IntraURL(1))
	nodes := cl.Nodes()
	if len(nodes) != 3 {
		t.Fatalf("map lists %d nodes, want 3: %+v", len(nodes), nodes)
	}
	for i, n := range nodes {
		if n.State != "up" || strings.Join(n.PublicAddrs, ",") != strings.Join(c.Configs[i].Public, ",") {
			t.Errorf("node %+v, want up with public %v", n, c.Configs[i].Public)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := cl.S3()
	if _, err := s.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("owners")}); err != nil {
		t.Fatal(err)
	}
	const objects, size = 12, 1 << 20
	data := make([]byte, size)
	rand.Read(data)
	owned := map[string]int{} // node ID -> objects
	for i := 0; i < objects; i++ {
		key := fmt.Sprintf("dir/obj-%02d", i)
		if _, err := s.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("owners"), Key: aws.String(key), Body: bytes.NewReader(data)}); err != nil {
			t.Fatal(err)
		}
		owned[cl.Owner("owners", key).ID]++
	}
	if len(owned) < 2 {
		t.Fatalf("all %d objects on one node (%v): placement is not spread", objects, owned)
	}
	before := make([]map[string]float64, 3)
	for i := range before {
		before[i] = listenerBytes(t, c, i)
	}
	const rounds, workers = 3, 4
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				for i := 0; i < objects; i++ {
					key := fmt.Sprintf("dir/obj-%02d", (i+w)%objects)
					out, err := s.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("owners"), Key: aws.String(key)})
					if err != nil {
						errc <- err
						return
					}
					b, err := io.ReadAll(out.Body)
					out.Body.Close()
					if err != nil || !bytes.Equal(b, data) {
						errc <- fmt.Errorf("%s: %d bytes, %v", key, len(b), err)
						return
					}
				}
			}
		}(w)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	const slack = 1 << 20 // headers, metrics scrapes
	for i, n := range nodes {
		want := float64(owned[n.ID] * rounds * workers * size)
		// A response is counted once its send call returns, which may be
		// a moment after the client has read its last byte.
		var after map[string]float64
		var public float64
		var per []float64
		for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			after, public, per = listenerBytes(t, c, i), 0, nil
			for _, a := range c.Configs[i].Public {
				d := after[a] - before[i][a]
				per = append(per, d)
				public += d
			}
			if public >= want || time.Now().After(deadline) {
				break
			}
		}
		for _, a := range c.Configs[i].Intra {
			if d := after[a] - before[i][a]; d > slack {
				t.Errorf("%s: intra %s sent %.0f bytes: requests were forwarded between nodes", n.ID, a, d)
			}
		}
		t.Logf("%s owns %d objects: public addresses sent %.1f MB (%v), want %.1f MB", n.ID, owned[n.ID], public/1e6, per, want/1e6)
		if public < want || public > want+slack {
			t.Errorf("%s: public addresses sent %.0f bytes, want %.0f (its own objects only)", n.ID, public, want)
		}
		if want > 0 {
			for k, d := range per {
				if d < 0.2*want {
					t.Errorf("%s: public address %s carried %.0f of %.0f bytes: not spread over both", n.ID, c.Configs[i].Public[k], d, want)
				}
			}
		}
	}
	var used int
	for _, st := range cl.Stats() {
		if st.BytesRecv > 0 {
			used++
		}
	}
	if used == 0 {
		t.Errorf("client interface counters show no traffic: %+v", cl.Stats())
	}
	// A bucket-level request goes to some node and works too.
	lo, err := s.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("owners"), Prefix: aws.String("dir/")})
	if err != nil || len(lo.Contents) != objects {
		t.Fatalf("list: %v, %d objects", err, len(lo.Contents))
	}
}

// TestFollowsMap: a change of the cluster map reaches the client through
// the long poll within a moment, not at the end of a poll period.
func TestFollowsMap(t *testing.T) {
	c := startCluster(t)
	cl := newClient(t, c, c.IntraURL(0))
	v0 := cl.MapVersion()
	time.Sleep(200 * time.Millisecond) // the poll is waiting now
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cl.S3().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("follow")}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	if err := cl.WaitMap(wctx, v0+1); err != nil {
		t.Fatal(err)
	}
	t.Logf("map %d -> %d seen after %v", v0, cl.MapVersion(), time.Since(start))
	// Stopping a node: the client's map marks it down after the cluster does.
	if err := c.StopNode(2); err != nil {
		t.Error(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := cl.Nodes()[2].State
		if st != "up" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node3 still %q in the client's map 30s after it stopped", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Objects that node3 would own now go to their next node in HRW order.
	for i := 0; i < 50; i++ {
		if o := cl.Owner("follow", fmt.Sprint(i)); o.ID == "node3" || o.ID == "" {
			t.Fatalf("owner of follow/%d is %q with node3 down", i, o.ID)
		}
	}
}

// TestLoaderRouter: the load generator, given the client's router and HTTP
// client, fills and reads a dataset with every request at its owner.
func TestLoaderRouter(t *testing.T) {
	c := startCluster(t)
	cl := newClient(t, c, c.IntraURL(2))
	r := cl.Router()
	for i := 0; i < 20; i++ {
		key := fmt.Sprint("k", i)
		got, err := r.Route("b", key)
		if want := "http://" + cl.Owner("b", key).PublicAddrs[0]; err != nil || got != want {
			t.Fatalf("Route(b, %s) = %q, %v; want %q", key, got, err, want)
		}
	}
	if got, err := r.Route("b", ""); err != nil || !strings.HasPrefix(got, "http://127.60.") {
		t.Fatalf("Route(b, \"\") = %q, %v", got, err)
	}
	before := make([]map[string]float64, 3)
	for i := range before {
		before[i] = listenerBytes(t, c, i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := cl.LoaderConfig(loader.Config{
		Region: "us-east-1", AccessKey: c.Spec.AccessKey, SecretKey: c.Spec.SecretKey,
		Bucket: "loaded", CreateBucket: true, Workers: 4, MinSize: 256 << 10,
		FillCount: 12, Duration: 1500 * time.Millisecond, MaxOps: 2000, Seed: 7,
	})
	res, err := loader.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Params.Router != "owner" {
		t.Errorf("router %q, want owner", res.Params.Router)
	}
	if res.Main.Total.Errors != 0 || res.Fill.Total.Errors != 0 || res.Main.Total.Count == 0 {
		t.Fatalf("fill %+v, main %+v", res.Fill.Total, res.Main.Total)
	}
	var intra float64
	for i := range before {
		after := listenerBytes(t, c, i)
		for _, a := range c.Configs[i].Intra {
			intra += after[a] - before[i][a]
		}
	}
	t.Logf("%d GETs, %.1f MB read; intra listeners sent %.0f bytes", res.Main.Total.Count, float64(res.Main.Total.Bytes)/1e6, intra)
	if intra > 1<<20 {
		t.Errorf("intra listeners sent %.0f bytes during a routed load: requests were forwarded", intra)
	}
}

// TestLoadCommandSmart: `slipstream load --smart SEED` fills and reads a
// dataset with every request at its owner. The seed is a node's S3
// address, the URL a user has at hand: the client reads the map at its
// public map path.
func TestLoadCommandSmart(t *testing.T) {
	c := startCluster(t)
	before := make([]map[string]float64, 3)
	for i := range before {
		before[i] = listenerBytes(t, c, i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "load", "--smart", "http://"+c.Configs[1].Public[0], "--local-addrs", "127.0.0.1",
		"--access-key", c.Spec.AccessKey, "--secret-key", c.Spec.SecretKey, "--bucket", "smartcli", "--create-bucket",
		"--fill-count", "9", "--size", "128KiB", "--duration", "1s", "--workers", "4", "--no-json", "--quiet")
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatal(err)
	}
	var public, intra float64
	for i := range before {
		after := listenerBytes(t, c, i)
		for _, a := range c.Configs[i].Public {
			public += after[a] - before[i][a]
		}
		for _, a := range c.Configs[i].Intra {
			intra += after[a] - before[i][a]
		}
	}
	t.Logf("public listeners sent %.0f bytes, intra %.0f", public, intra)
	if public < 9*128<<10 || intra > 1<<20 {
		t.Errorf("public listeners sent %.0f bytes, intra %.0f: want the reads at the owners, nothing forwarded", public, intra)
	}
}
