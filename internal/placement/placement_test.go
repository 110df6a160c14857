package placement

import (
	"fmt"
	"math"
	"reflect"
	"testing"
)

// TestGolden pins the hash: a change here moves every object in every
// deployed cluster, so it must be deliberate.
func TestGolden(t *testing.T) {
	nodes := []string{"n1", "n2", "n3", "n4", "n5"}
	for name, want := range goldenOrders() {
		if got := Order(nodes, name); !reflect.DeepEqual(got, want) {
			t.Errorf("Order(%q) = %v, golden %v", name, got, want)
		}
	}
	if s := Score("n1", "bucket/a"); s != goldenScore {
		t.Errorf("Score(n1, bucket/a) = %#x, golden %#x", s, goldenScore)
	}
}

func TestOwnerMatchesOrder(t *testing.T) {
	nodes := []string{"a", "b", "c", "d", "e", "f", "g"}
	for i := 0; i < 1000; i++ {
		name := fmt.Sprintf("obj-%d", i)
		if o, ord := Owner(nodes, name), Order(nodes, name); o != ord[0] {
			t.Fatalf("Owner(%q) = %s, Order()[0] = %s", name, o, ord[0])
		}
	}
	if Owner(nil, "x") != "" || Mountpath(nil, "x") != -1 {
		t.Fatal("empty candidate sets must give no owner")
	}
}

// TestSpread checks that owners are spread evenly. With N candidates and M
// names each candidate expects M/N; we allow 5 standard deviations of the
// binomial count, which a fair hash fails with probability < 1e-6 per node.
func TestSpread(t *testing.T) {
	for _, n := range []int{3, 8, 10, 100} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			cands := make([]string, n)
			for i := range cands {
				cands[i] = fmt.Sprintf("node-%03d", i)
			}
			const m = 200000
			count := map[string]int{}
			for i := 0; i < m; i++ {
				count[Owner(cands, fmt.Sprintf("bucket/key-%d", i))]++
			}
			p := 1 / float64(n)
			mean, sd := m*p, math.Sqrt(m*p*(1-p))
			for _, c := range cands {
				if dev := math.Abs(float64(count[c]) - mean); dev > 5*sd {
					t.Errorf("%s owns %d of %d, expected %.0f ± %.0f (5σ)", c, count[c], m, mean, 5*sd)
				}
			}
		})
	}
	t.Run("mountpaths-8", func(t *testing.T) {
		mps := make([]string, 8)
		for i := range mps {
			mps[i] = fmt.Sprintf("/data/mp%d", i)
		}
		const m = 100000
		count := make([]int, len(mps))
		for i := 0; i < m; i++ {
			count[Mountpath(mps, fmt.Sprintf("b/k%d", i))]++
		}
		p := 1.0 / 8
		mean, sd := m*p, math.Sqrt(m*p*(1-p))
		for i, c := range count {
			if math.Abs(float64(c)-mean) > 5*sd {
				t.Errorf("mountpath %d holds %d of %d, expected %.0f ± %.0f", i, c, m, mean, 5*sd)
			}
		}
	})
}

// TestMinimalMovement checks the HRW property: adding a node moves only the
// names the new node now owns, and removing one moves only its own names.
func TestMinimalMovement(t *testing.T) {
	before := []string{"n1", "n2", "n3", "n4"}
	after := append(append([]string{}, before...), "n5")
	moved, toNew := 0, 0
	for i := 0; i < 20000; i++ {
		name := fmt.Sprintf("b/%d", i)
		o1, o2 := Owner(before, name), Owner(after, name)
		if o1 != o2 {
			moved++
			if o2 == "n5" {
				toNew++
			}
		}
	}
	if moved != toNew {
		t.Fatalf("%d names moved but only %d moved to the new node", moved, toNew)
	}
	if frac := float64(moved) / 20000; frac < 0.15 || frac > 0.25 {
		t.Fatalf("adding 1 node to 4 moved %.3f of names, want about 0.2", frac)
	}
}

func TestOwnersDistinct(t *testing.T) {
	nodes := []string{"a", "b", "c"}
	got := Owners(nodes, "x/y", 5)
	if len(got) != 3 {
		t.Fatalf("Owners returned %d nodes from 3 candidates", len(got))
	}
	seen := map[string]bool{}
	for _, g := range got {
		if seen[g] {
			t.Fatalf("duplicate owner %s in %v", g, got)
		}
		seen[g] = true
	}
}

const goldenScore uint64 = 0xf1edd30d3dd7f8ae

func goldenOrders() map[string][]string {
	return map[string][]string{
		"bucket/a":                    {"n1", "n4", "n3", "n2", "n5"},
		"bucket/b":                    {"n5", "n2", "n1", "n4", "n3"},
		"data/train/shard-000001.tar": {"n4", "n2", "n5", "n1", "n3"},
	}
}
