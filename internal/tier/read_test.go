package tier_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/backend/backendtest"
	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/store"
	"github.com/slipstream-io/slipstream/internal/tier"
)

type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

func bytesReader(b []byte) io.Reader { return onlyReader{bytes.NewReader(b)} }

var cacheBucket = map[string]tier.Bucket{"data": {Mode: tier.ModeCache}}

func TestColdThenWarm(t *testing.T) {
	kinds(t, func(t *testing.T, kind string) {
		e := newEnv(t, kind)
		tr := e.newTier(t, tier.Config{}, cacheBucket)
		ctx := context.Background()
		body := backendtest.Body(1, 3<<20+17)
		a := remotePut(t, e.raw, "set/obj", body)

		r, err := tr.Get(ctx, "data", "set/obj", nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, warm := r.(*store.Reader); warm {
			t.Fatal("first GET was served locally")
		}
		if got := r.Info(); got.Size != int64(len(body)) || got.ETag != a.ETag {
			t.Errorf("cold info %+v, backend %+v", got, a)
		}
		if data := readAll(t, r, nil); !bytes.Equal(data, body) {
			t.Fatal("cold GET content differs")
		}
		eventually(t, "local copy", func() bool { _, err := e.local.Stat(ctx, "data", "set/obj"); return err == nil })
		info, _ := e.local.Stat(ctx, "data", "set/obj")
		if info.ETag != a.ETag || info.BackendETag != a.ETag || info.Dirty || info.Size != int64(len(body)) {
			t.Errorf("local copy %+v", info)
		}
		gets := e.be.fullGets.Load()
		r, err = tr.Get(ctx, "data", "set/obj", nil)
		if _, warm := r.(*store.Reader); err != nil || !warm {
			t.Fatalf("second GET not warm: %T %v", r, err)
		}
		if data := readAll(t, r, err); !bytes.Equal(data, body) {
			t.Fatal("warm GET content differs")
		}
		if e.be.fullGets.Load() != gets || gets != 1 {
			t.Errorf("backend GETs: %d then %d, want 1 and no more", gets, e.be.fullGets.Load())
		}
		// A warm range is local too.
		r, err = tr.Get(ctx, "data", "set/obj", &object.Range{Offset: 5, Length: 10})
		if data := readAll(t, r, err); !bytes.Equal(data, body[5:15]) {
			t.Error("warm range differs")
		}
		if c := tr.Counters(); c.ColdHits != 1 || c.WarmHits != 2 {
			t.Errorf("counters %+v, want 1 cold and 2 warm", c)
		}
		if _, err := tr.Get(ctx, "data", "missing", nil); !errors.Is(err, object.ErrNotFound) {
			t.Errorf("missing object: %v", err)
		}
		if _, err := e.local.Stat(ctx, "data", "missing"); !errors.Is(err, object.ErrNotFound) {
			t.Error("a missing object left something local")
		}
		spoolEmpty(t, e.dir+"/spool")
	})
}

func TestSingleFlight(t *testing.T) {
	kinds(t, func(t *testing.T, kind string) {
		e := newEnv(t, kind)
		e.be.set(func(c *ctl) { c.slow = 2 * time.Millisecond })
		tr := e.newTier(t, tier.Config{}, cacheBucket)
		body := backendtest.Body(2, 2<<20)
		remotePut(t, e.raw, "hot", body)
		if e.proxy != nil {
			e.proxy.Reset()
		}
		const readers = 8
		var wg sync.WaitGroup
		errs := make(chan error, readers)
		start := make(chan struct{})
		for i := 0; i < readers; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				r, err := tr.Get(context.Background(), "data", "hot", nil)
				if err != nil {
					errs <- err
					return
				}
				defer r.Close()
				data, err := io.ReadAll(r)
				if err == nil && !bytes.Equal(data, body) {
					err = errors.New("content differs")
				}
				errs <- err
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
		if n := e.be.fullGets.Load() + e.be.rangeGets.Load(); n != 1 {
			t.Errorf("%d concurrent cold GETs made %d backend requests, want 1", readers, n)
		}
		if e.proxy != nil {
			if n := e.proxy.Count("GET", "/remote/hot"); n != 1 {
				t.Errorf("the S3 server saw %d GETs, want 1", n)
			}
		}
	})
}

func TestFailedFillLeavesNothing(t *testing.T) {
	for _, mode := range []string{"truncated", "corrupt"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, "fs")
			e.be.set(func(c *ctl) {
				c.slow = time.Millisecond
				if mode == "truncated" {
					c.failAfter = 1 << 20
				} else {
					c.corrupt = true
				}
			})
			tr := e.newTier(t, tier.Config{}, cacheBucket)
			ctx := context.Background()
			body := backendtest.Body(3, 2<<20)
			remotePut(t, e.raw, "bad", body)
			var wg sync.WaitGroup
			errs := make(chan error, 4)
			for i := 0; i < 4; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r, err := tr.Get(ctx, "data", "bad", nil)
					if err == nil {
						_, err = io.Copy(io.Discard, r)
						r.Close()
					}
					errs <- err
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err == nil {
					t.Error("a waiter of a failed fill got no error")
				}
			}
			if _, err := e.local.Stat(ctx, "data", "bad"); !errors.Is(err, object.ErrNotFound) {
				t.Errorf("failed fill left a local object: %v", err)
			}
			spoolEmpty(t, e.dir+"/spool")
			// Healed backend: the next GET fills.
			e.be.set(func(c *ctl) { c.failAfter, c.corrupt = 0, false })
			r, err := tr.Get(ctx, "data", "bad", nil)
			if data := readAll(t, r, err); !bytes.Equal(data, body) {
				t.Error("refill content differs")
			}
		})
	}
}

func TestParallelRangeFill(t *testing.T) {
	kinds(t, func(t *testing.T, kind string) {
		e := newEnv(t, kind)
		tr := e.newTier(t, tier.Config{ParallelThreshold: 1 << 20, PartSize: 256 << 10, FillParallel: 3}, cacheBucket)
		body := backendtest.Body(4, 3<<20+1234)
		remotePut(t, e.raw, "big", body)
		if e.proxy != nil {
			e.proxy.Reset()
		}
		r, err := tr.Get(context.Background(), "data", "big", nil)
		if data := readAll(t, r, err); !bytes.Equal(data, body) {
			t.Fatal("parallel fill delivered wrong bytes")
		}
		parts := int64((len(body) + 256<<10 - 1) / (256 << 10))
		if f, rg := e.be.fullGets.Load(), e.be.rangeGets.Load(); f != 1 || rg != parts-1 {
			t.Errorf("backend requests: %d full + %d ranges, want 1 + %d", f, rg, parts-1)
		}
		if e.proxy != nil {
			ranged := 0
			for _, q := range e.proxy.Requests() {
				if q.Method == "GET" && strings.HasPrefix(q.Range, "bytes=") {
					ranged++
				}
			}
			if int64(ranged) != parts-1 {
				t.Errorf("S3 server saw %d range GETs, want %d", ranged, parts-1)
			}
		}
		info, _, err := tr.Fill(context.Background(), "data", "big")
		if err != nil || info.Size != int64(len(body)) {
			t.Fatalf("local copy: %+v %v", info, err)
		}
		lr, err := e.local.Get(context.Background(), "data", "big", nil)
		if data := readAll(t, lr, err); !bytes.Equal(data, body) {
			t.Error("local copy of a parallel fill differs")
		}
	})
}

func TestRangeOnCold(t *testing.T) {
	kinds(t, func(t *testing.T, kind string) {
		e := newEnv(t, kind)
		e.be.set(func(c *ctl) { c.slow = 3 * time.Millisecond })
		tr := e.newTier(t, tier.Config{}, cacheBucket)
		ctx := context.Background()
		body := backendtest.Body(5, 4<<20)
		remotePut(t, e.raw, "r", body)
		began := time.Now()
		r, err := tr.Get(ctx, "data", "r", &object.Range{Offset: 4<<20 - 1000, Length: 500})
		if err != nil {
			t.Fatal(err)
		}
		if off, n := r.Range(); off != 4<<20-1000 || n != 500 || r.Info().Size != 4<<20 {
			t.Errorf("range reader reports %d+%d of %d", off, n, r.Info().Size)
		}
		data := readAll(t, r, nil)
		rangeTook := time.Since(began)
		if !bytes.Equal(data, body[4<<20-1000:4<<20-500]) {
			t.Fatal("cold range differs")
		}
		if e.be.rangeGets.Load() != 1 {
			t.Errorf("range GETs to the backend: %d, want 1", e.be.rangeGets.Load())
		}
		// The whole object fills in the background; it is slower (64 reads of 3 ms).
		if _, err := e.local.Stat(ctx, "data", "r"); err == nil {
			t.Errorf("whole object already local after %v: the range waited for the fill", rangeTook)
		}
		info, _, err := tr.Fill(ctx, "data", "r")
		if err != nil || info.Size != int64(len(body)) {
			t.Fatalf("background fill: %+v %v", info, err)
		}
		if e.be.fullGets.Load() != 1 {
			t.Errorf("full GETs: %d, want 1 (the background fill)", e.be.fullGets.Load())
		}
	})
}

func TestStaleness(t *testing.T) {
	kinds(t, func(t *testing.T, kind string) {
		for _, pol := range []string{"never", "always", "ttl:300ms"} {
			t.Run(pol, func(t *testing.T) {
				e := newEnv(t, kind)
				v, err := tier.ParseValidate(pol, 0)
				if err != nil {
					t.Fatal(err)
				}
				tr := e.newTier(t, tier.Config{}, map[string]tier.Bucket{"data": {Mode: tier.ModeCache, Validate: v}})
				ctx := context.Background()
				v1, v2 := []byte("version one"), []byte("version two!")
				remotePut(t, e.raw, "k", v1)
				if _, _, err := tr.Fill(ctx, "data", "k"); err != nil {
					t.Fatal(err)
				}
				time.Sleep(20 * time.Millisecond) // distinct mtimes for the fs backend
				remotePut(t, e.raw, "k", v2)
				r, err := tr.Get(ctx, "data", "k", nil)
				got := readAll(t, r, err)
				want := v1
				if pol == "always" {
					want = v2
				}
				if !bytes.Equal(got, want) {
					t.Errorf("right after the remote overwrite: %q, want %q", got, want)
				}
				if pol == "ttl:300ms" {
					time.Sleep(450 * time.Millisecond)
					r, err := tr.Get(ctx, "data", "k", nil)
					if got := readAll(t, r, err); !bytes.Equal(got, v2) {
						t.Errorf("after the TTL: %q", got)
					}
				}
				if pol != "never" {
					// The refetch above stores v2 after the client has its
					// bytes: let it land before the remote delete.
					eventually(t, "the refetched copy to land", func() bool {
						i, err := e.local.Stat(ctx, "data", "k")
						return err == nil && i.Size == int64(len(v2))
					})
					if err := e.raw.Delete(ctx, "k"); err != nil {
						t.Fatal(err)
					}
					if pol == "ttl:300ms" {
						time.Sleep(450 * time.Millisecond)
					}
					if _, err := tr.Get(ctx, "data", "k", nil); !errors.Is(err, object.ErrNotFound) {
						t.Errorf("after a remote delete: %v", err)
					}
					if _, err := e.local.Stat(ctx, "data", "k"); !errors.Is(err, object.ErrNotFound) {
						t.Error("a copy deleted remotely stayed local")
					}
				}
			})
		}
	})
}

func TestParseValidate(t *testing.T) {
	cases := []struct {
		in   string
		want string
		ok   bool
	}{
		{"", "never", true}, {"never", "never", true}, {"always", "always", true},
		{"ttl:5m", "ttl:5m0s", true}, {"ttl:0s", "", false}, {"ttl:x", "", false}, {"sometimes", "", false},
		{"ttl", "ttl:1m0s", true}, // the node's default, here 1m
	}
	for _, c := range cases {
		v, err := tier.ParseValidate(c.in, time.Minute)
		if (err == nil) != c.ok || (c.ok && v.String() != c.want) {
			t.Errorf("ParseValidate(%q) = %v, %v", c.in, v, err)
		}
		if err != nil && !errors.Is(err, object.ErrInvalidArgument) {
			t.Errorf("ParseValidate(%q): error %v is not ErrInvalidArgument", c.in, err)
		}
	}
}

func TestPrefetchAndEvict(t *testing.T) {
	e := newEnv(t, "fs")
	tr := e.newTier(t, tier.Config{}, cacheBucket)
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		remotePut(t, e.raw, "ds/"+string(rune('a'+i)), backendtest.Body(int64(i), 1000+i))
	}
	remotePut(t, e.raw, "other", []byte("x"))
	var calls int
	prog, err := tr.Prefetch(ctx, "data", tier.PrefetchOptions{
		Prefix:   "ds/",
		Filter:   func(k string) bool { return k[len(k)-1]%2 == 0 },
		Parallel: 4,
		Progress: func(tier.PrefetchProgress) { calls++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	if prog.Listed != 10 || prog.Filled != 10 || prog.Failed != 0 || !prog.Done || calls != 11 {
		t.Errorf("progress %+v after %d callbacks", prog, calls)
	}
	n := 0
	_ = e.local.Walk(ctx, "data", func(i object.Info) error { n++; return nil })
	if n != 10 {
		t.Errorf("%d objects local after prefetch, want 10", n)
	}
	prog, _ = tr.Prefetch(ctx, "data", tier.PrefetchOptions{Prefix: "ds/"})
	if prog.Warm != 10 || prog.Filled != 10 {
		t.Errorf("second prefetch %+v", prog)
	}
	objs, bytes, err := tr.Evict(ctx, "data", "ds/")
	if err != nil || objs != 20 || bytes == 0 {
		t.Errorf("evict: %d objects %d bytes %v", objs, bytes, err)
	}
	if _, err := e.local.Stat(ctx, "data", "ds/a"); !errors.Is(err, object.ErrNotFound) {
		t.Error("evicted object still local")
	}
}
