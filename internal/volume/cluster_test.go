package volume_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/volume"
	"github.com/slipstream-io/slipstream/internal/volume/nbd"
)

// testNode is an in-process node: a local replica served over HTTP on a
// loopback port that survives kill/restart.
type testNode struct {
	t     testing.TB
	id    string
	local *volume.Local
	mps   []string
	addr  string
	srv   *http.Server
	h     *volume.Handler
	done  chan struct{}
	// writes counts chunk-mutating requests per chunk, by URL path.
	mu     sync.Mutex
	writes map[string]int
	puts   atomic.Int64
	syncs  atomic.Int64 // Sync calls served
	// hang, while set, makes every chunk write block until it is cleared.
	hang atomic.Bool
}

func startNode(t testing.TB, id string) *testNode {
	l, mps := newLocal(t, 2)
	n := &testNode{t: t, id: id, local: l, mps: mps, addr: "127.0.0.1:0", writes: map[string]int{}}
	n.start()
	t.Cleanup(n.kill)
	return n
}

func (n *testNode) start() {
	n.t.Helper()
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ { // the old port may linger briefly after a kill
		if ln, err = net.Listen("tcp", n.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		n.t.Fatal(err)
	}
	n.addr = ln.Addr().String()
	n.h = volume.NewHandler(countingReplica{n.local, n})
	n.srv = &http.Server{Handler: n.h}
	n.done = make(chan struct{})
	go func() { defer close(n.done); _ = n.srv.Serve(ln) }()
}

// kill closes the listener and every connection, like a crashed node.
func (n *testNode) kill() {
	if n.srv == nil {
		return
	}
	n.srv.Close()
	n.h.Close()
	<-n.done
	n.srv = nil
}

// countingReplica counts the chunk-mutating calls a node serves.
type countingReplica struct {
	*volume.Local
	n *testNode
}

func (c countingReplica) count(vol string, chunk int64) {
	for c.n.hang.Load() {
		time.Sleep(5 * time.Millisecond)
	}
	c.n.puts.Add(1)
	c.n.mu.Lock()
	c.n.writes[fmt.Sprintf("%s/%d", vol, chunk)]++
	c.n.mu.Unlock()
}

func (c countingReplica) WriteAt(ctx context.Context, vol string, epoch uint64, chunk int64, p []byte, off int64, sync bool) error {
	c.count(vol, chunk)
	return c.Local.WriteAt(ctx, vol, epoch, chunk, p, off, sync)
}

func (c countingReplica) Zero(ctx context.Context, vol string, epoch uint64, chunk int64, off, n int64, punch bool) error {
	c.count(vol, chunk)
	return c.Local.Zero(ctx, vol, epoch, chunk, off, n, punch)
}

func (c countingReplica) Sync(ctx context.Context, vol string, chunks []int64) error {
	c.n.syncs.Add(1)
	return c.Local.Sync(ctx, vol, chunks)
}

func (n *testNode) url() string { return "http://" + n.addr }

func (n *testNode) resetCounts() {
	n.mu.Lock()
	n.writes = map[string]int{}
	n.mu.Unlock()
	n.puts.Store(0)
}

func (n *testNode) chunksWritten() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.writes)
}

// openVolume opens a volume coordinated by nodes[0]: its own replica is
// called directly, the others over HTTP.
// remoteNode is a node a volume reaches over its chunk stream.
type remoteNode interface {
	nodeID() string
	url() string
}

func (n *testNode) nodeID() string { return n.id }

// openVolume opens a volume coordinated by self, with its local replica,
// over self and the other nodes.
func openVolume[N remoteNode](t *testing.T, spec volume.Spec, stateDir string, self *testNode, others ...N) *volume.Volume {
	t.Helper()
	return openConfig(t, volumeConfig(t, spec, stateDir, self, others...))
}

func volumeConfig[N remoteNode](t *testing.T, spec volume.Spec, stateDir string, self *testNode, others ...N) volume.Config {
	t.Helper()
	cfg := volume.Config{Spec: spec, Self: self.id, StateDir: stateDir, Replicas: map[string]volume.Replica{self.id: self.local},
		Nodes: []string{self.id}, OpTimeout: 2 * time.Second, ProbeInterval: 50 * time.Millisecond}
	for _, n := range others {
		cfg.Nodes = append(cfg.Nodes, n.nodeID())
		c, err := volume.NewClientConfig(volume.ClientConfig{BaseURL: n.url(), Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cfg.Replicas[n.nodeID()] = c
	}
	return cfg
}

func openConfig(t *testing.T, cfg volume.Config) *volume.Volume {
	t.Helper()
	v, err := volume.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return v
}

// waitInSync waits until no mirror of v is stale or down.
func waitInSync(t *testing.T, v *volume.Volume, d time.Duration) {
	t.Helper()
	waitFor(t, d, "the volume in sync", func() bool { return len(v.StaleChunks()) == 0 && len(v.Down()) == 0 })
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// compareMirrors checks that every chunk reads the same on every owner.
func compareMirrors(t *testing.T, v *volume.Volume, nodes ...*testNode) {
	t.Helper()
	ctx := context.Background()
	spec := v.Spec()
	byID := map[string]*testNode{}
	for _, n := range nodes {
		byID[n.id] = n
	}
	a, b := make([]byte, spec.ChunkSize), make([]byte, spec.ChunkSize)
	for c := int64(0); c < spec.Chunks(); c++ {
		owners := v.Owners(c)
		if err := byID[owners[0]].local.ReadAt(ctx, spec.Name, c, a, 0); err != nil {
			t.Fatal(err)
		}
		for _, o := range owners[1:] {
			if err := byID[o].local.ReadAt(ctx, spec.Name, c, b, 0); err != nil {
				t.Fatal(err)
			}
			if string(a) != string(b) {
				t.Fatalf("chunk %d differs between %s and %s", c, owners[0], o)
			}
		}
	}
}

func TestSpecValidate(t *testing.T) {
	for _, tt := range []struct {
		spec volume.Spec
		ok   bool
	}{
		{volume.Spec{Name: "v", Size: 1 << 30}, true},
		{volume.Spec{Name: "v", Size: 1 << 30, ChunkSize: 3 << 20}, false},
		{volume.Spec{Name: "v", Size: 0}, false},
		{volume.Spec{Name: "_v", Size: 1}, false},
		{volume.Spec{Name: "v", Size: 1, Copies: 9}, false},
		{volume.Spec{Name: "v", Size: 1, ID: "0af3"}, true},
		{volume.Spec{Name: "v@0af3", Size: 1}, false},
		{volume.Spec{Name: "v", Size: 1, ID: "a/b"}, false},
		{volume.Spec{Name: "v", Size: 1, ID: "a@b"}, false},
	} {
		err := tt.spec.WithDefaults().Validate()
		if (err == nil) != tt.ok {
			t.Errorf("%+v: %v", tt.spec, err)
		}
	}
}

func TestMirroredFailoverAndResync(t *testing.T) {
	ctx := context.Background()
	a, b := startNode(t, "a"), startNode(t, "b")
	spec := volume.Spec{Name: "vol1", Size: 32 << 20, ChunkSize: 1 << 20, Copies: 2}
	state := t.TempDir()
	v := openVolume(t, spec, state, a, b)
	if v.Size() != spec.Size || !v.MultiConn() {
		t.Fatal("size or multi-conn wrong")
	}
	pattern := func(seed byte, n int) []byte {
		p := make([]byte, n)
		for i := range p {
			p[i] = seed + byte(i*7)
		}
		return p
	}
	// A write spanning two chunks lands on both mirrors.
	if err := v.WriteAt(ctx, pattern(1, 8192), 1<<20-4096, false); err != nil {
		t.Fatal(err)
	}
	if err := v.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	compareMirrors(t, v, a, b)
	got := make([]byte, 4096)
	if err := b.local.ReadAt(ctx, "vol1", 1, got, 0); err != nil || string(got) != string(pattern(1, 8192)[4096:]) {
		t.Fatalf("second mirror lacks the data: %v", err)
	}

	// Kill b: writes and reads go on without error; touched chunks are stale on b.
	b.kill()
	for i := int64(0); i < 5; i++ {
		if err := v.WriteAt(ctx, pattern(byte(i), 4096), i*(3<<20)+4096, false); err != nil {
			t.Fatalf("write with a mirror down: %v", err)
		}
	}
	if err := v.WriteZeroes(ctx, 2<<20, 4096, true, true); err != nil {
		t.Fatal(err)
	}
	if err := v.Flush(ctx); err != nil {
		t.Fatalf("flush with a mirror down: %v", err)
	}
	if err := v.ReadAt(ctx, got, 3<<20+4096); err != nil || string(got) != string(pattern(1, 4096)) {
		t.Fatalf("read with a mirror down: %v", err)
	}
	stale := v.StaleChunks()["b"]
	if stale != 6 {
		t.Fatalf("stale chunks on b = %d, want 6 (5 writes + 1 zero)", stale)
	}
	// The stale map is durable: a second volume over the same state sees it.
	v2, err := volume.Open(ctx, volume.Config{Spec: spec, Nodes: []string{"a", "b"}, StateDir: state,
		Replicas: map[string]volume.Replica{"a": a.local, "b": volume.NewClient("http://127.0.0.1:1", nil)}, ProbeInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if got := v2.StaleChunks()["b"]; got != 6 {
		t.Errorf("persisted stale map has %d chunks for b, want 6", got)
	}
	v2.Close()

	// Bring b back: only the stale chunks are copied, then the mirrors agree.
	b.resetCounts()
	b.start()
	waitInSync(t, v, 10*time.Second)
	if n := b.chunksWritten(); n != 6 {
		t.Errorf("resync wrote %d chunks on b, want exactly the 6 stale ones", n)
	}
	compareMirrors(t, v, a, b)

	// Trim punches the range on every mirror: it reads as zeros and frees space.
	before := allocated(t, b.mps)
	if err := v.Trim(ctx, 0, 2<<20); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*testNode{a, b} {
		if err := n.local.ReadAt(ctx, "vol1", 1, got, 0); err != nil || !allZeroes(got) {
			t.Fatalf("trimmed range on %s not zero: %v", n.id, err)
		}
	}
	if after := allocated(t, b.mps); after >= before {
		t.Errorf("trim freed nothing on b: %d -> %d bytes", before, after)
	}

	// Reads prefer the local mirror: with a's data corrupted behind the
	// volume's back, a read returns a's bytes.
	if err := a.local.WriteAt(ctx, "vol1", 0, 0, []byte("local"), 0, false); err != nil {
		t.Fatal(err)
	}
	if err := v.ReadAt(ctx, got[:5], 0); err != nil || string(got[:5]) != "local" {
		t.Errorf("read did not come from the local mirror: %q %v", got[:5], err)
	}

	// With every mirror of a chunk gone, I/O fails with ErrNoMirror.
	b.kill()
	v1 := openVolume(t, volume.Spec{Name: "solo", Size: 8 << 20, ChunkSize: 1 << 20, Copies: 1}, t.TempDir(), a, b)
	var remote int64 = -1
	for c := int64(0); c < 8; c++ {
		if v1.Owners(c)[0] == "b" {
			remote = c
			break
		}
	}
	if remote < 0 {
		t.Fatal("no chunk placed on b")
	}
	if err := v1.WriteAt(ctx, got, remote<<20, false); !errors.Is(err, volume.ErrNoMirror) {
		t.Errorf("write to a chunk whose only mirror is down: %v", err)
	}
	if err := v1.ReadAt(ctx, got, remote<<20); !errors.Is(err, volume.ErrNoMirror) {
		t.Errorf("read of a chunk whose only mirror is down: %v", err)
	}
	if err := v1.ReadAt(ctx, got, 8<<20); !errors.Is(err, volume.ErrOutOfRange) {
		t.Errorf("read past the end: %v", err)
	}
}

func TestPlacementSpreadsChunks(t *testing.T) {
	nodes := []*testNode{startNode(t, "n1"), startNode(t, "n2"), startNode(t, "n3")}
	v := openVolume(t, volume.Spec{Name: "spread", Size: 300 << 20, ChunkSize: 1 << 20, Copies: 2}, t.TempDir(), nodes[0], nodes[1:]...)
	count := map[string]int{}
	for c := int64(0); c < 300; c++ {
		o := v.Owners(c)
		if len(o) != 2 || o[0] == o[1] {
			t.Fatalf("chunk %d owners %v", c, o)
		}
		for _, id := range o {
			count[id]++
		}
	}
	for id, k := range count {
		if k < 150 || k > 250 {
			t.Errorf("node %s holds %d of 600 chunk copies: %v", id, k, count)
		}
	}
}

// TestHungMirror: a mirror that stops answering is failed by the stream
// watchdog; writes go on without error and it is resynchronised later.
func TestHungMirror(t *testing.T) {
	ctx := context.Background()
	a, b := startNode(t, "a"), startNode(t, "b")
	v := openVolume(t, volume.Spec{Name: "hung", Size: 8 << 20, ChunkSize: 1 << 20, Copies: 2}, t.TempDir(), a, b)
	data := make([]byte, 4096)
	for i := range data {
		data[i] = byte(i)
	}
	b.hang.Store(true)
	start := time.Now()
	if err := v.WriteAt(ctx, data, 0, false); err != nil {
		t.Fatalf("write with a hung mirror: %v", err)
	}
	if d := time.Since(start); d < 500*time.Millisecond || d > 5*time.Second {
		t.Errorf("write took %v; want about the 1 s replica timeout", d)
	}
	if v.StaleChunks()["b"] != 1 {
		t.Fatalf("stale: %v", v.StaleChunks())
	}
	b.hang.Store(false)
	waitInSync(t, v, 10*time.Second)
	compareMirrors(t, v, a, b)
}

// TestSameNameNewVolume: a volume created under the name of a deleted one
// (a new ID) reads zeros even from a node that kept the old one's chunks
// (it was down for the delete), and deleting the old key spares the new.
func TestSameNameNewVolume(t *testing.T) {
	ctx := context.Background()
	a, b := startNode(t, "a"), startNode(t, "b")
	old := volume.Spec{Name: "v", Size: 8 << 20, ChunkSize: 1 << 20, Copies: 2, ID: "1"}
	v1 := openVolume(t, old, t.TempDir(), a, b)
	data := []byte("the old volume's data")
	if err := v1.WriteAt(ctx, data, 4096, true); err != nil {
		t.Fatal(err)
	}
	v1.Close()

	cur := old
	cur.ID = "2"
	v2 := openVolume(t, cur, t.TempDir(), a, b)
	got := make([]byte, len(data))
	if err := v2.ReadAt(ctx, got, 4096); err != nil {
		t.Fatal(err)
	}
	if string(got) != string(make([]byte, len(data))) {
		t.Fatalf("a new volume of the same name reads %q, want zeros", got)
	}
	if err := v2.WriteAt(ctx, []byte("new"), 0, true); err != nil {
		t.Fatal(err)
	}
	// b missed the delete; removing the old key later keeps the new one.
	if err := b.local.Delete(ctx, old.Key()); err != nil {
		t.Fatal(err)
	}
	if err := b.local.ReadAt(ctx, cur.Key(), 0, got[:3], 0); err != nil || string(got[:3]) != "new" {
		t.Fatalf("new volume on b after the old one's delete: %q %v", got[:3], err)
	}
	keys, err := b.local.Keys()
	if err != nil || len(keys) != 1 || keys[0] != cur.Key() {
		t.Fatalf("keys on b: %v %v, want [%s]", keys, err, cur.Key())
	}
}

// TestVolumeExtents: a volume reports holes from the local mirror of a
// chunk, and plain data where it has no in-sync local mirror.
func TestVolumeExtents(t *testing.T) {
	ctx := context.Background()
	a, b := startNode(t, "a"), startNode(t, "b")
	const chunk = 1 << 20
	spec := volume.Spec{Name: "sparse", Size: 16 * chunk, ChunkSize: chunk, Copies: 1, ID: "5"}
	v := openVolume(t, spec, t.TempDir(), a, b)
	local, remote := int64(-1), int64(-1)
	for i := int64(0); i < 16 && (local < 0 || remote < 0); i++ {
		if o := v.Owners(i); o[0] == "a" && local < 0 {
			local = i
		} else if o[0] == "b" && remote < 0 {
			remote = i
		}
	}
	if local < 0 || remote < 0 {
		t.Fatal("placement put every chunk on one node")
	}
	if err := v.WriteAt(ctx, make([]byte, 4096), local*chunk+8192, true); err != nil {
		t.Fatal(err)
	}
	type ext = nbd.Extent
	hole := func(n int64) ext { return ext{Length: n, Hole: true, Zero: true} }
	for _, tt := range []struct {
		name   string
		off, n int64
		want   []ext
	}{
		{"local chunk", local * chunk, chunk, []ext{hole(8192), {Length: 4096}, hole(chunk - 12288)}},
		{"remote chunk is data", remote * chunk, chunk, []ext{{Length: chunk}}},
		{"part of a local chunk", local*chunk + 4096, 8192, []ext{hole(4096), {Length: 4096}}},
	} {
		got, err := v.Extents(ctx, tt.off, tt.n)
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("%s: %+v %v, want %+v", tt.name, got, err, tt.want)
		}
	}
	if _, err := v.Extents(ctx, spec.Size-4096, 8192); !errors.Is(err, volume.ErrOutOfRange) {
		t.Errorf("extents past the end: %v", err)
	}
}

// marks is an in-memory StaleMarks (the cluster map's role); as gives a
// volume's view, which marks as its node.
type marks struct {
	mu      sync.Mutex
	stale   map[string][]string // mirror -> writers
	fail    error               // answer every call with this (a cluster without quorum)
	calls   int
	version uint64 // the map's version: raised by every change
}

type marksAs struct {
	*marks
	writer string
}

func (m *marks) as(writer string) marksAs { return marksAs{m, writer} }

func (m marksAs) SetStale(_ context.Context, mirror string, stale bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls++
	if m.fail != nil {
		return m.fail
	}
	m.setLocked(mirror, m.writer, stale)
	return nil
}

// ClearCovered clears every writer's mark: no writer here outlives its
// volume.
func (m marksAs) ClearCovered(_ context.Context, mirror string, writers []string, _ uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls++
	if m.fail != nil {
		return m.fail
	}
	for _, w := range writers {
		m.setLocked(mirror, w, false)
	}
	return nil
}

func (m *marks) setLocked(mirror, writer string, stale bool) {
	if m.stale == nil {
		m.stale = map[string][]string{}
	}
	m.version++
	ws := slices.DeleteFunc(m.stale[mirror], func(w string) bool { return w == writer })
	if stale {
		ws = append(ws, writer)
		slices.Sort(ws)
	}
	if len(ws) == 0 {
		delete(m.stale, mirror)
	} else {
		m.stale[mirror] = ws
	}
}

// list returns the stale mirrors.
func (m *marks) list() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.stale))
}

// ver returns the map's version (volume.Config.MapVersion).
func (m *marks) ver() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.version
}

// snapshot returns the marks as byWriter and the version they are of.
func (m *marks) snapshot() (map[string][]string, uint64) {
	m.mu.Lock()
	ver := m.version
	m.mu.Unlock()
	// A change in between only makes the marks newer than ver.
	return m.byWriter(), ver
}

// byWriter returns the marks as the cluster map hands them to a volume.
func (m *marks) byWriter() map[string][]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string][]string{}
	for k, ws := range m.stale {
		out[k] = slices.Clone(ws)
	}
	return out
}

// TestWriterDiesWhileAMirrorIsStale: the writing node dies while a mirror
// it was marking stale is down; another node that opens the volume must
// not read that mirror as current (its chunks whose other copy was on the
// dead writer fail instead), resynchronises it once it writes, and the
// mark clears when every chunk has caught up.
func TestWriterDiesWhileAMirrorIsStale(t *testing.T) {
	ctx := context.Background()
	a, b, c := startNode(t, "a"), startNode(t, "b"), startNode(t, "c")
	const chunk = 1 << 20
	spec := volume.Spec{Name: "vol", Size: 12 * chunk, ChunkSize: chunk, Copies: 2, ID: "9"}
	mk := &marks{}
	cfg := volumeConfig(t, spec, t.TempDir(), a, b, c)
	cfg.Marks = mk.as("a")
	v1 := openConfig(t, cfg)
	fill := func(v *volume.Volume, seed byte) {
		t.Helper()
		for i := range int64(12) {
			if err := v.WriteAt(ctx, bytes.Repeat([]byte{seed + byte(i)}, 4096), i*chunk, false); err != nil {
				t.Fatal(err)
			}
		}
	}
	fill(v1, 10)
	c.kill()
	fill(v1, 50) // c misses these
	if got := mk.list(); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("marks after writes missed by c: %v", got)
	}
	v1.Close()
	a.kill() // the writer dies; c returns
	c.start()

	cfg = volumeConfig(t, spec, t.TempDir(), b, a, c)
	cfg.Marks, cfg.Stale = mk.as("b"), mk.byWriter()
	v2 := openConfig(t, cfg)
	got := make([]byte, 4096)
	var withA []int64
	onB := int64(-1)
	for i := range int64(12) {
		owners := v2.Owners(i)
		err := v2.ReadAt(ctx, got, i*chunk)
		switch {
		case slices.Contains(owners, "b"):
			onB = i
			if err != nil || got[0] != 50+byte(i) {
				t.Errorf("chunk %d on %v: %v, first byte %d, want %d", i, owners, err, got[0], 50+i)
			}
		default: // a and c: a is dead, c missed the last write
			withA = append(withA, i)
			if !errors.Is(err, volume.ErrNoMirror) {
				t.Errorf("chunk %d on %v: %v (first byte %d), want ErrNoMirror rather than c's old copy", i, owners, err, got[0])
			}
		}
	}
	if len(withA) == 0 {
		t.Fatal("placement put no chunk on a and c only")
	}
	time.Sleep(200 * time.Millisecond) // a reader does not resynchronise
	if got := v2.StaleChunks()["c"]; got != 12 {
		t.Errorf("c's stale chunks before v2 writes: %d, want all 12", got)
	}
	// v2 writes: it is the writer now and resynchronises c from b where
	// it can; the chunks whose good copy is on a wait for a.
	if err := v2.WriteAt(ctx, []byte{50 + byte(onB)}, onB*chunk+4096, false); err != nil {
		t.Fatal(err)
	}
	// A write no mirror takes (a down, c stale) fails and marks nothing.
	if err := v2.WriteAt(ctx, []byte("x"), withA[0]*chunk, false); !errors.Is(err, volume.ErrNoMirror) {
		t.Fatalf("write to a chunk without a live in-sync mirror: %v", err)
	}
	waitFor(t, 10*time.Second, "c resynchronised from b", func() bool { return v2.StaleChunks()["c"] == len(withA) })
	if got := mk.list(); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("marks while a is down: %v", got)
	}
	a.start()
	waitFor(t, 10*time.Second, "the mark to clear", func() bool { return len(mk.list()) == 0 })
	for _, i := range withA {
		if err := v2.ReadAt(ctx, got, i*chunk); err != nil || got[0] != 50+byte(i) {
			t.Errorf("chunk %d after a returned: %v, first byte %d", i, err, got[0])
		}
	}
}

// TestStaleMarkUnavailable: when the cluster cannot record a stale mirror,
// writes go on (the writer's own stale map has the chunks) and stop
// asking for a while instead of waiting on every newly missed chunk.
func TestStaleMarkUnavailable(t *testing.T) {
	ctx := context.Background()
	a, b := startNode(t, "a"), startNode(t, "b")
	const chunk = 1 << 20
	mk := &marks{fail: errors.New("no quorum")}
	cfg := volumeConfig(t, volume.Spec{Name: "vol", Size: 16 * chunk, ChunkSize: chunk, Copies: 2, ID: "3"}, t.TempDir(), a, b)
	cfg.Marks = mk.as("a")
	v := openConfig(t, cfg)
	b.kill()
	for i := range int64(16) {
		if err := v.WriteAt(ctx, []byte("x"), i*chunk, false); err != nil {
			t.Fatal(err)
		}
	}
	mk.mu.Lock()
	calls := mk.calls
	mk.mu.Unlock()
	if calls == 0 || calls > 2 {
		t.Errorf("%d attempts to record the stale mirror during 16 writes, want 1 (then a back-off)", calls)
	}
	if got := v.StaleChunks()["b"]; got != 16 {
		t.Errorf("b's stale chunks: %d, want 16", got)
	}
}
