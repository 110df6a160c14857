package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDemo runs `slipstream demo` at a small scale: a real cluster, the
// remote stand-in, the load generator's epochs and the report. It checks
// the summary table and the report's files.
func TestDemo(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(binary, "demo", "--report", filepath.Join(dir, "report"), "--work", filepath.Join(dir, "work"), "--objects", "12",
		"--object-size", "1048576", "--cache", "24117248", "--remote-rate", "33554432", "--workers", "4")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("demo: %v", err)
	}
	for _, want := range []string{"direct from backend", "cold", "warm", "larger than cache", "report: "} {
		if !strings.Contains(string(out), want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	html, err := os.ReadFile(filepath.Join(dir, "report", "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	pngs, _ := filepath.Glob(filepath.Join(dir, "report", "*.png"))
	if len(pngs) < 8 {
		t.Fatalf("report has %d PNGs", len(pngs))
	}
	for _, p := range pngs {
		if fi, err := os.Stat(p); err != nil || fi.Size() < 5000 {
			t.Errorf("%s is missing or too small", p)
		}
	}
	if !strings.Contains(string(html), "compare-throughput.png") {
		t.Error("index.html does not reference the comparison chart")
	}
	// The demo cleans up: no node or remote process outlives it.
	if out, _ := exec.Command("pgrep", "-f", filepath.Join(dir, "work")).CombinedOutput(); strings.TrimSpace(string(out)) != "" {
		t.Errorf("processes left running: %s", out)
	}
}
