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
// served from the cluster's drives only, and the report is written. Two
// epochs over a dataset twice the cache must not flush the first dataset,
// which was read five times: with S3-FIFO (the default) it is still
// served from the drives afterwards; with LRU it is gone, which shows
// that the check can fail.
func TestDemo(t *testing.T) {
	for _, tc := range []struct {
		policy   string
		minAfter int // share of "warm after the scan" GETs served from the drives, in percent
		maxAfter int
	}{
		{"s3fifo", 90, 100},
		{"lru", 0, 50},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			report := filepath.Join(t.TempDir(), "report")
			out, err := exec.CommandContext(t.Context(), binary, "demo", "--objects", "64", "--object-size", strconv.Itoa(256<<10),
				"--cache", strconv.Itoa(32<<20), "--policy", tc.policy, "--report", report).CombinedOutput()
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
			m := regexp.MustCompile(`(?m)^\s+warm after the scan\s+(\d+)% of GETs served from the cluster's drives`).FindSubmatch(out)
			if m == nil {
				t.Fatalf("no \"warm after the scan\" line in the demo output:\n%s", out)
			}
			if pct, _ := strconv.Atoi(string(m[1])); pct < tc.minAfter || pct > tc.maxAfter {
				t.Errorf("%s: %d%% of the first dataset served from the drives after the scan, want %d%% to %d%%:\n%s",
					tc.policy, pct, tc.minAfter, tc.maxAfter, out)
			}
			for _, f := range []string{"index.html", "cold.json", "warm.json", "warm-after-the-scan.json", "compare-throughput.png"} {
				if st, err := os.Stat(filepath.Join(report, f)); err != nil || st.Size() == 0 {
					t.Errorf("report file %s: %v", f, err)
				}
			}
		})
	}
	t.Run("unknown policy", func(t *testing.T) {
		out, err := exec.CommandContext(t.Context(), binary, "demo", "--policy", "mru", "--report", filepath.Join(t.TempDir(), "r")).CombinedOutput()
		if err == nil || !regexp.MustCompile(`unknown eviction policy: "mru"`).Match(out) {
			t.Errorf("demo --policy mru: %v\n%s", err, out)
		}
	})
}
