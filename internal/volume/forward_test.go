package volume_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/volume"
)

// forwarder is the cluster's volume.Forwarder: a chunk client per node.
type forwarder map[string]*volume.Client

func (f forwarder) Forward(ctx context.Context, node, vol string, op volume.Op) (uint64, error) {
	c, ok := f[node]
	if !ok {
		return 0, fmt.Errorf("no node %s", node)
	}
	return c.Forward(ctx, vol, op)
}

// sharedCluster is three nodes whose volumes share one claim, learn of
// claims and stale marks as a map would tell them (every few ms), and
// forward to each other.
type sharedCluster struct {
	t      *testing.T
	spec   volume.Spec
	nodes  map[string]*testNode
	claims *claimsMap
	marks  *marks
	fwd    forwarder
	mu     sync.Mutex
	vols   map[string]*volume.Volume
	held   map[string]bool // nodes the map does not reach for now
}

func newSharedCluster(t *testing.T, spec volume.Spec) *sharedCluster {
	return newSharedClusterConns(t, spec, 0)
}

// newSharedClusterConns is newSharedCluster whose nodes forward with
// streamConns stream connections (volume.ClientConfig.StreamConns; -1:
// plain HTTP requests).
func newSharedClusterConns(t *testing.T, spec volume.Spec, streamConns int) *sharedCluster {
	sc := &sharedCluster{t: t, spec: spec, nodes: map[string]*testNode{}, claims: &claimsMap{cas: true}, marks: &marks{},
		fwd: forwarder{}, vols: map[string]*volume.Volume{}, held: map[string]bool{}}
	for _, id := range []string{"a", "b", "c"} {
		sc.nodes[id] = startNode(t, id)
		c, err := volume.NewClientConfig(volume.ClientConfig{BaseURL: sc.nodes[id].url(), Timeout: time.Second, StreamConns: streamConns})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		sc.fwd[id] = c
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() { // the map reaching every node
		defer close(done)
		for ctx.Err() == nil {
			// The marks are read first: they are then at most as new as
			// the version told with them.
			stale, ver := sc.marks.snapshot()
			w, e := sc.claims.get()
			sc.mu.Lock()
			for id, v := range sc.vols {
				if sc.held[id] {
					continue
				}
				v.NoteClaim(w, e)
				v.NoteStaleAt(stale, ver)
			}
			sc.mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return sc
}

// hold stops the map from reaching node id (its map falls behind), or
// lets it reach it again.
func (sc *sharedCluster) hold(id string, held bool) {
	sc.mu.Lock()
	sc.held[id] = held
	sc.mu.Unlock()
}

// open opens the volume on node id, which then takes forwarded ops.
func (sc *sharedCluster) open(id string, holdIdle time.Duration) *volume.Volume {
	return sc.openWith(id, holdIdle, nil)
}

// openWith is open with the configuration changed by edit (if not nil).
func (sc *sharedCluster) openWith(id string, holdIdle time.Duration, edit func(*volume.Config)) *volume.Volume {
	var others []*testNode
	for o, n := range sc.nodes {
		if o != id {
			others = append(others, n)
		}
	}
	cfg := volumeConfig(sc.t, sc.spec, sc.t.TempDir(), sc.nodes[id], others...)
	cfg.Marks, cfg.Claims, cfg.Stale = sc.marks.as(id), sc.claims.as(id), sc.marks.byWriter()
	cfg.Writer, cfg.Epoch = sc.claims.get()
	cfg.Forward, cfg.HoldIdle, cfg.MapVersion = sc.fwd, holdIdle, sc.marks.ver
	if edit != nil {
		edit(&cfg)
	}
	v := openConfig(sc.t, cfg)
	sc.nodes[id].h.Coordinate(func(key string) *volume.Volume {
		if key == v.Spec().Key() {
			return v
		}
		return nil
	})
	sc.mu.Lock()
	sc.vols[id] = v
	sc.mu.Unlock()
	return v
}

// block is the data a writer writes at block i in round r.
func block(writer byte, i, r int) []byte {
	b := bytes.Repeat([]byte{writer}, 4096)
	binary.BigEndian.PutUint64(b[8:], uint64(i))
	binary.BigEndian.PutUint64(b[16:], uint64(r))
	return b
}

// writeRegion writes n random 4 KiB blocks of [base, base+blocks*4096)
// through v, flushing every 32, and returns the last round written to
// each block (-1: none).
func writeRegion(ctx context.Context, v *volume.Volume, writer byte, base int64, blocks, n int, seed uint64) ([]int, error) {
	last := make([]int, blocks)
	for i := range last {
		last[i] = -1
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	for r := range n {
		i := rng.IntN(blocks)
		if err := v.WriteAt(ctx, block(writer, i, r), base+int64(i)*4096, false); err != nil {
			return last, fmt.Errorf("write %d (block %d): %w", r, i, err)
		}
		last[i] = r
		if r%32 == 31 {
			if err := v.Flush(ctx); err != nil {
				return last, fmt.Errorf("flush after write %d: %w", r, err)
			}
		}
	}
	return last, v.Flush(ctx)
}

// checkRegion reads the region through v and compares it with last.
func checkRegion(t *testing.T, v *volume.Volume, writer byte, base int64, last []int) {
	t.Helper()
	got := make([]byte, len(last)*4096)
	if err := v.ReadAt(context.Background(), got, base); err != nil {
		t.Fatalf("reading writer %c's region: %v", writer, err)
	}
	for i, r := range last {
		want := make([]byte, 4096)
		if r >= 0 {
			want = block(writer, i, r)
		}
		if !bytes.Equal(got[i*4096:(i+1)*4096], want) {
			t.Fatalf("writer %c's block %d does not hold its last write (round %d)", writer, i, r)
		}
	}
}

// TestTwoWritersShareTheClaim: two clients write one volume at once
// through two nodes (disjoint ranges, with flushes). Neither gets an
// error: the node without the claim forwards its writes to the holder
// instead of taking the claim back and forth (fencing the other's writes
// in flight). A third node then reads every block's last write. Writes
// are forwarded over the chunk stream, and over plain HTTP requests.
func TestTwoWritersShareTheClaim(t *testing.T) {
	for _, tc := range []struct {
		name  string
		conns int
	}{{"stream", 0}, {"http", -1}} {
		t.Run(tc.name, func(t *testing.T) { testTwoWriters(t, tc.conns) })
	}
}

func testTwoWriters(t *testing.T, streamConns int) {
	const chunk = 1 << 20
	sc := newSharedClusterConns(t, volume.Spec{Name: "shared", Size: 8 * chunk, ChunkSize: chunk, Copies: 2, ID: "f1"}, streamConns)
	va, vb, vc := sc.open("a", time.Second), sc.open("b", time.Second), sc.open("c", time.Second)
	ctx := context.Background()
	const blocks, writes = 1024, 600
	var lastA, lastB []int
	var errA, errB error
	var wg sync.WaitGroup
	wg.Go(func() { lastA, errA = writeRegion(ctx, va, 'a', 0, blocks, writes, 1) })
	wg.Go(func() { lastB, errB = writeRegion(ctx, vb, 'b', blocks*4096, blocks, writes, 2) })
	wg.Wait()
	if errA != nil || errB != nil {
		t.Fatalf("writing through a: %v; through b: %v", errA, errB)
	}
	w, epoch := sc.claims.get()
	t.Logf("claim %d, held by %s", epoch, w)
	if epoch > 2 {
		t.Errorf("the claim moved %d times for %d writes through two nodes: the writers took it from each other", epoch, 2*writes)
	}
	checkRegion(t, vc, 'a', 0, lastA)
	checkRegion(t, vc, 'b', blocks*4096, lastB)
}

// TestForwardingFollowsTheClients: the claim stays with the node whose
// clients write; when they stop, the node that forwards claims the volume
// after HoldIdle. When the holder dies, the node that forwarded to it
// claims the volume and its client sees no error.
func TestForwardingFollowsTheClients(t *testing.T) {
	const chunk = 1 << 20
	const idle = 300 * time.Millisecond
	sc := newSharedCluster(t, volume.Spec{Name: "moves", Size: 8 * chunk, ChunkSize: chunk, Copies: 2, ID: "f2"})
	va, vb := sc.open("a", idle), sc.open("b", idle)
	ctx := context.Background()
	holder := func() string { w, _ := sc.claims.get(); return w }
	if err := vb.WriteAt(ctx, block('b', 0, 0), 0, false); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond) // the map reaches a
	if err := va.WriteAt(ctx, block('a', 0, 0), 4<<20, false); err != nil {
		t.Fatal(err)
	}
	if w := holder(); w != "b" {
		t.Fatalf("a's write right after b's took the claim (holder %q)", w)
	}
	// b's client is idle: after HoldIdle b refuses a's writes and a
	// claims the volume.
	waitFor(t, 5*time.Second, "the claim to follow the client to a", func() bool {
		if err := va.WriteAt(ctx, block('a', 1, 1), 4<<20+4096, false); err != nil {
			t.Fatal(err)
		}
		return holder() == "a"
	})

	// Now b's client writes on and on, and a's at the same time: b holds
	// the claim (a's client was idle when b's began) and a forwards.
	time.Sleep(idle + 100*time.Millisecond)
	stop := make(chan struct{})
	bDone := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				bDone <- nil
				return
			default:
			}
			if err := vb.WriteAt(ctx, block('b', i%16, i), int64(i%16)*4096, false); err != nil {
				bDone <- err
				return
			}
		}
	}()
	waitFor(t, 2*time.Second, "b to hold the claim", func() bool { return holder() == "b" })
	time.Sleep(30 * time.Millisecond) // the map reaches a
	for i := range 20 {
		if err := va.WriteAt(ctx, block('a', i, i), 4<<20+int64(i)*4096, false); err != nil {
			t.Fatalf("write %d through a while b writes: %v", i, err)
		}
	}
	if w := holder(); w != "b" {
		t.Errorf("a took the claim while b's client writes (holder %q)", w)
	}
	close(stop)
	if err := <-bDone; err != nil {
		t.Fatalf("b's client, writing while a's forwards: %v", err)
	}

	// b dies with a's forwarded writes not flushed: a claims the volume,
	// its writes go on, and its flush syncs what b applied for it.
	sc.nodes["b"].kill()
	last := make([]int, 20)
	for i := range last {
		last[i] = i
	}
	for i := range 16 {
		if err := va.WriteAt(ctx, block('a', i, 100+i), 4<<20+int64(i)*4096, false); err != nil {
			t.Fatalf("write %d through a after b died: %v", i, err)
		}
		last[i] = 100 + i
	}
	if err := va.Flush(ctx); err != nil {
		t.Fatalf("flush through a after b died (some writes went through b): %v", err)
	}
	if w := holder(); w != "a" {
		t.Errorf("claim held by %q after b died, want a", w)
	}
	checkRegion(t, va, 'a', 4<<20, last)
}

// TestFlushReachesTheHolder: writes forwarded without FUA are made
// durable by the forwarding node's Flush, on the holder; with the holder
// gone, by syncing their chunks on the mirrors directly.
func TestFlushReachesTheHolder(t *testing.T) {
	const chunk = 1 << 20
	sc := newSharedCluster(t, volume.Spec{Name: "flush", Size: 8 * chunk, ChunkSize: chunk, Copies: 2, ID: "f3"})
	va, vb := sc.open("a", time.Minute), sc.open("b", time.Minute)
	ctx := context.Background()
	holder := func() string { w, _ := sc.claims.get(); return w }
	if err := vb.WriteAt(ctx, block('b', 0, 0), 0, false); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond) // the map reaches a
	syncs := func() (n int64) {
		for _, nd := range sc.nodes {
			n += nd.syncs.Load()
		}
		return n
	}
	c := chunkOn(t, va, "a", "c") // its mirrors outlive b
	for round, kill := range []bool{false, true} {
		before := syncs()
		if err := va.WriteAt(ctx, block('a', 1, round), c*chunk, false); err != nil {
			t.Fatal(err)
		}
		if w := holder(); w != "b" {
			t.Fatalf("round %d: a claimed the volume (holder %q): nothing was forwarded", round, w)
		}
		if n := syncs() - before; n != 0 {
			t.Fatalf("round %d: %d syncs before the flush", round, n)
		}
		if kill {
			sc.nodes["b"].kill()
		}
		if err := va.Flush(ctx); err != nil {
			t.Fatalf("round %d: flush: %v", round, err)
		}
		if n := syncs() - before; n == 0 {
			t.Fatalf("round %d: a's flush synced nothing: the write forwarded to b is not durable", round)
		}
	}
	// A write beyond the end fails at once, without a claim taken for it.
	if err := va.WriteAt(ctx, make([]byte, 4096), 8*chunk, false); !errors.Is(err, volume.ErrOutOfRange) {
		t.Fatalf("write beyond the end: %v, want ErrOutOfRange", err)
	}
	if w := holder(); w != "b" {
		t.Errorf("a write beyond the end moved the claim to %q", w)
	}
}

// cutReplica is a replica that one volume cannot reach while cut is set
// (a partial partition: other nodes still reach it).
type cutReplica struct {
	volume.Replica
	cut *atomic.Bool
}

var errCut = errors.New("cut off")

func (r cutReplica) ReadAt(ctx context.Context, vol string, c int64, p []byte, off int64) error {
	if r.cut.Load() {
		return fmt.Errorf("%w: %w", volume.ErrReplicaError, errCut)
	}
	return r.Replica.ReadAt(ctx, vol, c, p, off)
}

func (r cutReplica) WriteAt(ctx context.Context, vol string, e uint64, c int64, p []byte, off int64, sync bool) error {
	if r.cut.Load() {
		return fmt.Errorf("%w: %w", volume.ErrReplicaError, errCut)
	}
	return r.Replica.WriteAt(ctx, vol, e, c, p, off, sync)
}

func (r cutReplica) Zero(ctx context.Context, vol string, e uint64, c int64, off, n int64, punch bool) error {
	if r.cut.Load() {
		return fmt.Errorf("%w: %w", volume.ErrReplicaError, errCut)
	}
	return r.Replica.Zero(ctx, vol, e, c, off, n, punch)
}

func (r cutReplica) Sync(ctx context.Context, vol string, cs []int64) error {
	if r.cut.Load() {
		return fmt.Errorf("%w: %w", volume.ErrReplicaError, errCut)
	}
	return r.Replica.Sync(ctx, vol, cs)
}

func (r cutReplica) Ping(ctx context.Context) error {
	if r.cut.Load() {
		return fmt.Errorf("%w: %w", volume.ErrReplicaError, errCut)
	}
	return r.Replica.Ping(ctx)
}

// TestReadsWaitForTheHoldersMarks: a client writes through c, which
// forwards its writes to a, the holder of the claim. a cannot reach c's
// mirror (a partial partition), so a write lands on a's mirror only and
// a marks c's stale; c's map is behind and does not show the mark yet.
// c's client then reads what it wrote. c must not read its own mirror as
// current: the read waits for c's map to show the mark, fails if it does
// not in time, and reads the write from a once it does. Over the chunk
// stream and over plain HTTP requests.
func TestReadsWaitForTheHoldersMarks(t *testing.T) {
	for _, tc := range []struct {
		name  string
		conns int
	}{{"stream", 0}, {"http", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			const chunk = 1 << 20
			sc := newSharedClusterConns(t, volume.Spec{Name: "marks", Size: 8 * chunk, ChunkSize: chunk, Copies: 2, ID: "f4"}, tc.conns)
			var cut atomic.Bool
			va := sc.openWith("a", time.Minute, func(cfg *volume.Config) {
				cfg.Replicas["c"] = cutReplica{cfg.Replicas["c"], &cut}
			})
			vc := sc.open("c", time.Minute)
			ctx := context.Background()
			k := chunkOn(t, va, "a", "c")
			off := k * chunk
			if err := va.WriteAt(ctx, block('a', 0, 0), 0, true); err != nil { // a holds the claim
				t.Fatal(err)
			}
			time.Sleep(30 * time.Millisecond) // the map reaches c
			if err := vc.WriteAt(ctx, block('c', 0, 0), off, true); err != nil {
				t.Fatal(err)
			}
			sc.hold("c", true)
			cut.Store(true)
			if err := vc.WriteAt(ctx, block('c', 0, 1), off, true); err != nil {
				t.Fatalf("write forwarded to a while a cannot reach c: %v", err)
			}
			if sent, _ := vc.Forwarded(); sent != 2 {
				t.Fatalf("c forwarded %d writes, want 2", sent)
			}
			if !slices.Contains(sc.marks.list(), "c") {
				t.Fatal("a did not mark c's mirror stale")
			}
			got := make([]byte, 4096)
			start := time.Now()
			err := vc.ReadAt(ctx, got, off)
			if !errors.Is(err, volume.ErrNoMirror) {
				t.Fatalf("read through c, whose map does not show the mark: %v (%s), want ErrNoMirror", err, describe(got))
			}
			t.Logf("the read failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
			time.AfterFunc(100*time.Millisecond, func() { sc.hold("c", false) })
			if err := vc.ReadAt(ctx, got, off); err != nil {
				t.Fatalf("read through c once its map shows the mark: %v", err)
			}
			if want := block('c', 0, 1); !bytes.Equal(got, want) {
				t.Fatalf("c read %s, want its last write (round 1)", describe(got))
			}
		})
	}
}

// describe tells which block() a 4 KiB block holds.
func describe(b []byte) string {
	if len(b) < 24 {
		return "short block"
	}
	return fmt.Sprintf("writer %q block %d round %d", b[0], binary.BigEndian.Uint64(b[8:]), binary.BigEndian.Uint64(b[16:]))
}
