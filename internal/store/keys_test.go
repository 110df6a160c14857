package store

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

// TestSortedKeysModel compares sortedKeys with a sorted slice under random
// inserts, deletes and seeks, across many block splits and merges.
func TestSortedKeysModel(t *testing.T) {
	var s sortedKeys
	var model []string
	r := rand.New(rand.NewPCG(5, 6))
	key := func() string { return fmt.Sprintf("k%05d", r.IntN(20000)) }
	check := func(step int) {
		var all []string
		for c := s.SeekGE(""); ; c = s.Next(c) {
			k, ok := s.At(c)
			if !ok {
				break
			}
			all = append(all, k)
		}
		if !slices.Equal(all, model) || s.Len() != len(model) {
			t.Fatalf("step %d: %d keys iterated, Len %d, model %d", step, len(all), s.Len(), len(model))
		}
		for _, b := range s.blocks {
			if len(b) == 0 || len(b) > maxBlock {
				t.Fatalf("step %d: block of %d keys", step, len(b))
			}
		}
	}
	for step := 0; step < 60000; step++ {
		k := key()
		i, in := slices.BinarySearch(model, k)
		// Insert-heavy first, then delete-heavy, to exercise splits and merges.
		if (step < 30000) == (r.IntN(4) != 0) {
			if s.Insert(k) == in {
				t.Fatalf("Insert(%s) disagrees", k)
			}
			if !in {
				model = slices.Insert(model, i, k)
			}
		} else {
			if s.Delete(k) != in {
				t.Fatalf("Delete(%s) disagrees", k)
			}
			if in {
				model = slices.Delete(model, i, i+1)
			}
		}
		if step%5000 == 0 {
			check(step)
		}
		q := key()
		ge, _ := s.At(s.SeekGE(q))
		gt, _ := s.At(s.SeekGT(q))
		j := sort.SearchStrings(model, q)
		wantGE, wantGT := "", ""
		if j < len(model) {
			wantGE = model[j]
		}
		if j < len(model) && model[j] == q {
			j++
		}
		if j < len(model) {
			wantGT = model[j]
		}
		if ge != wantGE || gt != wantGT {
			t.Fatalf("step %d: seek %s: GE %q GT %q, want %q %q", step, q, ge, gt, wantGE, wantGT)
		}
	}
	check(-1)
	if built := sortedKeysFrom(model); built.Len() != len(model) {
		t.Fatal("sortedKeysFrom lost keys")
	}
}

func TestPrefixEnd(t *testing.T) {
	for _, c := range []struct {
		in, out string
		ok      bool
	}{{"a/", "a0", true}, {"ab", "ac", true}, {"a\xff", "b", true}, {"\xff\xff", "", false}, {"", "", false}} {
		out, ok := prefixEnd(c.in)
		if out != c.out || ok != c.ok {
			t.Fatalf("prefixEnd(%q) = %q,%v want %q,%v", c.in, out, ok, c.out, c.ok)
		}
	}
}

// BenchmarkRandomInsert inserts 1M keys in random order, like a cold epoch
// over a large dataset.
func BenchmarkRandomInsert(b *testing.B) {
	const n = 1 << 20
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("train/shard-%07d.tar", i)
	}
	rand.New(rand.NewPCG(1, 1)).Shuffle(n, func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var s sortedKeys
		for _, k := range keys {
			s.Insert(k)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/insert")
}
