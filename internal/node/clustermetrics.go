package node

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/store"
)

// clusterCollector reports the members as the map has them (every node
// reports the whole cluster, so that an alert on any node's metrics sees a
// node down) and this node's drives: space, copies and whether the drive
// failed.
type clusterCollector struct {
	mapped     func() *cluster.Map
	leader     func() string
	mountpaths func() []store.MountpathStats

	version, leaderKnown, nodeUp, draining *prometheus.Desc
	used, capacity, objects, failed        *prometheus.Desc
}

func newClusterCollector(mapped func() *cluster.Map, leader func() string, mountpaths func() []store.MountpathStats) *clusterCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &clusterCollector{
		mapped: mapped, leader: leader, mountpaths: mountpaths,
		version: d("slipstream_cluster_map_version", "Version of the cluster map this node has applied."),
		leaderKnown: d("slipstream_cluster_leader_known",
			"1 if this node knows a raft leader; 0 on every node means the map cannot change (fewer than half the voters up)."),
		nodeUp:   d("slipstream_cluster_node_up", "1 if the map has the member up, 0 if down or in maintenance.", "node"),
		draining: d("slipstream_cluster_node_draining", "1 while the member is drained (admin node drain).", "node"),
		used:     d("slipstream_mountpath_used_bytes", "Bytes used on the file system of the mountpath (or held there, with space.max_bytes_per_mountpath).", "path"),
		capacity: d("slipstream_mountpath_capacity_bytes", "Size of the file system of the mountpath (or space.max_bytes_per_mountpath).", "path"),
		objects:  d("slipstream_mountpath_objects", "Object copies stored on the mountpath.", "path"),
		failed:   d("slipstream_mountpath_failed", "1 once the mountpath's drive failed: it takes no new writes.", "path"),
	}
}

func (c *clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.version, c.leaderKnown, c.nodeUp, c.draining, c.used, c.capacity, c.objects, c.failed} {
		ch <- d
	}
}

func (c *clusterCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.mapped()
	ch <- prometheus.MustNewConstMetric(c.version, prometheus.GaugeValue, float64(m.Version))
	ch <- prometheus.MustNewConstMetric(c.leaderKnown, prometheus.GaugeValue, b2f(c.leader() != ""))
	for _, id := range m.NodeIDs() {
		ni, _ := m.Node(id)
		ch <- prometheus.MustNewConstMetric(c.nodeUp, prometheus.GaugeValue, b2f(ni.State == cluster.StateUp), id)
		ch <- prometheus.MustNewConstMetric(c.draining, prometheus.GaugeValue, b2f(ni.Draining), id)
	}
	for _, mp := range c.mountpaths() {
		ch <- prometheus.MustNewConstMetric(c.used, prometheus.GaugeValue, float64(mp.Used), mp.Path)
		ch <- prometheus.MustNewConstMetric(c.capacity, prometheus.GaugeValue, float64(mp.Capacity), mp.Path)
		ch <- prometheus.MustNewConstMetric(c.objects, prometheus.GaugeValue, float64(mp.Objects), mp.Path)
		ch <- prometheus.MustNewConstMetric(c.failed, prometheus.GaugeValue, b2f(mp.Failed), mp.Path)
	}
}
