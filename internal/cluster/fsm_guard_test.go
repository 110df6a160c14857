package cluster

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestMaintenanceCountsAsAway: a node put in maintenance is out of
// placement, so writes and deletes of its keys go to other nodes
// meanwhile, as while it is down. Its Downs count grows, so that when it
// is up again internal/node's rejoin pass checks its copies.
func TestMaintenanceCountsAsAway(t *testing.T) {
	m := NewMap()
	n := NodeInfo{ID: "n1", RaftAddr: "127.0.0.1:1", IntraAddrs: []string{"127.0.0.1:2"}, State: StateUp, Joined: t0}
	var err error
	if m, err = applyCommand(m, command{Op: opNodePut, Node: &n}); err != nil {
		t.Fatal(err)
	}
	before := m.Nodes["n1"].Downs
	if m, err = applyCommand(m, command{Op: opNodeState, Name: "n1", State: StateMaintenance}); err != nil {
		t.Fatal(err)
	}
	if m.Nodes["n1"].Places() {
		t.Fatal("a node in maintenance still takes copies")
	}
	if m, err = applyCommand(m, command{Op: opNodeState, Name: "n1", State: StateUp}); err != nil {
		t.Fatal(err)
	}
	if got := m.Nodes["n1"].Downs; got <= before {
		t.Errorf("up -> maintenance -> up left Downs at %d (was %d): the returning node will not check its copies", got, before)
	}
}

// TestVolumePutKeepsLayout: the admin create of a volume checks that the
// name is free on its (maybe lagging) map. The FSM refuses a second create
// of the name (another ID), and a change other than growing the size, so
// two creates or two resizes that race cannot change the chunk size,
// copies or nodes of a volume under its data.
func TestVolumePutKeepsLayout(t *testing.T) {
	m := NewMap()
	first := VolumeSpec{Name: "v", Size: 1 << 30, ChunkSize: 4 << 20, Copies: 2, Created: t0, ID: "aaaa", Nodes: []string{"n1", "n2", "n3"}}
	var err error
	if m, err = applyCommand(m, command{Op: opVolumePut, Volume: &first}); err != nil {
		t.Fatal(err)
	}
	second := VolumeSpec{Name: "v", Size: 2 << 30, ChunkSize: 64 << 10, Copies: 1, Created: t0.Add(1), ID: "bbbb", Nodes: []string{"n4"}}
	m2, err := applyCommand(m, command{Op: opVolumePut, Volume: &second})
	got := m2.Volumes["v"]
	if err == nil && (got.ChunkSize != first.ChunkSize || got.Copies != first.Copies) {
		t.Errorf("a second create (ID %s) of existing volume %s (ID %s) was accepted and changed it: chunk %d -> %d, copies %d -> %d, nodes %v -> %v, ID kept %q",
			second.ID, first.Name, first.ID, first.ChunkSize, got.ChunkSize, first.Copies, got.Copies, first.Nodes, got.Nodes, got.ID)
	}
}

// TestForwardedLeadershipLost: propose treats raft.ErrLeadershipLost as
// "the entry may have been committed" (a retried delete that then finds
// nothing succeeds). Forwarded from the leader over HTTP, it keeps its
// identity instead of becoming "not the leader".
func TestForwardedLeadershipLost(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, raft.ErrLeadershipLost)
	}))
	defer srv.Close()
	c := &Cluster{hc: srv.Client()}
	err := c.post(t.Context(), srv.URL+PathApply, []byte(`{}`), nil, true)
	if err == nil {
		t.Fatal("no error")
	}
	if !errors.Is(err, raft.ErrLeadershipLost) && !errors.Is(err, errUnreachable) {
		t.Errorf("a forwarded apply that lost leadership comes back as %v (not ErrLeadershipLost): propose will not treat it as uncertain", err)
	}
}

// TestForwardedToClosingLeader: a leader that is shutting down answers
// "closed"; for the node that forwarded to it that is a leader gone
// mid-request, which it retries with the next one (and treats as
// uncertain), not a failure of its own.
func TestForwardedToClosingLeader(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, ErrClosed)
	}))
	defer srv.Close()
	c := &Cluster{hc: srv.Client()}
	err := c.post(t.Context(), srv.URL+PathApply, []byte(`{}`), nil, true)
	if !retryable(err) || errors.Is(err, ErrClosed) {
		t.Errorf("a forwarded apply to a closing leader comes back as %v: not retried", err)
	}
}

// TestVolumeDeleteByID: a delete that names the volume's ID removes only
// that volume, not one created since under the same name.
func TestVolumeDeleteByID(t *testing.T) {
	m := NewMap()
	v := VolumeSpec{Name: "v", Size: 1 << 30, ChunkSize: 4 << 20, Copies: 2, Created: t0, ID: "new"}
	var err error
	if m, err = applyCommand(m, command{Op: opVolumePut, Volume: &v}); err != nil {
		t.Fatal(err)
	}
	stale := command{Op: opVolumeDelete, Name: "v", Volume: &VolumeSpec{Name: "v", ID: "old"}}
	if m2, err := applyCommand(m, stale); !errors.Is(err, ErrVolumeNotFound) || m2.Volumes["v"].ID != "new" {
		t.Fatalf("delete of an older volume of the name: %v; volume now %+v", err, m2.Volumes["v"])
	}
	if m, err = applyCommand(m, command{Op: opVolumeDelete, Name: "v", Volume: &VolumeSpec{Name: "v", ID: "new"}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Volumes["v"]; ok {
		t.Fatal("delete by the right ID left the volume")
	}
}

// TestNodePutKeepsMaintenance: a join's node.put, decided on the joiner's
// read of the map, keeps a node in maintenance and keeps its first join
// time, also when the operator's change landed after that read.
func TestNodePutKeepsMaintenance(t *testing.T) {
	m := NewMap()
	m.Nodes["n1"] = NodeInfo{ID: "n1", RaftAddr: "a:1", IntraAddrs: []string{"a:2"}, State: StateMaintenance, Joined: t0}
	put := NodeInfo{ID: "n1", RaftAddr: "a:1", IntraAddrs: []string{"a:3"}, State: StateUp, Joined: t0.Add(time.Hour)}
	n, err := applyCommand(m, command{Op: opNodePut, Node: &put})
	if err != nil {
		t.Fatal(err)
	}
	got := n.Nodes["n1"]
	if got.State != StateMaintenance || !got.Joined.Equal(t0) || got.IntraAddrs[0] != "a:3" {
		t.Errorf("after a join: state %s, joined %v, addrs %v; want maintenance, %v, [a:3]", got.State, got.Joined, got.IntraAddrs, t0)
	}
}
