package tier_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/backend"
	"github.com/slipstream-io/slipstream/internal/backend/backendtest"
	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/store"
	"github.com/slipstream-io/slipstream/internal/tier"
)

// A cold GET that joins a fill just as the fill ends gets the whole object:
// the fill's spool stays open for every reader that joined it, and a GET
// that comes too late for the spool is served from the local copy.
func TestColdGetJoiningEndingFill(t *testing.T) {
	e := newEnv(t, "fs")
	tr := e.newTier(t, tier.Config{}, cacheBucket)
	ctx := context.Background()
	body := backendtest.Body(11, 1024)
	var failures atomic.Int64
	var first atomic.Value
	for i := 0; i < 300 && failures.Load() == 0; i++ {
		key := fmt.Sprintf("k%d", i)
		remotePut(t, e.raw, key, body)
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					r, err := tr.Get(ctx, "data", key, nil)
					if err != nil {
						failures.Add(1)
						first.CompareAndSwap(nil, err.Error())
						return
					}
					_, warm := r.(*store.Reader)
					data, err := io.ReadAll(r)
					r.Close()
					if err != nil || !bytes.Equal(data, body) {
						failures.Add(1)
						first.CompareAndSwap(nil, fmt.Sprintf("read: %v (%d bytes)", err, len(data)))
						return
					}
					if warm {
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	if n := failures.Load(); n > 0 {
		t.Fatalf("%d GETs failed around the end of a fill; first: %v", n, first.Load())
	}
}

// A delimited listing shows no common prefix whose only key has a delete
// pending (not destaged yet): the "folder" is empty.
func TestListHidesPrefixEmptiedByPendingDelete(t *testing.T) {
	e, tr := gatedWriteback(t, tier.Config{})
	ctx := context.Background()
	remotePut(t, e.raw, "dir/only", []byte("x"))
	remotePut(t, e.raw, "top", []byte("y"))
	if err := tr.Delete(ctx, "wback", "dir/only"); err != nil {
		t.Fatal(err)
	}
	res, err := tr.List(ctx, "wback", object.ListOptions{Delimiter: "/"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.CommonPrefixes) != 0 {
		t.Errorf("common prefixes %v: dir/ holds no key once dir/only is deleted", res.CommonPrefixes)
	}
	res, err = tr.List(ctx, "wback", object.ListOptions{Prefix: "dir/", Delimiter: "/"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Objects) != 0 {
		t.Errorf("objects under dir/: %v", res.Objects)
	}
}

// listKeys lists one page of bucket and returns its keys and common
// prefixes.
func listKeys(t *testing.T, tr *tier.Tier, bucket string, opts object.ListOptions) (objs, prefixes []string) {
	t.Helper()
	res, err := tr.List(context.Background(), bucket, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range res.Objects {
		objs = append(objs, o.Key)
	}
	return objs, res.CommonPrefixes
}

// peerDeletes is another node's answer to PendingDeletes: the keys it
// deleted and has not destaged.
type peerDeletes struct {
	keys  map[string]bool
	calls atomic.Int32
}

func (p *peerDeletes) PendingDeletes(ctx context.Context, bucket string, keys, prefixes []string) (deleted, under []string, err error) {
	p.calls.Add(1)
	for _, k := range keys {
		if p.keys[k] {
			deleted = append(deleted, k)
		}
	}
	for _, pre := range prefixes {
		for k := range p.keys {
			if strings.HasPrefix(k, pre) {
				under = append(under, pre)
				break
			}
		}
	}
	return deleted, under, nil
}

// Keys another node deleted (the owner, with the deletes not destaged yet)
// are left out of this node's listing of the backend, and so is a common
// prefix whose every key is deleted, here or there. A prefix with a key
// left stays.
func TestListHidesOtherNodesPendingDeletes(t *testing.T) {
	peers := &peerDeletes{keys: map[string]bool{"gone": true, "dir/a": true, "half/a": true}}
	e, tr := gatedWriteback(t, tier.Config{Peers: peers})
	ctx := context.Background()
	for _, k := range []string{"dir/a", "dir/b", "gone", "half/a", "half/b", "kept"} {
		remotePut(t, e.raw, k, []byte(k))
	}
	if err := tr.Delete(ctx, "wback", "dir/b"); err != nil { // deleted here
		t.Fatal(err)
	}
	objs, prefixes := listKeys(t, tr, "wback", object.ListOptions{Delimiter: "/"})
	if strings.Join(objs, ",") != "kept" || strings.Join(prefixes, ",") != "half/" {
		t.Errorf("listing: objects %q, common prefixes %q; want [kept] and [half/]", objs, prefixes)
	}
	if objs, _ = listKeys(t, tr, "wback", object.ListOptions{}); strings.Join(objs, ",") != "half/b,kept" {
		t.Errorf("flat listing: %q; want half/b,kept", objs)
	}
	if peers.calls.Load() == 0 {
		t.Error("the listing never asked the other nodes")
	}
}

// A pending write of a folder marker "dir/" rolls up into the common prefix
// "dir/" in a delimited listing, as in S3, and is listed once: as that
// prefix, not also as an object.
func TestListRollsUpPendingFolderMarker(t *testing.T) {
	e, tr := gatedWriteback(t, tier.Config{})
	ctx := context.Background()
	remotePut(t, e.raw, "dir/x", []byte("x"))
	if _, err := tr.Put(ctx, "wback", "dir/", bytesReader(nil), putOpts(0)); err != nil {
		t.Fatal(err)
	}
	objs, prefixes := listKeys(t, tr, "wback", object.ListOptions{Delimiter: "/"})
	if len(objs) != 0 || strings.Join(prefixes, ",") != "dir/" {
		t.Errorf("delimited listing: objects %q, common prefixes %q; want no objects and [dir/]", objs, prefixes)
	}
}

// validate=always: a GET reflects the backend as of the request. A full GET
// that finds an older fill in progress waits and revalidates; a range GET is
// served by the backend rather than from a fill that started before it.
func TestValidateAlwaysRangeIgnoresOlderFill(t *testing.T) {
	e := newEnv(t, "fs")
	e.be.set(func(c *ctl) { c.slow = 3 * time.Millisecond })
	tr := e.newTier(t, tier.Config{}, map[string]tier.Bucket{"data": {Mode: tier.ModeCache, Validate: tier.Validate{Policy: tier.ValidateAlways}}})
	ctx := context.Background()
	v1 := backendtest.Body(21, 4<<20)
	v2 := backendtest.Body(22, 4<<20)
	remotePut(t, e.raw, "k", v1)
	r, err := tr.Get(ctx, "data", "k", nil) // starts the fill of v1
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := io.ReadFull(r, make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	remotePut(t, e.raw, "k", v2) // the remote changes while v1 fills
	rr, err := tr.Get(ctx, "data", "k", &object.Range{Offset: 0, Length: 100})
	data := readAll(t, rr, err)
	if bytes.Equal(data, v1[:100]) {
		t.Fatal("validate=always range GET issued after the remote changed returned the old version's bytes")
	}
	if !bytes.Equal(data, v2[:100]) {
		t.Fatal("range GET returned neither version")
	}
}

// kmsETags serves objects as the s3 backend reports SSE-KMS or SSE-C
// objects: ETags of 32 hex digits that are not the MD5 of the body, marked
// as such.
type kmsETags struct{ *ctl }

const kmsETag = "0123456789abcdef0123456789abcdef"

func (k kmsETags) Get(ctx context.Context, key string, rng *object.Range) (io.ReadCloser, backend.Attrs, error) {
	rc, a, err := k.ctl.Get(ctx, key, rng)
	a.ETag, a.ETagNotMD5 = kmsETag, true
	return rc, a, err
}

func (k kmsETags) Stat(ctx context.Context, key string) (backend.Attrs, error) {
	a, err := k.ctl.Stat(ctx, key)
	a.ETag, a.ETagNotMD5 = kmsETag, true
	return a, err
}

// A cold GET of an object whose ETag looks like an MD5 but is not the
// body's (an encrypted object) serves the object.
func TestColdGetOfEncryptedObject(t *testing.T) {
	e := newEnv(t, "fs")
	tr := e.newTier(t, tier.Config{}, map[string]tier.Bucket{"data": {Mode: tier.ModeCache, Backend: kmsETags{e.be}}})
	body := backendtest.Body(31, 100<<10)
	remotePut(t, e.raw, "enc", body)
	r, err := tr.Get(context.Background(), "data", "enc", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("cold GET of an object with a non-MD5 hex ETag failed after %d of %d bytes: %v", len(data), len(body), err)
	}
	if !bytes.Equal(data, body) {
		t.Fatal("cold GET returned other bytes")
	}
}

// A cold GET that arrives while a PUT of the same key is in progress waits
// for the write, but returns as soon as its context ends, whatever the PUT
// does.
func TestGetWaitingForWriteHonoursContext(t *testing.T) {
	e := newEnv(t, "fs")
	tr := e.newTier(t, tier.Config{}, cacheBucket)
	remotePut(t, e.raw, "k", []byte("old version"))
	pr, pw := io.Pipe()
	putDone := make(chan error, 1)
	go func() {
		_, err := tr.Put(context.Background(), "data", "k", pr, putOpts(10))
		putDone <- err
	}()
	if _, err := pw.Write([]byte("ab")); err != nil { // the PUT is under way
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		r, err := tr.Get(ctx, "data", "k", nil)
		if err == nil {
			r.Close()
		}
		got <- err
	}()
	returned := false
	select {
	case err := <-got:
		returned = true
		t.Logf("GET returned: %v", err)
	case <-time.After(3 * time.Second):
		t.Error("GET whose context ended 200ms ago is still blocked behind a stalled PUT")
	}
	pw.CloseWithError(io.ErrUnexpectedEOF)
	<-putDone
	if !returned {
		<-got
	}
}

// gatedWriteback is a tier with the write-back bucket wback over an fs
// backend whose uploads wait until the test ends: its writes and deletes
// stay pending.
func gatedWriteback(t *testing.T, cfg tier.Config) (*env, *tier.Tier) {
	t.Helper()
	e := newEnv(t, "fs")
	gate := make(chan struct{})
	t.Cleanup(func() { close(gate) })
	e.be.set(func(c *ctl) { c.gate = gate })
	return e, e.newTier(t, cfg, wbBucket)
}
