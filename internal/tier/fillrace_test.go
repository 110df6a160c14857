package tier_test

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/backend"
	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/store"
	"github.com/slipstream-io/slipstream/internal/tier"
)

// A fill (admin prefetch) of a key whose delete is not destaged yet must not
// bring the backend's copy back.
func TestFillSkipsPendingDelete(t *testing.T) {
	e := newEnv(t, "fs")
	ctx := context.Background()
	remotePut(t, e.raw, "k", []byte("v0"))
	gate := make(chan struct{})
	e.be.set(func(c *ctl) { c.gate = gate })
	tr := e.newTier(t, tier.Config{}, wbBucket)
	if err := tr.Delete(ctx, "wback", "k"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tr.Fill(ctx, "wback", "k"); err != nil {
		t.Logf("Fill: %v", err)
	}
	close(gate)
	waitDestaged(t, tr)
	if _, err := e.raw.Stat(ctx, "k"); err == nil {
		t.Fatal("delete not destaged")
	}
	mustBeDeleted(t, tr, "wback", "k")
}

// onceHook runs the function armed on it at the next fire, once.
type onceHook struct {
	mu sync.Mutex
	f  func()
}

func (h *onceHook) arm(f func()) {
	h.mu.Lock()
	h.f = f
	h.mu.Unlock()
}

func (h *onceHook) fire() {
	h.mu.Lock()
	f := h.f
	h.f = nil
	h.mu.Unlock()
	if f != nil {
		f()
	}
}

// statHook runs its hook before the store's next Stat.
type statHook struct {
	*store.Store
	onceHook
}

func (s *statHook) Stat(ctx context.Context, bucket, key string) (object.Info, error) {
	s.fire()
	return s.Store.Stat(ctx, bucket, key)
}

// A cold GET races a DELETE: the GET checks for a pending delete before the
// delete, its fill would start after it. The key must stay deleted.
func TestColdGetRacingDeleteStaysDeleted(t *testing.T) {
	e := newEnv(t, "fs")
	ctx := context.Background()
	remotePut(t, e.raw, "k", []byte("v0"))
	gate := make(chan struct{})
	e.be.set(func(c *ctl) { c.gate = gate })
	sh := &statHook{Store: e.local}
	tr, err := tier.New(ctx, tier.Config{SpoolDir: e.dir + "/spool", JournalDir: e.dir + "/journal"}, sh)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	tr.AddBucket("wback", tier.Bucket{Mode: tier.ModeWriteback, Backend: e.be})
	sh.arm(func() {
		if err := tr.Delete(ctx, "wback", "k"); err != nil {
			t.Error(err)
		}
	})
	r, err := tr.Get(ctx, "wback", "k", nil)
	if err == nil {
		b, _ := io.ReadAll(r)
		r.Close()
		t.Logf("GET concurrent with DELETE returned %q (ok either way)", b)
	}
	close(gate)
	waitDestaged(t, tr)
	time.Sleep(100 * time.Millisecond)
	mustBeDeleted(t, tr, "wback", "k")
}

// statHookBackend runs its hook after the backend's next Stat.
type statHookBackend struct {
	*ctl
	onceHook
}

func (s *statHookBackend) Stat(ctx context.Context, key string) (backend.Attrs, error) {
	a, err := s.ctl.Stat(ctx, key)
	s.fire()
	return a, err
}

// A GET that finds a stale clean copy (validate=always) decides to refetch;
// a writeback PUT is acknowledged during its backend Stat. The refetch must
// not commit the backend's version over the acknowledged dirty write.
func TestRefetchKeepsAcknowledgedDirtyWrite(t *testing.T) {
	e := newEnv(t, "fs")
	ctx := context.Background()
	remotePut(t, e.raw, "k", []byte("v0"))
	sb := &statHookBackend{ctl: e.be}
	tr := e.newTier(t, tier.Config{DestageParallel: 1}, map[string]tier.Bucket{"wback": {Mode: tier.ModeWriteback, Backend: sb,
		Validate: tier.Validate{Policy: tier.ValidateAlways}}})
	r0, err0 := tr.Get(ctx, "wback", "k", nil)
	readAll(t, r0, err0) // warm, clean copy of v0
	time.Sleep(50 * time.Millisecond)
	remotePut(t, e.raw, "k", []byte("v0-changed-in-backend"))
	gate := make(chan struct{})
	e.be.set(func(c *ctl) { c.gate = gate }) // v1 stays pending
	// the only destage worker is busy with another key
	if _, err := tr.Put(ctx, "wback", "blocker", bytesReader([]byte("b")), object.PutOptions{Size: 1}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	v1 := []byte("v1-acknowledged")
	sb.arm(func() {
		if _, err := tr.Put(ctx, "wback", "k", bytesReader(v1), object.PutOptions{Size: int64(len(v1))}); err != nil {
			t.Error(err)
		}
	})
	r, err := tr.Get(ctx, "wback", "k", nil)
	if err == nil {
		b, _ := io.ReadAll(r)
		r.Close()
		t.Logf("racing GET: %q", b)
	}
	time.Sleep(100 * time.Millisecond)
	if i, err := e.local.Stat(ctx, "wback", "k"); err == nil {
		t.Logf("local after race: size=%d dirty=%v", i.Size, i.Dirty)
	}
	close(gate)
	waitDestaged(t, tr)
	r, err = tr.Get(ctx, "wback", "k", nil)
	got := readAll(t, r, err)
	if string(got) != string(v1) {
		t.Fatalf("after destage GET = %q, want acknowledged %q; backend ops %v", got, v1, e.be.ops())
	}
}

// getHookBackend runs its hook before the backend's next Get.
type getHookBackend struct {
	*ctl
	onceHook
}

func (g *getHookBackend) Get(ctx context.Context, key string, rng *object.Range) (io.ReadCloser, backend.Attrs, error) {
	g.fire()
	return g.ctl.Get(ctx, key, rng)
}

// putDone reports the end of every Put through the tier's store.
type putDone struct {
	*store.Store
	done chan error
}

func (p *putDone) Put(ctx context.Context, bucket, key string, r io.Reader, opts store.PutOptions) (object.Info, error) {
	info, err := p.Store.Put(ctx, bucket, key, r, opts)
	p.done <- err
	return info, err
}

// TestFillKeepsCopyWrittenMeanwhile: a fill, a cold one or the refetch of
// a stale copy, does not replace a version committed to the store while it
// fetched (outside the tier's writes, as a multipart completion is before
// the tier adopts it): the GET is served the backend's bytes, the newer
// local copy stays.
func TestFillKeepsCopyWrittenMeanwhile(t *testing.T) {
	for _, warm := range []bool{false, true} {
		t.Run(map[bool]string{false: "cold fill", true: "refetch"}[warm], func(t *testing.T) {
			e := newEnv(t, "fs")
			ctx := context.Background()
			remotePut(t, e.raw, "k", []byte("v0"))
			gb := &getHookBackend{ctl: e.be}
			pd := &putDone{Store: e.local, done: make(chan error, 10)}
			tr, err := tier.New(ctx, tier.Config{SpoolDir: e.dir + "/spool"}, pd)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			if err := tr.AddBucket("cache", tier.Bucket{Mode: tier.ModeCache, Backend: gb, Validate: tier.Validate{Policy: tier.ValidateAlways}}); err != nil {
				t.Fatal(err)
			}
			if warm {
				r0, err0 := tr.Get(ctx, "cache", "k", nil)
				readAll(t, r0, err0) // warm, clean copy of v0
				if err := <-pd.done; err != nil {
					t.Fatal(err)
				}
				time.Sleep(20 * time.Millisecond)
			}
			remotePut(t, e.raw, "k", []byte("v0-changed-in-backend"))
			direct := []byte("committed-to-the-store-directly")
			gb.arm(func() {
				if _, err := e.local.Put(ctx, "cache", "k", bytesReader(direct), storePut(len(direct))); err != nil {
					t.Error(err)
				}
			})
			r, err := tr.Get(ctx, "cache", "k", nil)
			if got := readAll(t, r, err); string(got) != "v0-changed-in-backend" {
				t.Fatalf("fill served %q", got)
			}
			t.Logf("the fill's commit: %v", <-pd.done)
			lr, err := e.local.Get(ctx, "cache", "k", nil)
			if got := readAll(t, lr, err); string(got) != string(direct) {
				t.Fatalf("local copy = %q: the fill replaced the version committed meanwhile", got)
			}
		})
	}
}

// waitDestaged waits (up to 10 s) until tr has no write-back work left.
func waitDestaged(t *testing.T, tr *tier.Tier) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tr.WaitDestaged(ctx); err != nil {
		t.Fatal(err)
	}
}

// mustBeDeleted fails the test if a GET of bucket/key succeeds.
func mustBeDeleted(t *testing.T, tr *tier.Tier, bucket, key string) {
	t.Helper()
	r, err := tr.Get(context.Background(), bucket, key, nil)
	if err == nil {
		b, _ := io.ReadAll(r)
		r.Close()
		t.Fatalf("deleted %s/%s served after its delete reached the backend: %q", bucket, key, b)
	}
}
