package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// TestDemo runs the main job end to end, scaled down: the cold epoch
// fetches every object from the remote stand-in once, the warm epochs are
// served from the cluster's drives only, and the report is written.
func TestDemo(t *testing.T) {
	report := filepath.Join(t.TempDir(), "report")
	out, err := exec.CommandContext(t.Context(), binary, "demo", "--objects", "64", "--object-size", strconv.Itoa(256<<10),
		"--cache", strconv.Itoa(32<<20), "--report", report).CombinedOutput()
	if err != nil {
		t.Fatalf("slipstream demo: %v\n%s", err, out)
	}
	for _, want := range []string{
		`(?m)^\s+cold\s+0% of GETs served from the cluster's drives \(0\), 64 fetched from the remote$`,
		`(?m)^\s+warm\s+100% of GETs served from the cluster's drives \(256\), 0 fetched from the remote$`,
		`(?m)^\s+larger than cache\s+GET\s`,
	} {
		if !regexp.MustCompile(want).Match(out) {
			t.Errorf("demo output does not match %s:\n%s", want, out)
		}
	}
	for _, f := range []string{"index.html", "cold.json", "warm.json", "compare-throughput.png"} {
		if st, err := os.Stat(filepath.Join(report, f)); err != nil || st.Size() == 0 {
			t.Errorf("report file %s: %v", f, err)
		}
	}
}
