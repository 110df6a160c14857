package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/config"
	"github.com/slipstream-io/slipstream/internal/localcluster"
	"github.com/slipstream-io/slipstream/internal/node"
	"github.com/slipstream-io/slipstream/internal/placement"
	"github.com/slipstream-io/slipstream/internal/volume"
)

// volumeCmd runs `slipstream volume` against node i.
func volumeCmd(t *testing.T, c *localcluster.Cluster, i int, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"volume"}, args...)...)
	cmd.Env = adminEnv(c, i)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("slipstream volume %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// runTool runs a real NBD client in a temporary directory (fio keeps
// verify state files in its working directory).
func runTool(t *testing.T, name string, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Fatalf("%s is not installed; run scripts/setup.sh", name)
	}
	cmd := exec.Command(name, args...)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

func fioArgs(uri string, verifyOnly bool) []string {
	args := []string{"--name=pattern", "--ioengine=nbd", "--uri=" + uri, "--rw=randwrite", "--bs=4k", "--iodepth=16",
		"--offset=32m", "--size=24m", "--verify=crc32c", "--verify_state_save=0", "--randrepeat=1", "--randseed=42", "--norandommap=0"}
	if verifyOnly {
		return append(args, "--verify_only")
	}
	return append(args, "--do_verify=0")
}

// TestVolumeNBD creates a mirrored volume, writes a pattern with fio's nbd
// engine through one node, kills a mirror and verifies the pattern, lets
// it resynchronise, kills the other mirror and verifies again; qemu-img and
// nbdinfo see the same volume.
func TestVolumeNBD(t *testing.T) {
	c := startCluster(t, localcluster.Spec{})
	out := volumeCmd(t, c, 0, "create", "vol1", "--size", "64MiB", "--copies", "2", "--chunk", "1MiB")
	if !strings.Contains(out, "2 copies") || !strings.Contains(out, "nbd://") {
		t.Fatalf("volume create: %s", out)
	}
	uri := fmt.Sprintf("nbd://%s/vol1", c.Configs[0].NBD[0])
	if info := runTool(t, "nbdinfo", uri); !strings.Contains(info, "67108864") {
		t.Fatalf("nbdinfo: %s", info)
	}
	sock := fmt.Sprintf("nbd+unix:///vol1?socket=%s", c.Configs[1].NBDSocket)
	if info := runTool(t, "nbdinfo", sock); !strings.Contains(info, "67108864") {
		t.Fatalf("nbdinfo over the Unix socket: %s", info)
	}

	runTool(t, "fio", fioArgs(uri, false)...)
	c.Kill(2) // node3 holds a mirror of about two thirds of the chunks
	runTool(t, "fio", fioArgs(uri, true)...)
	// Writes continue with the mirror down; node3 misses them.
	img := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(img, randomBytes(3, 8<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	runTool(t, "qemu-img", "convert", "-n", "-f", "raw", "-O", "raw", img, uri)
	startAgain(t, c, 2)
	waitFor(t, 60*time.Second, "node1 to resynchronise node3", func() bool {
		v, ok := volumeStates(t, c)["node1"]["vol1"]
		return ok && len(v.Stale) == 0 && len(v.Down) == 0
	})
	c.Kill(1) // now node2 goes: node3 must have caught up
	// Both the fio pattern and the image survive on node3 alone.
	runTool(t, "fio", fioArgs(uri, true)...)
	dump := filepath.Join(t.TempDir(), "dump")
	runTool(t, "nbdcopy", uri, dump)
	got, err := os.ReadFile(dump)
	if err != nil || len(got) != 64<<20 {
		t.Fatalf("nbdcopy of the volume: %d bytes, %v", len(got), err)
	}
	if !bytes.Equal(got[:8<<20], randomBytes(3, 8<<20)) {
		t.Fatal("the image written while node3 was down differs after node3's resync and node2's loss")
	}
	out = volumeCmd(t, c, 0, "info", "vol1")
	if !strings.Contains(out, "chunk copies per node") {
		t.Fatalf("volume info: %s", out)
	}
	volumeCmd(t, c, 0, "resize", "vol1", "--size", "96MiB")
	if info := runTool(t, "nbdinfo", uri); !strings.Contains(info, "100663296") {
		t.Fatalf("nbdinfo after growing to 96 MiB: %s", info)
	}
	startAgain(t, c, 1)
	// node3 is down when vol1 is deleted and a new vol1 created: when it
	// returns it serves the new volume (zeros), not the old one's chunks
	// it still has, and then removes those.
	c.Kill(2)
	waitFor(t, 30*time.Second, "the map to mark node3 down", func() bool {
		return clusterMap(t, c, 0).Nodes["node3"].State == cluster.StateDown
	})
	volumeCmd(t, c, 0, "delete", "vol1") // the nodes that are up remove their chunk files
	chunkFiles := func(i int) int {
		n := 0
		for _, mp := range c.Configs[i].Mountpaths {
			files, _ := filepath.Glob(filepath.Join(mp, "volumes", "vol1*", "*"))
			n += len(files)
		}
		return n
	}
	for i := range 2 {
		if n := chunkFiles(i); n > 0 {
			t.Errorf("chunk files left on node%d after delete: %d", i+1, n)
		}
	}
	if out := volumeCmd(t, c, 0, "list"); strings.Contains(out, "vol1") {
		t.Fatalf("volume listed after delete: %s", out)
	}
	volumeCmd(t, c, 0, "create", "vol1", "--size", "16MiB", "--copies", "2", "--chunk", "1MiB")
	startAgain(t, c, 2)
	uri3 := fmt.Sprintf("nbd://%s/vol1", c.Configs[2].NBD[0])
	waitFor(t, 30*time.Second, "node3 to export the new vol1", func() bool {
		out, err := exec.Command("nbdinfo", "--size", uri3).Output()
		return err == nil && strings.TrimSpace(string(out)) == "16777216"
	})
	// The new volume is all holes: nbdinfo --map (BLOCK_STATUS) reports
	// them for the chunks node3 holds, data for the others.
	var extents []struct{ Length, Type int64 }
	if err := json.Unmarshal([]byte(runTool(t, "nbdinfo", "--map", "--json", uri3)), &extents); err != nil {
		t.Fatal(err)
	}
	var total, holes int64
	for _, e := range extents {
		total += e.Length
		if e.Type&1 != 0 {
			holes += e.Length
		}
	}
	if total != 16<<20 || holes < 4<<20 {
		t.Errorf("nbdinfo --map of a new volume: %d bytes mapped, %d of them holes", total, holes)
	}
	runTool(t, "nbdcopy", uri3, dump)
	if got, err := os.ReadFile(dump); err != nil || !bytes.Equal(got, make([]byte, 16<<20)) {
		t.Fatalf("a new volume named like a deleted one does not read as zeros through the node that missed the delete (%v)", err)
	}
	waitFor(t, 30*time.Second, "node3 to remove the deleted volume's chunks", func() bool { return chunkFiles(2) == 0 })
	volumeCmd(t, c, 0, "delete", "vol1")
}

// TestVolumeWriterMoves: a client writes a volume through one node, then
// through another, then through the first again, each time after the
// previous node's client has been idle for longer than the claim is held
// for it (1 s). Each move claims the volume for the new node (volume
// info names it and its claim number), and every node then reads the
// last data written, from whichever mirror it prefers.
func TestVolumeWriterMoves(t *testing.T) {
	c := startCluster(t, localcluster.Spec{})
	volumeCmd(t, c, 0, "create", "vol2", "--size", "16MiB", "--copies", "2", "--chunk", "1MiB")
	uri := func(i int) string { return fmt.Sprintf("nbd://%s/vol2", c.Configs[i].NBD[0]) }
	dir := t.TempDir()
	for step, w := range []struct {
		node int
		seed int64
	}{{0, 5}, {1, 6}, {0, 7}} {
		img := filepath.Join(dir, fmt.Sprintf("img%d", step))
		data := randomBytes(w.seed, 4<<20)
		if err := os.WriteFile(img, data, 0o644); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond)
		runTool(t, "qemu-img", "convert", "-n", "-f", "raw", "-O", "raw", img, uri(w.node))
		// Asked of node3, which learns of the claim when the map reaches it.
		want := fmt.Sprintf("written through: node%d (claim %d;", w.node+1, step+1)
		waitFor(t, 10*time.Second, fmt.Sprintf("volume info to show %q", want), func() bool {
			return strings.Contains(volumeCmd(t, c, 2, "info", "vol2"), want)
		})
		for i := range 3 {
			dump := filepath.Join(dir, fmt.Sprintf("dump%d-%d", step, i))
			runTool(t, "nbdcopy", uri(i), dump)
			got, err := os.ReadFile(dump)
			if err != nil || len(got) != 16<<20 || !bytes.Equal(got[:4<<20], data) {
				t.Fatalf("step %d: node%d does not read the data last written through node%d (%d bytes, %v)", step, i+1, w.node+1, len(got), err)
			}
		}
	}
}

// TestVolumeTwoWritersAtOnce: two fio jobs write one volume at the same
// time through two nodes (disjoint ranges, 16 writes in flight each,
// verified after writing, fsync at the end). Neither sees an error: the
// node without the claim forwards its writes to the one that holds it
// rather than take the claim from it. A third node then reads both
// patterns back. The two jobs run in one fio process, at most 1000 writes
// a second each, so that they write at the same time for seconds even
// when one starts late (its thread, on a loaded machine).
func TestVolumeTwoWritersAtOnce(t *testing.T) {
	c := startCluster(t, localcluster.Spec{})
	volumeCmd(t, c, 0, "create", "shared", "--size", "64MiB", "--copies", "2", "--chunk", "1MiB")
	global := []string{"--ioengine=nbd", "--rw=randwrite", "--bs=4k", "--iodepth=16", "--size=16m", "--verify=crc32c",
		"--verify_state_save=0", "--randrepeat=1", "--randseed=7", "--end_fsync=1", "--rate_iops=1000"}
	job := func(node int, offset string) []string {
		return []string{"--name=writer" + offset, fmt.Sprintf("--uri=nbd://%s/shared", c.Configs[node].NBD[0]), "--offset=" + offset}
	}
	out := runTool(t, "fio", slices.Concat(global, job(0, "0"), job(1, "32m"))...)
	if !strings.Contains(out, "writer0") || !strings.Contains(out, "writer32m") {
		t.Fatalf("fio did not run both writers:\n%s", out)
	}
	for _, off := range []string{"0", "32m"} {
		runTool(t, "fio", slices.Concat(global, []string{"--verify_only"}, job(2, off))...)
	}
	info := volumeCmd(t, c, 2, "info", "shared")
	var holder string
	var claim int
	if i := strings.Index(info, "written through: "); i < 0 {
		t.Fatalf("volume info names no writer: %s", info)
	} else if _, err := fmt.Sscanf(info[i:], "written through: %s (claim %d;", &holder, &claim); err != nil {
		t.Fatalf("volume info: %v: %s", err, info)
	}
	t.Logf("claim %d, held by %s", claim, holder)
	var sent, applied int64
	for _, vs := range volumeStates(t, c) {
		sent += vs["shared"].Forwarded
		applied += vs["shared"].AppliedForOthers
	}
	if sent == 0 || applied == 0 {
		t.Errorf("admin status counts %d writes forwarded and %d applied for other nodes: one client's writes should have gone through the other's node", sent, applied)
	}
	t.Logf("%d writes forwarded, %d applied for other nodes", sent, applied)
	if claim > 2 {
		t.Errorf("the claim moved %d times while two clients wrote: they took it from each other", claim)
	}
}

// volState is a node's view of one of its open volumes in `admin status`.
type volState struct {
	Stale            map[string]int
	Down             []string
	Forwarded        int64 // writes of its clients sent to the claim's holder
	AppliedForOthers int64 // writes of other nodes' clients applied as the holder
}

// volumeStates is every node's view of its open volumes in `admin status`
// (by node ID, then volume).
func volumeStates(t *testing.T, c *localcluster.Cluster) map[string]map[string]volState {
	t.Helper()
	var st []struct {
		Node   struct{ ID string }
		Status struct {
			Extra struct {
				Volumes map[string]volState
			}
		}
	}
	for i := range c.Configs {
		if c.PID(i) == 0 {
			continue
		}
		// Asked directly: the output is parsed even if the command fails.
		cmd := exec.Command(binary, "admin", "status", "--json")
		cmd.Env = append(os.Environ(), "SLIPSTREAM_NODE="+c.IntraURL(i), "SLIPSTREAM_SECRET=local-cluster-secret")
		out, err := cmd.Output()
		if jerr := json.Unmarshal(out, &st); jerr != nil {
			t.Fatalf("admin status --json: %v, %v: %s", err, jerr, out)
		}
		break
	}
	out := map[string]map[string]volState{}
	for _, n := range st {
		out[n.Node.ID] = n.Status.Extra.Volumes
	}
	return out
}

// qemuRead reads [off, off+n) of uri with qemu-io and checks that every
// byte is pattern; it returns qemu-io's complaint, or "".
// startAgain starts node i of c again and waits for the cluster to be
// ready with its three nodes.
func startAgain(t *testing.T, c *localcluster.Cluster, i int) {
	t.Helper()
	if err := c.StartNode(i); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(t.Context(), 3); err != nil {
		t.Fatal(err)
	}
}

func qemuRead(uri string, off, n int64, pattern byte) string {
	out, err := exec.Command("qemu-io", "-f", "raw", "-r", "-c",
		fmt.Sprintf("read -P 0x%x %d %d", pattern, off, n), uri).CombinedOutput()
	s := string(out)
	if err != nil || !strings.Contains(s, fmt.Sprintf("read %d/%d bytes", n, n)) || strings.Contains(s, "failed") {
		return fmt.Sprintf("%v: %s", err, s)
	}
	return ""
}

// TestVolumeStaleMarkCleared: a node that has a volume open (an NBD
// server for a client) learns from the map that another node's write
// left a mirror stale, and then that the writer resynchronised it. When
// the writer dies afterwards, the resynchronised mirror is current for
// every node: a chunk whose mirrors were the dead writer and the
// resynchronised node reads at once through each node that is up.
func TestVolumeStaleMarkCleared(t *testing.T) {
	c := startCluster(t, localcluster.Spec{})
	const name = "vol3"
	volumeCmd(t, c, 0, "create", name, "--size", "64MiB", "--copies", "2", "--chunk", "4MiB")
	uri := func(i int) string { return fmt.Sprintf("nbd://%s/%s", c.Configs[i].NBD[0], name) }
	// A chunk mirrored on node1 and node2.
	chunk := int64(-1)
	for i := range int64(16) {
		o := placement.Owners([]string{"node1", "node2", "node3"}, volume.ChunkName(name, i), 2)
		if slices.Contains(o, "node1") && slices.Contains(o, "node2") {
			chunk = i
			break
		}
	}
	if chunk < 0 {
		t.Fatal("no chunk on node1 and node2")
	}
	off, n := chunk<<22, int64(4<<20)
	// node3 serves a client: the volume is open there from now on.
	runTool(t, "qemu-io", "-f", "raw", "-c", "write -P 0x11 0 64M", uri(2))

	c.Kill(0)
	runTool(t, "qemu-io", "-f", "raw", "-c", fmt.Sprintf("write -P 0x5a %d %d", off, n), uri(1))
	if m := clusterMap(t, c, 1).Volumes[name]; !slices.Contains(m.StaleBy["node1"], "node2") {
		t.Fatalf("node2 did not mark node1 stale in the map: %+v", m.StaleBy)
	}
	// volume info and list say so: the chunks a copy short while node1
	// is down, and the one chunk it missed, as the writer (node2) counts.
	waitFor(t, 30*time.Second, "node1 to be marked down", func() bool {
		ni, _ := clusterMap(t, c, 1).Node("node1")
		return ni.State == cluster.StateDown
	})
	info := volumeCmd(t, c, 1, "info", name)
	if !regexp.MustCompile(`(?m)^DEGRADED: \d+ chunks are a copy short while node1 is not up$`).MatchString(info) ||
		!strings.Contains(info, "resynchronising: node1 missed writes to 1 chunk; the writer copies them to it once it is back\n") {
		t.Errorf("volume info with node1 down:\n%s", info)
	}
	if list := volumeCmd(t, c, 1, "list"); !regexp.MustCompile(`(?m)^vol3 .* degraded `).MatchString(list) {
		t.Errorf("volume list with node1 down:\n%s", list)
	}
	// admin status, over the nodes' real answers: node1 down, and the
	// writer's count of the chunk it missed (node3, which has the volume
	// open too but not its claim, would count all 16).
	status := admin(t, c, 1, "status")
	if !strings.Contains(status, "needs attention:\n") || !regexp.MustCompile(`(?m)^  node1: down for \d+s; the other nodes make new copies of its objects in .*; its volume chunks are re-placed only after admin node rm$`).MatchString(status) ||
		!strings.Contains(status, "  node2: volume vol3: mirrors down: node1; chunks to resynchronise: 1 on node1\n") ||
		strings.Contains(status, "node3: volume vol3") || strings.Contains(status, "intra-cluster path") {
		t.Errorf("admin status with node1 down:\n%s", status)
	}
	// node3 reports them from its own map, which may take the mark a
	// moment after node2's.
	degraded := `slipstream_volume_degraded_chunks{volume="vol3"}`
	waitFor(t, 10*time.Second, "node3's metrics to count vol3's chunks a copy short", func() bool {
		n := metric(t, c, 2, degraded)
		return n >= 1 && n <= 16
	})
	if n := metric(t, c, 2, `slipstream_volume_unavailable_chunks{volume="vol3"}`); n != 0 {
		t.Errorf("%v chunks of vol3 unavailable with only node1 down", n)
	}
	if up1, up2 := metric(t, c, 2, `slipstream_cluster_node_up{node="node1"}`), metric(t, c, 2, `slipstream_cluster_node_up{node="node2"}`); up1 != 0 || up2 != 1 {
		t.Errorf("node3's slipstream_cluster_node_up: node1 %v, node2 %v; want 0 and 1", up1, up2)
	}
	startAgain(t, c, 0)
	waitFor(t, 60*time.Second, "node2 to resynchronise node1 and clear its mark", func() bool {
		return len(clusterMap(t, c, 1).Volumes[name].Stale) == 0
	})
	if info := volumeCmd(t, c, 1, "info", name); !strings.Contains(info, "health: every chunk has its 2 copies on nodes that are up\n") {
		t.Errorf("volume info once node1 is resynchronised:\n%s", info)
	}
	waitFor(t, 10*time.Second, "node3's metrics to count no chunk a copy short", func() bool { return metric(t, c, 2, degraded) == 0 })
	waitFor(t, 30*time.Second, "admin status to find nothing that needs attention", func() bool {
		status = admin(t, c, 1, "status")
		return strings.Contains(status, "nothing needs attention\n")
	})
	// Every node's open volume follows the map.
	waitFor(t, 5*time.Second, "the nodes to drop the mark the map cleared", func() bool {
		for id, vs := range volumeStates(t, c) {
			if v, ok := vs[name]; ok && (len(v.Stale) != 0 || len(v.Down) != 0) {
				t.Logf("%s: %+v", id, v)
				return false
			}
		}
		return true
	})
	c.Kill(1)
	for _, i := range []int{2, 0} {
		start := time.Now()
		for {
			msg := qemuRead(uri(i), off, n, 0x5a)
			if msg == "" {
				break
			}
			if time.Since(start) > 3*time.Second {
				t.Fatalf("chunk %d through node%d after node2's loss: %s", chunk, i+1, msg)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// TestVolumeWriterLostAfterResync: node2 dies, a client writes the whole
// volume through node3, node2 returns and node3 resynchronises it, then
// node3 dies. node1, which had the volume open all along, and node2 read
// every chunk at once from the mirrors left (node2 current again), and
// once node3 is back every node reads every chunk and reports no mirror
// down or stale for long.
func TestVolumeWriterLostAfterResync(t *testing.T) {
	c := startCluster(t, localcluster.Spec{})
	const name = "vol4"
	volumeCmd(t, c, 0, "create", name, "--size", "64MiB", "--copies", "2", "--chunk", "4MiB")
	uri := func(i int) string { return fmt.Sprintf("nbd://%s/%s", c.Configs[i].NBD[0], name) }
	runTool(t, "qemu-io", "-f", "raw", "-c", "write -P 0x11 0 64M", uri(0)) // open on node1

	c.Kill(1)
	runTool(t, "qemu-io", "-f", "raw", "-c", "write -P 0x33 0 64M", uri(2))
	startAgain(t, c, 1)
	waitFor(t, 60*time.Second, "node3 to resynchronise node2 and clear its mark", func() bool {
		return len(clusterMap(t, c, 0).Volumes[name].Stale) == 0
	})
	c.Kill(2)
	readAll := func(i int, within time.Duration) {
		t.Helper()
		start := time.Now()
		for {
			msg := qemuRead(uri(i), 0, 64<<20, 0x33)
			if msg == "" {
				return
			}
			if time.Since(start) > within {
				t.Fatalf("reading the volume through node%d: %s (states %+v)", i+1, msg, volumeStates(t, c))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	for _, i := range []int{0, 1} {
		readAll(i, 3*time.Second)
	}
	startAgain(t, c, 2)
	for _, i := range []int{0, 1, 2} {
		readAll(i, 3*time.Second)
	}
	waitFor(t, 5*time.Second, "no node to report a mirror down or stale", func() bool {
		for _, vs := range volumeStates(t, c) {
			if v, ok := vs[name]; ok && (len(v.Stale) != 0 || len(v.Down) != 0) {
				return false
			}
		}
		return true
	})
}

// TestVolumeDriveReplaced: a node whose drive is replaced (its mountpaths
// emptied while it is stopped, its data directory kept) comes back
// without the chunks it held. It must not serve its empty copy as current
// (zeros): every node keeps reading the pattern, and the node is
// resynchronised from the other mirrors.
func TestVolumeDriveReplaced(t *testing.T) {
	const name = "vol5"
	c, _ := writtenVolume(t, name, 0x33)
	if err := c.StopNode(1); err != nil {
		t.Fatal(err)
	}
	emptyMountpaths(t, c, 1)
	startAgain(t, c, 1)
	node2CopiedBack(t, c, name, 0x33, "node2's drive was replaced")
}

// writtenVolume starts a 3-node cluster, creates a 32 MiB copies=2
// volume of 4 MiB chunks and writes pattern over all of it through node1
// (which then holds its claim). uri(i) is its NBD URI on node i.
func writtenVolume(t *testing.T, name string, pattern byte) (c *localcluster.Cluster, uri func(i int) string) {
	t.Helper()
	c = startCluster(t, localcluster.Spec{})
	return c, writeVolume(t, c, name, pattern)
}

// writeVolume creates a 32 MiB copies=2 volume of 4 MiB chunks on c's
// nodes that are not draining and writes pattern over all of it through
// node1 (which then holds its claim). It returns the volume's NBD URI on
// node i.
func writeVolume(t *testing.T, c *localcluster.Cluster, name string, pattern byte) (uri func(i int) string) {
	t.Helper()
	volumeCmd(t, c, 0, "create", name, "--size", "32MiB", "--copies", "2", "--chunk", "4MiB")
	uri = func(i int) string { return fmt.Sprintf("nbd://%s/%s", c.Configs[i].NBD[0], name) }
	runTool(t, "qemu-io", "-f", "raw", "-c", fmt.Sprintf("write -P 0x%x 0 32M", pattern), "-c", "flush", uri(0))
	return uri
}

// node2CopiedBack checks a 32 MiB volume that node1 wrote with pattern,
// of which node2 lost every chunk (what): every node reads the pattern at
// once, node2 never serving its empty copy; node1 copies node2's chunks
// back; and with node1 down, node2 reads the pattern.
func node2CopiedBack(t *testing.T, c *localcluster.Cluster, name string, pattern byte, what string) {
	t.Helper()
	uri := func(i int) string { return fmt.Sprintf("nbd://%s/%s", c.Configs[i].NBD[0], name) }
	for _, i := range []int{1, 0, 2} {
		if msg := qemuRead(uri(i), 0, 32<<20, pattern); msg != "" {
			t.Fatalf("the volume through node%d after %s: %s", i+1, what, msg)
		}
	}
	// node2 has the volume open (the read above) and knows its own
	// mirror lost every chunk; once node1 has copied them back, node2
	// learns it from the map. (The map alone can show no mark before
	// node2 has made its own.)
	waitFor(t, 60*time.Second, "node2 to be resynchronised after "+what, func() bool {
		st, open := volumeStates(t, c)["node2"][name]
		return open && st.Stale["node2"] == 0 && len(clusterMap(t, c, 0).Volumes[name].Stale) == 0
	})
	c.Kill(0)
	if msg := readsBack(uri(1), 32<<20, pattern); msg != "" {
		t.Fatalf("the volume through node2 once resynchronised after %s, node1 (the writer) down: %s", what, msg)
	}
}

// TestVolumeDriveReplacedWhileWriterRestarts: the node that holds a
// volume's claim (its last writer) restarts, and so does a mirror node
// whose drives were emptied meanwhile. No client opens the volume again,
// yet the emptied mirror is copied back: the claim holder opens the
// volume by itself once the map shows the lost mirror's mark, since it
// alone may resynchronise it. Afterwards the volume reads back through
// the emptied node with the claim holder down.
func TestVolumeDriveReplacedWhileWriterRestarts(t *testing.T) {
	const name = "vol6"
	c, uri := writtenVolume(t, name, 0x5a)
	if w := clusterMap(t, c, 0).Volumes[name].Writer; w != "node1" {
		t.Fatalf("the volume's claim is held by %q, want node1 (it wrote)", w)
	}
	for _, i := range []int{1, 0} {
		if err := c.StopNode(i); err != nil {
			t.Fatal(err)
		}
	}
	emptyMountpaths(t, c, 1)
	for _, i := range []int{0, 1} {
		if err := c.StartNode(i); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.WaitReady(t.Context(), 3); err != nil {
		t.Fatal(err)
	}
	// node1 opens the volume once its map shows node2's mark, and then
	// counts every chunk of node2 stale until it has copied it. The map
	// is read from node1 too: another node's may not show the mark yet.
	waitFor(t, 60*time.Second, "node2's lost mirror to be marked and then resynchronised without a client", func() bool {
		st, open := volumeStates(t, c)["node1"][name]
		return open && st.Stale["node2"] == 0 && len(clusterMap(t, c, 0).Volumes[name].Stale) == 0
	})
	c.Kill(0)
	if msg := readsBack(uri(1), 32<<20, 0x5a); msg != "" {
		t.Fatalf("the volume through node2, resynchronised with no client, node1 down: %s", msg)
	}
}

// emptyMountpaths removes everything on node i's mountpaths (a replaced
// drive); the node must be stopped.
func emptyMountpaths(t *testing.T, c *localcluster.Cluster, i int) {
	t.Helper()
	for _, mp := range c.Configs[i].Mountpaths {
		ents, err := os.ReadDir(mp)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if err := os.RemoveAll(filepath.Join(mp, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// readsBack reads the first n bytes of uri until they are all pattern, for
// up to 20 s (a new leader may be elected meanwhile); it returns qemu-io's
// last complaint, or "".
func readsBack(uri string, n int64, pattern byte) string {
	var msg string
	for start := time.Now(); time.Since(start) < 20*time.Second; time.Sleep(500 * time.Millisecond) {
		if msg = qemuRead(uri, 0, n, pattern); msg == "" {
			return ""
		}
	}
	return msg
}

// TestVolumeServerReplaced is the replacement of a dead server of a
// volume whose chunks cannot be re-placed on other nodes (copies=2 on two
// nodes: node3 was draining when it was created): node2 dies, is removed
// (`admin node rm`), and a new machine, with empty drives and a data
// directory of its own, on another address, joins under node2's ID. It
// holds none of the chunks node2 held, so it must not serve them as
// current (zeros) before it has them: the node that wrote the volume
// copies them back from the other mirror, with no client asking.
// Afterwards the volume reads back through the new node with the writer
// down.
func TestVolumeServerReplaced(t *testing.T) {
	const name = "vol7"
	c := startCluster(t, localcluster.Spec{})
	admin(t, c, 0, "node", "drain", "node3")
	waitFor(t, 10*time.Second, "node1's map to show node3 draining", func() bool {
		return clusterMap(t, c, 0).Nodes["node3"].Draining
	})
	writeVolume(t, c, name, 0x6c)
	admin(t, c, 0, "node", "undrain", "node3")
	if got := clusterMap(t, c, 0).Volumes[name].Nodes; !slices.Equal(got, []string{"node1", "node2"}) {
		t.Fatalf("%s placed on %v, want node1 and node2", name, got)
	}

	c.Kill(1)
	waitFor(t, 30*time.Second, "the map to mark node2 down", func() bool {
		return clusterMap(t, c, 0).Nodes["node2"].State == cluster.StateDown
	})
	if out := admin(t, c, 0, "node", "rm", "node2"); !strings.Contains(out, "a copy short until a node joins as node2") || !strings.Contains(out, name+" (copies=2, 8 chunks)") {
		t.Errorf("node rm does not say %s's chunks on node2 are a copy short:\n%s", name, out)
	}
	if out := volumeCmd(t, c, 0, "info", name); !strings.Contains(out, "WARNING: node2 is no longer a member") {
		t.Errorf("volume info does not say node2's chunk copies are missing:\n%s", out)
	}
	// The new machine: empty drives and data directory, other addresses.
	emptyMountpaths(t, c, 1)
	if err := os.RemoveAll(c.Configs[1].DataDir); err != nil {
		t.Fatal(err)
	}
	moved := func(addr string) string { return strings.Replace(addr, ".2:", ".12:", 1) }
	err := c.Reconfigure(1, func(n *config.Node) {
		n.Raft = moved(n.Raft)
		for _, l := range [][]string{n.Public, n.Intra, n.NBD} {
			for k := range l {
				l[k] = moved(l[k])
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	startAgain(t, c, 1)
	if got := clusterMap(t, c, 0).Nodes["node2"].IntraAddrs; len(got) == 0 || got[0] != c.Configs[1].Intra[0] {
		t.Fatalf("node2's intra addresses in the map: %v, want %s first", got, c.Configs[1].Intra[0])
	}
	node2CopiedBack(t, c, name, 0x6c, "node2 was replaced by a new machine")
}

// TestVolumeReplacedOnRemoval: a node of a 4-node cluster dies and is
// removed: node2, a mirror, or node1, which also holds the volume's
// claim (another node then claims the volume to re-place it). Its chunks
// of a copies=2 volume are copied to the volume's other nodes while the
// volume is read and written through other nodes, and while fio writes
// a second volume through node4 all along, without an error; once the
// map shows the re-placements ended, both volumes read back with one
// more of the nodes that held them down, so every chunk has both its
// copies on the nodes left.
func TestVolumeReplacedOnRemoval(t *testing.T) {
	for _, tc := range []struct {
		name          string
		remove, after int
	}{
		{"mirror", 1, 0},
		{"writer", 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const name = "vol8"
			const via = 2 // node3 answers the admin calls
			c := startCluster(t, localcluster.Spec{Nodes: 4})
			uri := writeVolume(t, c, name, 0x4d)
			gone := fmt.Sprintf("node%d", tc.remove+1)
			held := volumeInfoJSON(t, c, via, name).ChunksPerNode[gone]
			if held == 0 {
				t.Fatalf("%s holds no chunk of the volume", gone)
			}
			// fio writes vol9 through node4, 200 writes a second for
			// about 12 s, across the node's death, removal and the
			// re-placements.
			volumeCmd(t, c, via, "create", "vol9", "--size", "64MiB", "--copies", "2", "--chunk", "4MiB")
			load := func(verify bool) []string {
				return pacedLoad(fmt.Sprintf("nbd://%s/vol9", c.Configs[3].NBD[0]), "40m", 7, verify)
			}
			fioDone, fioOut := startFio(t, load(false))
			time.Sleep(time.Second)

			c.Kill(tc.remove)
			waitFor(t, 30*time.Second, "the map to mark "+gone+" down", func() bool {
				return clusterMap(t, c, via).Nodes[gone].State == cluster.StateDown
			})
			out := admin(t, c, via, "node", "rm", gone)
			if !strings.Contains(out, fmt.Sprintf("copied to the volumes' other nodes (volume info shows when it is done): %s (copies=2, %d chunks)", name, held)) {
				t.Errorf("node rm does not say %s's chunks of %s are copied to the other nodes:\n%s", gone, name, out)
			}
			// Through node4 and node3 meanwhile: the first 8 MiB are
			// written again, and everything reads back.
			runTool(t, "qemu-io", "-f", "raw", "-c", "write -P 0x4e 0 8M", "-c", "flush", uri(3))
			readBoth := func(i int, what string) {
				t.Helper()
				msg := ""
				for start := time.Now(); time.Since(start) < 20*time.Second; time.Sleep(500 * time.Millisecond) {
					if msg = qemuRead(uri(i), 0, 8<<20, 0x4e); msg == "" {
						if msg = qemuRead(uri(i), 8<<20, 24<<20, 0x4d); msg == "" {
							return
						}
					}
				}
				t.Fatalf("the volume through node%d %s: %s", i+1, what, msg)
			}
			readBoth(2, "during the re-placement")

			waitFio(t, fioDone, fioOut, 90*time.Second, "fio writing vol9 across the removal")
			waitFor(t, 60*time.Second, "the re-placements to end", func() bool {
				m := clusterMap(t, c, via)
				return m.Volumes[name].Prev == nil && !slices.Contains(m.Volumes[name].Nodes, gone) &&
					m.Volumes["vol9"].Prev == nil && !slices.Contains(m.Volumes["vol9"].Nodes, gone)
			})
			info := volumeInfoJSON(t, c, via, name)
			sum := int64(0)
			for _, n := range info.ChunksPerNode {
				sum += n
			}
			if len(info.Removed) != 0 || info.ChunksPerNode[gone] != 0 || info.Copying != 0 || sum != 2*info.Chunks {
				t.Fatalf("volume info after the re-placement: %+v", info)
			}
			waitThreeVoters(t, c, via)
			c.Kill(tc.after)
			what := fmt.Sprintf("after the re-placement, node%d down too", tc.after+1)
			readBoth(2, what)
			readBoth(3, what)
			runTool(t, "fio", load(true)...)
		})
	}
}

// waitThreeVoters waits until the map (through node via) has three raft
// voters, so that the quorum survives the next kill.
func waitThreeVoters(t *testing.T, c *localcluster.Cluster, via int) {
	t.Helper()
	waitFor(t, 30*time.Second, "three voters among the nodes left", func() bool {
		voters := 0
		for _, n := range clusterMap(t, c, via).Nodes {
			if n.Voter {
				voters++
			}
		}
		return voters == 3
	})
}

// startFio starts fio with args in a temporary directory; it reports on
// done when fio ends (killed at the end of the test if still running),
// with its output in out.
func startFio(t *testing.T, args []string) (done <-chan error, out *bytes.Buffer) {
	t.Helper()
	fio := exec.Command("fio", args...)
	fio.Dir = t.TempDir()
	out = &bytes.Buffer{}
	fio.Stdout, fio.Stderr = out, out
	if err := fio.Start(); err != nil {
		t.Fatal(err)
	}
	ch := make(chan error, 1)
	exited := make(chan struct{})
	go func() { ch <- fio.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = fio.Process.Kill()
			<-exited
		}
	})
	return ch, out
}

// chunkFiles counts the chunk files of volume name on node i's drives.
func chunkFiles(t *testing.T, c *localcluster.Cluster, i int, name string) int {
	t.Helper()
	n := 0
	for _, mp := range c.Configs[i].Mountpaths {
		dirs, err := filepath.Glob(filepath.Join(mp, "volumes", name+"@*"))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range dirs {
			files, err := filepath.Glob(filepath.Join(d, strings.Repeat("[0-9a-f]", 16)))
			if err != nil {
				t.Fatal(err)
			}
			n += len(files)
		}
	}
	return n
}

// waitFio waits up to d for the fio started by startFio (done, out) to
// end, and fails the test if it fails or does not end; what names the run.
func waitFio(t *testing.T, done <-chan error, out *bytes.Buffer, d time.Duration, what string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v\n%s", what, err, out.String())
		}
	case <-time.After(d):
		t.Fatalf("%s did not end:\n%s", what, out.String())
	}
}

// pacedLoad is the fio job of the re-placement tests: random 16 KiB
// writes over the first size bytes (fio's notation) of the export at
// uri, 4 in flight, 200 a second, from the pseudo-random sequence of
// seed, each block with a CRC32C; with verify, it only reads the same
// blocks back and checks them.
func pacedLoad(uri, size string, seed int, verify bool) []string {
	args := []string{"--name=load", "--ioengine=nbd", "--uri=" + uri,
		"--rw=randwrite", "--bs=16k", "--iodepth=4", "--size=" + size, "--verify=crc32c", "--verify_state_save=0",
		"--randrepeat=1", fmt.Sprintf("--randseed=%d", seed), "--norandommap=0"}
	if verify {
		return append(args, "--verify_only")
	}
	return append(args, "--do_verify=0", "--rate_iops=200")
}

// volumeInfoJSON is `volume info NAME --json` through node i.
func volumeInfoJSON(t *testing.T, c *localcluster.Cluster, i int, name string) node.VolumeInfo {
	t.Helper()
	var info node.VolumeInfo
	if err := json.Unmarshal([]byte(volumeCmd(t, c, i, "info", name, "--json")), &info); err != nil {
		t.Fatal(err)
	}
	return info
}

// TestVolumeLostChunks: two nodes of a 4-node cluster die together and
// are removed one after the other, so the re-placement of the first one's
// chunks finds those whose two copies were on the two dead nodes with no
// copy left. It still ends, and so does the second one's after it; volume
// info lists exactly those chunks as lost; through either node left their
// reads and writes fail with EIO while every other chunk reads back; and
// once the loss is accepted they read as zeros through both nodes (each of
// which reads its own copy). The dead pair is the non-voter and one voter,
// so that the raft quorum survives: which nodes vote depends on the order
// in which they joined.
func TestVolumeLostChunks(t *testing.T) {
	const name = "vol10"
	c := startCluster(t, localcluster.Spec{Nodes: 4})
	waitThreeVoters(t, c, 0)
	var voters, others []int
	m := clusterMap(t, c, 0)
	for i, cfg := range c.Configs {
		if m.Nodes[cfg.ID].Voter {
			voters = append(voters, i)
		} else {
			others = append(others, i)
		}
	}
	// Node indexes: live[0] and live[1] stay, dead[0] and dead[1] die.
	live, dead := voters[:2], []int{voters[2], others[0]}
	id := func(i int) string { return c.Configs[i].ID }
	t.Logf("killing %s and %s", id(dead[0]), id(dead[1]))

	volumeCmd(t, c, live[0], "create", name, "--size", "32MiB", "--copies", "2", "--chunk", "1MiB")
	uri := func(i int) string { return fmt.Sprintf("nbd://%s/%s", c.Configs[live[i]].NBD[0], name) }
	runTool(t, "qemu-io", "-f", "raw", "-c", "write -P 0x5a 0 32M", "-c", "flush", uri(0))
	var lost []int64
	for i := range int64(32) {
		o := placement.Owners([]string{"node1", "node2", "node3", "node4"}, volume.ChunkName(name, i), 2)
		if !slices.Contains(o, id(live[0])) && !slices.Contains(o, id(live[1])) {
			lost = append(lost, i)
		}
	}
	if len(lost) == 0 || len(lost) == 32 {
		t.Fatalf("placement puts %d of 32 chunks only on %s and %s: pick another volume name", len(lost), id(dead[0]), id(dead[1]))
	}

	c.Kill(dead[0])
	c.Kill(dead[1])
	waitFor(t, 30*time.Second, "the map to mark the dead nodes down", func() bool {
		m := clusterMap(t, c, live[0])
		return m.Nodes[id(dead[0])].State == cluster.StateDown && m.Nodes[id(dead[1])].State == cluster.StateDown
	})
	admin(t, c, live[0], "node", "rm", id(dead[0]))
	admin(t, c, live[0], "node", "rm", id(dead[1]))
	survivors := []string{id(live[0]), id(live[1])}
	slices.Sort(survivors)
	waitFor(t, 60*time.Second, "the re-placements to end", func() bool {
		v := clusterMap(t, c, live[0]).Volumes[name]
		return v.Prev == nil && slices.Equal(v.Nodes, survivors)
	})
	if info := volumeInfoJSON(t, c, live[1], name); !slices.Equal(info.Lost, lost) {
		t.Fatalf("volume info lists lost chunks %v, want %v", info.Lost, lost)
	}
	if out := volumeCmd(t, c, live[1], "info", name); !strings.Contains(out, fmt.Sprintf("LOST: %d chunks (", len(lost))) {
		t.Fatalf("volume info does not show the lost chunks:\n%s", out)
	}
	readAll := func(what string, lostPattern byte, lostFails bool) {
		t.Helper()
		for _, i := range []int{0, 1} {
			for ch := range int64(32) {
				msg := qemuRead(uri(i), ch<<20, 1<<20, 0x5a)
				switch {
				case !slices.Contains(lost, ch):
				case lostFails:
					if !strings.Contains(msg, "Input/output error") {
						t.Fatalf("%s: lost chunk %d read through %s: %q, want EIO", what, ch, id(live[i]), msg)
					}
					continue
				default:
					msg = qemuRead(uri(i), ch<<20, 1<<20, lostPattern)
				}
				if msg != "" {
					t.Fatalf("%s: chunk %d through %s: %s", what, ch, id(live[i]), msg)
				}
			}
		}
	}
	readAll("lost", 0, true)
	// The second survivor's metrics: the lost chunks, and the reads it
	// answered with an error and without.
	if n := metric(t, c, live[1], `slipstream_volume_lost_chunks{volume="vol10"}`); n != float64(len(lost)) {
		t.Errorf("slipstream_volume_lost_chunks = %v, want %d", n, len(lost))
	}
	if n := metric(t, c, live[1], `slipstream_nbd_requests_total{op="read",result="error"}`); n < float64(len(lost)) {
		t.Errorf("NBD reads answered with an error: %v, want at least %d", n, len(lost))
	}
	if n := metric(t, c, live[1], `slipstream_nbd_bytes_total{op="read"}`); n < float64(32-len(lost))*(1<<20) {
		t.Errorf("NBD bytes read: %v, want at least %d MiB", n, 32-len(lost))
	}
	out, err := exec.Command("qemu-io", "-f", "raw", "-c", fmt.Sprintf("write -P 0x11 %d 4k", lost[0]<<20), uri(1)).CombinedOutput()
	if err == nil && !strings.Contains(string(out), "Input/output error") {
		t.Fatalf("a write to lost chunk %d succeeded: %s", lost[0], out)
	}

	out2 := volumeCmd(t, c, live[1], "accept-loss", name)
	if !strings.Contains(out2, fmt.Sprintf("the loss of %d chunks accepted", len(lost))) {
		t.Fatalf("accept-loss: %s", out2)
	}
	if info := volumeInfoJSON(t, c, live[0], name); len(info.Lost) != 0 {
		t.Fatalf("lost chunks after accept-loss: %v", info.Lost)
	}
	waitFor(t, 10*time.Second, "the lost chunks to read as zeros", func() bool {
		return qemuRead(uri(0), lost[0]<<20, 1<<20, 0) == "" && qemuRead(uri(1), lost[0]<<20, 1<<20, 0) == ""
	})
	readAll("accepted", 0, false)
	if n := metric(t, c, live[0], `slipstream_volume_lost_chunks{volume="vol10"}`); n != 0 {
		t.Errorf("slipstream_volume_lost_chunks after accept-loss = %v", n)
	}
}

// metric returns the value of series (name and labels, as the text format
// writes them) on node i's public metrics; 0 if it has none.
func metric(t *testing.T, c *localcluster.Cluster, i int, series string) float64 {
	t.Helper()
	for _, line := range metricsLines(t, c, i) {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metrics line %q: %v", line, err)
			}
			return f
		}
	}
	return 0
}

// metricsLines returns the lines of node i's public metrics.
func metricsLines(t *testing.T, c *localcluster.Cluster, i int) []string {
	t.Helper()
	resp, err := http.Get(c.Endpoint(i) + node.PublicMetricsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(string(body), "\n")
}

// TestVolumeDrained: draining node2 of a 4-node cluster copies its chunks
// off it, those of a copies=1 volume included, while fio writes that
// volume through node4 across the copy; node2 is written until the copies
// are made. Then node2 is killed and removed: the copies=1 volume reads
// back whole (fio verify, qemu-io patterns), and so does the copies=2 one
// with one more node down.
func TestVolumeDrained(t *testing.T) {
	c := startCluster(t, localcluster.Spec{Nodes: 4})
	const via = 2 // node3 answers the admin calls
	uri := func(i int, name string) string { return fmt.Sprintf("nbd://%s/%s", c.Configs[i].NBD[0], name) }
	volumeCmd(t, c, via, "create", "one", "--size", "64MiB", "--copies", "1", "--chunk", "1MiB")
	volumeCmd(t, c, via, "create", "two", "--size", "32MiB", "--copies", "2", "--chunk", "1MiB")
	runTool(t, "qemu-io", "-f", "raw", "-c", "write -P 0x61 32M 32M", "-c", "flush", uri(0, "one"))
	runTool(t, "qemu-io", "-f", "raw", "-c", "write -P 0x62 0 32M", "-c", "flush", uri(0, "two"))
	onNode2 := volumeInfoJSON(t, c, via, "one").ChunksPerNode["node2"]
	if onNode2 == 0 {
		t.Fatal("node2 holds no chunk of volume one")
	}
	// fio writes the first 32 MiB of one through node4, 200 writes a
	// second, across the drain and the copies.
	load := func(verify bool) []string { return pacedLoad(uri(3, "one"), "32m", 11, verify) }
	fioDone, fioOut := startFio(t, load(false))
	time.Sleep(time.Second)

	out := admin(t, c, via, "node", "drain", "node2")
	if !strings.Contains(out, fmt.Sprintf("volume chunks are copied off it, and it is written until they are (volume info shows when it is done): one (copies=1, %d chunks)", onNode2)) {
		t.Errorf("drain does not say the chunks of one are copied off node2:\n%s", out)
	}
	// The writer ends the re-placements itself once every node has seen
	// the copies made, with node2 up and still a member.
	waitFor(t, 60*time.Second, "the re-placements off node2 to end", func() bool {
		m := clusterMap(t, c, via)
		for _, name := range []string{"one", "two"} {
			if v := m.Volumes[name]; v.Prev != nil || slices.Contains(v.Nodes, "node2") {
				return false
			}
		}
		return true
	})
	if info := volumeCmd(t, c, via, "info", "one"); strings.Contains(info, "re-plac") {
		t.Errorf("volume info after the re-placement ended:\n%s", info)
	}
	waitFor(t, 60*time.Second, "node2 to delete its chunks of one", func() bool { return chunkFiles(t, c, 1, "one") == 0 })
	waitFio(t, fioDone, fioOut, 90*time.Second, "fio writing one across the drain")

	c.Kill(1)
	waitFor(t, 30*time.Second, "the map to mark node2 down", func() bool {
		return clusterMap(t, c, via).Nodes["node2"].State == cluster.StateDown
	})
	if out := admin(t, c, via, "node", "rm", "node2"); strings.Contains(out, "lost") || strings.Contains(out, "short") {
		t.Errorf("rm of the drained node2:\n%s", out)
	}
	waitFor(t, 30*time.Second, "the re-placements to end", func() bool {
		m := clusterMap(t, c, via)
		return m.Volumes["one"].Prev == nil && m.Volumes["two"].Prev == nil
	})
	runTool(t, "fio", load(true)...)
	if msg := qemuRead(uri(2, "one"), 32<<20, 32<<20, 0x61); msg != "" {
		t.Fatalf("one through node3 with node2 gone: %s", msg)
	}
	waitThreeVoters(t, c, via)
	c.Kill(0)
	if msg := qemuRead(uri(2, "two"), 0, 32<<20, 0x62); msg != "" {
		t.Fatalf("two through node3 with node2 gone and node1 down: %s", msg)
	}
}

// TestVolumeRebalance: node4 joins a 3-node cluster with a copies=1 and a
// copies=2 volume, and `volume rebalance` spreads both over it while fio
// writes the copies=1 volume through node4 (200 writes a second). The
// chunks HRW gives node4 are copied there, their old owners are written
// until the writer has every node past the copies, then the re-placement
// ends by itself and the old owners delete the chunks they no longer
// hold. fio verify passes through another node, every node holds exactly
// the chunks HRW gives it over the four nodes, and the copies=2 volume
// reads back with node4 killed.
func TestVolumeRebalance(t *testing.T) {
	c := startCluster(t, localcluster.Spec{Nodes: 4, Initial: 3})
	ctx := context.Background()
	const via = 2 // node3 answers the admin calls
	uri := func(i int, name string) string { return fmt.Sprintf("nbd://%s/%s", c.Configs[i].NBD[0], name) }
	volumeCmd(t, c, via, "create", "one", "--size", "64MiB", "--copies", "1", "--chunk", "1MiB")
	volumeCmd(t, c, via, "create", "two", "--size", "32MiB", "--copies", "2", "--chunk", "1MiB")
	runTool(t, "qemu-io", "-f", "raw", "-c", "write -P 0x61 0 64M", "-c", "flush", uri(0, "one"))
	runTool(t, "qemu-io", "-f", "raw", "-c", "write -P 0x62 0 32M", "-c", "flush", uri(0, "two"))
	if out := volumeCmd(t, c, via, "rebalance", "one"); !strings.Contains(out, "nothing to move") {
		t.Errorf("rebalance with no node to add:\n%s", out)
	}

	if err := c.StartNode(3); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx, 4); err != nil {
		t.Fatal(err)
	}
	// fio writes through node4 and verifies through node3.
	load := func(verify bool) []string {
		if verify {
			return pacedLoad(uri(2, "one"), "32m", 13, true)
		}
		return pacedLoad(uri(3, "one"), "32m", 13, false)
	}
	fioDone, fioOut := startFio(t, load(false))
	time.Sleep(time.Second)

	out := volumeCmd(t, c, via, "rebalance", "--all")
	for _, name := range []string{"one", "two"} {
		if !regexp.MustCompile(`(?m)^volume ` + name + `: \d+ chunk copies copied to node4 \(placed on node1, node2, node3 before\)`).MatchString(out) {
			t.Errorf("rebalance --all does not say %s moves to node4:\n%s", name, out)
		}
	}
	waitFor(t, 90*time.Second, "the rebalances to end", func() bool {
		m := clusterMap(t, c, via)
		for _, name := range []string{"one", "two"} {
			if v := m.Volumes[name]; v.Prev != nil || !slices.Contains(v.Nodes, "node4") {
				return false
			}
		}
		return true
	})
	waitFio(t, fioDone, fioOut, 120*time.Second, "fio writing one across the rebalance")
	m := clusterMap(t, c, via)
	for _, name := range []string{"one", "two"} {
		if v := m.Volumes[name]; len(v.Stale) > 0 || len(v.Lost) > 0 {
			t.Errorf("%s after the rebalance: stale %v, lost %v", name, v.Stale, v.Lost)
		}
	}
	// Every node ends with exactly the chunks HRW gives it over the four.
	for _, name := range []string{"one", "two"} {
		info := volumeInfoJSON(t, c, via, name)
		if info.ChunksPerNode["node4"] == 0 {
			t.Fatalf("%s: node4 holds no chunk after the rebalance: %v", name, info.ChunksPerNode)
		}
		for i := range 4 {
			id := fmt.Sprintf("node%d", i+1)
			waitFor(t, 60*time.Second, fmt.Sprintf("%s to hold %d chunks of %s", id, info.ChunksPerNode[id], name), func() bool {
				return int64(chunkFiles(t, c, i, name)) == info.ChunksPerNode[id]
			})
		}
	}
	runTool(t, "fio", load(true)...)
	if msg := qemuRead(uri(1, "one"), 32<<20, 32<<20, 0x61); msg != "" {
		t.Fatalf("one through node2 after the rebalance: %s", msg)
	}
	c.Kill(3)
	if msg := qemuRead(uri(1, "two"), 0, 32<<20, 0x62); msg != "" {
		t.Fatalf("two through node2 with node4 down: %s", msg)
	}
}

// TestVolumeRebalanceWriterDies: the node that writes a copies=2 volume
// (and copies its chunks to node4, just joined) is killed as the
// rebalance starts. A node of the set left claims the volume and makes
// the copies; the re-placement stays open (the old owners written) while
// the killed node, a member still, cannot say that it reads the new
// owners, and ends once it is back. The volume reads back through every
// node, and through node4 with node1 killed again.
func TestVolumeRebalanceWriterDies(t *testing.T) {
	c := startCluster(t, localcluster.Spec{Nodes: 4, Initial: 3})
	ctx := context.Background()
	const via = 2
	uri := func(i int) string { return fmt.Sprintf("nbd://%s/vol", c.Configs[i].NBD[0]) }
	volumeCmd(t, c, via, "create", "vol", "--size", "64MiB", "--copies", "2", "--chunk", "1MiB")
	runTool(t, "qemu-io", "-f", "raw", "-c", "write -P 0x63 0 64M", "-c", "flush", uri(0))
	if err := c.StartNode(3); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx, 4); err != nil {
		t.Fatal(err)
	}
	if w := clusterMap(t, c, via).Volumes["vol"].Writer; w != "node1" {
		t.Fatalf("writer %q, want node1", w)
	}
	volumeCmd(t, c, via, "rebalance", "vol")
	c.Kill(0)
	waitFor(t, 60*time.Second, "the copies to node4 to be made without node1", func() bool {
		v := clusterMap(t, c, via).Volumes["vol"]
		return (v.Copied || v.Prev == nil) && v.Writer != "node1"
	})
	time.Sleep(3 * time.Second) // several settle attempts
	if v := clusterMap(t, c, via).Volumes["vol"]; v.Prev == nil {
		t.Fatalf("the re-placement ended while node1, a member, could not answer: %+v", v)
	}
	if msg := qemuRead(uri(3), 0, 64<<20, 0x63); msg != "" {
		t.Fatalf("through node4 with node1 down: %s", msg)
	}
	if err := c.StartNode(0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the re-placement to end with node1 back", func() bool {
		return clusterMap(t, c, via).Volumes["vol"].Prev == nil
	})
	for i := range 4 {
		if msg := qemuRead(uri(i), 0, 64<<20, 0x63); msg != "" {
			t.Fatalf("through node%d after the rebalance: %s", i+1, msg)
		}
	}
	waitThreeVoters(t, c, via)
	c.Kill(0)
	if msg := qemuRead(uri(3), 0, 64<<20, 0x63); msg != "" {
		t.Fatalf("through node4 with node1 killed after the rebalance: %s", msg)
	}
}
