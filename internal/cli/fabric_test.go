package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const fabricSamples = "../fabric/testdata/samples"

func runFabric(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(context.Background(), append([]string{"fabric"}, args...), &out, &errb)
	return out.String(), errb.String(), code
}

func TestFabricCommandsJSON(t *testing.T) {
	before := filepath.Join(fabricSamples, "ft2-h16/minhop/before")
	after := filepath.Join(fabricSamples, "ft2-h16/minhop/after")
	png := filepath.Join(t.TempDir(), "loads.png")
	for _, tc := range []struct {
		name  string
		args  []string
		check func(t *testing.T, v any)
	}{
		{"info", []string{"info", "--json", before}, func(t *testing.T, v any) {
			if m := v.(map[string]any); m["hosts"].(float64) != 16 || m["switches"].(float64) != 6 {
				t.Errorf("info %v", m)
			}
		}},
		{"hosts", []string{"hosts", before, "--json"}, func(t *testing.T, v any) {
			if l := v.([]any); len(l) != 16 {
				t.Errorf("%d hosts", len(l))
			}
		}},
		{"route", []string{"route", "--json", before, "node0001", "stor004"}, func(t *testing.T, v any) {
			rs := v.([]any)
			if len(rs) != 2 {
				t.Fatalf("%d routes, want both directions", len(rs))
			}
			if r := rs[0].(map[string]any); r["src"] != "node0001/mlx5_0/1" || len(r["hops"].([]any)) != 4 {
				t.Errorf("route %v", r)
			}
		}},
		{"loads", []string{"loads", "--json", "--png", png, before}, func(t *testing.T, v any) {
			if m := v.(map[string]any); m["routes"].(float64) != 240 || len(m["links"].([]any)) != 20 {
				t.Errorf("loads routes %v links %d", m["routes"], len(m["links"].([]any)))
			}
		}},
		{"select", []string{"select", "--json", "-k", "3", "--candidates", "node[0001-0012]", "--targets", "stor[001-004]", before}, func(t *testing.T, v any) {
			m := v.(map[string]any)
			if len(m["hosts"].([]any)) != 3 || !strings.HasPrefix(m["hostlist"].(string), "node") {
				t.Errorf("select %v", m)
			}
		}},
		{"diff", []string{"diff", "--json", before, after}, func(t *testing.T, v any) {
			if m := v.(map[string]any); m["changed"].(float64) != 72 || m["routes"].(float64) != 240 {
				t.Errorf("diff %v of %v", m["changed"], m["routes"])
			}
		}},
		{"check", []string{"check", "--json", before}, func(t *testing.T, v any) {
			if l := v.([]any); len(l) != 3 {
				t.Errorf("%d checks", len(l))
			}
		}},
		{"watch", []string{"watch", "--json", "--interval", "10ms", "--timeout", "200ms", before}, func(t *testing.T, v any) {
			if m := v.(map[string]any); m["summary"] == nil {
				t.Errorf("watch event %v", m)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errs, code := runFabric(t, tc.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			var v any
			dec := json.NewDecoder(strings.NewReader(out))
			if err := dec.Decode(&v); err != nil {
				t.Fatalf("not JSON: %v\n%s", err, out)
			}
			tc.check(t, v)
		})
	}
	if st, err := os.Stat(png); err != nil || st.Size() < 1000 {
		t.Errorf("heat map: %v", err)
	}
}

func TestFabricTextAndErrors(t *testing.T) {
	before := filepath.Join(fabricSamples, "ft2-h16/minhop/before")
	out, _, code := runFabric(t, "select", before, "-k", "4", "--format", "hostlist")
	if code != 0 || !strings.Contains(out, "[") {
		t.Errorf("hostlist output %q (exit %d)", out, code)
	}
	out, _, code = runFabric(t, "loads", before, "--format", "csv", "--top", "0")
	if code != 0 || strings.Count(out, "\n") != 49 || !strings.HasPrefix(out, "from_guid,") {
		t.Errorf("csv: %d lines (exit %d)", strings.Count(out, "\n"), code)
	}
	// 238: walking every route of both fabrics and comparing the links
	// (by GUID and port) finds 238 changed routes
	out, _, code = runFabric(t, "diff", before, filepath.Join(fabricSamples, "ft3-k4-h16/ftree/after"))
	if code != 0 || !strings.Contains(out, "routes changed: 238 of 240") || !strings.Contains(out, "cable up:") {
		t.Errorf("diff of different fabrics (exit %d):\n%s", code, out)
	}
	out, _, code = runFabric(t, "diff", filepath.Join(fabricSamples, "ft3-k4-h16/ftree/before"), filepath.Join(fabricSamples, "ft3-k4-h16/ftree/after"))
	if code != 0 || !strings.Contains(out, "96 of 240") || !strings.Contains(out, "fell back from ftree to minhop") {
		t.Errorf("diff text:\n%s", out)
	}
	for _, args := range [][]string{
		{"route", before, "node0001"},
		{"select", before},
		{"nosuch"},
		{"select", before, "-k", "2", "--candidates", "node[1-"},
	} {
		if _, _, code := runFabric(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	_, errs, code := runFabric(t, "route", before, "node0001", "nohost")
	if code != 1 || !strings.Contains(errs, "nohost") {
		t.Errorf("unknown host: exit %d %q", code, errs)
	}
	_, errs, code = runFabric(t, "info", filepath.Join(before, "opensm-subnet.lst"))
	if code != 1 || !strings.Contains(errs, "LFT") {
		t.Errorf("no LFT: exit %d %q", code, errs)
	}
}

func TestFabricExplicitFiles(t *testing.T) {
	d := filepath.Join(fabricSamples, "ft2-h16/minhop/before")
	lft, subnet := filepath.Join(d, "opensm-lfts.dump"), filepath.Join(d, "opensm-subnet.lst")
	for _, args := range [][]string{
		{"info", "--json", lft, subnet},
		{"info", "--json", lft + "," + subnet},
	} {
		out, errs, code := runFabric(t, args...)
		if code != 0 || !strings.Contains(out, `"hosts": 16`) {
			t.Errorf("%v: exit %d %s %s", args, code, errs, out)
		}
	}
}

// TestFabricSelectRandomZeroRunsNoTrials: --random 0 skips the random
// comparison (which costs 100 x k^2 route walks on a large k) rather than
// running the library's default of 100 trials.
func TestFabricSelectRandomZeroRunsNoTrials(t *testing.T) {
	src := filepath.Join(fabricSamples, "ft2-h16/minhop/before")
	out, errOut, code := runFabric(t, "select", src, "-k", "2", "--random", "0", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var v struct {
		Random struct {
			Trials int `json:"trials"`
		} `json:"random"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	if v.Random.Trials != 0 {
		t.Errorf("--random 0 ran %d random trials", v.Random.Trials)
	}
}

// TestFabricSelectWarnsOfBrokenRoutes: when every choice has routes the
// LFTs do not deliver, select shows the broken route count and warns.
func TestFabricSelectWarnsOfBrokenRoutes(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(fabricSamples, "ft2-h16/minhop/before")
	for _, name := range []string{"opensm-subnet.lst", "opensm-lfts.dump"} {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		if name == "opensm-lfts.dump" {
			// no switch forwards to node0002 (LID 9)
			var out []string
			for _, ln := range strings.SplitAfter(string(b), "\n") {
				if !strings.HasPrefix(ln, "0x0009 ") {
					out = append(out, ln)
				}
			}
			b = []byte(strings.Join(out, ""))
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, errOut, code := runFabric(t, "select", dir, "-k", "2", "--candidates", "node[0001-0002]", "--random", "0")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(errOut, "warning: 1 of the 2 routes of the selection are broken") || !strings.Contains(out, "BROKEN") {
		t.Errorf("stdout:\n%s\nstderr:\n%s", out, errOut)
	}
	if strings.Contains(out, "random") {
		t.Errorf("--random 0 printed a random comparison:\n%s", out)
	}
}

// TestFabricLoadsRejectsUnknownKind: --kind takes switch, up or down; any
// other value is a usage error (exit 2), not an empty list of links.
func TestFabricLoadsRejectsUnknownKind(t *testing.T) {
	src := filepath.Join(fabricSamples, "ft2-h16/minhop/before")
	for _, tc := range []struct {
		kind string
		code int
	}{{"switch", 0}, {"up", 0}, {"down", 0}, {"bogus", 2}, {"Switch", 2}} {
		_, errOut, code := runFabric(t, "loads", src, "--kind", tc.kind, "--json")
		if code != tc.code {
			t.Errorf("--kind %s: exit %d, want %d (%s)", tc.kind, code, tc.code, errOut)
		}
	}
}

// TestFabricDiffTopZeroListsAll: as for fabric loads, --top 0 lists every
// load change (the help says so), not the library's default of 50; a
// positive --top bounds the list.
func TestFabricDiffTopZeroListsAll(t *testing.T) {
	before := filepath.Join(fabricSamples, "ft3-k8-h128/ftree/before")
	after := filepath.Join(fabricSamples, "ft3-k8-h128/ftree/after")
	changes := func(top string) int {
		t.Helper()
		out, errOut, code := runFabric(t, "diff", before, after, "--json", "--top", top)
		if code != 0 {
			t.Fatalf("--top %s: exit %d: %s", top, code, errOut)
		}
		var v struct {
			LoadChanges []json.RawMessage `json:"load_changes"`
		}
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatal(err)
		}
		return len(v.LoadChanges)
	}
	all := changes("100000")
	if all <= 50 {
		t.Fatalf("sample has %d load changes, want more than 50 for this test", all)
	}
	if got := changes("0"); got != all {
		t.Errorf("--top 0 listed %d load changes, want all %d", got, all)
	}
	if got := changes("7"); got != 7 {
		t.Errorf("--top 7 listed %d load changes", got)
	}
}

// TestFabricRouteSameEndpoint: a route from an endpoint to itself crosses
// no fabric link; route says so (exit 0) instead of printing nothing.
func TestFabricRouteSameEndpoint(t *testing.T) {
	src := filepath.Join(fabricSamples, "ft2-h16/minhop/before")
	out, errOut, code := runFabric(t, "route", src, "node0001", "node0001")
	if code != 0 || !strings.Contains(out, "same endpoint") || !strings.Contains(out, "local") {
		t.Errorf("route node0001 node0001: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, _, code = runFabric(t, "route", src, "node0001", "node0001", "--json")
	if code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("route --json node0001 node0001: exit %d, %q, want []", code, out)
	}
}

// TestFabricRoutePortGUIDForms: a port GUID is accepted as
// opensm-subnet.lst prints it (16 hex digits, no 0x; either case) and as
// ibnetdiscover prints it (no leading zeros, no 0x), not only with 0x.
func TestFabricRoutePortGUIDForms(t *testing.T) {
	src := filepath.Join(fabricSamples, "ft2-h16/minhop/before")
	want, errOut, code := runFabric(t, "route", src, "node0001", "stor004", "--oneway")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	// node0001's HCA port: PortGUID:0002c90400000011 in opensm-subnet.lst,
	// (2c90400000011) in ibnetdiscover.out
	for _, guid := range []string{"0x0002c90400000011", "0002C90400000011", "0002c90400000011", "2c90400000011"} {
		out, errOut, code := runFabric(t, "route", src, guid, "stor004", "--oneway")
		if code != 0 || out != want {
			t.Errorf("route %s stor004: exit %d %s\n%s", guid, code, errOut, out)
		}
	}
	if _, errOut, code := runFabric(t, "route", src, "2c90400000099", "stor004"); code != 1 || !strings.Contains(errOut, "2c90400000099") {
		t.Errorf("unknown GUID: exit %d %q", code, errOut)
	}
}

// TestFabricDiffFallbackFromOSMLog: with osm.log but no opensm.out (as on
// many production SMs) diff still reports the ftree -> minhop fallback the
// log shows, naming ftree as the engine that fell back.
func TestFabricDiffFallbackFromOSMLog(t *testing.T) {
	src := func(state string) string {
		d := filepath.Join(fabricSamples, "ft3-k4-h16/ftree", state)
		return strings.Join([]string{filepath.Join(d, "opensm-lfts.dump"), filepath.Join(d, "opensm-subnet.lst"), filepath.Join(d, "osm.log")}, ",")
	}
	out, errOut, code := runFabric(t, "diff", src("before"), src("after"))
	if code != 0 || !strings.Contains(out, "FALLBACK") || !strings.Contains(out, "WARNING: OpenSM fell back from ftree to minhop") {
		t.Errorf("exit %d %s\n%s", code, errOut, out)
	}
}
