package volume_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/volume"
)

// claimsMap is the cluster map's volume claim (writer and epoch); as
// gives a node's volume.Claims.
type claimsMap struct {
	mu     sync.Mutex
	writer string
	epoch  uint64
	cas    bool // a claim from an older epoch than the current one fails, as the map's does
}

type claimsAs struct {
	*claimsMap
	self string
}

func (c *claimsMap) as(self string) claimsAs { return claimsAs{c, self} }

func (c *claimsMap) get() (string, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writer, c.epoch
}

func (c claimsAs) Claim(_ context.Context, from uint64) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cas && c.writer != c.self && c.epoch != from {
		return 0, fmt.Errorf("%w: %s holds claim %d", volume.ErrFenced, c.writer, c.epoch)
	}
	if c.writer != c.self {
		c.writer = c.self
		c.epoch++
	}
	return c.epoch, nil
}

// chunkOn returns the first chunk of v whose owners are exactly ids.
func chunkOn(t *testing.T, v *volume.Volume, ids ...string) int64 {
	t.Helper()
	for c := range v.Spec().Chunks() {
		if o := slices.Sorted(slices.Values(v.Owners(c))); slices.Equal(o, ids) {
			return c
		}
	}
	t.Fatalf("no chunk on %v", ids)
	return -1
}

// TestReaderFollowsResyncAfterWriterDies is the user's sequence on three
// nodes: n3 serves the volume (it wrote it first); n1 dies; a client
// writes a chunk of n1 and n2 through n2, which marks n1 stale in the map
// and, once n1 restarts, resynchronises it and clears the mark; n2 dies.
// n3, which learnt of the mark and of its clearing from the map, reads
// the chunk from n1 at once: no EIO while it finds out that n1 restarted,
// and n1 is not held down.
func TestReaderFollowsResyncAfterWriterDies(t *testing.T) {
	ctx := context.Background()
	n1, n2, n3 := startNode(t, "n1"), startNode(t, "n2"), startNode(t, "n3")
	const chunk = 1 << 20
	spec := volume.Spec{Name: "vol", Size: 8 * chunk, ChunkSize: chunk, Copies: 2, ID: "7"}
	mk, claims := &marks{}, &claimsMap{}
	open := func(self *testNode, others ...*testNode) *volume.Volume {
		cfg := volumeConfig(t, spec, t.TempDir(), self, others...)
		cfg.Marks, cfg.Claims, cfg.Stale = mk.as(self.id), claims.as(self.id), mk.byWriter()
		cfg.Writer, cfg.Epoch = claims.get()
		return openConfig(t, cfg)
	}
	// follow hands v the map as a node's volumes.noteStale does.
	follow := func(v *volume.Volume) {
		v.NoteClaim(claims.get())
		v.NoteStale(mk.byWriter())
	}
	v3 := open(n3, n1, n2)
	for i := range int64(8) {
		if err := v3.WriteAt(ctx, bytes.Repeat([]byte{1}, chunk), i*chunk, true); err != nil {
			t.Fatal(err)
		}
	}
	c := chunkOn(t, v3, "n1", "n2")

	n1.kill()
	v2 := open(n2, n1, n3)
	want := bytes.Repeat([]byte{0x5a}, chunk)
	if err := v2.WriteAt(ctx, want, c*chunk, true); err != nil {
		t.Fatal(err)
	}
	if got := mk.byWriter(); !slices.Equal(got["n1"], []string{"n2"}) {
		t.Fatalf("marks after n2's write with n1 down: %v", got)
	}
	follow(v3)
	if got := v3.StaleChunks()["n1"]; got != 8 {
		t.Fatalf("n3 does not take every chunk of n1 as stale after n2's mark: %d", got)
	}

	n1.start()
	waitFor(t, 10*time.Second, "n2 to resynchronise n1 and clear its mark", func() bool { return len(mk.list()) == 0 })
	follow(v3)
	if got := v3.StaleChunks(); len(got) != 0 {
		t.Fatalf("n3 still takes chunks as stale after the map cleared every mark: %v", got)
	}

	n2.kill()
	got := make([]byte, chunk)
	if err := v3.ReadAt(ctx, got, c*chunk); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("chunk %d through n3 after n2's loss: %v (data right: %v)", c, err, bytes.Equal(got, want))
	}
	if down := v3.Down(); slices.Contains(down, "n1") {
		t.Errorf("n3 holds n1 down although it answers: %v", down)
	}
}

// TestReturnedMirrorNotFailedAgain: a mirror that failed (its node died)
// is back once its node answers again; the first call after that does not
// fail it again because the node restarted meanwhile (the probe that
// brought it back knows), so its chunks read at once when their other
// mirror is lost.
func TestReturnedMirrorNotFailedAgain(t *testing.T) {
	ctx := context.Background()
	a, b, c := startNode(t, "a"), startNode(t, "b"), startNode(t, "c")
	const chunk = 1 << 20
	spec := volume.Spec{Name: "vol", Size: 16 * chunk, ChunkSize: chunk, Copies: 2, ID: "8"}
	cfg := volumeConfig(t, spec, t.TempDir(), a, b, c)
	cfg.OpTimeout = 200 * time.Millisecond
	cfg.Marks = (&marks{}).as("a")
	v := openConfig(t, cfg)
	ch := int64(-1) // a chunk of b and c that reads try on b first
	for i := range spec.Chunks() {
		if slices.Equal(v.Owners(i), []string{"b", "c"}) {
			ch = i
			break
		}
	}
	if ch < 0 {
		t.Fatal("no chunk on b then c")
	}
	want := bytes.Repeat([]byte{7}, 4096)
	if err := v.WriteAt(ctx, want, ch*chunk, true); err != nil {
		t.Fatal(err)
	}
	b.kill()
	got := make([]byte, 4096)
	if err := v.ReadAt(ctx, got, ch*chunk); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read with b down: %v", err)
	}
	if down := v.Down(); !slices.Equal(down, []string{"b"}) {
		t.Fatalf("down after a read b failed: %v", down)
	}
	b.start()
	waitFor(t, 10*time.Second, "b back", func() bool { return len(v.Down()) == 0 })
	c.kill()
	if err := v.ReadAt(ctx, got, ch*chunk); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("chunk %d through b, back, after c's loss: %v", ch, err)
	}
	if down := v.Down(); !slices.Equal(down, []string{"c"}) && len(down) != 0 {
		t.Errorf("down after reading through b: %v, want at most c", down)
	}
}
