package sysstat

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestPageServed: the live page is served as HTML, polls the stats path it
// was given, and loads nothing from elsewhere (clusters often have no way
// out to the internet).
func TestPageServed(t *testing.T) {
	srv := httptest.NewServer(Page("/x/stats"))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	page := string(body)
	if !strings.Contains(page, `const STATS = "/x/stats";`) {
		t.Error("the page does not poll the stats path it was given")
	}
	if m := regexp.MustCompile(`(?i)(src|href)\s*=|https?://|@import|url\(`).FindString(page); m != "" {
		t.Errorf("the page loads something from elsewhere: %q", m)
	}
	resp, err = http.Post(srv.URL, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", resp.StatusCode)
	}
}

// TestPageRates runs the page's own script in Node.js: the rates it charts
// from two snapshots (counters per second, disk and interface bytes per
// second, busy time as a percentage of the interval).
func TestPageRates(t *testing.T) {
	nodejs, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("Node.js is not installed; run scripts/setup.sh")
	}
	m := regexp.MustCompile(`(?s)<script>(.*)</script>`).FindStringSubmatch(pageHTML)
	if m == nil {
		t.Fatal("no script in the page")
	}
	test := m[1] + `
const assert = require("assert");
const a = {time: "2026-01-01T00:00:00Z", counters: {s3_get_requests: 10, s3_sent_bytes: 1000, warm_hits: 5, destage_backlog_bytes: 7},
	disks: [{device: "vda", read_bytes: 0, write_bytes: 0, io_time_ms: 0}], nics: [{name: "eth0", rx_bytes: 100, tx_bytes: 100}]};
const b = {time: "2026-01-01T00:00:02Z", counters: {s3_get_requests: 30, s3_sent_bytes: 5000, warm_hits: 5, cold_hits: 4, destage_backlog_bytes: 9},
	disks: [{device: "vda", read_bytes: 2048, write_bytes: 4096, io_time_ms: 500}, {device: "new", read_bytes: 1}],
	nics: [{name: "eth0", rx_bytes: 300, tx_bytes: 100}]};
const got = {};
for (const [id, , unit, vals] of module.exports.rates(a, b).charts) got[id] = vals;
assert.deepStrictEqual(got.s3req, {GET: 10, PUT: 0, other: 0, "errors (5xx)": 0});
assert.deepStrictEqual(got.s3bytes, {sent: 2000, received: 0});
assert.deepStrictEqual(got.tier, {warm: 0, cold: 2});
assert.deepStrictEqual(got.backlog, {dirty: 9});
assert.deepStrictEqual(got.disk, {"vda read": 1024, "vda write": 2048});
assert.deepStrictEqual(got.util, {vda: 25});
assert.deepStrictEqual(got.nic, {"eth0 rx": 100, "eth0 tx": 0});
assert.strictEqual(module.exports.rates(b, b), null);
assert.strictEqual(module.exports.fmt(3 * 1024 * 1024, "B/s"), "3.00 MiB/s");
console.log("ok");
`
	f := filepath.Join(t.TempDir(), "page_test.cjs") // CommonJS: module.exports is defined
	if err := os.WriteFile(f, []byte(test), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(nodejs, f).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("the page's script: %v\n%s", err, out)
	}
}
