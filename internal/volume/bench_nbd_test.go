package volume_test

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/loader"
	"github.com/slipstream-io/slipstream/internal/report"
	"github.com/slipstream-io/slipstream/internal/sysstat"
	"github.com/slipstream-io/slipstream/internal/volume"
	"github.com/slipstream-io/slipstream/internal/volume/filedev"
	"github.com/slipstream-io/slipstream/internal/volume/nbd"
)

// benchVolume opens a volume the way a node does, with the default
// timeouts (10 s per replica call): the tests' short ones fail a mirror
// that a loaded disk keeps busy for a second, which under fio's queue of
// 1 MiB writes is not a failure.
func benchVolume[N remoteNode](t *testing.T, spec volume.Spec, stateDir string, self *testNode, others ...N) *volume.Volume {
	t.Helper()
	cfg := volume.Config{Spec: spec, Self: self.id, StateDir: stateDir, Replicas: map[string]volume.Replica{self.id: self.local}, Nodes: []string{self.id}}
	for _, n := range others {
		c, err := volume.NewClientConfig(volume.ClientConfig{BaseURL: n.url()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cfg.Nodes = append(cfg.Nodes, n.nodeID())
		cfg.Replicas[n.nodeID()] = c
	}
	return openConfig(t, cfg)
}

// TestBenchNBD is the NBD benchmark behind scripts/bench-nbd.sh. It runs only
// when SLIPSTREAM_BENCH_NBD is set: the fio matrix against our server
// (a file device, copies=1 and copies=2 volumes on two nodes, and a
// copies=1 volume on node a alone: every chunk local, FVP's WB+0)
// and, in the same run, against nbdkit null, nbdkit memory and a local file
// through libaio, and prints ratios.
func TestBenchNBD(t *testing.T) {
	if os.Getenv("SLIPSTREAM_BENCH_NBD") == "" {
		t.Skip("set SLIPSTREAM_BENCH_NBD=1 (scripts/bench-nbd.sh) to run the NBD benchmark")
	}
	for _, tool := range []string{"fio", "nbdkit"} {
		needTool(t, tool)
	}
	runtime := envInt("BENCH_RUNTIME", 5)
	jobs := envInt("BENCH_JOBS", 2)
	// Every job runs against every target once per round, interleaved;
	// tables show the median round and ratios the median of the rounds'
	// own ratios, with their range: on this shared machine one target can
	// move by half between two 5 s runs a minute apart.
	rounds := envInt("BENCH_ROUNDS", 3)
	const region = 512 << 20 // bytes each target is exercised over
	dir := t.TempDir()

	// Node a (in this process) coordinates the volumes and serves NBD;
	// node b runs in a process of its own, as a node of a real cluster.
	a, b := startNode(t, "a"), startNodeProcess(t, "b")
	if os.Getenv("BENCH_PIN") != "" {
		pinHosts(t, b.pid)
	}
	mkvol := func(name string, copies int) *volume.Volume {
		return benchVolume(t, volume.Spec{Name: name, Size: region, Copies: copies}, filepath.Join(dir, "state"), a, b)
	}
	fd, err := filedev.Open(filepath.Join(dir, "ours-file.img"), region)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	local := benchVolume[*procNode](t, volume.Spec{Name: "c1local", Size: region, Copies: 1}, filepath.Join(dir, "state"), a)
	sock := serveNBD(t, nbd.Map{"file": fd, "c1": mkvol("c1", 1), "c2": mkvol("c2", 2), "c1local": local})

	pids := map[string]int{}
	nbdkit := func(name string, args ...string) string {
		s := filepath.Join(dir, name+".sock")
		cmd := exec.Command("nbdkit", append([]string{"-f", "-U", s, "--threads=16"}, args...)...)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		pids["nbdkit-"+name] = cmd.Process.Pid
		for i := 0; i < 100; i++ {
			if _, err := os.Stat(s); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		return s
	}
	nullSock := nbdkit("null", "null", fmt.Sprint(region))
	memSock := nbdkit("memory", "memory", fmt.Sprint(region))
	diskFile := filepath.Join(dir, "disk.img")

	type target struct {
		name, desc string
		args       []string
	}
	nbdArgs := func(sock, export string) []string {
		return []string{"--ioengine=nbd", "--uri=nbd+unix:///" + export + "?socket=" + sock}
	}
	targets := []target{
		{"nbdkit-null", "nbdkit null plugin (protocol only)", nbdArgs(nullSock, "")},
		{"nbdkit-memory", "nbdkit memory plugin", nbdArgs(memSock, "")},
		{"disk", "local file, fio libaio direct=1 (the disk)", []string{"--ioengine=libaio", "--direct=1", "--filename=" + diskFile}},
		{"ours-file", "our server, file device", nbdArgs(sock, "file")},
		{"c1", "our server, volume copies=1 (2 nodes)", nbdArgs(sock, "c1")},
		{"c2", "our server, volume copies=2 (2 nodes)", nbdArgs(sock, "c2")},
		{"c1local", "our server, volume copies=1 on this node only", nbdArgs(sock, "c1local")},
	}
	type job struct {
		name string
		args []string
	}
	matrix := []job{
		{"1m-write", []string{"--rw=write", "--bs=1m"}},
		{"1m-read", []string{"--rw=read", "--bs=1m"}},
		{"4k-randread", []string{"--rw=randread", "--bs=4k"}},
		{"4k-randwrite", []string{"--rw=randwrite", "--bs=4k"}},
		{"8k-randread", []string{"--rw=randread", "--bs=8k"}},
		{"8k-randwrite", []string{"--rw=randwrite", "--bs=8k"}},
		{"64k-randrw", []string{"--rw=randrw", "--bs=64k", "--rwmixread=50"}},
		{"32k-randwrite", []string{"--rw=randwrite", "--bs=32k"}},
		{"256k-randwrite", []string{"--rw=randwrite", "--bs=256k"}},
	}
	common := []string{"--name=bench", "--iodepth=32", fmt.Sprintf("--numjobs=%d", jobs),
		fmt.Sprintf("--size=%d", region/jobs), fmt.Sprintf("--offset_increment=%d", region/jobs),
		"--group_reporting", "--output-format=json", "--percentile_list=50:99:99.9"}

	runFioOut := func(args ...string) []byte {
		out, err := exec.Command("fio", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("fio %v: %v\n%s", args, err, out)
		}
		return out
	}
	runFio := func(args ...string) fioResult { return parseFio(t, runFioOut(args...)) }
	// Fill every target first so that reads read data, not holes.
	for _, tg := range targets {
		runFio(append(append(append([]string{}, common...), tg.args...), "--rw=write", "--bs=1m")...)
	}
	if only := os.Getenv("BENCH_ONLY"); only != "" { // e.g. "4k-randread,4k-randwrite"
		var keep []job
		for _, j := range matrix {
			if strings.Contains(","+only+",", ","+j.name+",") {
				keep = append(keep, j)
			}
		}
		matrix = keep
	}
	all := map[string]map[string][]fioResult{} // job, target: one per round
	for _, j := range matrix {
		all[j.name] = map[string][]fioResult{}
	}
	for round := 0; round < rounds; round++ {
		for _, j := range matrix {
			for _, tg := range targets {
				args := append(append(append([]string{}, common...), tg.args...), j.args...)
				args = append(args, "--time_based", fmt.Sprintf("--runtime=%d", runtime), "--ramp_time=1")
				// Server CPU per I/O: our server is this process plus node b's;
				// nbdkit runs in its own.
				cpu := func() time.Duration {
					if pid, ok := pids[tg.name]; ok {
						d, _ := sysstat.ProcessCPU(pid)
						return d
					}
					d, _ := sysstat.ProcessCPU(b.pid)
					return selfCPU() + d
				}
				c0 := cpu()
				stop := func() {}
				if round == 0 {
					stop = cpuProfile(t, j.name+"-"+tg.name)
				}
				r := runFio(args...)
				stop()
				if tg.name != "disk" {
					r.cpuPerIO = float64(cpu()-c0) / 1000 / (r.iops * float64(runtime+1))
				}
				all[j.name][tg.name] = append(all[j.name][tg.name], r)
			}
		}
	}
	results := map[string]map[string]fioResult{} // the median round of each
	for jn, byTarget := range all {
		results[jn] = map[string]fioResult{}
		for tn, rs := range byTarget {
			results[jn][tn] = medianRun(rs)
		}
	}
	// ratio is the median, over rounds, of a / b measured in the same
	// round, with the range: "0.84 (0.80–0.90)".
	ratio := func(job, a, b string) string {
		x, y := all[job][a], all[job][b]
		var rs []float64
		for i := range min(len(x), len(y)) {
			rs = append(rs, x[i].iops/y[i].iops)
		}
		return ratioCell(rs)
	}

	// The PernixData set-up: one workload of two workers, each with one
	// write outstanding (and four, to show where the CPU starts to bind),
	// random writes of 4K/32K/256K, copies=1 (WB+0) vs copies=2 (WB+1).
	sweepDepths := []int{1, 4}
	sweepAll := map[string][]fioResult{} // by "c1/4k/1", one per round
	if os.Getenv("BENCH_ONLY") == "" || strings.Contains(os.Getenv("BENCH_ONLY"), "sweep") {
		for round := 0; round < rounds; round++ {
			for _, depth := range sweepDepths {
				for _, sz := range []string{"4k", "32k", "256k"} {
					for _, tg := range targets {
						if tg.name != "c1" && tg.name != "c2" && tg.name != "c1local" && tg.name != "disk" {
							continue
						}
						args := append(append([]string{}, common...), tg.args...)
						args = append(args, fmt.Sprintf("--iodepth=%d", depth), "--rw=randwrite", "--bs="+sz,
							"--time_based", fmt.Sprintf("--runtime=%d", runtime), "--ramp_time=1")
						// For `slipstream report` (scripts/bench-nbd.sh): the
						// JSON output as DIR/qdN/004k-c1.json and fio's
						// per-second logs next to it.
						var save string
						if fioDir := os.Getenv("BENCH_FIO_DIR"); fioDir != "" && tg.name != "disk" && round == 0 {
							d := filepath.Join(fioDir, fmt.Sprintf("qd%d", depth))
							if err := os.MkdirAll(d, 0o755); err != nil {
								t.Fatal(err)
							}
							save = filepath.Join(d, fmt.Sprintf("%04s-%s", sz, tg.name))
							args = append(args, "--write_iops_log="+save, "--write_bw_log="+save, "--write_hist_log="+save,
								"--log_avg_msec=1000", "--log_hist_msec=1000")
						}
						out := runFioOut(args...)
						k := fmt.Sprintf("%s/%s/%d", tg.name, sz, depth)
						sweepAll[k] = append(sweepAll[k], parseFio(t, out))
						if save != "" {
							if err := os.WriteFile(save+".json", out, 0o644); err != nil {
								t.Fatal(err)
							}
						}
					}
				}
			}
		}
	}
	sweep := map[string]fioResult{}
	for k, rs := range sweepAll {
		sweep[k] = medianRun(rs)
	}
	sweepRatio := func(a, b, sz string, depth int) string {
		x, y := sweepAll[fmt.Sprintf("%s/%s/%d", a, sz, depth)], sweepAll[fmt.Sprintf("%s/%s/%d", b, sz, depth)]
		var rs []float64
		for i := range min(len(x), len(y)) {
			rs = append(rs, x[i].iops/y[i].iops)
		}
		return ratioCell(rs)
	}

	var md bytes.Buffer
	fmt.Fprintf(&md, "fio: iodepth 32, numjobs %d (one NBD connection per job), %d s per job after 1 s ramp, over %d MiB; all in one run, jobs interleaved across targets, %d rounds. Each row is the target's median round (by IOPS); each ratio is the median of the ratios measured within one round, with their range in parentheses.\n\n", jobs, runtime, region>>20, rounds)
	for _, tg := range targets {
		fmt.Fprintf(&md, "- `%s`: %s\n", tg.name, tg.desc)
	}
	fmt.Fprintf(&md, "\n| job | target | IOPS | MiB/s | p50 µs | p99 µs | p99.9 µs | server CPU µs/IO | vs null | vs memory | vs disk |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, j := range matrix {
		r := results[j.name]
		for _, tg := range targets {
			x := r[tg.name]
			fmt.Fprintf(&md, "| %s | %s | %.0f | %.0f | %.0f | %.0f | %.0f | %s | %.2f | %.2f | %.2f |\n", j.name, tg.name, x.iops, x.mibs, x.p50, x.p99, x.p999, cpuCell(x.cpuPerIO),
				x.iops/r["nbdkit-null"].iops, x.iops/r["nbdkit-memory"].iops, x.iops/r["disk"].iops)
		}
	}
	fmt.Fprintf(&md, "\nKey ratios (medians of the rounds' own ratios, range in parentheses):\n\n| job | c1 / nbdkit null | c2 / nbdkit null | c1local / nbdkit null | ours-file / nbdkit null | c2 / c1 (WB+1 vs WB+0) | c2 / c1local |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, j := range matrix {
		fmt.Fprintf(&md, "| %s | %s | %s | %s | %s | %s | %s |\n", j.name, ratio(j.name, "c1", "nbdkit-null"), ratio(j.name, "c2", "nbdkit-null"),
			ratio(j.name, "c1local", "nbdkit-null"), ratio(j.name, "ours-file", "nbdkit-null"), ratio(j.name, "c2", "c1"), ratio(j.name, "c2", "c1local"))
	}
	// Both nodes write to the one disk here, so copies=2 puts twice c2's
	// bytes on it: c2 / c1 cannot exceed disk / (2 × c1) in bytes.
	fmt.Fprintf(&md, "\nWrite-size sweep, random writes, copies=1 vs copies=2 (\"disk allows\": the c2 / c1 at which c2's two copies "+
		"fill the disk's bandwidth measured in the same run, disk MiB/s / (2 × c1 MiB/s)):\n\n"+
		"| size | disk MiB/s | c1 IOPS | c1 MiB/s | c1 p99 µs | c2 IOPS | c2 p99 µs | c2 / c1 | disk allows |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range []string{"4k", "32k", "256k"} {
		r, ok := results[s+"-randwrite"]
		if !ok {
			continue
		}
		fmt.Fprintf(&md, "| %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %s | %.2f |\n", s, r["disk"].mibs, r["c1"].iops, r["c1"].mibs, r["c1"].p99,
			r["c2"].iops, r["c2"].p99, ratio(s+"-randwrite", "c2", "c1"), min(1, r["disk"].mibs/(2*r["c1"].mibs)))
	}
	if len(sweep) > 0 {
		fmt.Fprintf(&md, "\nThe same sweep with two fio jobs (two workers, as in the PernixData test) and few writes in flight:\n\n"+
			"| size | writes in flight per job | disk IOPS | c1 IOPS | c1 p50 µs | c1 p99 µs | c1local IOPS | c2 IOPS | c2 p50 µs | c2 p99 µs | c2 / c1 | c2 / c1local |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, depth := range sweepDepths {
			for _, sz := range []string{"4k", "32k", "256k"} {
				at := func(tg string) fioResult { return sweep[fmt.Sprintf("%s/%s/%d", tg, sz, depth)] }
				d, c1, cl, c2 := at("disk"), at("c1"), at("c1local"), at("c2")
				fmt.Fprintf(&md, "| %s | %d | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %s | %s |\n", sz, depth, d.iops, c1.iops, c1.p50, c1.p99,
					cl.iops, c2.iops, c2.p50, c2.p99, sweepRatio("c2", "c1", sz, depth), sweepRatio("c2", "c1local", sz, depth))
			}
		}
	}
	if img := os.Getenv("BENCH_IMG"); img != "" && os.Getenv("BENCH_ONLY") == "" { // the plots of a full run
		var jobNames, targetNames []string
		for _, j := range matrix {
			jobNames = append(jobNames, j.name)
		}
		for _, tg := range targets {
			targetNames = append(targetNames, tg.name)
		}
		if err := benchPlots(img, jobNames, targetNames, results); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&md, "\n![IOPS relative to nbdkit null](img/bench-nbd-matrix.png)\n\n![write-size sweep](img/bench-nbd-sweep.png)\n")
	}
	os.Stdout.Write(md.Bytes())
	if out := os.Getenv("BENCH_OUT"); out != "" {
		if err := os.WriteFile(out, md.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// medianRun is the run with the median IOPS of rs.
func medianRun(rs []fioResult) fioResult {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b fioResult) int { return cmp.Compare(a.iops, b.iops) })
	return rs[len(rs)/2]
}

// ratioCell shows the median of rs and, for more than one, their range.
func ratioCell(rs []float64) string {
	if len(rs) == 0 {
		return "–"
	}
	rs = slices.Clone(rs)
	slices.Sort(rs)
	if len(rs) == 1 {
		return fmt.Sprintf("%.2f", rs[0])
	}
	return fmt.Sprintf("%.2f (%.2f–%.2f)", rs[len(rs)/2], rs[0], rs[len(rs)-1])
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

type fioResult struct{ iops, mibs, p50, p99, p999, cpuPerIO float64 }

func cpuCell(v float64) string {
	if v == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", v)
}

// selfCPU is the user+system CPU time of this process.
func selfCPU() time.Duration {
	var r syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r)
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}

// parseFio reads fio's JSON output (after any text the nbd engine prints)
// with the parser `slipstream report` uses; latency percentiles of a mixed
// job are the worse of its reads' and writes'.
func parseFio(t *testing.T, out []byte) fioResult {
	t.Helper()
	rs, err := loader.ParseFio(out, "fio")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	tot := rs[0].Main.Total
	return fioResult{iops: tot.OpsPerSec, mibs: tot.BytesPerSec / (1 << 20),
		p50: tot.Latency.P50 * 1000, p99: tot.Latency.P99 * 1000, p999: tot.Latency.P999 * 1000}
}

// benchPlots draws the matrix (IOPS of every target relative to nbdkit
// null, per job) and the write-size sweep (copies=1 vs copies=2) into dir.
func benchPlots(dir string, jobs, targets []string, results map[string]map[string]fioResult) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var bars []report.Bars
	for _, tg := range targets {
		b := report.Bars{Name: tg}
		for _, j := range jobs {
			b.Values = append(b.Values, results[j][tg].iops/results[j]["nbdkit-null"].iops)
		}
		bars = append(bars, b)
	}
	if err := report.BarChart(filepath.Join(dir, "bench-nbd-matrix.png"), "fio matrix: IOPS relative to nbdkit null (same run)",
		"IOPS / nbdkit null", jobs, bars); err != nil {
		return err
	}
	sizes := []string{"4k", "32k", "256k"}
	var sweep []report.Bars
	for _, c := range []struct{ target, name string }{{"c1", "copies=1 (WB+0)"}, {"c2", "copies=2 (WB+1)"}} {
		b := report.Bars{Name: c.name}
		for _, sz := range sizes {
			b.Values = append(b.Values, results[sz+"-randwrite"][c.target].iops)
		}
		sweep = append(sweep, b)
	}
	return report.BarChart(filepath.Join(dir, "bench-nbd-sweep.png"), "random-write IOPS by write size, copies=1 vs copies=2",
		"IOPS", sizes, sweep)
}

// pinHosts makes the machine two hosts of one CPU each: this process (the
// NBD server and node a) and every child it starts from now on (fio,
// nbdkit) run on CPU 0, node b's process on CPU 1.
func pinHosts(t *testing.T, nodeB int) {
	t.Helper()
	for _, c := range [][]string{{"-a", "-p", "-c", "0", strconv.Itoa(os.Getpid())}, {"-a", "-p", "-c", "1", strconv.Itoa(nodeB)}} {
		if out, err := exec.Command("taskset", c...).CombinedOutput(); err != nil {
			t.Fatalf("taskset %v: %v\n%s", c, err, out)
		}
	}
	goruntime.GOMAXPROCS(1)
}

// nodeChildEnv makes the test binary serve one node's chunk replicas (see
// TestBenchNodeChild).
const nodeChildEnv = "SLIPSTREAM_BENCH_NODE_DIR"

// TestBenchNodeChild is node b of TestBenchNBD when run as a child process:
// it serves a Local on two mountpaths under $SLIPSTREAM_BENCH_NODE_DIR on a
// loopback port it prints, until its stdin closes.
func TestBenchNodeChild(t *testing.T) {
	dir := os.Getenv(nodeChildEnv)
	if dir == "" {
		t.Skip("child of TestBenchNBD")
	}
	l, err := volume.NewLocal(volume.LocalConfig{Mountpaths: []string{filepath.Join(dir, "mp1"), filepath.Join(dir, "mp2")}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = http.Serve(ln, volume.NewHandler(l)) }()
	fmt.Println("ADDR", ln.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// procNode is a node serving chunk replicas from a child process.
type procNode struct {
	id, addr string
	pid      int
}

func (n *procNode) nodeID() string { return n.id }
func (n *procNode) url() string    { return "http://" + n.addr }

// startNodeProcess starts node id as a child process of the test binary.
func startNodeProcess(t *testing.T, id string) *procNode {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestBenchNodeChild$")
	cmd.Env = append(os.Environ(), nodeChildEnv+"="+t.TempDir())
	if os.Getenv("BENCH_PIN") != "" {
		cmd.Env = append(cmd.Env, "GOMAXPROCS=1") // a host of one CPU (pinHosts)
	}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if addr, ok := strings.CutPrefix(sc.Text(), "ADDR "); ok {
			go func() { _, _ = io.Copy(io.Discard, stdout) }()
			return &procNode{id: id, addr: addr, pid: cmd.Process.Pid}
		}
	}
	t.Fatalf("node %s: no address from the child process", id)
	return nil
}

// cpuProfile writes a CPU profile of this process (node a, the NBD server)
// to $BENCH_CPUPROFILE/name.pprof until the returned function is called,
// if that directory is set.
func cpuProfile(t *testing.T, name string) (stop func()) {
	dir := os.Getenv("BENCH_CPUPROFILE")
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, name+".pprof"))
	if err != nil {
		t.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		t.Fatal(err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}
