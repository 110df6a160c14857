package cluster

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// TestRemoveReplacesVolumes: removing a member takes it out of the node
// set of every volume that keeps Copies nodes without it (Copies >= 2),
// records the set the chunks were on (Prev, kept across a second removal)
// and drops the node's own stale marks; copies=1 volumes and volumes
// that would fall short of Copies nodes keep it. volume.placed ends the
// re-placement only for the volume's current node set, writer and epoch.
func TestRemoveReplacesVolumes(t *testing.T) {
	m := NewMap()
	for _, id := range []string{"a", "b", "c", "d"} {
		m.Nodes[id] = NodeInfo{ID: id, State: StateUp}
	}
	all := []string{"a", "b", "c", "d"}
	m.Volumes["two"] = VolumeSpec{Name: "two", ID: "01", Size: 1 << 20, ChunkSize: 4096, Copies: 2, Nodes: all, Writer: "a", Epoch: 3,
		Stale: []string{"b", "c"}, StaleBy: map[string][]string{"b": {"a"}, "c": {"b"}}}
	m.Volumes["one"] = VolumeSpec{Name: "one", ID: "02", Size: 1 << 20, ChunkSize: 4096, Copies: 1, Nodes: all}
	m.Volumes["tight"] = VolumeSpec{Name: "tight", ID: "03", Size: 1 << 20, ChunkSize: 4096, Copies: 2, Nodes: []string{"a", "b"}}
	m.Volumes["other"] = VolumeSpec{Name: "other", ID: "04", Size: 1 << 20, ChunkSize: 4096, Copies: 2, Nodes: []string{"a", "c", "d"}}

	m1, err := applyCommand(m, command{Op: opNodeRemove, Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	two := m1.Volumes["two"]
	if !slices.Equal(two.Nodes, []string{"a", "c", "d"}) || !slices.Equal(two.Prev, all) {
		t.Fatalf("two after removing b: nodes %v prev %v", two.Nodes, two.Prev)
	}
	if !slices.Equal(two.Stale, []string{"c"}) || len(two.StaleBy) != 1 || !slices.Equal(two.StaleBy["c"], []string{"b"}) {
		t.Fatalf("two's marks after removing b: %v %v (b's own mark goes, the marks b made stay)", two.Stale, two.StaleBy)
	}
	for _, name := range []string{"one", "tight", "other"} {
		if got := m1.Volumes[name]; !slices.Equal(got.Nodes, m.Volumes[name].Nodes) || got.Prev != nil {
			t.Fatalf("%s changed: nodes %v prev %v", name, got.Nodes, got.Prev)
		}
	}
	if !slices.Equal(m.Volumes["two"].Nodes, all) {
		t.Fatal("applyCommand changed the previous map")
	}

	// c goes while two's re-placement is in progress: it stays in two's
	// set until that ends; other, with none in progress, loses it at once.
	m2, err := applyCommand(m1, command{Op: opNodeRemove, Name: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if two := m2.Volumes["two"]; !slices.Equal(two.Nodes, []string{"a", "c", "d"}) || !slices.Equal(two.Prev, all) || !slices.Equal(two.Stale, []string{"c"}) {
		t.Fatalf("two after removing c: nodes %v prev %v stale %v", two.Nodes, two.Prev, two.Stale)
	}
	if other := m2.Volumes["other"]; !slices.Equal(other.Nodes, []string{"a", "d"}) || !slices.Equal(other.Prev, []string{"a", "c", "d"}) {
		t.Fatalf("other after removing c: nodes %v prev %v", other.Nodes, other.Prev)
	}
	// A mark for a mirror no longer in the set (a write in flight while
	// b was removed) changes nothing.
	if got, err := applyCommand(m2, command{Op: opVolumeStale, Name: "two", Node: &NodeInfo{ID: "b"}, State: StateDown, Writer: "a"}); err != nil || got != m2 {
		t.Fatalf("mark of removed b: %v, stale %v", err, got.Volumes["two"].Stale)
	}

	placed := func(id, node string, epoch uint64, nodes []string) command {
		return command{Op: opVolumePlaced, Name: "two", Volume: &VolumeSpec{Name: "two", ID: id, Nodes: nodes}, Node: &NodeInfo{ID: node}, Epoch: epoch}
	}
	for _, bad := range []command{
		placed("01", "a", 3, []string{"a", "d"}),      // not the volume's set
		placed("01", "d", 3, []string{"a", "c", "d"}), // not the writer
		placed("01", "a", 2, []string{"a", "c", "d"}), // an older claim
	} {
		if got, err := applyCommand(m2, bad); !errors.Is(err, ErrStalePlacement) || got != m2 {
			t.Fatalf("%+v: %v", bad, err)
		}
	}
	if _, err := applyCommand(m2, placed("99", "a", 3, []string{"a", "c", "d"})); !errors.Is(err, ErrVolumeNotFound) {
		t.Fatalf("another volume's ID: %v", err)
	}
	// The end of b's re-placement starts c's, from the set b's ended on.
	m3, err := applyCommand(m2, placed("01", "a", 3, []string{"a", "c", "d"}))
	if two := m3.Volumes["two"]; err != nil || !slices.Equal(two.Prev, []string{"a", "c", "d"}) || !slices.Equal(two.Nodes, []string{"a", "d"}) || two.Stale != nil {
		t.Fatalf("placed for b: %v, %+v", err, m3.Volumes["two"])
	}
	m4, err := applyCommand(m3, placed("01", "a", 3, []string{"a", "d"}))
	if err != nil || m4.Volumes["two"].Prev != nil || !slices.Equal(m4.Volumes["two"].Nodes, []string{"a", "d"}) {
		t.Fatalf("placed for c: %v, %+v", err, m4.Volumes["two"])
	}
	if _, err := applyCommand(m4, placed("01", "a", 3, []string{"a", "d"})); !errors.Is(err, ErrStalePlacement) {
		t.Fatalf("placed twice: %v", err)
	}
	// Two copies need two nodes: removing a third leaves it placed.
	m5, err := applyCommand(m4, command{Op: opNodeRemove, Name: "d"})
	if err != nil || !slices.Equal(m5.Volumes["two"].Nodes, []string{"a", "d"}) || m5.Volumes["two"].Prev != nil {
		t.Fatalf("removing d: %v, %+v", err, m5.Volumes["two"])
	}
	// A resize keeps the re-placement.
	bigger := m2.Volumes["two"]
	bigger.Size, bigger.Prev = 2<<20, nil
	if m5, err := applyCommand(m2, command{Op: opVolumePut, Volume: &bigger}); err != nil || !slices.Equal(m5.Volumes["two"].Prev, all) {
		t.Fatalf("resize: %v, prev %v", err, m5.Volumes["two"].Prev)
	}
}

// TestPlacedRecordsLostChunks: the chunks a re-placement found no copy
// of are added to the volume's Lost (sorted, once, within the volume),
// kept across the next re-placement and a resize, and leave it only when
// an operator accepts their loss, for that volume.
func TestPlacedRecordsLostChunks(t *testing.T) {
	m := NewMap()
	for _, id := range []string{"a", "c", "d"} {
		m.Nodes[id] = NodeInfo{ID: id, State: StateUp}
	}
	// b and c gone, c while b's re-placement was in progress (Size: 256 chunks).
	delete(m.Nodes, "c")
	m.Volumes["v"] = VolumeSpec{Name: "v", ID: "01", Size: 1 << 20, ChunkSize: 4096, Copies: 2, Nodes: []string{"a", "c", "d"}, Prev: []string{"a", "b", "c", "d"}, Writer: "a", Epoch: 1}
	placed := func(m *Map, nodes []string, lost ...int64) *Map {
		t.Helper()
		n, err := applyCommand(m, command{Op: opVolumePlaced, Name: "v", Volume: &VolumeSpec{Name: "v", ID: "01", Nodes: nodes, Lost: lost}, Node: &NodeInfo{ID: "a"}, Epoch: 1})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	m1 := placed(m, []string{"a", "c", "d"}, 7, 3, 256, -1, 7)
	if v := m1.Volumes["v"]; !slices.Equal(v.Lost, []int64{3, 7}) || !slices.Equal(v.Nodes, []string{"a", "d"}) {
		t.Fatalf("after b's re-placement: lost %v nodes %v (want [3 7], c's re-placement started)", v.Lost, v.Nodes)
	}
	m2 := placed(m1, []string{"a", "d"}, 5, 3)
	if v := m2.Volumes["v"]; !slices.Equal(v.Lost, []int64{3, 5, 7}) || v.Prev != nil {
		t.Fatalf("after c's re-placement: lost %v prev %v", v.Lost, v.Prev)
	}
	bigger := m2.Volumes["v"]
	bigger.Size, bigger.Lost = 2<<20, nil
	m3, err := applyCommand(m2, command{Op: opVolumePut, Volume: &bigger})
	if err != nil || !slices.Equal(m3.Volumes["v"].Lost, []int64{3, 5, 7}) {
		t.Fatalf("resize: %v, lost %v", err, m3.Volumes["v"].Lost)
	}
	accept := func(id string, lost ...int64) command {
		return command{Op: opVolumeAcceptLoss, Name: "v", Volume: &VolumeSpec{Name: "v", ID: id, Lost: lost}}
	}
	if _, err := applyCommand(m3, accept("02", 3)); !errors.Is(err, ErrVolumeNotFound) {
		t.Fatalf("accepting for another volume of the name: %v", err)
	}
	if got, err := applyCommand(m3, accept("01", 4, 9)); err != nil || got != m3 {
		t.Fatalf("accepting chunks not lost changed the map: %v", err)
	}
	m4, err := applyCommand(m3, accept("01", 3, 7, 8))
	if err != nil || !slices.Equal(m4.Volumes["v"].Lost, []int64{5}) || m4.Version != m3.Version+1 {
		t.Fatalf("accepting 3 and 7: %v, lost %v", err, m4.Volumes["v"].Lost)
	}
	if m5, err := applyCommand(m4, accept("01", 5)); err != nil || m5.Volumes["v"].Lost != nil {
		t.Fatalf("accepting the last: %v, lost %v", err, m5.Volumes["v"].Lost)
	}
	if !slices.Equal(m3.Volumes["v"].Lost, []int64{3, 5, 7}) {
		t.Fatal("applyCommand changed the previous map")
	}
}

// TestDrainReplacesVolumes: draining a member re-places the volumes that
// keep Copies nodes without it, copies=1 ones included (the node is there
// to copy from), and keeps its stale marks (it is written until the
// re-placement ends). volume.placed then only records the copies made
// (Copied); the end of the drain, the node's removal or another change of
// the set ends it. A drain that ends while the copies are being made
// gives the node its chunks back.
func TestDrainReplacesVolumes(t *testing.T) {
	m := NewMap()
	all := []string{"a", "b", "c", "d"}
	for _, id := range all {
		m.Nodes[id] = NodeInfo{ID: id, State: StateUp}
	}
	vol := func(name string, copies int, nodes []string) VolumeSpec {
		return VolumeSpec{Name: name, ID: name, Size: 1 << 20, ChunkSize: 4096, Copies: copies, Nodes: nodes, Writer: "a", Epoch: 1}
	}
	m.Volumes["one"] = vol("one", 1, all)
	m.Volumes["two"] = vol("two", 2, all)
	m.Volumes["tight"] = vol("tight", 2, []string{"a", "b"})
	busy := vol("busy", 2, []string{"a", "b", "c"})
	busy.Prev = all
	m.Volumes["busy"] = busy
	apply := func(m *Map, c command) *Map {
		t.Helper()
		n, err := applyCommand(m, c)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		return n
	}
	drain := func(id string, on bool) command { return command{Op: opNodeDrain, Name: id, Drain: on} }
	placed := func(name string, nodes []string) command {
		return command{Op: opVolumePlaced, Name: name, Volume: &VolumeSpec{Name: name, ID: name, Nodes: nodes}, Node: &NodeInfo{ID: "a"}, Epoch: 1}
	}
	acd := []string{"a", "c", "d"}

	m1 := apply(m, drain("b", true))
	for _, name := range []string{"one", "two"} {
		if v := m1.Volumes[name]; !slices.Equal(v.Nodes, acd) || !slices.Equal(v.Prev, all) || v.Copied {
			t.Fatalf("%s after draining b: %+v", name, v)
		}
	}
	if v := m1.Volumes["tight"]; v.Prev != nil || !slices.Equal(v.Nodes, []string{"a", "b"}) {
		t.Fatalf("tight (two copies, two nodes) re-placed: %+v", v)
	}
	if v := m1.Volumes["busy"]; !slices.Equal(v.Nodes, []string{"a", "b", "c"}) || !slices.Equal(v.Prev, all) {
		t.Fatalf("busy (a re-placement in progress) changed: %+v", v)
	}
	// b, drained, is still written: a mark on it counts.
	m2 := apply(m1, command{Op: opVolumeStale, Name: "two", Node: &NodeInfo{ID: "b"}, State: StateDown, Writer: "a"})
	if v := m2.Volumes["two"]; !slices.Equal(v.Stale, []string{"b"}) {
		t.Fatalf("mark on drained b: %v", v.Stale)
	}
	m3 := apply(m2, placed("two", acd))
	if v := m3.Volumes["two"]; !v.Copied || !slices.Equal(v.Prev, all) || !slices.Equal(v.Stale, []string{"b"}) {
		t.Fatalf("two placed: %+v (want copied, b still written)", v)
	}
	if _, err := applyCommand(m3, placed("two", acd)); !errors.Is(err, ErrStalePlacement) {
		t.Fatalf("placed twice: %v", err)
	}
	// The drain ends: one, still copying, goes back to its old set; two,
	// copied, ends without b.
	m4 := apply(m3, drain("b", false))
	if v := m4.Volumes["one"]; !slices.Equal(v.Nodes, all) || v.Prev != nil {
		t.Fatalf("one after the drain ended: %+v", v)
	}
	if v := m4.Volumes["two"]; !slices.Equal(v.Nodes, acd) || v.Prev != nil || v.Copied || v.Stale != nil {
		t.Fatalf("two after the drain ended: %+v", v)
	}
	// Drained again, copied, and removed: the removal ends it.
	m5 := apply(apply(apply(m4, drain("b", true)), placed("one", acd)), command{Op: opNodeRemove, Name: "b"})
	if v := m5.Volumes["one"]; !slices.Equal(v.Nodes, acd) || v.Prev != nil || v.Copied {
		t.Fatalf("one after b's removal: %+v", v)
	}
	// Removed before its copies are made, a copies=1 node's chunks stay
	// in the re-placement (those not copied are found lost).
	m6 := apply(apply(m4, drain("b", true)), command{Op: opNodeRemove, Name: "b"})
	if v := m6.Volumes["one"]; !slices.Equal(v.Nodes, acd) || !slices.Equal(v.Prev, all) {
		t.Fatalf("one after b's removal while copying: %+v", v)
	}
	// A copied re-placement ends when another node drains, whose own
	// re-placement starts.
	m7 := apply(apply(apply(m4, drain("b", true)), placed("one", acd)), drain("c", true))
	if v := m7.Volumes["one"]; !slices.Equal(v.Nodes, []string{"a", "d"}) || !slices.Equal(v.Prev, acd) || v.Copied {
		t.Fatalf("one after c drains too: %+v", v)
	}
}

func TestRebalanceAddsNodes(t *testing.T) {
	m := NewMap()
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		m.Nodes[id] = NodeInfo{ID: id, State: StateUp}
	}
	m.Nodes["d"] = NodeInfo{ID: "d", State: StateUp, Draining: true}
	m.Nodes["e"] = NodeInfo{ID: "e", State: StateDown}
	abc := []string{"a", "b", "c"}
	m.Volumes["v"] = VolumeSpec{Name: "v", ID: "v1", Size: 1 << 20, ChunkSize: 4096, Copies: 2, Nodes: []string{"a", "b"}, Writer: "a", Epoch: 3}
	since := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	rebalance := func(id string) command {
		return command{Op: opVolumeRebalance, Name: "v", Volume: &VolumeSpec{Name: "v", ID: id, Since: since}}
	}
	settled := func(node string, epoch uint64, nodes []string) command {
		return command{Op: opVolumeSettled, Name: "v", Volume: &VolumeSpec{Name: "v", ID: "v1", Nodes: nodes}, Node: &NodeInfo{ID: node}, Epoch: epoch}
	}
	placed := command{Op: opVolumePlaced, Name: "v", Volume: &VolumeSpec{Name: "v", ID: "v1", Nodes: abc}, Node: &NodeInfo{ID: "a"}, Epoch: 3}

	if _, err := applyCommand(m, rebalance("v0")); !errors.Is(err, ErrVolumeNotFound) {
		t.Fatalf("rebalance of another volume ID: %v", err)
	}
	// Only c takes placements: d is drained, e down.
	m1, err := applyCommand(m, rebalance("v1"))
	if err != nil {
		t.Fatal(err)
	}
	if v := m1.Volumes["v"]; !slices.Equal(v.Nodes, abc) || !slices.Equal(v.Prev, []string{"a", "b"}) || !v.Since.Equal(since) || v.Copied {
		t.Fatalf("after rebalance: %+v", v)
	}
	if _, err := applyCommand(m1, rebalance("v1")); !errors.Is(err, ErrPlacementBusy) {
		t.Fatalf("rebalance during a re-placement: %v", err)
	}
	if _, err := applyCommand(m1, settled("a", 3, abc)); !errors.Is(err, ErrStalePlacement) {
		t.Fatalf("settled before the copies are made: %v", err)
	}
	// The copies made, the old owners are still written: copied, not
	// ended, though no node left the set.
	m2, err := applyCommand(m1, placed)
	if err != nil {
		t.Fatal(err)
	}
	if v := m2.Volumes["v"]; !v.Copied || v.Prev == nil {
		t.Fatalf("after placed: %+v (want copied)", v)
	}
	for _, c := range []command{settled("b", 3, abc), settled("a", 2, abc), settled("a", 3, []string{"a", "b"})} {
		if _, err := applyCommand(m2, c); !errors.Is(err, ErrStalePlacement) {
			t.Fatalf("settled by %s epoch %d for %v: %v", c.Node.ID, c.Epoch, c.Volume.Nodes, err)
		}
	}
	m3, err := applyCommand(m2, settled("a", 3, abc))
	if err != nil {
		t.Fatal(err)
	}
	if v := m3.Volumes["v"]; !slices.Equal(v.Nodes, abc) || v.Prev != nil || v.Copied || !v.Since.IsZero() {
		t.Fatalf("after settled: %+v", v)
	}
	legacy := m3.Clone()
	lv := legacy.Volumes["v"]
	lv.Nodes = nil
	legacy.Volumes["v"] = lv
	if _, err := applyCommand(legacy, rebalance("v1")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("rebalance of a volume without a node set: %v", err)
	}
	// Nothing left to add: no change.
	if m4, err := applyCommand(m3, rebalance("v1")); err != nil || m4 != m3 {
		t.Fatalf("rebalance with every placing member in the set: %v (map changed: %v)", err, m4 != m3)
	}
	// A drain of a set member after its copies: settled ends it and
	// starts nothing more.
	m5, err := applyCommand(m3, command{Op: opNodeDrain, Name: "b", Drain: true})
	if err != nil {
		t.Fatal(err)
	}
	m5, err = applyCommand(m5, command{Op: opVolumePlaced, Name: "v", Volume: &VolumeSpec{Name: "v", ID: "v1", Nodes: []string{"a", "c"}}, Node: &NodeInfo{ID: "a"}, Epoch: 3})
	if err != nil {
		t.Fatal(err)
	}
	m6, err := applyCommand(m5, settled("a", 3, []string{"a", "c"}))
	if err != nil {
		t.Fatal(err)
	}
	if v := m6.Volumes["v"]; !slices.Equal(v.Nodes, []string{"a", "c"}) || v.Prev != nil || v.Copied {
		t.Fatalf("drain settled: %+v", v)
	}
}

func TestDropsMembers(t *testing.T) {
	m := NewMap()
	for _, id := range []string{"a", "b", "c"} {
		m.Nodes[id] = NodeInfo{ID: id, State: StateUp}
	}
	for _, tc := range []struct {
		name       string
		prev, next []string
		want       bool
	}{
		{"removed node only", []string{"a", "b", "x"}, []string{"a", "b"}, false},
		{"drained member", []string{"a", "b", "c"}, []string{"a", "b"}, true},
		{"rebalance adds", []string{"a", "b"}, []string{"a", "b", "c"}, true},
	} {
		if got := dropsMembers(m, VolumeSpec{Prev: tc.prev, Nodes: tc.next}); got != tc.want {
			t.Errorf("%s: dropsMembers = %v, want %v", tc.name, got, tc.want)
		}
	}
}
