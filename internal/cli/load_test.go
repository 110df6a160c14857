package cli

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/loader"
	"github.com/slipstream-io/slipstream/internal/testbin"
)

// loadTestS3 starts versitygw on a free loopback port for the load command
// tests and returns its endpoint; it is stopped by PID.
func loadTestS3(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts an S3 server")
	}
	bin := testbin.Tool(t, "versitygw")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, "--access", "clik", "--secret", "clis", "--port", addr, "posix", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for deadline := time.Now().Add(15 * time.Second); ; {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return "http://" + addr
		}
		if time.Now().After(deadline) {
			t.Fatal("versitygw did not start")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestLoadAndReportCommands(t *testing.T) {
	os.Unsetenv("AWS_CA_BUNDLE")
	ep := loadTestS3(t)
	dir := t.TempDir()
	ctx := context.Background()
	run := func(args ...string) (string, int) {
		var out, errb bytes.Buffer
		code := Main(ctx, args, &out, &errb)
		return out.String() + errb.String(), code
	}
	cold, warm := filepath.Join(dir, "cold.json"), filepath.Join(dir, "warm.json")
	out, code := run("load", "--endpoint", ep, "--access-key", "clik", "--secret-key", "clis", "--bucket", "cli",
		"--create-bucket", "--fill-count", "30", "--size", "8KiB-64KiB", "--epochs", "1", "--workers", "3",
		"--label", "cold", "--json", cold, "--csv", filepath.Join(dir, "cold.csv"))
	if code != 0 {
		t.Fatalf("load exited %d:\n%s", code, out)
	}
	if !strings.Contains(out, "cold") || !strings.Contains(out, "result: "+cold) {
		t.Fatalf("load output:\n%s", out)
	}
	r, err := loader.ReadResult(cold)
	if err != nil {
		t.Fatal(err)
	}
	if r.Main.Ops["GET"].Count != 30 || r.Fill.Ops["PUT"].Count != 30 || r.Params.MinSize != 8<<10 || r.Params.MaxSize != 64<<10 {
		t.Fatalf("result %+v", r.Main.Ops)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "cold.csv")); err != nil || !strings.HasPrefix(string(b), "phase,t,") {
		t.Fatalf("csv: %v %q", err, b)
	}
	out, code = run("load", "--endpoint", ep, "--access-key", "clik", "--secret-key", "clis", "--bucket", "cli",
		"--workload", "mixed", "--put-pct", "20", "--size", "8K", "--duration", "1s", "--label", "warm", "--json", warm, "--cleanup")
	if code != 0 {
		t.Fatalf("load exited %d:\n%s", code, out)
	}
	rep := filepath.Join(dir, "rep")
	out, code = run("report", cold, warm, "-o", rep)
	if code != 0 {
		t.Fatalf("report exited %d:\n%s", code, out)
	}
	if !strings.Contains(out, filepath.Join(rep, "index.html")) {
		t.Fatalf("report output:\n%s", out)
	}
	for _, f := range []string{"index.html", "compare-throughput.png", "01-cold-throughput.png", "02-warm-latency.png"} {
		if fi, err := os.Stat(filepath.Join(rep, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}

	// Results of loaders that ran together merge into one run.
	merged := filepath.Join(dir, "merged")
	if out, code := run("report", "-merge", "both", cold, warm, "-o", merged, "-table=false"); code != 0 {
		t.Fatalf("report -merge exited %d:\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(merged, "01-both-throughput.png")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(merged, "compare-throughput.png")); err == nil {
		t.Fatal("a merged report has comparison charts")
	}

	// Usage errors exit 2.
	for _, args := range [][]string{
		{"load", "--bucket", "b"}, // no duration or epochs
		{"load", "--bucket", "b", "--epochs", "1", "--workload", "delete"},
		{"load", "--bucket", "b", "--epochs", "1", "--size", "big"},
		{"report"},
	} {
		if out, code := run(args...); code != 2 {
			t.Errorf("%v exited %d, want 2:\n%s", args, code, out)
		}
	}
}

// fio's JSON output goes into the same report: a table row per job, the
// comparison charts and, from fio's per-second logs, the time series.
func TestReportFio(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := Main(context.Background(), []string{"report", "../loader/testdata/fio-randwrite.json", "../loader/testdata/fio-randrw.json", "-o", dir}, &out, &errb)
	if code != 0 {
		t.Fatalf("report exited %d:\n%s%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"fio-randwrite", "fio-randrw/mixed.1", "fio-randrw/mixed.2", "write", "read"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report output lacks %q:\n%s", want, out.String())
		}
	}
	// The per-second logs next to the JSON files give time series.
	for _, f := range []string{"index.html", "compare-throughput.png", "compare-requests.png", "compare-latency.png", "compare-timeline.png",
		"01-fio-randwrite-throughput.png", "01-fio-randwrite-latency.png", "03-fio-randrw-mixed-2-requests.png"} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Size() < 1000 {
			t.Errorf("%s: %v", f, err)
		}
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"fio version": "fio-3.33", "jobs": [`), 0o644); err != nil {
		t.Fatal(err)
	}
	if code := Main(context.Background(), []string{"report", bad, "-o", dir}, &out, &errb); code == 0 {
		t.Fatal("report of truncated fio output exited 0")
	}
}
