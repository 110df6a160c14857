package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/placement"
	"github.com/slipstream-io/slipstream/internal/testnet"
	"github.com/slipstream-io/slipstream/internal/volume"
)

// testLocal is a volume.Local on mountpaths, closed when the test ends.
func testLocal(t *testing.T, mountpaths ...string) *volume.Local {
	t.Helper()
	vl, err := volume.NewLocal(volume.LocalConfig{Mountpaths: mountpaths})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vl.Close() })
	return vl
}

// TestCollectDropsMovedVolumes: a node removes its chunks of the volumes
// whose set it has left for good (drained off, re-placement ended), and
// keeps those of volumes it is still a mirror of, or was during a
// re-placement in progress, and of volumes without a set of their own.
func TestCollectDropsMovedVolumes(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	vl := testLocal(t, filepath.Join(root, "mp1"))
	for _, k := range []string{"moved@01", "draining@02", "mine@03", "legacy"} {
		if err := vl.WriteAt(ctx, k, 0, 0, []byte("data"), 0, false); err != nil {
			t.Fatal(err)
		}
	}
	m := cluster.NewMap()
	spec := func(name, id string, nodes, prev []string) cluster.VolumeSpec {
		return cluster.VolumeSpec{Name: name, ID: id, Size: 1 << 20, ChunkSize: 4096, Copies: 1, Nodes: nodes, Prev: prev}
	}
	m.Volumes["moved"] = spec("moved", "01", []string{"b", "c"}, nil)
	m.Volumes["draining"] = spec("draining", "02", []string{"b"}, []string{"a", "b"})
	m.Volumes["mine"] = spec("mine", "03", []string{"a", "b"}, nil)
	m.Volumes["legacy"] = spec("legacy", "", nil, nil)
	vs := &volumes{self: "a", meta: fixedMap{m}, local: vl, stateDir: filepath.Join(root, "state"), log: slog.New(slog.DiscardHandler),
		open: map[string]openVolume{}, clients: map[string]*volume.Client{}}
	vs.dropMoved(ctx, m)
	want := []string{"draining@02", "legacy", "mine@03"}
	var keys []string
	var err error
	for range 500 {
		if keys, err = vl.Keys(); err != nil || slices.Equal(keys, want) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil || !slices.Equal(keys, want) {
		t.Fatalf("volume keys %v (%v), want %v", keys, err, want)
	}
}

// TestSweepMovedChunks: once a volume's re-placement has ended, a node
// deletes (after sweepDelay) its chunks that HRW over the volume's set no
// longer gives it, and keeps the others; while a re-placement is in
// progress, and for a set it swept already, it deletes nothing.
func TestSweepMovedChunks(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	vl := testLocal(t, filepath.Join(root, "mp1"), filepath.Join(root, "mp2"))
	const chunks = 64
	for c := int64(0); c < chunks; c++ {
		if err := vl.WriteAt(ctx, "v@01", 0, c, []byte("data"), 0, false); err != nil {
			t.Fatal(err)
		}
	}
	ab, abc := []string{"a", "b"}, []string{"a", "b", "c"}
	spec := cluster.VolumeSpec{Name: "v", ID: "01", Size: chunks * 4096, ChunkSize: 4096, Copies: 2, Nodes: abc, Prev: ab, Copied: true}
	m := cluster.NewMap()
	m.Volumes["v"] = spec
	fm := &fixedMap{m}
	vs := &volumes{self: "a", meta: fm, local: vl, stateDir: filepath.Join(root, "state"), log: slog.New(slog.DiscardHandler),
		open: map[string]openVolume{}, clients: map[string]*volume.Client{}, sweepDelay: 10 * time.Millisecond}
	held := func() []int64 {
		t.Helper()
		cs, err := vl.Chunks("v@01")
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	vs.sweepMoved(ctx, m)
	time.Sleep(100 * time.Millisecond)
	if got := held(); len(got) != chunks {
		t.Fatalf("swept during the re-placement: %d chunks left", len(got))
	}
	ended := m.Clone()
	spec.Prev, spec.Copied = nil, false
	ended.Volumes["v"] = spec
	fm.m = ended
	vs.sweepMoved(ctx, ended)
	var want []int64
	for c := int64(0); c < chunks; c++ {
		if slices.Contains(placement.Owners(abc, volume.ChunkName("v", c), 2), "a") {
			want = append(want, c)
		}
	}
	if len(want) == chunks || len(want) == 0 {
		t.Fatalf("a owns %d of %d chunks", len(want), chunks)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Equal(held(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("after the end: holds %v, want %v", held(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Swept once per set: a chunk written again is not looked at.
	if err := vl.WriteAt(ctx, "v@01", 0, 0, []byte("data"), 0, false); err != nil {
		t.Fatal(err)
	}
	vs.sweepMoved(ctx, ended)
	time.Sleep(100 * time.Millisecond)
	again := slices.Compact(slices.Sorted(slices.Values(append([]int64{0}, want...))))
	if got := held(); !slices.Equal(got, again) {
		t.Fatalf("swept the same set again: holds %v, want %v", got, again)
	}
}

// TestCollectDeletedVolumes: a node that was away when volumes were
// deleted removes their chunks and stale maps once it sees the map, and
// keeps those of the live volumes (including a new one of a deleted one's
// name).
func TestCollectDeletedVolumes(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	vl := testLocal(t, filepath.Join(root, "mp1"), filepath.Join(root, "mp2"))
	stateDir := filepath.Join(root, "state")
	for _, k := range []string{"v@01", "v@02", "w", "keep"} {
		for c := int64(0); c < 4; c++ {
			if err := vl.WriteAt(ctx, k, 0, c, []byte("data"), 0, false); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.MkdirAll(filepath.Join(stateDir, k), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	m := cluster.NewMap()
	m.Volumes["v"] = cluster.VolumeSpec{Name: "v", Size: 1 << 20, ChunkSize: 4096, Copies: 1, ID: "02"}
	m.Volumes["keep"] = cluster.VolumeSpec{Name: "keep", Size: 1 << 20, ChunkSize: 4096, Copies: 1}
	m.DeletedVolumes = []string{"v@01", "w", "never-here"}
	vs := &volumes{self: "a", meta: fixedMap{m}, local: vl, stateDir: stateDir, log: slog.New(slog.DiscardHandler),
		open: map[string]openVolume{}, clients: map[string]*volume.Client{}}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); vs.collect(cctx) }()
	want := []string{"keep", "v@02"}
	deadline := time.Now().Add(10 * time.Second)
	for {
		keys, err := vl.Keys()
		if err != nil {
			t.Fatal(err)
		}
		if slices.Equal(keys, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("volume keys %v, want %v", keys, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	ents, err := os.ReadDir(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	var states []string
	for _, e := range ents {
		states = append(states, e.Name())
	}
	if !slices.Equal(states, want) {
		t.Errorf("state dirs %v, want %v", states, want)
	}
	got := make([]byte, 4)
	if err := vl.ReadAt(ctx, "v@02", 3, got, 0); err != nil || string(got) != "data" {
		t.Errorf("live volume's chunk: %q %v", got, err)
	}
}

// TestLookupAfterResizeKeepsOneVolume: after a resize a node holds one
// Volume per volume: Lookup grows the open one in place, so connections
// opened before and after share its stale maps and unsynced writes
// instead of keeping two over one stale file.
func TestLookupAfterResizeKeepsOneVolume(t *testing.T) {
	ctx := context.Background()
	m := cluster.NewMap()
	m.Volumes["v"] = cluster.VolumeSpec{Name: "v", Size: 1 << 20, ChunkSize: 4096, Copies: 1, ID: "01", Nodes: []string{"a"}}
	vs := testVolumes(t, m)
	before, err := vs.Lookup(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	if err := before.WriteAt(ctx, []byte("data"), 0, false); err != nil {
		t.Fatal(err)
	}
	spec := m.Volumes["v"]
	spec.Size = 2 << 20
	m.Volumes["v"] = spec
	after, err := vs.Lookup(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatal("Lookup after a resize opened a second Volume for the volume")
	}
	if after.Size() != 2<<20 {
		t.Errorf("size after the resize: %d, want %d", after.Size(), 2<<20)
	}
	if len(vs.open) != 1 || vs.open["v"].spec.Size != 2<<20 {
		t.Errorf("open volumes %v", vs.open)
	}
	p := make([]byte, 4)
	if err := after.ReadAt(ctx, p, 0); err != nil || string(p) != "data" {
		t.Errorf("read %q, %v", p, err)
	}
	if err := after.WriteAt(ctx, []byte("more"), 2<<20-4, false); err != nil {
		t.Fatal(err)
	}
	if err := after.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// markCalls is a volumeMarker that records its calls.
type markCalls struct{ calls []string }

func (m *markCalls) SetVolumeStale(_ context.Context, name, mirror, writer string, stale bool) error {
	m.calls = append(m.calls, fmt.Sprintf("%s %s %s %v", name, mirror, writer, stale))
	return nil
}

func (m *markCalls) ClearCoveredMark(_ context.Context, name, mirror, writer string, epoch uint64) error {
	m.calls = append(m.calls, fmt.Sprintf("%s %s %s covered %d", name, mirror, writer, epoch))
	return nil
}

func (m *markCalls) ClaimVolume(_ context.Context, name, id, node string, _ uint64) (cluster.VolumeSpec, error) {
	m.calls = append(m.calls, fmt.Sprintf("%s claim %s %s", name, id, node))
	return cluster.VolumeSpec{Name: name, ID: id, Writer: "other", Epoch: 7}, nil
}

func (m *markCalls) VolumePlaced(_ context.Context, name, id, node string, epoch uint64, nodes []string, lost []int64) error {
	m.calls = append(m.calls, fmt.Sprintf("%s placed %s %s %d %v lost %v", name, id, node, epoch, nodes, lost))
	return nil
}

func (m *markCalls) VolumeSettled(_ context.Context, name, id, node string, epoch uint64, nodes []string) error {
	m.calls = append(m.calls, fmt.Sprintf("%s settled %s %s %d %v", name, id, node, epoch, nodes))
	return nil
}

// TestClearCoveredSparesLiveWriters: a node that resynchronised a mirror
// in full clears the marks other writers left on it only for writers that
// can no longer write. Of a volume no node claimed, those are the writers
// the map does not hold alive (down, or gone from the map); of a claimed
// volume, every writer but the one holding the claim (the others are
// fenced off). Its own mark stays.
func TestClearCoveredSparesLiveWriters(t *testing.T) {
	for _, tc := range []struct {
		writer string
		want   []string
	}{
		{"", []string{"v b c covered 3", "v b gone covered 3"}},
		{"d", []string{"v b b covered 3", "v b c covered 3", "v b gone covered 3"}},
	} {
		m := cluster.NewMap()
		for id, st := range map[string]cluster.NodeState{"a": cluster.StateUp, "b": cluster.StateUp, "c": cluster.StateDown, "d": cluster.StateMaintenance} {
			m.Nodes[id] = cluster.NodeInfo{ID: id, State: st}
		}
		m.Volumes["v"] = cluster.VolumeSpec{Name: "v", Writer: tc.writer, Epoch: 3}
		mc := &markCalls{}
		sm := staleMarks{m: mc, name: "v", self: "a", meta: fixedMap{m}}
		if err := sm.ClearCovered(context.Background(), "b", []string{"a", "b", "c", "d", "gone"}, 3); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(mc.calls, tc.want) {
			t.Errorf("writer %q: calls %q, want %q", tc.writer, mc.calls, tc.want)
		}
		if err := sm.SetStale(context.Background(), "b", true); err != nil || mc.calls[len(mc.calls)-1] != "v b a true" {
			t.Errorf("SetStale marks as the node itself: %q %v", mc.calls, err)
		}
	}
}

// TestClaimTakenRightAfter: a claim the map shows another node holding
// once it applied (that node claimed right after) is refused as fenced.
func TestClaimTakenRightAfter(t *testing.T) {
	sm := staleMarks{m: &markCalls{}, name: "v", id: "x1", self: "a"}
	if _, err := sm.Claim(context.Background(), 0); !errors.Is(err, volume.ErrFenced) {
		t.Fatalf("claim: %v, want ErrFenced", err)
	}
}

// TestCollectOpensVolumesMarkedByThisNode: a node the map lists as the
// writer of a stale mark opens that volume when it sees the map (after a
// restart), so that it resynchronises the chunks and clears its mark: no
// other node can while it is alive. So does the node that holds the claim
// of a volume another node marked (one that lost its chunks marks its own
// mirror): the claim fences every other node off the resync.
func TestCollectOpensVolumesMarkedByThisNode(t *testing.T) {
	m := cluster.NewMap()
	for _, id := range []string{"a", "b"} {
		m.Nodes[id] = cluster.NodeInfo{ID: id, State: cluster.StateUp}
	}
	m.Volumes["marked"] = cluster.VolumeSpec{Name: "marked", Size: 1 << 20, ChunkSize: 4096, Copies: 2, ID: "01", Nodes: []string{"a", "b"},
		Stale: []string{"b"}, StaleBy: map[string][]string{"b": {"a"}}}
	m.Volumes["other"] = cluster.VolumeSpec{Name: "other", Size: 1 << 20, ChunkSize: 4096, Copies: 2, ID: "02", Nodes: []string{"a", "b"},
		Stale: []string{"a"}, StaleBy: map[string][]string{"a": {"b"}}}
	m.Volumes["claimed"] = cluster.VolumeSpec{Name: "claimed", Size: 1 << 20, ChunkSize: 4096, Copies: 2, ID: "03", Nodes: []string{"a", "b"},
		Writer: "a", Epoch: 4, Stale: []string{"b"}, StaleBy: map[string][]string{"b": {"b"}}}
	m.Volumes["claimed-by-b"] = cluster.VolumeSpec{Name: "claimed-by-b", Size: 1 << 20, ChunkSize: 4096, Copies: 2, ID: "04", Nodes: []string{"a", "b"},
		Writer: "b", Epoch: 4, Stale: []string{"b"}, StaleBy: map[string][]string{"b": {"b"}}}
	m.Volumes["claimed-clean"] = cluster.VolumeSpec{Name: "claimed-clean", Size: 1 << 20, ChunkSize: 4096, Copies: 2, ID: "05", Nodes: []string{"a", "b"},
		Writer: "a", Epoch: 4}
	vs := testVolumes(t, m)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); vs.collect(ctx) }()
	for _, name := range []string{"marked", "claimed"} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			vs.mu.Lock()
			_, open := vs.open[name]
			vs.mu.Unlock()
			if open {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("volume %q was not opened", name)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	cancel()
	<-done
	for _, name := range []string{"other", "claimed-by-b", "claimed-clean"} {
		if _, open := vs.open[name]; open {
			t.Errorf("opened volume %q, which this node neither marked nor holds the claim of with marks", name)
		}
	}
}

// testVolumes is node a's volumes over map m, with one mountpath; they
// are closed when the test ends.
func testVolumes(t *testing.T, m *cluster.Map) *volumes {
	t.Helper()
	root := t.TempDir()
	vl, err := volume.NewLocal(volume.LocalConfig{Mountpaths: []string{filepath.Join(root, "mp")}})
	if err != nil {
		t.Fatal(err)
	}
	vs := &volumes{self: "a", meta: fixedMap{m}, local: vl, stateDir: filepath.Join(root, "state"), log: slog.New(slog.DiscardHandler),
		open: map[string]openVolume{}, clients: map[string]*volume.Client{}}
	t.Cleanup(func() { vs.close(); vl.Close() })
	return vs
}

// TestLookupWaitsForTheLeadersMap: a volume is opened from a map caught up
// with the leader's, so that it knows every stale mark (a node that just
// restarted may not have applied the latest yet); with no leader to ask,
// it waits for an election (electionWait), and is not opened if none
// ends.
func TestLookupWaitsForTheLeadersMap(t *testing.T) {
	ctx := context.Background()
	m := cluster.NewMap()
	vs := testVolumes(t, m)
	vs.electionWait = 300 * time.Millisecond
	vs.sync = func(context.Context) error { return cluster.ErrNoLeader }
	m.Volumes["v"] = cluster.VolumeSpec{Name: "v", Size: 1 << 20, ChunkSize: 4096, Copies: 1, ID: "01", Nodes: []string{"a"}}
	start := time.Now()
	if _, err := vs.Lookup(ctx, "v"); !errors.Is(err, cluster.ErrNoLeader) || time.Since(start) < vs.electionWait {
		t.Fatalf("Lookup with no leader to ask: %v after %v, want ErrNoLeader after %v", err, time.Since(start), vs.electionWait)
	}
	synced := 0
	vs.sync = func(context.Context) error {
		if synced++; synced < 3 { // an election in progress
			return cluster.ErrNoLeader
		}
		return nil
	}
	if _, err := vs.Lookup(ctx, "v"); err != nil || synced != 3 {
		t.Fatalf("Lookup during an election: %v, after %d catch-ups (want 3)", err, synced)
	}
}

// TestOpenVolumeFollowsClearedMarks: a node that has a volume open (it
// serves a client) and learns from the map that another writer left a
// mirror stale reads no chunk of that mirror; once that writer has
// resynchronised the mirror and the map no longer lists the mark, the
// node's volume takes the mirror as current again (it holds no mark of
// its own on it).
func TestOpenVolumeFollowsClearedMarks(t *testing.T) {
	ctx := context.Background()
	m := cluster.NewMap()
	spec := cluster.VolumeSpec{Name: "v", Size: 1 << 20, ChunkSize: 4096, Copies: 2, ID: "01", Nodes: []string{"a", "b"}, Writer: "b", Epoch: 1}
	m.Volumes["v"] = spec
	vs := testVolumes(t, m)
	dev, err := vs.Lookup(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	v := dev.(*volume.Volume)
	marked := spec
	marked.Stale, marked.StaleBy = []string{"a"}, map[string][]string{"a": {"b"}}
	m2 := m.Clone()
	m2.Volumes["v"] = marked
	vs.noteStale(ctx, m2)
	if got := v.StaleChunks()["a"]; got != 256 {
		t.Fatalf("a's stale chunks after b's mark: %d, want every one (256)", got)
	}
	m3 := m.Clone()
	m3.Volumes["v"] = spec
	vs.noteStale(ctx, m3)
	if got := v.StaleChunks(); len(got) != 0 {
		t.Errorf("stale chunks after the map cleared b's mark: %v, want none", got)
	}
	p := make([]byte, 4)
	if err := v.ReadAt(ctx, p, 0); err != nil {
		t.Errorf("reading chunk 0 from a's mirror: %v", err)
	}
}

// TestWipedNodeTreatsWrittenVolumesAsLost: a node that starts from an
// empty data directory and empty mountpaths, listed as a mirror of a
// volume written before, does not take its (missing) chunks as in sync:
// they are lost, never read, and the volume is opened to mark the mirror
// stale in the map. A volume created after it started is not lost.
func TestWipedNodeTreatsWrittenVolumesAsLost(t *testing.T) {
	m := cluster.NewMap()
	for _, id := range []string{"a", "b"} {
		m.Nodes[id] = cluster.NodeInfo{ID: id, State: cluster.StateUp}
	}
	before := time.Now().Add(-time.Hour).UTC()
	m.Volumes["old"] = cluster.VolumeSpec{Name: "old", Size: 1 << 20, ChunkSize: 4096, Copies: 2, ID: "01", Nodes: []string{"a", "b"},
		Created: before, Writer: "b", Epoch: 1}
	m.Volumes["new"] = cluster.VolumeSpec{Name: "new", Size: 1 << 20, ChunkSize: 4096, Copies: 2, ID: "02", Nodes: []string{"a", "b"},
		Created: time.Now().Add(time.Hour).UTC(), Writer: "b", Epoch: 1}
	vs := testVolumes(t, m)
	vs.initState()
	oldKey, newKey := m.Volumes["old"].Key(), m.Volumes["new"].Key()
	ctx := context.Background()
	if err := vs.local.Fence(ctx, oldKey, 1); err != nil {
		t.Fatal(err)
	}
	if err := vs.local.Fence(ctx, newKey, 1); err != nil {
		t.Fatal(err)
	}
	if lost, err := vs.local.Lost(oldKey); err != nil || !lost {
		t.Fatalf("old volume: Lost = %v, %v; want true (the wiped node may have held its chunks)", lost, err)
	}
	if err := vs.local.ReadAt(ctx, oldKey, 0, make([]byte, 4096), 0); err == nil {
		t.Error("the wiped node's chunks of the old volume read as current")
	}
	if lost, err := vs.local.Lost(newKey); err != nil || lost {
		t.Fatalf("new volume: Lost = %v, %v; want false", lost, err)
	}
	waitFor := func(name string) {
		deadline := time.Now().Add(10 * time.Second)
		for {
			vs.mu.Lock()
			_, ok := vs.open[name]
			vs.mu.Unlock()
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("volume %s not opened to mark its lost mirror", name)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("old")
}

// TestVolumeClientsFollowTheMap: the chunk client of another node dials
// that node where the map shows it now: at its new address once it came
// back on other addresses (a new machine under a dead node's ID), and at
// its second address while its first does not answer.
func TestVolumeClientsFollowTheMap(t *testing.T) {
	ctx := context.Background()
	serve := func() (string, func()) {
		addr, _, stop := serveChunks(t)
		return addr, stop
	}
	deadAddr := testnet.RefusingAddr(t, "127.0.0.1")
	old, stopOld := serve()
	m := cluster.NewMap()
	m.Nodes["b"] = cluster.NodeInfo{ID: "b", IntraAddrs: []string{old}}
	vs := testVolumes(t, m)
	vs.mu.Lock()
	r := vs.replica(m, "b")
	vs.mu.Unlock()
	if err := r.WriteAt(ctx, "v", 0, 0, []byte("old"), 0, false); err != nil {
		t.Fatalf("write to b at its first address: %v", err)
	}
	stopOld()
	moved, stopMoved := serve()
	defer stopMoved()
	m.Nodes["b"] = cluster.NodeInfo{ID: "b", IntraAddrs: []string{deadAddr, moved}}
	var err error
	for range 3 { // the broken stream is found on the first call
		if err = r.WriteAt(ctx, "v", 0, 0, []byte("new"), 0, false); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("write to b after it moved: %v", err)
	}
	got := make([]byte, 3)
	if err := r.ReadAt(ctx, "v", 0, got, 0); err != nil || string(got) != "new" {
		t.Fatalf("read from b after it moved: %q, %v", got, err)
	}
	if err := r.Ping(ctx); err != nil {
		t.Fatalf("ping of b after it moved: %v", err)
	}
}

// TestVolumeInfoNamesRemovedNodes: a node of the volume's set that the
// map no longer lists is reported, with its chunk copies.
func TestVolumeInfoNamesRemovedNodes(t *testing.T) {
	m := cluster.NewMap()
	for _, id := range []string{"a", "c"} {
		m.Nodes[id] = cluster.NodeInfo{ID: id}
	}
	v := cluster.VolumeSpec{Name: "v", Size: 64 << 20, ChunkSize: 4 << 20, Copies: 2, ID: "01", Nodes: []string{"a", "b", "c"}}
	info := volumeInfo(m, v, nil, 0)
	if !slices.Equal(info.Removed, []string{"b"}) {
		t.Fatalf("removed %v, want [b]", info.Removed)
	}
	if info.ChunksPerNode["b"] == 0 {
		t.Error("no chunk copies counted on the removed node")
	}
	if info.Copying != 0 {
		t.Errorf("copying %d without a re-placement", info.Copying)
	}
	// Re-placed on a and c (b removed): each of b's copies gets a new
	// owner, and a and c keep theirs.
	moved := v
	moved.Prev, moved.Nodes = v.Nodes, []string{"a", "c"}
	after := volumeInfo(m, moved, nil, 0)
	if after.Copying != info.ChunksPerNode["b"] || len(after.Removed) != 0 ||
		after.ChunksPerNode["a"]+after.ChunksPerNode["c"] != 2*info.Chunks || after.ChunksPerNode["a"] < info.ChunksPerNode["a"] {
		t.Errorf("re-placed: copying %d (b held %d), per node %v (before %v)", after.Copying, info.ChunksPerNode["b"], after.ChunksPerNode, info.ChunksPerNode)
	}
	m.Nodes["b"] = cluster.NodeInfo{ID: "b"}
	if info := volumeInfo(m, v, nil, 0); len(info.Removed) != 0 {
		t.Errorf("removed %v once b is a member again", info.Removed)
	}
}

// TestVolumeInfoHealth: volume info counts the chunks a copy short
// (a holder down or gone) and those with no holder up, and names the
// holders that are down; during a re-placement a chunk's holders are its
// owners before it.
func TestVolumeInfoHealth(t *testing.T) {
	m := cluster.NewMap()
	for _, id := range []string{"a", "b", "c", "d"} {
		m.Nodes[id] = cluster.NodeInfo{ID: id, State: cluster.StateUp}
	}
	setState := func(st cluster.NodeState, ids ...string) {
		for _, id := range ids {
			ni := m.Nodes[id]
			ni.State = st
			m.Nodes[id] = ni
		}
	}
	v2 := cluster.VolumeSpec{Name: "v", Size: 256 << 20, ChunkSize: 4 << 20, Copies: 2, ID: "01", Nodes: []string{"a", "b", "c"}}
	healthy := volumeInfo(m, v2, nil, 0)
	if healthy.Degraded != 0 || healthy.Unavailable != 0 || healthy.Down != nil {
		t.Fatalf("all up: degraded %d, unavailable %d, down %v", healthy.Degraded, healthy.Unavailable, healthy.Down)
	}
	per := healthy.ChunksPerNode

	setState(cluster.StateDown, "c")
	info := volumeInfo(m, v2, nil, 0)
	if !slices.Equal(info.Down, []string{"c"}) || info.Degraded != per["c"] || info.Unavailable != 0 {
		t.Errorf("c down: down %v, degraded %d (c holds %d), unavailable %d", info.Down, info.Degraded, per["c"], info.Unavailable)
	}
	// b and c down: every chunk (2 of the 3 nodes) has a copy on one of
	// them, and those not on a have both copies on them.
	setState(cluster.StateDown, "b")
	info = volumeInfo(m, v2, nil, 0)
	if info.Degraded != info.Chunks || info.Unavailable != info.Chunks-per["a"] || !slices.Equal(info.Down, []string{"b", "c"}) {
		t.Errorf("b, c down: degraded %d of %d, unavailable %d, want %d; down %v", info.Degraded, info.Chunks, info.Unavailable, info.Chunks-per["a"], info.Down)
	}
	// Gone from the cluster counts as not up.
	setState(cluster.StateUp, "b", "c")
	delete(m.Nodes, "b")
	info = volumeInfo(m, v2, nil, 0)
	if info.Degraded != per["b"] || info.Unavailable != 0 || info.Down != nil {
		t.Errorf("b removed: degraded %d (b held %d), unavailable %d, down %v", info.Degraded, per["b"], info.Unavailable, info.Down)
	}
	m.Nodes["b"] = cluster.NodeInfo{ID: "b", State: cluster.StateUp}

	// copies=1: a chunk on a node that is down has no holder up.
	v1 := v2
	v1.Copies = 1
	per1 := volumeInfo(m, v1, nil, 0).ChunksPerNode
	setState(cluster.StateDown, "a")
	info = volumeInfo(m, v1, nil, 0)
	if info.Unavailable != per1["a"] || info.Degraded != per1["a"] || per1["a"] == 0 {
		t.Errorf("copies=1, a down: degraded %d, unavailable %d, a holds %d", info.Degraded, info.Unavailable, per1["a"])
	}
	setState(cluster.StateUp, "a")

	// A rebalance onto d whose copies are not made: d being down does not
	// make a chunk a copy short (the old owners hold it), b being down does.
	moving := v2
	moving.Prev, moving.Nodes = v2.Nodes, []string{"a", "b", "c", "d"}
	setState(cluster.StateDown, "d")
	info = volumeInfo(m, moving, nil, 0)
	if info.Degraded != 0 || !slices.Equal(info.Down, []string{"d"}) {
		t.Errorf("re-placing onto d, d down: degraded %d, down %v", info.Degraded, info.Down)
	}
	setState(cluster.StateUp, "d")
	setState(cluster.StateDown, "b")
	if info = volumeInfo(m, moving, nil, 0); info.Degraded != per["b"] {
		t.Errorf("re-placing onto d, b down: degraded %d, want b's %d chunks before", info.Degraded, per["b"])
	}
	// Once copied, the chunks' holders are their owners over a, b, c, d.
	moving.Copied = true
	if info = volumeInfo(m, moving, nil, 0); info.Degraded != info.ChunksPerNode["b"] {
		t.Errorf("re-placed onto d, b down: degraded %d, want b's %d chunks after", info.Degraded, info.ChunksPerNode["b"])
	}
}

// TestVolumesOn: every chunk copy of every volume is counted on exactly
// one node, and a node outside a volume's set holds none of it.
func TestVolumesOn(t *testing.T) {
	m := cluster.NewMap()
	for _, id := range []string{"a", "b", "c", "d"} {
		m.Nodes[id] = cluster.NodeInfo{ID: id}
	}
	m.Volumes["v2"] = cluster.VolumeSpec{Name: "v2", Size: 64 << 20, ChunkSize: 1 << 20, Copies: 2, Nodes: []string{"a", "b", "c"}}
	m.Volumes["v1"] = cluster.VolumeSpec{Name: "v1", Size: 32 << 20, ChunkSize: 1 << 20, Copies: 1, Nodes: []string{"a", "b", "c", "d"}}
	total := map[string]int64{}
	for _, id := range []string{"a", "b", "c", "d"} {
		vols := VolumesOn(m, id)
		if !slices.IsSortedFunc(vols, func(x, y VolumeCopies) int { return strings.Compare(x.Volume, y.Volume) }) {
			t.Errorf("%s: not sorted by name: %+v", id, vols)
		}
		for _, v := range vols {
			if v.Copies != m.Volumes[v.Volume].Copies || v.Chunks <= 0 {
				t.Errorf("%s: %+v", id, v)
			}
			if v.Volume == "v2" && id == "d" {
				t.Errorf("d is not in v2's set but holds %d of its chunks", v.Chunks)
			}
			total[v.Volume] += v.Chunks
		}
	}
	if total["v2"] != 128 || total["v1"] != 32 {
		t.Errorf("chunk copies counted: %v, want v2 128 (64 chunks, 2 copies), v1 32", total)
	}
}

// serveChunks serves a volume.Local of its own over HTTP on a loopback
// port, as a node's chunk endpoints.
func serveChunks(t *testing.T) (addr string, h *volume.Handler, stop func()) {
	t.Helper()
	vl, err := volume.NewLocal(volume.LocalConfig{Mountpaths: []string{t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h = volume.NewHandler(vl)
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	return ln.Addr().String(), h, func() { srv.Close(); h.Close(); vl.Close() }
}

// TestSettleWaitsForEveryNode: the writer ends a re-placement whose
// copies are made only once every other member answers that its volumes
// have taken in the writer's map: not while one answers with an older
// version, nor while one does not answer.
func TestSettleWaitsForEveryNode(t *testing.T) {
	ctx := context.Background()
	bAddr, bh, stopB := serveChunks(t)
	defer stopB()
	cAddr, ch, stopC := serveChunks(t)
	m := cluster.NewMap()
	m.Version = 7
	m.Nodes["a"] = cluster.NodeInfo{ID: "a"}
	m.Nodes["b"] = cluster.NodeInfo{ID: "b", IntraAddrs: []string{bAddr}}
	m.Nodes["c"] = cluster.NodeInfo{ID: "c", IntraAddrs: []string{cAddr}}
	vs := testVolumes(t, m)
	mc := &markCalls{}
	vs.marks = mc
	nodes := []string{"a", "b", "c"}
	bh.NoteSeen(7)
	ch.NoteSeen(6)
	if err := vs.settle(ctx, "v", "01", nodes, 3); err == nil || !strings.Contains(err.Error(), "node c") {
		t.Fatalf("settle with c behind: %v", err)
	}
	ch.NoteSeen(7)
	stopC()
	if err := vs.settle(ctx, "v", "01", nodes, 3); err == nil || !strings.Contains(err.Error(), "node c") {
		t.Fatalf("settle with c not answering: %v", err)
	}
	if len(mc.calls) != 0 {
		t.Fatalf("settled while a node may read the old owners: %v", mc.calls)
	}
	delete(m.Nodes, "c") // removed from the cluster
	if err := vs.settle(ctx, "v", "01", nodes, 3); err != nil {
		t.Fatal(err)
	}
	if want := []string{"v settled 01 a 3 [a b c]"}; !slices.Equal(mc.calls, want) {
		t.Fatalf("calls %v, want %v", mc.calls, want)
	}
}

// TestPriorVolume: a node whose state began after a volume was created
// and claimed, and which the volume lists, was wiped (its copies are
// lost), unless a rebalance in progress added it before its state began
// (it holds nothing yet by design).
func TestPriorVolume(t *testing.T) {
	born := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	before, after := born.Add(-time.Hour), born.Add(time.Hour)
	for _, tc := range []struct {
		name string
		spec cluster.VolumeSpec
		want bool
	}{
		{"member since before", cluster.VolumeSpec{Nodes: []string{"a", "b"}}, true},
		{"not a member", cluster.VolumeSpec{Nodes: []string{"b", "c"}}, false},
		{"created after", cluster.VolumeSpec{Nodes: []string{"a", "b"}, Created: after}, false},
		{"rebalanced in, state before it", cluster.VolumeSpec{Nodes: []string{"a", "b"}, Prev: []string{"b"}, Since: after}, false},
		{"rebalanced in, state after it", cluster.VolumeSpec{Nodes: []string{"a", "b"}, Prev: []string{"b"}, Since: before}, true},
		{"in prev of a drain", cluster.VolumeSpec{Nodes: []string{"a"}, Prev: []string{"a", "b"}}, true},
	} {
		spec := tc.spec
		spec.Name, spec.ID, spec.Size, spec.ChunkSize, spec.Copies, spec.Epoch = "v", "01", 1<<20, 4096, 1, 1
		if spec.Created.IsZero() {
			spec.Created = before.Add(-time.Hour)
		}
		m := cluster.NewMap()
		m.Volumes["v"] = spec
		vs := testVolumes(t, m)
		vs.born = born
		if got := vs.prior(spec.Key()); got != tc.want {
			t.Errorf("%s: prior = %v, want %v", tc.name, got, tc.want)
		}
	}
}
