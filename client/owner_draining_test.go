package client

import (
	"testing"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/placement"
)

// TestOwnerSkipsDrainingNode: a draining node stays up but takes no
// new copies; the nodes place an object on the first node in HRW order that
// is up and not draining (NodeInfo.Places), and that node is its owner. The
// client must send there, not to the draining node, which would only
// forward the request (a write-back PUT, whose owner alone journals it,
// takes an extra hop through it for as long as the drain lasts).
func TestOwnerSkipsDrainingNode(t *testing.T) {
	ids := []string{"a", "b", "c", "d"}
	const bucket, key = "bk", "some/key"
	order := placement.Order(ids, placement.ObjectName(bucket, key))
	c := testClient(map[string]cluster.NodeState{"a": cluster.StateUp, "b": cluster.StateUp, "c": cluster.StateUp, "d": cluster.StateUp})
	m := c.currentMap().Clone()
	m.Version++
	n := m.Nodes[order[0]]
	n.Draining = true
	m.Nodes[order[0]] = n
	c.setMap(m)
	if got := c.Owner(bucket, key).ID; got != order[1] {
		t.Errorf("owner %q while %q drains, want %q (HRW order %v)", got, order[0], order[1], order)
	}
	if host, _, err := c.hostFor(bucket, key); err != nil || host != order[1]+".example:9000" {
		t.Errorf("hostFor = %q, %v; want the first node that is not draining", host, err)
	}
	// Every node draining: the first up one still answers.
	for _, id := range ids {
		n := m.Nodes[id]
		n.Draining = true
		m.Nodes[id] = n
	}
	m.Version++
	c.setMap(m)
	if got := c.Owner(bucket, key).ID; got != order[0] {
		t.Errorf("owner %q with every node draining, want %q", got, order[0])
	}
}
