package tier_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/backend"
	"github.com/slipstream-io/slipstream/internal/backend/fs"
	s3backend "github.com/slipstream-io/slipstream/internal/backend/s3"
	"github.com/slipstream-io/slipstream/internal/backend/s3/s3test"
	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/store"
	"github.com/slipstream-io/slipstream/internal/tier"
)

var errInjected = errors.New("injected backend failure")

// ctl wraps a real backend to count, slow down and break operations.
type ctl struct {
	backend.Backend
	fullGets, rangeGets atomic.Int64
	puts, deletes       atomic.Int64

	mu        sync.Mutex
	slow      time.Duration // sleep per 64 KiB read from a body
	failAfter int64         // a full GET body fails after this many bytes (0 = never)
	corrupt   bool          // flip a byte of full GET bodies
	failPuts  bool          // Put and Delete fail
	gate      chan struct{} // if set, Put/Delete wait for it to close
	log       []string      // "put key etag" / "delete key" in completion order
}

func (c *ctl) set(fn func(c *ctl)) { c.mu.Lock(); fn(c); c.mu.Unlock() }

func (c *ctl) Get(ctx context.Context, key string, rng *object.Range) (io.ReadCloser, backend.Attrs, error) {
	if rng == nil {
		c.fullGets.Add(1)
	} else {
		c.rangeGets.Add(1)
	}
	rc, a, err := c.Backend.Get(ctx, key, rng)
	if err != nil {
		return nil, a, err
	}
	c.mu.Lock()
	r := &ctlReader{rc: rc, slow: c.slow}
	if rng == nil {
		r.failAfter, r.corrupt = c.failAfter, c.corrupt
	}
	c.mu.Unlock()
	return r, a, nil
}

func (c *ctl) wait(ctx context.Context) error {
	c.mu.Lock()
	gate, fail := c.gate, c.failPuts
	c.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	c.mu.Lock()
	fail = fail || c.failPuts
	c.mu.Unlock()
	if fail {
		return errInjected
	}
	return nil
}

func (c *ctl) Put(ctx context.Context, key string, r io.Reader, size int64, pa backend.PutAttrs) (backend.Attrs, error) {
	c.puts.Add(1)
	if err := c.wait(ctx); err != nil {
		_, _ = io.Copy(io.Discard, r)
		return backend.Attrs{}, err
	}
	a, err := c.Backend.Put(ctx, key, r, size, pa)
	if err == nil {
		c.mu.Lock()
		c.log = append(c.log, "put "+key+" "+a.ETag)
		c.mu.Unlock()
	}
	return a, err
}

func (c *ctl) Delete(ctx context.Context, key string) error {
	c.deletes.Add(1)
	if err := c.wait(ctx); err != nil {
		return err
	}
	err := c.Backend.Delete(ctx, key)
	if err == nil {
		c.mu.Lock()
		c.log = append(c.log, "delete "+key)
		c.mu.Unlock()
	}
	return err
}

func (c *ctl) ops() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.log...)
}

type ctlReader struct {
	rc        io.ReadCloser
	slow      time.Duration
	failAfter int64
	corrupt   bool
	n         int64
}

func (r *ctlReader) Read(p []byte) (int, error) {
	if len(p) > 64<<10 {
		p = p[:64<<10]
	}
	if r.slow > 0 {
		time.Sleep(r.slow)
	}
	if r.failAfter > 0 && r.n >= r.failAfter {
		return 0, errInjected
	}
	if r.failAfter > 0 && r.n+int64(len(p)) > r.failAfter {
		p = p[:r.failAfter-r.n]
	}
	m, err := r.rc.Read(p)
	if r.corrupt && r.n == 0 && m > 0 {
		p[0] ^= 0xff
	}
	r.n += int64(m)
	return m, err
}

func (r *ctlReader) Close() error { return r.rc.Close() }

// env is a node's store and a backend, real ones.
type env struct {
	kind    string
	dir     string // store + journal + spool live here
	local   *store.Store
	raw     backend.Backend // the backend without the wrapper
	be      *ctl
	srv     *s3test.Server // s3 only
	proxy   *s3test.Proxy  // s3 only: counts HTTP requests
	bucket  string         // remote bucket (s3) or directory (fs)
	fsDir   string
	backend backend.Spec
}

func newEnv(t testing.TB, kind string) *env {
	t.Helper()
	e := &env{kind: kind, dir: t.TempDir(), bucket: "remote"}
	switch kind {
	case "fs":
		e.fsDir = t.TempDir()
		e.backend = backend.Spec{Kind: "fs", Path: e.fsDir}
		b, err := fs.New(e.backend)
		if err != nil {
			t.Fatal(err)
		}
		e.raw = b
	case "s3":
		e.srv = s3test.Start(t)
		e.srv.CreateBucket(t, e.bucket)
		e.proxy = s3test.NewProxy(t, e.srv.Endpoint)
		e.backend = e.srv.Spec(e.bucket, "")
		e.backend.Endpoint = e.proxy.Endpoint
		b, err := s3backend.New(context.Background(), e.backend)
		if err != nil {
			t.Fatal(err)
		}
		e.raw = b
	default:
		t.Fatalf("kind %q", kind)
	}
	e.be = &ctl{Backend: e.raw}
	e.openStore(t)
	return e
}

func (e *env) openStore(t testing.TB) {
	t.Helper()
	st, err := store.Open(context.Background(), store.Config{Mountpaths: []string{e.dir + "/mp1", e.dir + "/mp2"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.local = st
	t.Cleanup(func() { st.Close() })
}

// remoteFile is where the backend keeps key on disk.
func (e *env) remoteFile(key string) string {
	if e.kind == "fs" {
		return e.fsDir + "/" + key
	}
	return e.srv.Dir + "/" + e.bucket + "/" + key
}

// destaged waits (bounded) until tr has destaged its backlog and returns
// what the remote holds for key, and the error reading it.
func (e *env) destaged(t *testing.T, tr *tier.Tier, key string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := tr.WaitDestaged(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(e.remoteFile(key))
	return string(b), err
}

func (e *env) newTier(t *testing.T, cfg tier.Config, buckets map[string]tier.Bucket) *tier.Tier {
	t.Helper()
	if cfg.SpoolDir == "" {
		cfg.SpoolDir = e.dir + "/spool"
	}
	if cfg.JournalDir == "" {
		cfg.JournalDir = e.dir + "/journal"
	}
	tr, err := tier.New(context.Background(), cfg, e.local)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	for name, b := range buckets {
		if b.Backend == nil && b.Mode != tier.ModeLocal {
			b.Backend = e.be
		}
		if err := tr.AddBucket(name, b); err != nil {
			t.Fatal(err)
		}
	}
	return tr
}

func remotePut(t *testing.T, b backend.Backend, key string, body []byte) backend.Attrs {
	t.Helper()
	a, err := b.Put(context.Background(), key, bytesReader(body), int64(len(body)), backend.PutAttrs{ContentType: "application/octet-stream"})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func readAll(t *testing.T, r object.Reader, err error) []byte {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func spoolEmpty(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		t.Errorf("spool dir holds %d files", len(ents))
	}
}

func kinds(t *testing.T, fn func(t *testing.T, kind string)) {
	for _, k := range []string{"fs", "s3"} {
		t.Run(k, func(t *testing.T) {
			if k == "s3" && testing.Short() {
				t.Skip("-short: no S3 server")
			}
			fn(t, k)
		})
	}
}

var _ = fmt.Sprintf

func newEnvB(b *testing.B) *env { return newEnv(b, "fs") }

func storePut(n int) store.PutOptions {
	return store.PutOptions{PutOptions: object.PutOptions{Size: int64(n)}}
}
