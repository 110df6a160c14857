package e2e

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/slipstream-io/slipstream/internal/localcluster"
)

// TestEightNodesLoseTwo: on eight nodes, a bucket with copies=3 loses two
// nodes at once (SIGKILL) while clients PUT through every node. Every
// acknowledged object is then read back, whole, through each surviving
// node while the two stay down (one of its three copies at least is on a
// survivor), and again through the two once they are back.
func TestEightNodesLoseTwo(t *testing.T) {
	c := startCluster(t, localcluster.Spec{Nodes: 8})
	ctx := context.Background()
	admin(t, c, 0, "bucket", "create", "wide", "--copies", "3")
	var (
		mu    sync.Mutex
		acked = map[string]string{} // key -> md5
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Go(func() {
			rng := rand.New(rand.NewSource(int64(g)))
			deadline := time.Now().Add(time.Minute)
			for i := 0; i < 300 && time.Now().Before(deadline); i++ { // bounded
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("g%d/obj%04d", g, i)
				body := randomBytes(int64(g*100000+i), 64<<10+rng.Intn(64<<10))
				cl := s3Client(c, c.Endpoint(rng.Intn(8)))
				if err := putObject(ctx, cl, "wide", key, body); err == nil {
					mu.Lock()
					acked[key] = md5hex(body)
					mu.Unlock()
				}
			}
		})
	}
	waitFor(t, 30*time.Second, "100 acknowledged PUTs", func() bool { mu.Lock(); defer mu.Unlock(); return len(acked) >= 100 })
	c.Kill(3)
	c.Kill(6)
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	t.Logf("%d PUTs acknowledged", len(acked))

	check := func(nodes []int) {
		t.Helper()
		for n, i := range nodes {
			cl := s3Client(c, c.Endpoint(i))
			k := 0
			for key, sum := range acked {
				if k++; k%len(nodes) != n { // each node reads its share
					continue
				}
				got, err := getObject(ctx, cl, "wide", key)
				if err != nil || md5hex(got) != sum {
					t.Fatalf("acknowledged %s through node %d: %d bytes, %v", key, i+1, len(got), err)
				}
			}
		}
	}
	check([]int{0, 1, 2, 4, 5, 7})
	for _, i := range []int{3, 6} {
		if err := c.StartNode(i); err != nil {
			t.Fatal(err)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := c.WaitReady(rctx, 8); err != nil {
		t.Fatal(err)
	}
	check([]int{3, 6})
	// The listing through a returned node has every acknowledged key.
	p := s3.NewListObjectsV2Paginator(s3Client(c, c.Endpoint(3)), &s3.ListObjectsV2Input{Bucket: aws.String("wide")})
	listed := map[string]bool{}
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Contents {
			listed[aws.ToString(o.Key)] = true
		}
	}
	for key := range acked {
		if !listed[key] {
			t.Fatalf("acknowledged %s missing from the listing", key)
		}
	}
}
