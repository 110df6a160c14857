package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/slipstream-io/slipstream/internal/localcluster"
	"github.com/slipstream-io/slipstream/internal/testbin"
)

// alertsDir holds the Prometheus alerting rules shipped for operators.
const alertsDir = "../../deploy/prometheus"

// TestAlertRules checks the shipped alerting rules with promtool (syntax,
// and their unit tests: each alert fires on the series it is about, after
// its delay, with its labels and text) and that every metric they name is
// one a live node exports.
func TestAlertRules(t *testing.T) {
	promtool := testbin.Tool(t, "promtool")
	for _, args := range [][]string{{"check", "rules", "slipstream-alerts.yml"}, {"test", "rules", "slipstream-alerts.test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = alertsDir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	rules, err := os.ReadFile(filepath.Join(alertsDir, "slipstream-alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var named []string
	for _, m := range regexp.MustCompile(`slipstream_[a-z_]+`).FindAllString(string(rules), -1) {
		if !slices.Contains(named, m) {
			named = append(named, m)
		}
	}
	// A cluster with a volume exports every family the rules name.
	c := startCluster(t, localcluster.Spec{Nodes: 2})
	volumeCmd(t, c, 0, "create", "alerted", "--size", "16MiB", "--copies", "2")
	exported := map[string]bool{}
	for _, line := range metricsLines(t, c, 0) {
		if name, ok := strings.CutPrefix(line, "# TYPE "); ok {
			exported[strings.Fields(name)[0]] = true
		}
	}
	if len(named) < 10 {
		t.Fatalf("the rules name %d metrics: %v", len(named), named)
	}
	for _, m := range named {
		if !exported[m] {
			t.Errorf("the rules name %s, which a node does not export", m)
		}
	}
}
