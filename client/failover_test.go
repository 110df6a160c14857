package client_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/slipstream-io/slipstream/client"
	"github.com/slipstream-io/slipstream/internal/localcluster"
	"github.com/slipstream-io/slipstream/internal/testbin"
)

// TestOwnerKilledBeforeTheMapShowsIt: right after an object's owner dies,
// while the client's map still shows it up, GETs of its objects (two
// copies) succeed through the next node, and later requests pass the dead
// node over without trying it again.
func TestOwnerKilledBeforeTheMapShowsIt(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the multi-process cluster")
	}
	c := testbin.StartCluster(t, localcluster.Spec{Binary: binary, Nodes: 3, Net: "127.61", Copies: 2})
	cl := newClient(t, c, c.IntraURL(0))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := cl.S3()
	if _, err := s.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("fail")}); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 256<<10)
	rand.Read(data)
	victim := c.Configs[2].ID // not the client's seed
	var keys []string
	for i := 0; len(keys) < 4 && i < 200; i++ {
		key := fmt.Sprintf("k%03d", i)
		if _, err := s.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("fail"), Key: aws.String(key), Body: bytes.NewReader(data)}); err != nil {
			t.Fatal(err)
		}
		if cl.Owner("fail", key).ID == victim {
			keys = append(keys, key)
		}
	}
	if len(keys) < 4 {
		t.Fatalf("only %d of 200 keys owned by %s", len(keys), victim)
	}
	// A second client, routing the load generator's way (Router and
	// HTTPClient): it has not met the dead node yet.
	router := newClient(t, c, c.IntraURL(1))
	c.Kill(2)
	killed := time.Now()
	routeAround(t, router, "fail", keys[0], victim)
	// The SDK's own retries are off: it would retry until the map shows
	// the owner down; each GET must succeed at its first call.
	noRetry := func(o *s3.Options) { o.RetryMaxAttempts = 1 }
	for _, key := range keys {
		out, err := s.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("fail"), Key: aws.String(key)}, noRetry)
		if err != nil {
			t.Fatalf("GET %s %v after its owner died: %v", key, time.Since(killed), err)
		}
		b, err := io.ReadAll(out.Body)
		out.Body.Close()
		if err != nil || !bytes.Equal(b, data) {
			t.Fatalf("GET %s: %d bytes, %v", key, len(b), err)
		}
	}
	took := time.Since(killed)
	i := slices.IndexFunc(cl.Nodes(), func(n client.NodeInfo) bool { return n.ID == victim })
	t.Logf("%d GETs served %v after the owner died; the client's map shows it %s", len(keys), took, cl.Nodes()[i].State)
	if cl.Owner("fail", keys[0]).ID == victim {
		t.Errorf("the client still routes to %s, which it could not reach", victim)
	}
}

// routeAround: the router sends key to victim, dead but still up in the
// map; the request fails, and the next route of key goes elsewhere.
func routeAround(t *testing.T, cl *client.Client, bucket, key, victim string) {
	t.Helper()
	r := cl.Router()
	base, err := r.Route(bucket, key)
	if err != nil {
		t.Fatal(err)
	}
	if cl.Owner(bucket, key).ID != victim {
		t.Logf("the map already shows %s down: the router's failover is not exercised", victim)
		return
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodHead, base+"/"+bucket+"/"+key, nil)
	if resp, err := cl.HTTPClient().Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("a request to the dead node %s answered %s", victim, resp.Status)
	}
	next, err := r.Route(bucket, key)
	if err != nil || next == base {
		t.Errorf("after a request to %s failed, the router still sends %s there (%s, %v)", victim, key, next, err)
	}
}
