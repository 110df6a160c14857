package tier_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/backend"
	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/store"
	"github.com/slipstream-io/slipstream/internal/tier"
)

// localHooks runs its hooks around the store's calls: afterStat once after
// the next Stat returns, beforeGet once before the next Get.
type localHooks struct {
	*store.Store
	afterStat, beforeGet onceHook
}

func (l *localHooks) Stat(ctx context.Context, bucket, key string) (object.Info, error) {
	info, err := l.Store.Stat(ctx, bucket, key)
	l.afterStat.fire()
	return info, err
}

func (l *localHooks) Get(ctx context.Context, bucket, key string, rng *object.Range) (*store.Reader, error) {
	l.beforeGet.fire()
	return l.Store.Get(ctx, bucket, key, rng)
}

// A range GET of a cold object finds it local by the time it looks for a
// fill (a fill ended meanwhile); the copy is evicted before it opens it.
// The GET must then treat the object as cold again, as a full GET does,
// and not answer that an object the backend holds does not exist.
func TestColdRangeSurvivesEvictionOfNewCopy(t *testing.T) {
	e := newEnv(t, "fs")
	ctx := context.Background()
	body := []byte("0123456789abcdef")
	remotePut(t, e.raw, "k", body)
	lh := &localHooks{Store: e.local}
	tr, err := tier.New(ctx, tier.Config{SpoolDir: e.dir + "/spool"}, lh)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if err := tr.AddBucket("data", tier.Bucket{Mode: tier.ModeCache, Backend: e.be}); err != nil {
		t.Fatal(err)
	}
	lh.afterStat.arm(func() {
		// The GET found the object cold; another request fills it now.
		if _, _, err := tr.Fill(ctx, "data", "k"); err != nil {
			t.Error(err)
		}
		lh.beforeGet.arm(func() {
			if err := e.local.EvictObject(ctx, "data", "k"); err != nil {
				t.Error(err)
			}
		})
	})
	r, err := tr.Get(ctx, "data", "k", &object.Range{Offset: 2, Length: 4})
	if err != nil {
		t.Fatalf("range GET of an object the backend holds: %v", err)
	}
	if got := readAll(t, r, nil); string(got) != "2345" {
		t.Fatalf("range GET = %q, want %q", got, "2345")
	}
}

// gatedBodies holds the bodies of the backend's full GETs until release is
// closed; opened is signalled once per full GET, after the object was
// opened (its version chosen).
type gatedBodies struct {
	*ctl
	opened  chan struct{}
	release chan struct{}
}

type gatedReader struct {
	io.ReadCloser
	release chan struct{}
}

func (g gatedReader) Read(p []byte) (int, error) {
	<-g.release
	return g.ReadCloser.Read(p)
}

func (g *gatedBodies) Get(ctx context.Context, key string, rng *object.Range) (io.ReadCloser, backend.Attrs, error) {
	rc, a, err := g.ctl.Get(ctx, key, rng)
	if err != nil || rng != nil {
		return rc, a, err
	}
	g.opened <- struct{}{}
	return gatedReader{ReadCloser: rc, release: g.release}, a, nil
}

// validate=always: a GET reflects the backend as of the request. A fill that
// started before the request and commits while the GET looks for one (after
// the GET found the object cold) holds the version of its start: the GET
// must validate that copy, not serve it as it is.
func TestValidateAlwaysChecksCopyFilledMeanwhile(t *testing.T) {
	for _, rng := range []*object.Range{nil, {Offset: 0, Length: 2}} {
		t.Run(map[bool]string{true: "full", false: "range"}[rng == nil], func(t *testing.T) {
			e := newEnv(t, "fs")
			ctx := context.Background()
			remotePut(t, e.raw, "k", []byte("v0"))
			gb := &gatedBodies{ctl: e.be, opened: make(chan struct{}, 4), release: make(chan struct{})}
			lh := &localHooks{Store: e.local}
			tr, err := tier.New(ctx, tier.Config{SpoolDir: e.dir + "/spool"}, lh)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			if err := tr.AddBucket("data", tier.Bucket{Mode: tier.ModeCache, Backend: gb, Validate: tier.Validate{Policy: tier.ValidateAlways}}); err != nil {
				t.Fatal(err)
			}
			filled := make(chan error, 1)
			go func() {
				_, _, err := tr.Fill(ctx, "data", "k")
				filled <- err
			}()
			select {
			case <-gb.opened: // the fill has v0 open
			case <-time.After(5 * time.Second):
				close(gb.release)
				t.Fatal("fill did not start")
			}
			time.Sleep(10 * time.Millisecond)
			remotePut(t, e.raw, "k", []byte("v1"))
			lh.afterStat.arm(func() {
				// The GET found the object cold; the older fill commits.
				close(gb.release)
				select {
				case err := <-filled:
					if err != nil {
						t.Error(err)
					}
				case <-time.After(5 * time.Second):
					t.Error("fill did not end")
				}
			})
			r, err := tr.Get(ctx, "data", "k", rng)
			if got := readAll(t, r, err); string(got) != "v1" {
				t.Fatalf("validate=always GET issued after the remote changed = %q, want %q", got, "v1")
			}
			if errors.Is(err, object.ErrNotFound) {
				t.Fatal(err)
			}
		})
	}
}

// A cache copy that records no backend version (committed by another path
// than a fill or a write-through) is not a copy of a backend version: a GET
// that validates it (validate=always or an expired ttl) must neither
// replace it with the backend's older version nor drop it because the
// backend does not hold the key.
func TestValidationKeepsCopyWithoutBackendVersion(t *testing.T) {
	for _, remote := range []bool{true, false} {
		t.Run(map[bool]string{true: "older remote", false: "new key"}[remote], func(t *testing.T) {
			e := newEnv(t, "fs")
			ctx := context.Background()
			if remote {
				remotePut(t, e.raw, "k", []byte("v0"))
			}
			pd := &putDone{Store: e.local, done: make(chan error, 10)}
			tr, err := tier.New(ctx, tier.Config{SpoolDir: e.dir + "/spool"}, pd)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			if err := tr.AddBucket("data", tier.Bucket{Mode: tier.ModeCache, Backend: e.be, Validate: tier.Validate{Policy: tier.ValidateAlways}}); err != nil {
				t.Fatal(err)
			}
			mp := []byte("committed-by-another-path")
			if _, err := e.local.Put(ctx, "data", "k", bytesReader(mp), storePut(len(mp))); err != nil {
				t.Fatal(err)
			}
			r, err := tr.Get(ctx, "data", "k", nil)
			if got := readAll(t, r, err); !bytes.Equal(got, mp) {
				t.Errorf("GET: %q, want the local copy %q", got, mp)
			}
			select { // a refetch's commit, if the GET started one
			case err := <-pd.done:
				t.Errorf("the GET refetched the key (commit: %v)", err)
			case <-time.After(200 * time.Millisecond):
			}
			r, err = e.local.Get(ctx, "data", "k", nil)
			if got := readAll(t, r, err); !bytes.Equal(got, mp) {
				t.Fatalf("local copy after the GET: %q, want %q", got, mp)
			}
		})
	}
}
