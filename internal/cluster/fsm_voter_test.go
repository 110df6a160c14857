package cluster

import (
	"errors"
	"testing"
)

// TestNodeVoterChangesOnlySuffrage: node.voter, with which the leader
// records a member's suffrage, changes the Voter field and nothing else of
// the record, whatever the proposer's copy of it said.
func TestNodeVoterChangesOnlySuffrage(t *testing.T) {
	m := NewMap()
	n := NodeInfo{ID: "n1", RaftAddr: "127.0.0.1:1", IntraAddrs: []string{"127.0.0.1:2"}, State: StateMaintenance, Joined: t0, Downs: 3, Draining: true, Drains: 1}
	var err error
	if m, err = applyCommand(m, command{Op: opNodePut, Node: &n}); err != nil {
		t.Fatal(err)
	}
	m2, err := applyCommand(m, command{Op: opNodeVoter, Node: &NodeInfo{ID: "n1", Voter: true}})
	if err != nil {
		t.Fatal(err)
	}
	want := n
	want.Voter = true
	if got := m2.Nodes["n1"]; !nodeEqual(got, want) || m2.Version != m.Version+1 {
		t.Errorf("after node.voter: %+v (version %d), want %+v (version %d)", got, m2.Version, want, m.Version+1)
	}
	if m3, err := applyCommand(m2, command{Op: opNodeVoter, Node: &NodeInfo{ID: "n1", Voter: true}}); err != nil || m3 != m2 {
		t.Errorf("node.voter with the suffrage recorded already: %v, new map %v", err, m3 != m2)
	}
	if _, err := applyCommand(m, command{Op: opNodeVoter, Node: &NodeInfo{ID: "nope", Voter: true}}); !errors.Is(err, ErrNodeNotFound) {
		t.Errorf("node.voter of a missing node: %v, want ErrNodeNotFound", err)
	}
	if _, err := applyCommand(m, command{Op: opNodeVoter}); !errors.Is(err, ErrInvalid) {
		t.Errorf("node.voter without a node: %v, want ErrInvalid", err)
	}
}
