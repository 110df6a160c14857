package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/config"
	"github.com/slipstream-io/slipstream/internal/localcluster"
	"github.com/slipstream-io/slipstream/internal/placement"
)

// TestRebalance follows the copies of a copies=2 bucket through the node
// set changing: a fourth node joins (objects move to it, and leave the
// nodes HRW no longer places them on), a node dies and stays down past
// down_after (its copies are made again on the others, so a second loss
// would lose nothing), it comes back (the extra copies go), and a node is
// removed for good with `admin node rm`, another is drained and undrained;
// then a drive is replaced and a copy rots (admin rebalance and admin
// scrub repair them). After each
// step every node holds exactly the keys HRW places on it among the nodes
// that count, and every object reads back intact.
func TestRebalance(t *testing.T) {
	c := startCluster(t, localcluster.Spec{Nodes: 4, Initial: 3, ExtraConfig: func(i int, n *config.Node) {
		n.Rebalance.Settle = time.Second
		n.Rebalance.DownAfter = 3 * time.Second
	}})
	ctx := context.Background()
	admin(t, c, 0, "bucket", "create", "two", "--copies", "2")
	w := s3Client(c, c.Endpoint(0))
	const n = 60
	key := func(i int) string { return fmt.Sprintf("r%02d", i) }
	for i := range n {
		if err := putObject(ctx, w, "two", key(i), randomBytes(int64(i), 32<<10)); err != nil {
			t.Fatal(err)
		}
	}
	// expect returns the number of keys HRW places on each node of ids.
	expect := func(ids ...string) map[string]int {
		want := map[string]int{}
		for _, id := range ids {
			want[id] = 0
		}
		for i := range n {
			for _, id := range placement.Order(ids, placement.ObjectName("two", key(i)))[:2] {
				want[id]++
			}
		}
		return want
	}
	settled := func(what string, want map[string]int) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for got := objectCounts(t, c); !maps.Equal(got, want); got = objectCounts(t, c) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out after 60s waiting for %s: want %v, last %v", what, want, got)
			}
			time.Sleep(200 * time.Millisecond)
		}
		for i := range n {
			if b, err := getObject(ctx, w, "two", key(i)); err != nil || !bytes.Equal(b, randomBytes(int64(i), 32<<10)) {
				t.Fatalf("%s: GET %s: %d bytes, %v", what, key(i), len(b), err)
			}
		}
	}
	settled("the copies on three nodes", expect("node1", "node2", "node3"))

	if err := c.StartNode(3); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx, 4); err != nil {
		t.Fatal(err)
	}
	settled("the copies to move to node4 after it joined", expect("node1", "node2", "node3", "node4"))

	c.Kill(1)
	gone := expect("node1", "node3", "node4")
	settled("node2's copies to be made again on the others", gone)

	if err := c.StartNode(1); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx, 4); err != nil {
		t.Fatal(err)
	}
	settled("the extra copies to go once node2 is back", expect("node1", "node2", "node3", "node4"))

	// Removing a node for good: refused while it is up; once it is down
	// and removed, the others hold its copies.
	cmd := exec.Command(binary, "admin", "node", "rm", "node4")
	cmd.Env = append(os.Environ(), "SLIPSTREAM_NODE="+c.IntraURL(0), "SLIPSTREAM_SECRET=local-cluster-secret")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "node4 is up") {
		t.Fatalf("admin node rm of an up node: %v\n%s", err, out)
	}
	c.Kill(3)
	waitFor(t, 30*time.Second, "the map to mark node4 down", func() bool {
		return clusterMap(t, c, 0).Nodes["node4"].State == cluster.StateDown
	})
	admin(t, c, 0, "node", "rm", "node4")
	if _, ok := clusterMap(t, c, 0).Nodes["node4"]; ok {
		t.Fatal("node4 still in the map after admin node rm")
	}
	want3 := expect("node1", "node2", "node3")
	settled("node4's copies to be made again on the others", want3)

	// Draining a node that is up moves its copies away before it leaves
	// (copies=1 data on it would otherwise be lost with it), and while it
	// drains the cluster still serves every object; undrain brings it back.
	admin(t, c, 0, "node", "drain", "node2")
	drained := expect("node1", "node3")
	drained["node2"] = 0
	settled("node2 to drain", drained)
	admin(t, c, 0, "node", "undrain", "node2")
	settled("node2 to take its copies back", want3)

	// A pass by hand finds nothing left to do.
	out := admin(t, c, 0, "rebalance")
	if !regexp.MustCompile(`rebalance: \d+ copies scanned, 0 sent \(0 B\), 0 dropped, 0 left for later, 0 failed`).MatchString(out) {
		t.Fatalf("admin rebalance on a balanced cluster:\n%s", out)
	}

	// A drive replaced by an empty one: once the pass by hand is through,
	// the node holds its copies again.
	if err := c.StopNode(2); err != nil {
		t.Error(err)
	}
	if err := os.RemoveAll(c.Configs[2].Mountpaths[0]); err != nil {
		t.Fatal(err)
	}
	if err := c.StartNode(2); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx, 3); err != nil {
		t.Fatal(err)
	}
	// A node that took node3 for down keeps the extra copies it made
	// meanwhile; the pass must see it up.
	waitFor(t, 30*time.Second, "every node to see node3 up", func() bool {
		for i := range 3 {
			if clusterMap(t, c, i).Nodes["node3"].State != cluster.StateUp {
				return false
			}
		}
		return true
	})
	out = admin(t, c, 0, "rebalance")
	if got := objectCounts(t, c); !maps.Equal(got, want3) {
		t.Fatalf("after a drive was replaced and admin rebalance ran: %v, want %v; the pass said:\n%s", got, want3, out)
	}

	// A copy rots on its drive: the scrub finds it and rewrites it from the
	// other holder.
	damageOneObject(t, c.Configs[0].Mountpaths)
	out = admin(t, c, 0, "scrub")
	if !strings.Contains(out, fmt.Sprintf("%d copies checked", 2*n)) || !strings.Contains(out, "1 corrupt, 1 repaired, 0 not repaired") {
		t.Fatalf("admin scrub after damaging a copy:\n%s", out)
	}
	settled("the reads after the scrub", want3)
	if out := admin(t, c, 0, "scrub"); !strings.Contains(out, "0 corrupt") {
		t.Fatalf("admin scrub after the repair:\n%s", out)
	}
}

// damageOneObject flips a byte of the first object file found under the
// mountpaths.
func damageOneObject(t *testing.T, mountpaths []string) {
	t.Helper()
	for _, mp := range mountpaths {
		var file string
		filepath.WalkDir(filepath.Join(mp, "obj"), func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() && file == "" {
				file = path
			}
			return nil
		})
		if file == "" {
			continue
		}
		f, err := os.OpenFile(file, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b := make([]byte, 1)
		if _, err := f.ReadAt(b, 100); err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte{b[0] ^ 0xff}, 100); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("no object file under %v", mountpaths)
}

// objectCounts returns the objects each node's store holds (nodes that do
// not answer are left out), from one `admin status --json`.
func objectCounts(t *testing.T, c *localcluster.Cluster) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for id, st := range clusterStatus(t, c) {
		counts[id] = st.objects()
	}
	return counts
}
