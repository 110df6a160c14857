package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/netx"
	"github.com/slipstream-io/slipstream/internal/node"
	"github.com/slipstream-io/slipstream/internal/peer"
	"github.com/slipstream-io/slipstream/internal/store"
	"github.com/slipstream-io/slipstream/internal/tier"
)

// fakeCluster is a three-node cluster's admin API, answering like the
// nodes do (errors included), one HTTP server per node.
type fakeCluster struct {
	t       *testing.T
	mu      sync.Mutex
	m       *cluster.Map
	srvs    []*httptest.Server
	secret  string
	mps     map[string][]store.MountpathStats
	extra   map[string]node.Sections // what each node reports besides its mountpaths
	vols    map[string]node.VolumeInfo
	hang    map[string]bool // nodes whose status does not answer until the request ends
	leader  string          // the leader the nodes report: "" node1, "-" none
	asking  int             // status requests in flight, and the most at once
	mostAsk int
	jobs    []string      // job requests seen
	removed []string      // nodes removed (admin node rm)
	jobWait time.Duration // pause between a job's progress lines
}

func newFakeCluster(t *testing.T) *fakeCluster {
	f := &fakeCluster{t: t, m: cluster.NewMap(), secret: "s3cret", mps: map[string][]store.MountpathStats{}, extra: map[string]node.Sections{}, vols: map[string]node.VolumeInfo{}, hang: map[string]bool{}}
	f.m.Version = 7
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("node%d", i)
		srv := httptest.NewServer(f.handler(id))
		t.Cleanup(srv.Close)
		f.srvs = append(f.srvs, srv)
		addr := strings.TrimPrefix(srv.URL, "http://")
		f.m.Nodes[id] = cluster.NodeInfo{ID: id, IntraAddrs: []string{addr}, PublicAddrs: []string{fmt.Sprintf("127.0.%d.1:9000", i)},
			State: cluster.StateUp, Voter: true}
		f.mps[id] = []store.MountpathStats{
			{Path: fmt.Sprintf("/data/%s/mp1", id), Used: 3 << 30, Capacity: 100 << 30, Objects: int64(i)},
			{Path: fmt.Sprintf("/data/%s/mp2-longer-name", id), Used: 3 << 30, Capacity: 100 << 30, Objects: 10},
		}
	}
	f.m.Buckets["data"] = cluster.BucketProps{Name: "data", Copies: 2, Mode: cluster.ModeLocal, Validate: "never"}
	return f
}

// env returns the admin flags pointing at node1.
func (f *fakeCluster) args(args ...string) []string {
	return append(args, "--node", f.srvs[0].URL, "--secret", f.secret)
}

func fakeError(w http.ResponseWriter, status int, msg string) {
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

func (f *fakeCluster) handler(id string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /cluster/map", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.leader == "-" && r.URL.Query().Has("sync") {
			fakeError(w, http.StatusServiceUnavailable, "cluster: no leader")
			return
		}
		_ = json.NewEncoder(w).Encode(f.m)
	})
	mux.HandleFunc("POST "+cluster.PathLeave, func(w http.ResponseWriter, r *http.Request) {
		var req struct{ ID string }
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.mu.Lock()
		defer f.mu.Unlock()
		f.removed = append(f.removed, req.ID)
		delete(f.m.Nodes, req.ID)
		_ = json.NewEncoder(w).Encode(struct{}{})
	})
	admin := http.NewServeMux()
	admin.HandleFunc("POST /admin/v1/nodes/{id}/drain", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(struct{}{})
	})
	admin.HandleFunc("GET /admin/v1/status", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.asking++
		f.mostAsk = max(f.mostAsk, f.asking)
		hang := f.hang[id]
		f.mu.Unlock()
		defer func() { f.mu.Lock(); f.asking--; f.mu.Unlock() }()
		if hang {
			<-r.Context().Done()
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		leader := "node1"
		if f.leader == "-" {
			leader = ""
		}
		_ = json.NewEncoder(w).Encode(node.Status{Node: id, Leader: leader, MapVersion: f.m.Version, Mountpaths: f.mps[id], Extra: f.extra[id]})
	})
	admin.HandleFunc("GET /admin/v1/buckets", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		var out []cluster.BucketProps
		for _, n := range f.m.BucketNames() {
			b, _ := f.m.Bucket(n)
			out = append(out, b)
		}
		_ = json.NewEncoder(w).Encode(out)
	})
	admin.HandleFunc("POST /admin/v1/buckets", func(w http.ResponseWriter, r *http.Request) {
		var b cluster.BucketProps
		_ = json.NewDecoder(r.Body).Decode(&b)
		b = b.WithDefaults() // as the node does: copies 0 is stored as 1
		f.mu.Lock()
		f.m.Buckets[b.Name] = b
		f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(b)
	})
	admin.HandleFunc("DELETE /admin/v1/buckets/{name}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if _, ok := f.m.Buckets[r.PathValue("name")]; !ok {
			fakeError(w, http.StatusNotFound, "object: no such bucket: "+r.PathValue("name"))
			return
		}
		delete(f.m.Buckets, r.PathValue("name"))
		_ = json.NewEncoder(w).Encode(struct{}{})
	})
	job := func(name string, lines func(bucket string) []any) {
		admin.HandleFunc("POST /admin/v1/"+name, func(w http.ResponseWriter, r *http.Request) {
			f.mu.Lock()
			f.jobs = append(f.jobs, name+" "+r.URL.RawQuery)
			f.mu.Unlock()
			for _, l := range lines(r.URL.Query().Get("bucket")) {
				_ = json.NewEncoder(w).Encode(l)
				w.(http.Flusher).Flush()
				time.Sleep(f.jobWait)
			}
		})
	}
	// Like the nodes: scrub and rebalance of an unknown bucket do nothing,
	// prefetch reports the error as its last one.
	job("scrub", func(string) []any {
		return []any{node.ScrubProgress{Checked: 1}, node.ScrubProgress{Checked: 2}, node.ScrubProgress{Checked: 3, Done: true}}
	})
	job("rebalance", func(string) []any { return []any{node.RebalanceProgress{Scanned: 1, Done: true}} })
	job("prefetch", func(b string) []any {
		if b != "data" {
			return []any{node.Progress{Done: true, LastErr: "object: no such bucket: " + b}}
		}
		return []any{node.Progress{Listed: 1, Filled: 1, Bytes: 10, Done: true}}
	})
	admin.HandleFunc("POST /admin/v1/evict", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.jobs = append(f.jobs, "evict "+r.URL.RawQuery)
		f.mu.Unlock()
		if b := r.URL.Query().Get("bucket"); b != "data" {
			fakeError(w, http.StatusNotFound, "object: no such bucket: "+b)
			return
		}
		objs := 0
		if id == "node1" {
			objs = 1
		}
		_ = json.NewEncoder(w).Encode(node.EvictResult{Node: id, Objects: objs, Bytes: 100})
	})
	admin.HandleFunc("GET /admin/v1/volumes/{name}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if v, ok := f.vols[r.PathValue("name")]; ok {
			_ = json.NewEncoder(w).Encode(v)
			return
		}
		fakeError(w, http.StatusBadRequest, fmt.Sprintf("object: invalid argument: volume %q", r.PathValue("name")))
	})
	admin.HandleFunc("GET /admin/v1/volumes", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		out := []node.VolumeInfo{}
		for _, name := range slices.Sorted(maps.Keys(f.vols)) {
			out = append(out, f.vols[name])
		}
		_ = json.NewEncoder(w).Encode(out)
	})
	admin.HandleFunc("POST /admin/v1/volumes", func(w http.ResponseWriter, r *http.Request) {
		var v cluster.VolumeSpec
		_ = json.NewDecoder(r.Body).Decode(&v)
		if v.Copies > 3 {
			fakeError(w, http.StatusServiceUnavailable, fmt.Sprintf("object: no live replica could serve the request: %d copies, 3 nodes up", v.Copies))
			return
		}
		_ = json.NewEncoder(w).Encode(node.VolumeInfo{VolumeSpec: v})
	})
	mux.Handle("/admin/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(peer.SecretHeader) != f.secret {
			http.Error(w, "cluster secret required", http.StatusForbidden)
			return
		}
		admin.ServeHTTP(w, r)
	}))
	return mux
}

// run runs the slipstream command line and returns its exit code and
// output.
func run(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = Main(context.Background(), args, &o, &e)
	return code, o.String(), e.String()
}

// admin status exits 1 when nodes did not answer, says why once at the
// end, and keeps the table aligned.
func TestAdminStatusFailsWhenNodesDoNotAnswer(t *testing.T) {
	f := newFakeCluster(t)
	code, out, errOut := run("admin", "status", "--node", f.srvs[0].URL, "--secret", "wrong")
	if code != 1 {
		t.Errorf("exit %d with a wrong secret, want 1\nstdout:\n%s", code, out)
	}
	if n := strings.Count(errOut, "cluster secret required"); n != 1 {
		t.Errorf("the reason appears %d times on stderr, want once:\n%s", n, errOut)
	}
	if strings.Contains(out, "cluster secret required") {
		t.Errorf("the error is repeated in the table:\n%s", out)
	}
	for _, want := range []string{"3 of 3 nodes did not answer", "node1, node2, node3", "--secret"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	checkAligned(t, out, "DRIVES", "FULLEST", "OBJECTS")
}

// checkAligned checks that the table's columns named cols (by default
// those of the table of mountpaths) start at the same offset on every row.
func checkAligned(t *testing.T, out string, cols ...string) {
	t.Helper()
	if len(cols) == 0 {
		cols = []string{"MOUNTPATH", "USED"}
	}
	var header string
	var rows []string
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(l, "NODE"):
			header = l
		case header != "" && l == "":
			header += "\x00" // table ended
		case header != "" && !strings.HasSuffix(header, "\x00"):
			rows = append(rows, l)
		}
	}
	header = strings.TrimSuffix(header, "\x00")
	if header == "" || len(rows) == 0 {
		t.Fatalf("no table in:\n%s", out)
	}
	for _, name := range cols {
		col := strings.Index(header, name)
		if col < 1 {
			t.Fatalf("no column %s in %q", name, header)
		}
		for _, r := range rows {
			if len(r) <= col || r[col-1] != ' ' || r[col] == ' ' {
				t.Errorf("column %s of a row not aligned with the header:\n%s\n%s", name, header, r)
			}
		}
	}
}

// The status tables stay aligned whatever the nodes' extra status is: one
// row per node, with the fullest drive's share and the failed drives, by
// default; one per mountpath, saying what USED and CAPACITY are, with
// --detail.
func TestAdminStatusAligned(t *testing.T) {
	f := newFakeCluster(t)
	f.mu.Lock()
	f.mps["node2"][0].Used = 91 << 30
	f.mps["node2"][1].Failed = true
	f.mu.Unlock()
	code, out, errOut := run(f.args("admin", "status")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	checkAligned(t, out, "DRIVES", "FULLEST", "OBJECTS")
	containsAll(t, "the table of nodes", out,
		"127.0.1.1:9000  2            3%       11\n",
		"127.0.2.1:9000  2, 1 FAILED  91%      12\n",
		"admin status --detail",
	)
	if strings.Contains(out, "MOUNTPATH") || strings.Contains(out, "map version 7:") {
		t.Errorf("status without --detail shows mountpaths or sections:\n%s", out)
	}
	code, out, errOut = run(f.args("admin", "status", "--detail")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	checkAligned(t, out)
	if !strings.Contains(out, "USED and CAPACITY: the file system") {
		t.Errorf("status --detail does not say what USED and CAPACITY are:\n%s", out)
	}
	_, help, helpErr := run("admin", "status", "--help")
	if !strings.Contains(help+helpErr, "file system") {
		t.Errorf("status --help does not say what USED and CAPACITY are:\n%s", help+helpErr)
	}
	// A node that is down keeps the rows after it aligned; it is part of
	// the status (named on stderr), not a failure of the command.
	f.srvs[1].Close()
	for _, args := range [][]string{{"--detail"}, nil} {
		code, out, errOut = run(f.args(append([]string{"admin", "status"}, args...)...)...)
		if code != 0 || !strings.Contains(errOut, "1 of 3 nodes did not answer: node2") {
			t.Errorf("%v: exit %d, stderr %q; want 0 and node2 named", args, code, errOut)
		}
		if args == nil {
			checkAligned(t, out, "DRIVES", "FULLEST", "OBJECTS")
		} else {
			checkAligned(t, out)
		}
	}
}

// admin status NODE... shows those nodes' mountpaths and sections only,
// and refuses a node the map does not have.
func TestAdminStatusNamedNodes(t *testing.T) {
	f := newFakeCluster(t)
	code, out, errOut := run(f.args("admin", "status", "node2")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	containsAll(t, "status node2", out, "nothing needs attention", "/data/node2/mp1", "node2, map version 7:")
	for _, not := range []string{"/data/node1/", "node1 (leader), map version", "node3, map version"} {
		if strings.Contains(out, not) {
			t.Errorf("status node2 shows %q:\n%s", not, out)
		}
	}
	code, out, errOut = run(f.args("admin", "status", "--json", "node3")...)
	if code != 0 || strings.Count(out, `"node":{`) != 1 || !strings.Contains(out, `"id":"node3"`) {
		t.Errorf("status --json node3: exit %d, %s\n%s", code, errOut, out)
	}
	code, _, errOut = run(f.args("admin", "status", "node9")...)
	if code != 2 || !strings.Contains(errOut, `no node "node9" in the map (nodes: node1, node2, node3)`) {
		t.Errorf("status node9: exit %d, stderr %q", code, errOut)
	}
}

// admin status says what needs attention across the nodes, then each
// node's sections in words; --json keeps them as numbers.
func TestAdminStatusSections(t *testing.T) {
	f := newFakeCluster(t)
	code, out, errOut := run(f.args("admin", "status", "--detail")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	containsAll(t, "a healthy cluster's status", out,
		"nothing needs attention",
		"node1 (leader), map version 7:",
		"destage     nothing waiting for the backend",
		"0 destaged since start, 0 failed attempts; journal 0 B",
		"rebalance   no pass since start",
		"intra paths -\n",
		"volumes     none open here",
	)
	if strings.Contains(out, "write-back:") {
		t.Errorf("a cluster with nothing to destage shows a backlog:\n%s", out)
	}

	f.mu.Lock()
	intra := f.m.Nodes["node1"].IntraAddrs[0]
	f.extra["node1"] = node.Sections{
		Interfaces: node.Interfaces{
			Listeners:     []netx.ListenerStats{{Addr: intra, Accepted: 6, Open: 2, BytesRecv: 7 << 10, BytesSent: 3 << 20}, {Addr: "127.0.1.1:9000", Accepted: 1}},
			PeerTransport: []netx.IfaceStats{{Local: "127.0.1.1", State: netx.StateDegraded, PairsUp: 1, PairsDown: 1, Requests: 12, Retries: 2}, {Local: "127.0.2.1"}},
			Paths: []netx.PairStats{
				{Local: "127.0.1.1", Remote: f.m.Nodes["node2"].IntraAddrs[0], State: netx.StateDown, Since: time.Now().Add(-time.Minute), LastError: "connection refused"},
				{Local: "127.0.1.1", Remote: f.m.Nodes["node3"].IntraAddrs[0], State: netx.StateDown}, // node3 is down
				{Local: "127.0.2.1", Remote: "10.9.9.9:9100", State: netx.StateUp},
			},
		},
		Down:      map[string]node.DownNode{"node3": {For: 4 * time.Minute, After: 10 * time.Minute}},
		Scrub:     node.PassStatus[node.ScrubProgress]{Passes: 1, Last: &node.ScrubProgress{Checked: 9, Corrupt: 2, Unrepaired: 2}, LastDone: time.Now().Add(-90 * time.Second)},
		Rebalance: node.PassStatus[node.RebalanceProgress]{Running: true},
		Volumes: map[string]node.VolumeState{"v1": {Stale: map[string]int{"node3": 42, "node2": 0}, Down: []string{"node3"}, Copying: 5, Writer: true}, "v0": {},
			"v2": {Stale: map[string]int{"node3": 512}}},
	}
	// node2 has v1 open too, but not its claim: it counts every chunk of
	// the stale mirror, and attention takes the writer's count. No node
	// with v2 open holds its claim.
	f.extra["node2"] = node.Sections{Volumes: map[string]node.VolumeState{"v1": {Stale: map[string]int{"node3": 512}}}, Destage: tier.Backlog{Objects: 3, Bytes: 12 << 20, Oldest: 5 * time.Minute, Running: 1, Failures: 4,
		LastError: "backend: SlowDown", JournalBytes: 2 << 20, JournalCutRegions: 2, JournalCutBytes: 300, JournalCutFile: "/d/journal.cut-1"}}
	f.mps["node2"][1].Failed = true
	scratch := cluster.VolumeSpec{Name: "scratch", Copies: 1, Lost: []int64{3, 4}}
	f.m.Volumes["scratch"] = scratch
	f.vols["scratch"] = node.VolumeInfo{VolumeSpec: scratch, Unavailable: 9, Degraded: 9}
	n3 := f.m.Nodes["node3"]
	n3.State = cluster.StateDown
	f.m.Nodes["node3"] = n3
	f.mu.Unlock()
	f.srvs[2].Close()

	code, out, errOut = run(f.args("admin", "status", "--detail")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	checkAligned(t, out)
	containsAll(t, "status", out,
		"map version 7, 3 nodes, 1 bucket, 1 volume\nwrite-back: 3 writes not in the backend yet (12.0 MiB) across the nodes, the oldest 5m0s old\nneeds attention:\n",
		"  node1: intra-cluster path from 127.0.1.1 to node2 ("+f.m.Nodes["node2"].IntraAddrs[0]+") down for 1m0s: connection refused\n",
		"  node1: the last scrub found 2 damaged copies it could not repair\n",
		"  node1: volume v1: mirrors down: node3; chunks to resynchronise: 42 on node3\n",
		"  node1: volume v2: chunks to resynchronise: 512 on node3\n",
		"  node2: drive /data/node2/mp2-longer-name FAILED: it takes no new writes; replace it\n",
		"  node2: 3 writes not in the backend, the oldest 5m0s old; last upload error: backend: SlowDown\n",
		"  node2: the write-back journal was damaged: 2 regions cut out at start, kept in /d/journal.cut-1\n",
		"  node3: down for 4m0s; the other nodes make new copies of its objects in 6m0s (rebalance.down_after), or at once after admin node rm node3; its volume chunks are re-placed only after admin node rm\n  volume scratch: 9 chunks with no copy on a node that is up (volume info scratch)\n  volume scratch: 2 chunks LOST (volume info scratch)\n\n",
		"  destage     3 writes not in the backend yet (12.0 MiB), the oldest 5m0s old, 1 being uploaded\n",
		"              0 destaged since start, 4 failed attempts, the last error: backend: SlowDown; journal 2.0 MiB\n",
		"              journal cut at start: 300 B in 2 damaged regions, kept in /d/journal.cut-1\n",
		"  listening   "+intra+"  intra   6 accepted, 2 open, 7.0 KiB received, 3.0 MiB sent\n",
		"127.0.1.1:9000",
		"  public  1 accepted",
		"  intra paths from 127.0.1.1  degraded  1 of 2 paths up, 12 requests (0 in flight, 2 retried, 0 failed)",
		"              from 127.0.2.1  up        no path used yet, 0 requests",
		"  rebalance   a pass is running\n",
		"  scrub       1 pass since start, the last ended 1m30s ago: 9 copies checked (0 B), 2 corrupt, 0 repaired, 2 not repaired\n",
		"  volumes     v0: every mirror up to date\n",
		"              v1: mirrors down: node3; chunks to resynchronise: 42 on node3; 5 chunk copies left to copy to new owners\n",
	)
	for _, not := range []string{"node3, map version", "0 on node2", "to node3", "10.9.9.9", "node2: volume v1"} {
		if strings.Contains(out, not) {
			t.Errorf("status shows %q (sections of a node that did not answer, a mirror with nothing to resynchronise, a path to a node that is down or up, or a count of a volume's chunks not its writer's):\n%s", not, out)
		}
	}

	code, out, errOut = run(f.args("admin", "status", "--json")...)
	if code != 0 {
		t.Fatalf("--json: exit %d: %s", code, errOut)
	}
	var all []struct {
		Status node.Status `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &all); err != nil || len(all) != 3 {
		t.Fatalf("--json: %v, %d nodes:\n%s", err, len(all), out)
	}
	if got := all[1].Status.Extra.Destage; got.Objects != 3 || got.Oldest != 5*time.Minute || !strings.Contains(out, `"destage":{"objects":3,`) {
		t.Errorf("--json destage of node2: %+v\n%s", got, out)
	}
}

// volume info says whether every chunk has its copies on nodes that are
// up, with the writer's count of the chunks a stale mirror missed; volume
// list gives each volume's state in a word.
func TestVolumeHealth(t *testing.T) {
	f := newFakeCluster(t)
	spec := cluster.VolumeSpec{Name: "vm1", Size: 1 << 30, ChunkSize: 4 << 20, Copies: 2, Nodes: []string{"node1", "node2", "node3"}}
	f.mu.Lock()
	f.vols["vm1"] = node.VolumeInfo{VolumeSpec: spec, Chunks: 256}
	f.mu.Unlock()
	code, out, errOut := run(f.args("volume", "info", "vm1")...)
	if code != 0 || !strings.Contains(out, "placed on: node1, node2, node3\nhealth: every chunk has its 2 copies on nodes that are up\n") {
		t.Errorf("healthy: exit %d, stdout:\n%s\nstderr: %s", code, out, errOut)
	}

	degraded := spec
	degraded.Writer, degraded.Stale = "node1", []string{"node3"}
	f.mu.Lock()
	f.vols["vm1"] = node.VolumeInfo{VolumeSpec: degraded, Chunks: 256, Down: []string{"node3"}, Degraded: 170}
	f.extra["node1"] = node.Sections{Volumes: map[string]node.VolumeState{"vm1": {Stale: map[string]int{"node3": 42}, Writer: true}}}
	unavailable := spec
	unavailable.Name, unavailable.Copies = "scratch", 1
	f.vols["scratch"] = node.VolumeInfo{VolumeSpec: unavailable, Chunks: 256, Down: []string{"node3"}, Removed: []string{"node4"}, Degraded: 90, Unavailable: 90}
	f.vols["new"] = node.VolumeInfo{VolumeSpec: cluster.VolumeSpec{Name: "new", Copies: 1, Nodes: []string{"node1"}, Prev: []string{"node2"}}}
	f.mu.Unlock()
	code, out, errOut = run(f.args("volume", "info", "vm1")...)
	if code != 0 || !strings.Contains(out, "placed on: node1, node2, node3\n"+
		"DEGRADED: 170 chunks are a copy short while node3 is not up\n"+
		"resynchronising: node3 missed writes to 42 chunks; the writer copies them to it once it is back\n") {
		t.Errorf("node3 down: exit %d, stdout:\n%s\nstderr: %s", code, out, errOut)
	}
	code, out, errOut = run(f.args("volume", "info", "scratch")...)
	if code != 0 || !strings.Contains(out, "UNAVAILABLE: 90 chunks have no copy on a node that is up (node3, node4 not up): their reads and writes fail until one is back\n") ||
		strings.Contains(out, "DEGRADED") {
		t.Errorf("copies=1, node3 down: exit %d, stdout:\n%s\nstderr: %s", code, out, errOut)
	}
	code, out, errOut = run(f.args("volume", "list")...)
	states := map[string]string{}
	lines := strings.Split(out, "\n")
	col := strings.Index(lines[0], "STATE")
	for _, l := range lines[1:] {
		if len(l) > col && col > 0 {
			states[strings.Fields(l)[0]] = strings.Fields(l[col:])[0]
		}
	}
	if want := map[string]string{"vm1": "degraded", "scratch": "UNAVAILABLE", "new": "re-placing"}; code != 0 || !maps.Equal(states, want) {
		t.Errorf("volume list: exit %d, states %v, want %v\n%s%s", code, states, want, out, errOut)
	}
}

// volumeState names the worst of a volume's troubles.
func TestVolumeState(t *testing.T) {
	for _, tc := range []struct {
		v    node.VolumeInfo
		want string
	}{
		{node.VolumeInfo{}, "ok"},
		{node.VolumeInfo{VolumeSpec: cluster.VolumeSpec{Prev: []string{"a"}}}, "re-placing"},
		{node.VolumeInfo{VolumeSpec: cluster.VolumeSpec{Prev: []string{"a"}, Stale: []string{"b"}}}, "resyncing"},
		{node.VolumeInfo{VolumeSpec: cluster.VolumeSpec{Stale: []string{"b"}}, Degraded: 3}, "degraded"},
		{node.VolumeInfo{Degraded: 3, Unavailable: 1}, "UNAVAILABLE"},
		{node.VolumeInfo{VolumeSpec: cluster.VolumeSpec{Lost: []int64{7}}, Degraded: 3, Unavailable: 1}, "LOST"},
	} {
		if got := volumeState(tc.v); got != tc.want {
			t.Errorf("%+v: %s, want %s", tc.v, got, tc.want)
		}
	}
}

// admin status says when no node that answered knows a raft leader, and
// then shows the asked node's own map rather than failing.
func TestAdminStatusNoLeader(t *testing.T) {
	f := newFakeCluster(t)
	f.mu.Lock()
	f.leader = "-"
	f.mu.Unlock()
	code, out, errOut := run(f.args("admin", "status")...)
	if code != 0 || !strings.Contains(out, "needs attention:\n  cluster: no node that answered knows a raft leader") ||
		!strings.Contains(out, "map version 7, 3 nodes, 1 bucket, 0 volumes\n(the asked node's own copy of the map: no leader could confirm that it is the latest)\n") {
		t.Errorf("no leader: exit %d\nstdout:\n%s\nstderr: %s", code, out, errOut)
	}
	f.mu.Lock()
	f.leader = ""
	f.mu.Unlock()
	if _, out, _ := run(f.args("admin", "status")...); strings.Contains(out, "raft leader") || strings.Contains(out, "own copy") {
		t.Errorf("a leader, and status says there is none:\n%s", out)
	}
}

// admin status asks the nodes at once and gives up on one that does not
// answer within --timeout: the others are shown, the silent ones named.
func TestAdminStatusHungNodes(t *testing.T) {
	f := newFakeCluster(t)
	f.mu.Lock()
	f.hang["node2"], f.hang["node3"] = true, true
	f.mu.Unlock()
	code, out, errOut := run(f.args("admin", "status", "--detail", "--timeout", "500ms")...)
	if code != 0 || !strings.Contains(errOut, "2 of 3 nodes did not answer: node2, node3") || !strings.Contains(out, "node1 (leader), map version 7:") {
		t.Errorf("exit %d\nstdout:\n%s\nstderr: %s", code, out, errOut)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mostAsk < 2 {
		t.Errorf("at most %d status requests in flight at once: the nodes were asked one after the other", f.mostAsk)
	}
}

// containsAll fails the test for each of wants that out lacks.
func containsAll(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("%s lacks %q:\n%s", what, want, out)
		}
	}
}

// bucket create and set refuse --copies 0 instead of printing copies=0
// while the map stores 1; they print what the map stores.
func TestAdminBucketCopies(t *testing.T) {
	f := newFakeCluster(t)
	for _, sub := range []string{"create", "set"} {
		code, out, errOut := run(append([]string{"admin", "bucket", sub, "data", "--copies", "0"}, f.args()...)...)
		if code != 2 || strings.Contains(out, "copies=0") || !strings.Contains(errOut, "--copies 0") {
			t.Errorf("bucket %s --copies 0: exit %d, stdout %q, stderr %q; want a usage error", sub, code, out, errOut)
		}
	}
	code, out, errOut := run(append([]string{"admin", "bucket", "create", "fresh", "--copies", "3"}, f.args()...)...)
	if code != 0 || out != "bucket fresh: copies=3 mode=local\n" {
		t.Errorf("create: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, _ = run(append([]string{"admin", "bucket", "set", "data", "--mode", "local"}, f.args()...)...)
	if code != 0 || out != "bucket data: copies=2 mode=local\n" {
		t.Errorf("set keeps the stored copies: exit %d, stdout %q", code, out)
	}
}

// Every admin command given an unknown bucket fails with exit 1, the same
// message, and prints no result first.
func TestAdminUnknownBucket(t *testing.T) {
	f := newFakeCluster(t)
	for _, args := range [][]string{
		{"admin", "scrub", "--bucket", "nosuch"},
		{"admin", "rebalance", "--bucket", "nosuch"},
		{"admin", "prefetch", "nosuch"},
		{"admin", "evict", "nosuch"},
		{"admin", "bucket", "set", "nosuch", "--copies", "2"},
		{"admin", "bucket", "rm", "nosuch"},
	} {
		code, out, errOut := run(f.args(args...)...)
		if code != 1 || out != "" || errOut != "slipstream admin: no such bucket \"nosuch\"\n" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 1, nothing, no such bucket", args, code, out, errOut)
		}
	}
	if len(f.jobs) > 0 {
		t.Errorf("jobs started for an unknown bucket: %v", f.jobs)
	}
	code, out, errOut := run(f.args("admin", "scrub", "--bucket", "data")...)
	if code != 0 || !strings.Contains(out, "scrub: 9 copies checked") {
		t.Errorf("scrub of a known bucket: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// admin node drain says which volumes' chunks stay on the node and which
// its removal re-places; admin node rm refuses to remove a node that
// holds the only copy of chunks of a copies=1 volume unless --force is
// given, and says which volumes' chunks are copied to their other nodes
// and which are left a copy short (too few other nodes).
func TestAdminNodeVolumes(t *testing.T) {
	f := newFakeCluster(t)
	nodes := []string{"node1", "node2", "node3"}
	f.m.Volumes["solo"] = cluster.VolumeSpec{Name: "solo", Size: 64 << 20, ChunkSize: 1 << 20, Copies: 1, Nodes: nodes}
	f.m.Volumes["pair"] = cluster.VolumeSpec{Name: "pair", Size: 64 << 20, ChunkSize: 1 << 20, Copies: 2, Nodes: nodes}
	f.m.Volumes["away"] = cluster.VolumeSpec{Name: "away", Size: 64 << 20, ChunkSize: 1 << 20, Copies: 1, Nodes: []string{"node1", "node3"}}
	f.m.Volumes["tight"] = cluster.VolumeSpec{Name: "tight", Size: 64 << 20, ChunkSize: 1 << 20, Copies: 2, Nodes: []string{"node1", "node2"}}
	on := map[string]int64{}
	for _, v := range node.VolumesOn(f.m, "node2") {
		on[v.Volume] = v.Chunks
	}
	// HRW over 3 nodes puts about a third of solo's 64 chunks and two
	// thirds of pair's on node2, and none of away's.
	if on["solo"] < 10 || on["solo"] > 35 || on["pair"] < 30 || on["pair"] > 60 || on["tight"] != 64 || len(on) != 3 {
		t.Fatalf("chunk copies on node2: %v", on)
	}

	code, out, errOut := run(f.args("admin", "node", "drain", "node2")...)
	if code != 0 || !strings.Contains(out, "volume chunks do not move (too few other nodes for the copies): node2 keeps those of tight (copies=2, 64 chunks)\n") ||
		!strings.Contains(out, fmt.Sprintf("volume chunks are copied off it, and it is written until they are (volume info shows when it is done): pair (copies=2, %d chunks), solo (copies=1, %d chunks)\n", on["pair"], on["solo"])) {
		t.Errorf("drain: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	n2 := f.m.Nodes["node2"]
	n2.State = cluster.StateDown
	f.m.Nodes["node2"] = n2
	code, out, errOut = run(f.args("admin", "node", "rm", "node2")...)
	if code != 1 || out != "" || len(f.removed) != 0 ||
		!strings.Contains(errOut, fmt.Sprintf("node2 holds the only copy of volume chunks: solo (copies=1, %d chunks)", on["solo"])) ||
		strings.Contains(errOut, "pair") || !strings.Contains(errOut, "--force") {
		t.Fatalf("rm of the only copy: exit %d, removed %v, stdout %q, stderr %q", code, f.removed, out, errOut)
	}
	code, out, errOut = run(f.args("admin", "node", "rm", "node2", "--force")...)
	if code != 0 || !slices.Equal(f.removed, []string{"node2"}) ||
		!strings.Contains(out, "a copy short until a node joins as node2 (docs/operations.md): tight (copies=2, 64 chunks)\n") ||
		!strings.Contains(out, fmt.Sprintf("copied to the volumes' other nodes (volume info shows when it is done): pair (copies=2, %d chunks)\n", on["pair"])) ||
		!strings.Contains(out, fmt.Sprintf("lost with node2, the only copy of: solo (copies=1, %d chunks)\n", on["solo"])) {
		t.Errorf("rm --force: exit %d, removed %v, stdout %q, stderr %q", code, f.removed, out, errOut)
	}

	// A copies=1 volume still being copied off a drained node: its
	// removal needs --force.
	f.removed = nil
	f.m.Volumes = map[string]cluster.VolumeSpec{"moving": {Name: "moving", Size: 64 << 20, ChunkSize: 1 << 20, Copies: 1, Nodes: []string{"node1"}, Prev: []string{"node1", "node3"}}}
	n3 := f.m.Nodes["node3"]
	n3.State = cluster.StateDown
	f.m.Nodes["node3"] = n3
	code, out, errOut = run(f.args("admin", "node", "rm", "node3")...)
	if code != 1 || len(f.removed) != 0 || !strings.Contains(errOut, "holds the only copy of volume chunks: moving (copies=1, ") || !strings.Contains(errOut, "still being copied off it") {
		t.Fatalf("rm while a copies=1 volume is copied off it: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	// A node without volume chunks goes without a word about volumes.
	f.m.Volumes = map[string]cluster.VolumeSpec{"one": {Name: "one", Size: 64 << 20, ChunkSize: 1 << 20, Copies: 1, Nodes: []string{"node1"}}}
	if code, out, errOut := run(f.args("admin", "node", "rm", "node3")...); code != 0 || strings.Contains(out, "volume") {
		t.Errorf("rm of a node without volume chunks: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// Plurals, and a job's progress written as lines, without carriage
// returns, when stderr is not a terminal.
func TestAdminJobOutput(t *testing.T) {
	f := newFakeCluster(t)
	code, out, _ := run(f.args("admin", "evict", "data")...)
	if code != 0 || out != "evicted 1 object, 300 B, from 3 nodes\n" {
		t.Errorf("evict: exit %d, stdout %q", code, out)
	}
	old := progressEvery
	progressEvery = 20 * time.Millisecond
	defer func() { progressEvery = old }()
	f.jobWait = 100 * time.Millisecond
	code, out, errOut := run(f.args("admin", "scrub")...)
	if code != 0 || out != "scrub: 9 copies checked (0 B), 0 corrupt, 0 repaired, 0 not repaired\n" {
		t.Errorf("scrub: exit %d, stdout %q", code, out)
	}
	if strings.Contains(errOut, "\r") || strings.Contains(errOut, "\x1b") {
		t.Errorf("progress written with terminal controls to a non-terminal: %q", errOut)
	}
	if !strings.Contains(errOut, "copies checked") || !strings.HasSuffix(errOut, "\n") {
		t.Errorf("no progress lines: %q", errOut)
	}
}

// -h, --help and help print the usage of their command level and exit 0;
// a subcommand's help lists only its flags.
func TestHelp(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
		not  []string
	}{
		{[]string{"admin", "--help"}, []string{"usage: slipstream admin", "prefetch", "scrub"}, nil},
		{[]string{"admin", "-h"}, []string{"usage: slipstream admin"}, nil},
		{[]string{"admin", "help"}, []string{"usage: slipstream admin"}, nil},
		{[]string{"admin", "help", "bucket"}, []string{"usage: slipstream admin bucket", "create"}, nil},
		{[]string{"admin", "bucket", "--help"}, []string{"usage: slipstream admin bucket", "rm NAME"}, nil},
		{[]string{"admin", "bucket", "rm", "--help"}, []string{"admin bucket rm NAME", "-node", "-secret"}, []string{"-copies", "-mode", "-endpoint"}},
		{[]string{"admin", "bucket", "create", "--help"}, []string{"-copies", "-mode", "-backend"}, nil},
		{[]string{"admin", "bucket", "ls", "-h"}, []string{"-node"}, []string{"-copies"}},
		{[]string{"admin", "node", "--help"}, []string{"drain|undrain|rm ID"}, nil},
		{[]string{"admin", "node", "drain", "--help"}, []string{"drain|undrain|rm ID"}, nil},
		{[]string{"volume", "-h"}, []string{"usage: slipstream volume", "create NAME", "resize"}, nil},
		{[]string{"volume", "--help"}, []string{"usage: slipstream volume"}, nil},
		{[]string{"volume", "help", "create"}, []string{"-size", "-chunk", "-copies"}, nil},
		{[]string{"volume", "list", "--help"}, []string{"-json", "-node"}, []string{"-size", "-chunk", "-copies"}},
		{[]string{"volume", "info", "--help"}, []string{"-json"}, []string{"-size", "-chunk", "-copies"}},
		{[]string{"volume", "delete", "--help"}, []string{"-node"}, []string{"-size", "-chunk", "-copies", "-json"}},
		{[]string{"volume", "resize", "--help"}, []string{"-size"}, []string{"-chunk", "-copies"}},
	} {
		code, out, errOut := run(tc.args...)
		all := out + errOut
		if code != 0 {
			t.Errorf("%v: exit %d, want 0:\n%s", tc.args, code, all)
		}
		if strings.Contains(all, "unknown") {
			t.Errorf("%v: %s", tc.args, all)
		}
		for _, w := range tc.want {
			if !strings.Contains(all, w) {
				t.Errorf("%v: output lacks %q:\n%s", tc.args, w, all)
			}
		}
		for _, w := range tc.not {
			if strings.Contains(all, w) {
				t.Errorf("%v: output lists %q:\n%s", tc.args, w, all)
			}
		}
	}
	// Missing and unknown commands are still usage errors.
	for _, args := range [][]string{{"admin"}, {"admin", "frob"}, {"volume"}, {"volume", "frob"}, {"admin", "bucket", "frob"}} {
		if code, _, _ := run(args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

// Error messages: no internal package labels or doubled parts, one
// wording per error, each printed once.
func TestMessages(t *testing.T) {
	f := newFakeCluster(t)
	for _, tc := range []struct {
		args []string
		code int
		want string // the whole of stderr
	}{
		{[]string{"volume", "create", "vol5"}, 2, "slipstream volume: usage: --size is required (e.g. --size 10GiB)\n"},
		{[]string{"volume", "create", "vol5", "--size", "0"}, 2, "slipstream volume: usage: --size 0: a volume needs a size above 0 (e.g. 10GiB)\n"},
		{[]string{"volume", "create", "vol5", "--size", "lots"}, 2, "slipstream volume: usage: --size \"lots\": give a size such as 10GiB or 512MiB\n"},
		{[]string{"volume", "info", "nosuch"}, 1, "slipstream volume: no such volume \"nosuch\"\n"},
		{[]string{"volume", "info", "--json", "nosuch"}, 1, "slipstream volume: no such volume \"nosuch\"\n"},
		{[]string{"volume", "create", "--size", "0", "vol5"}, 2, "slipstream volume: usage: --size 0: a volume needs a size above 0 (e.g. 10GiB)\n"},
		{[]string{"volume", "create", "--copies", "2", "vol5", "--size", "lots"}, 2, "slipstream volume: usage: --size \"lots\": give a size such as 10GiB or 512MiB\n"},
		{[]string{"volume", "info", "vol5", "extra"}, 2, "slipstream volume: usage: volume info: unexpected argument \"extra\"\n"},
		{[]string{"volume", "create", "v4", "--size", "1GiB", "--copies", "4"}, 1, "slipstream volume: --copies 4 needs 4 nodes up, and the cluster has 3 up\n"},
		{[]string{"admin", "prefetch", "nosuch"}, 1, "slipstream admin: no such bucket \"nosuch\"\n"},
	} {
		code, _, errOut := run(f.args(tc.args...)...)
		if code != tc.code || errOut != tc.want {
			t.Errorf("%v: exit %d, stderr %q; want %d, %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
	code, _, errOut := run("report", "/nonexistent/r.json")
	if code != 1 || strings.Contains(errOut, "loader:") || !strings.Contains(errOut, "no such file") {
		t.Errorf("report of a missing file: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = run("node", "--confg", "x")
	if code != 2 || strings.Count(errOut, "-confg") != 1 {
		t.Errorf("node --confg: exit %d, the error printed %d times, want 2 and once:\n%s", code, strings.Count(errOut, "-confg"), errOut)
	}
	for in, want := range map[string]string{
		"object: no such key: object: no such key: single/one":                       "no such key: single/one",
		"loader: open r.json: no such file or directory":                             "open r.json: no such file or directory",
		"http://h:1: 0 failed, last error: object: no such bucket: b\nhttp://h:2: x": "http://h:1: 0 failed, last error: no such bucket: b\nhttp://h:2: x",
		`bucket "a": copies must be 1..16`:                                           `bucket "a": copies must be 1..16`,
	} {
		if got := cleanMessage(in); got != want {
			t.Errorf("cleanMessage(%q) = %q, want %q", in, got, want)
		}
	}
}

// downNote says how long a node has been down and what the cluster does
// about its copies, as the node that has seen it down the longest counts.
func TestDownNote(t *testing.T) {
	vm := cluster.NewMap()
	vm.Volumes["v"] = cluster.VolumeSpec{Name: "v", Nodes: []string{"n1", "n2"}}
	row := func(down map[string]node.DownNode, err error) statusRow {
		return statusRow{st: node.Status{Extra: node.Sections{Down: down}}, err: err}
	}
	for _, tc := range []struct {
		name string
		rows []statusRow
		m    *cluster.Map
		want string
	}{
		{"no node says", []statusRow{row(nil, nil)}, cluster.NewMap(), "down"},
		{"the longest view", []statusRow{
			row(map[string]node.DownNode{"n2": {For: time.Minute, After: 10 * time.Minute}}, nil),
			row(map[string]node.DownNode{"n2": {For: 3 * time.Minute, After: 10 * time.Minute}}, nil),
			row(map[string]node.DownNode{"n2": {For: 9 * time.Minute, After: 10 * time.Minute}}, errors.New("no answer")),
		}, cluster.NewMap(), "down for 3m0s; the other nodes make new copies of its objects in 7m0s (rebalance.down_after), or at once after admin node rm n2"},
		{"past down_after, with a volume on it", []statusRow{row(map[string]node.DownNode{"n2": {For: 11 * time.Minute, After: 10 * time.Minute}}, nil)}, vm,
			"down for 11m0s; the other nodes have made new copies of its objects (admin status --detail shows the rebalance); admin node rm n2 removes it for good; its volume chunks are re-placed only after admin node rm"},
		{"down_after off", []statusRow{row(map[string]node.DownNode{"n2": {For: time.Hour}}, nil)}, cluster.NewMap(),
			"down for 1h0m0s; its objects get no new copies elsewhere (rebalance.down_after is off)"},
	} {
		if got := downNote("n2", tc.rows, tc.m); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
	vm.Volumes["v"] = cluster.VolumeSpec{Name: "v", Nodes: []string{"n1", "n3"}}
	if got := downNote("n2", []statusRow{row(map[string]node.DownNode{"n2": {For: time.Minute, After: time.Hour}}, nil)}, vm); strings.Contains(got, "volume") {
		t.Errorf("a volume not on n2 is named: %q", got)
	}
}
