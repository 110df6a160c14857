package node

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/store"
)

// The cluster collector reports every member as the map has it and this
// node's drives.
func TestClusterCollector(t *testing.T) {
	m := cluster.NewMap()
	m.Version = 42
	m.Nodes["a"] = cluster.NodeInfo{ID: "a", State: cluster.StateUp}
	m.Nodes["b"] = cluster.NodeInfo{ID: "b", State: cluster.StateDown}
	m.Nodes["c"] = cluster.NodeInfo{ID: "c", State: cluster.StateUp, Draining: true}
	mps := []store.MountpathStats{
		{Path: "/d/mp1", Used: 100, Capacity: 1000, Objects: 7},
		{Path: "/d/mp2", Used: 5, Capacity: 1000, Failed: true},
	}
	c := newClusterCollector(func() *cluster.Map { return m }, func() string { return "" }, func() []store.MountpathStats { return mps })
	want := `
# HELP slipstream_cluster_leader_known 1 if this node knows a raft leader; 0 on every node means the map cannot change (fewer than half the voters up).
# TYPE slipstream_cluster_leader_known gauge
slipstream_cluster_leader_known 0
# HELP slipstream_cluster_map_version Version of the cluster map this node has applied.
# TYPE slipstream_cluster_map_version gauge
slipstream_cluster_map_version 42
# HELP slipstream_cluster_node_draining 1 while the member is drained (admin node drain).
# TYPE slipstream_cluster_node_draining gauge
slipstream_cluster_node_draining{node="a"} 0
slipstream_cluster_node_draining{node="b"} 0
slipstream_cluster_node_draining{node="c"} 1
# HELP slipstream_cluster_node_up 1 if the map has the member up, 0 if down or in maintenance.
# TYPE slipstream_cluster_node_up gauge
slipstream_cluster_node_up{node="a"} 1
slipstream_cluster_node_up{node="b"} 0
slipstream_cluster_node_up{node="c"} 1
# HELP slipstream_mountpath_failed 1 once the mountpath's drive failed: it takes no new writes.
# TYPE slipstream_mountpath_failed gauge
slipstream_mountpath_failed{path="/d/mp1"} 0
slipstream_mountpath_failed{path="/d/mp2"} 1
# HELP slipstream_mountpath_objects Object copies stored on the mountpath.
# TYPE slipstream_mountpath_objects gauge
slipstream_mountpath_objects{path="/d/mp1"} 7
slipstream_mountpath_objects{path="/d/mp2"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"slipstream_cluster_map_version", "slipstream_cluster_leader_known", "slipstream_cluster_node_up", "slipstream_cluster_node_draining",
		"slipstream_mountpath_failed", "slipstream_mountpath_objects"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(c, "slipstream_mountpath_used_bytes", "slipstream_mountpath_capacity_bytes"); n != 4 {
		t.Errorf("%d space series, want 4", n)
	}
}
