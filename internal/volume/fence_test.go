package volume

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
)

// memClaims is a Claims shared by the volumes of one test: the cluster
// map's writer and epoch of one volume.
type memClaims struct {
	mu     sync.Mutex
	writer string
	epoch  uint64
}

func (c *memClaims) as(self string) Claims { return memClaimsAs{c, self} }

func (c *memClaims) get() (string, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writer, c.epoch
}

type memClaimsAs struct {
	*memClaims
	self string
}

func (c memClaimsAs) Claim(context.Context, uint64) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.writer != c.self {
		c.writer, c.epoch = c.self, c.epoch+1
	}
	return c.epoch, nil
}

// TestFencesRefuseOlderWriters: a replica refuses writes, zeroes and
// fences of an epoch lower than one it has seen for the volume, and
// remembers the epoch across a restart (Local) and per volume.
func TestFencesRefuseOlderWriters(t *testing.T) {
	ctx := context.Background()
	mps := []string{filepath.Join(t.TempDir(), "mp0"), filepath.Join(t.TempDir(), "mp1")}
	l, err := NewLocal(LocalConfig{Mountpaths: mps})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	p := bytes.Repeat([]byte{1}, 4096)
	steps := []struct {
		name string
		do   func(r Replica) error
		want error
	}{
		{"epoch 0 before any claim", func(r Replica) error { return r.WriteAt(ctx, "v", 0, 0, p, 0, false) }, nil},
		{"fence 2", func(r Replica) error { return r.Fence(ctx, "v", 2) }, nil},
		{"write 0", func(r Replica) error { return r.WriteAt(ctx, "v", 0, 0, p, 0, false) }, ErrFenced},
		{"write 1", func(r Replica) error { return r.WriteAt(ctx, "v", 1, 0, p, 0, false) }, ErrFenced},
		{"zero 1", func(r Replica) error { return r.Zero(ctx, "v", 1, 0, 0, 4096, true) }, ErrFenced},
		{"fence 1", func(r Replica) error { return r.Fence(ctx, "v", 1) }, ErrFenced},
		{"write 2", func(r Replica) error { return r.WriteAt(ctx, "v", 2, 0, p, 0, false) }, nil},
		{"write 3 raises", func(r Replica) error { return r.WriteAt(ctx, "v", 3, 0, p, 0, true) }, nil},
		{"write 2 after 3", func(r Replica) error { return r.WriteAt(ctx, "v", 2, 0, p, 0, false) }, ErrFenced},
		{"other volume unaffected", func(r Replica) error { return r.WriteAt(ctx, "w", 1, 0, p, 0, false) }, nil},
		{"restart keeps epoch 3", func(Replica) error {
			l.Close()
			var err error
			l, err = NewLocal(LocalConfig{Mountpaths: mps})
			return err
		}, nil},
		{"write 2 after restart", func(r Replica) error { return r.WriteAt(ctx, "v", 2, 0, p, 0, false) }, ErrFenced},
		{"write 3 after restart", func(r Replica) error { return r.WriteAt(ctx, "v", 3, 0, p, 0, false) }, nil},
	}
	for _, st := range steps {
		err := st.do(l)
		if st.want == nil && err != nil || st.want != nil && !errors.Is(err, st.want) {
			t.Fatalf("%s: %v, want %v", st.name, err, st.want)
		}
	}
	// Over the wire, both transports carry the epoch and the refusal.
	for _, conns := range []int{0, -1} {
		t.Run(fmt.Sprintf("client streams %d", conns), func(t *testing.T) {
			addr, stop := serveReplica(t, l, "127.0.0.1:0")
			defer stop()
			c, err := NewClientConfig(ClientConfig{BaseURL: "http://" + addr, StreamConns: conns})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := c.WriteAt(ctx, "v", 2, 0, p, 0, false); !errors.Is(err, ErrFenced) {
				t.Errorf("write 2: %v, want ErrFenced", err)
			}
			if err := c.Zero(ctx, "v", 2, 0, 0, 4096, false); !errors.Is(err, ErrFenced) {
				t.Errorf("zero 2: %v, want ErrFenced", err)
			}
			if err := c.Fence(ctx, "v", 2); !errors.Is(err, ErrFenced) {
				t.Errorf("fence 2: %v, want ErrFenced", err)
			}
			if err := c.Fence(ctx, "v", 4); err != nil {
				t.Errorf("fence 4: %v", err)
			}
			if err := c.WriteAt(ctx, "v", 4, 0, p, 0, false); err != nil {
				t.Errorf("write 4: %v", err)
			}
			if err := c.WriteAt(ctx, "v", 3, 0, p, 0, false); !errors.Is(err, ErrFenced) {
				t.Errorf("write 3: %v, want ErrFenced", err)
			}
		})
	}
}

// TestReturningWriterCannotOverwriteNewWriter: writer a comes back after
// b claimed the volume and wrote; a's resynchronisation of the mirror it
// marked reads the old data before b's write and writes it after. The
// mirror refuses a's copy, so b's acknowledged write stays on both
// mirrors, and a stops writing the volume.
func TestReturningWriterCannotOverwriteNewWriter(t *testing.T) {
	ctx := context.Background()
	nodes := []string{"x", "y"}
	reps := memReps(nodes...)
	claims := &memClaims{}
	cfgA := memConfig("a", t.TempDir(), 4*memCS, nodes, reps, nil)
	cfgA.Claims = claims.as("a")
	a := openMemConfig(t, cfgA)

	old := bytes.Repeat([]byte{1}, memCS)
	reps["y"].down.Store(true)
	if err := a.WriteAt(ctx, old, 0, false); err != nil {
		t.Fatal(err)
	}
	if got := a.StaleChunks()["y"]; got != 1 {
		t.Fatalf("y stale chunks on a: %d, want 1", got)
	}

	cfgB := memConfig("b", t.TempDir(), 4*memCS, nodes, reps, nil)
	cfgB.Claims = claims.as("b")
	cfgB.Writer, cfgB.Epoch = claims.get()
	b := openMemConfig(t, cfgB)
	newer := bytes.Repeat([]byte{2}, memCS)
	var once sync.Once
	wrote := make(chan error, 1)
	reps["x"].readHook = func(vol string, c int64) {
		if c == 0 {
			// a's resync has read chunk 0 from x: b writes it now.
			once.Do(func() { wrote <- b.WriteAt(ctx, newer, 0, false) })
		}
	}
	reps["y"].down.Store(false)
	if err := <-wrote; err != nil {
		t.Fatalf("b's write: %v", err)
	}
	waitUntil(t, "a's resync of y to end", func() bool { return a.fencedOff() || a.StaleChunks()["y"] == 0 })
	for _, id := range nodes {
		got := make([]byte, memCS)
		if err := reps[id].ReadAt(ctx, "vol@1", 0, got, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, newer) {
			t.Errorf("mirror %s holds %d..., want b's write (%d...)", id, got[0], newer[0])
		}
	}
	if !a.fencedOff() {
		t.Error("a still writes the volume")
	}
	if w, e := claims.get(); w != "b" || e != 2 {
		t.Errorf("claim %s/%d, want b/2", w, e)
	}
	// A client writing through a again claims the volume back.
	if err := a.WriteAt(ctx, old, memCS, false); err != nil {
		t.Fatalf("a writes again: %v", err)
	}
	if w, e := claims.get(); w != "a" || e != 3 {
		t.Errorf("claim %s/%d, want a/3", w, e)
	}
	if err := b.WriteAt(ctx, newer, memCS, false); !errors.Is(err, ErrFenced) {
		t.Errorf("b's write after a claimed it back: %v, want ErrFenced", err)
	}
}

// TestFenceBadInput: the HTTP form of the chunk protocol refuses a fence
// without an epoch and a malformed epoch with 400, and changes nothing.
func TestFenceBadInput(t *testing.T) {
	l, err := NewLocal(LocalConfig{Mountpaths: []string{t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr, stop := serveReplica(t, l, "127.0.0.1:0")
	defer stop()
	for _, tc := range []struct{ method, path string }{
		{http.MethodPost, "/volume/v/_fence"},
		{http.MethodPost, "/volume/v/_fence?epoch=x"},
		{http.MethodPost, "/volume/v/_fence?epoch=-1"},
		{http.MethodPut, "/volume/v/0?off=0&epoch=1e3"},
		{http.MethodPost, "/volume/v/0/zero?off=0&n=4096&epoch=%20"},
	} {
		req, err := http.NewRequest(tc.method, "http://"+addr+tc.path, bytes.NewReader(make([]byte, 4096)))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s %s: %s, want 400", tc.method, tc.path, resp.Status)
		}
	}
	if e, err := l.loadEpoch("v"); err != nil || e != 0 {
		t.Errorf("epoch after bad requests: %d %v, want 0", e, err)
	}
}
