package multihome

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/slipstream-io/slipstream/client"
	"github.com/slipstream-io/slipstream/internal/netx"
)

// The helpers run inside a client namespace of the testbed: the test
// re-executes its own binary there (`ip netns exec NS /proc/self/exe
// -test.run=^TestHelper$`) with MH_ROLE naming what to do and MH_* the
// parameters. They print JSON lines on stdout.
const roleEnv = "MH_ROLE"

const (
	accessKey = "multihome"
	secretKey = "multihome-secret"
	bucket    = "multihome"
)

// fillResult is what the fill helper prints.
type fillResult struct {
	Keys   []string       `json:"keys"`
	Owners map[string]int `json:"owners"` // node ID -> objects
}

// loadResult is what the load helper prints.
type loadResult struct {
	Bytes      int64              `json:"bytes"`
	Requests   int64              `json:"requests"`
	Errors     int64              `json:"errors"`
	FirstError string             `json:"first_error,omitempty"`
	Seconds    float64            `json:"seconds"`
	TickMS     int                `json:"tick_ms"`
	Series     []int64            `json:"series"`  // bytes per tick
	PerNode    map[string][]int64 `json:"perNode"` // bytes per tick by owner
	Stats      []netx.IfaceStats  `json:"stats"`
	Pairs      []netx.PairStats   `json:"pairs"`
}

func env(name string) string { return os.Getenv("MH_" + name) }

func envInt(t *testing.T, name string) int {
	v, err := strconv.Atoi(env(name))
	if err != nil {
		t.Fatalf("MH_%s: %v", name, err)
	}
	return v
}

// TestHelper is the entry point of the helper processes.
func TestHelper(t *testing.T) {
	role := os.Getenv(roleEnv)
	if role == "" {
		t.Skip("helper process of the multihoming tests")
	}
	os.Unsetenv("AWS_CA_BUNDLE")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl := connect(t, ctx)
	defer cl.Close()
	switch role {
	case "fill":
		helperFill(t, ctx, cl)
	case "load":
		helperLoad(t, ctx, cl)
	default:
		t.Fatalf("unknown role %q", role)
	}
}

// connect makes a client, retrying until the seeds answer and the map lists
// MH_NODES nodes up.
func connect(t *testing.T, ctx context.Context) *client.Client {
	want := envInt(t, "NODES")
	deadline := time.Now().Add(90 * time.Second)
	var cl *client.Client
	var err error
	for {
		if cl == nil {
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			cl, err = client.New(cctx, client.Config{
				Seeds:      netx.SplitAddrs(env("SEEDS")),
				LocalAddrs: netx.SplitAddrs(env("LOCAL")),
				AccessKey:  accessKey, SecretKey: secretKey,
				PairFilter: pairFilter(),
			})
			cancel()
		}
		if cl != nil {
			up := 0
			for _, n := range cl.Nodes() {
				if n.State == "up" {
					up++
				}
			}
			if up >= want {
				return cl
			}
			err = fmt.Errorf("%d of %d nodes up", up, want)
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster not ready: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// pairFilter keeps, with MH_SAME_SUBNET=1, only pairs of addresses in the
// same /24 (one testbed subnet = one NIC on each side).
func pairFilter() func(local, remote string) bool {
	if env("SAME_SUBNET") != "1" {
		return nil
	}
	return func(local, remote string) bool {
		host, _, err := net.SplitHostPort(remote)
		if err != nil {
			host = remote
		}
		l, r := net.ParseIP(local).To4(), net.ParseIP(host).To4()
		return l != nil && r != nil && l[0] == r[0] && l[1] == r[1] && l[2] == r[2]
	}
}

// helperFill creates the bucket and MH_OBJECTS objects of MH_SIZE bytes,
// as many on each node, through the smart client, then reads each once
// (the load is warm).
func helperFill(t *testing.T, ctx context.Context, cl *client.Client) {
	n, size := envInt(t, "OBJECTS"), envInt(t, "SIZE")
	s := cl.S3()
	if _, err := s.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatal(err)
	}
	res := fillResult{Owners: map[string]int{}}
	data := make([]byte, size)
	rand.Read(data)
	var wg sync.WaitGroup
	errc := make(chan error, n)
	sem := make(chan struct{}, 6)
	// An equal number of objects per node, so that a uniform load keeps
	// every node equally busy.
	nodes := len(cl.Nodes())
	per := (n + nodes - 1) / nodes
	for i := 0; len(res.Keys) < n && i < 100*n; i++ {
		key := fmt.Sprintf("obj-%04d", i)
		owner := cl.Owner(bucket, key).ID
		if res.Owners[owner] >= per {
			continue
		}
		res.Keys = append(res.Keys, key)
		res.Owners[owner]++
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			_, err := s.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(data)})
			if err == nil {
				var out *s3.GetObjectOutput
				if out, err = s.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}); err == nil {
					var m int64
					m, err = io.Copy(io.Discard, out.Body)
					out.Body.Close()
					if err == nil && m != int64(size) {
						err = fmt.Errorf("%s: read %d of %d bytes", key, m, size)
					}
				}
			}
			if err != nil {
				errc <- fmt.Errorf("%s: %w", key, err)
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
}

// helperLoad GETs the objects MH_KEYS (only those owned by MH_ONLY, if set)
// with MH_WORKERS workers, each bound to one node's objects, for MH_SECONDS through the smart client's S3
// client with the SDK's retries off, so every error the transport does not
// absorb is counted. It prints "started", then one loadResult.
func helperLoad(t *testing.T, ctx context.Context, cl *client.Client) {
	workers, secs := envInt(t, "WORKERS"), envInt(t, "SECONDS")
	var keys []string
	owner := map[string]string{}
	for _, k := range strings.Split(env("KEYS"), ",") {
		o := cl.Owner(bucket, k).ID
		if only := env("ONLY"); only != "" && o != only {
			continue
		}
		keys = append(keys, k)
		owner[k] = o
	}
	if len(keys) == 0 {
		t.Fatal("no keys to read")
	}
	byNode := map[string][]string{}
	var nodeOrder []string
	for _, k := range keys {
		if byNode[owner[k]] == nil {
			nodeOrder = append(nodeOrder, owner[k])
		}
		byNode[owner[k]] = append(byNode[owner[k]], k)
	}
	nodes := cl.Nodes()
	nodeIdx := map[string]int{}
	for i, n := range nodes {
		nodeIdx[n.ID] = i
	}
	const tick = 250 * time.Millisecond
	lctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second)
	defer cancel()
	var total, reqs, errs atomic.Int64
	perNode := make([]atomic.Int64, len(nodes))
	var firstErr atomic.Value
	res := loadResult{TickMS: int(tick / time.Millisecond), PerNode: map[string][]int64{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		tk := time.NewTicker(tick)
		defer tk.Stop()
		var last int64
		lastNode := make([]int64, len(nodes))
		for {
			select {
			case <-lctx.Done():
				return
			case <-tk.C:
				b := total.Load()
				res.Series = append(res.Series, b-last)
				last = b
				for i, n := range nodes {
					v := perNode[i].Load()
					res.PerNode[n.ID] = append(res.PerNode[n.ID], v-lastNode[i])
					lastNode[i] = v
				}
			}
		}
	}()
	s := cl.S3()
	noRetry := func(o *s3.Options) { o.Retryer = aws.NopRetryer{} }
	fmt.Println("started")
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			buf := make([]byte, 256<<10)
			// Worker w reads only the objects of one node (w modulo the
			// nodes in the load), so each client keeps the same number of
			// requests outstanding to every node: a balanced demand.
			mine := byNode[nodeOrder[w%len(nodeOrder)]]
			for i := 0; i < 1_000_000 && lctx.Err() == nil; i++ {
				key := mine[(w/len(nodeOrder)*5+i)%len(mine)]
				ctr := &perNode[nodeIdx[owner[key]]]
				err := get(lctx, s, key, buf, &total, ctr, noRetry)
				if lctx.Err() != nil {
					return // cut by the end of the run: neither success nor error
				}
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				reqs.Add(1)
			}
		}(w)
	}
	wg.Wait()
	<-done
	res.Bytes, res.Requests, res.Errors = total.Load(), reqs.Load(), errs.Load()
	res.Seconds = time.Since(start).Seconds()
	res.Stats, res.Pairs = cl.Stats(), cl.Pairs()
	if s, ok := firstErr.Load().(string); ok {
		res.FirstError = s
	}
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
}

func get(ctx context.Context, s *s3.Client, key string, buf []byte, total, node *atomic.Int64, opt func(*s3.Options)) error {
	out, err := s.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}, opt)
	if err != nil {
		return err
	}
	defer out.Body.Close()
	var n int64
	for {
		m, err := out.Body.Read(buf)
		n += int64(m)
		total.Add(int64(m))
		node.Add(int64(m))
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	if out.ContentLength != nil && n != *out.ContentLength {
		return fmt.Errorf("%s: short body: %d of %d bytes", key, n, *out.ContentLength)
	}
	return nil
}
