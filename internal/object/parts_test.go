package object

import (
	"slices"
	"testing"
)

func TestPartRuns(t *testing.T) {
	many := make([]int64, MaxPartRuns+1)
	for i := range many {
		many[i] = int64(i + 1)
	}
	for _, tc := range []struct {
		name  string
		sizes []int64
		want  []PartRun
	}{
		{"one part", []int64{7}, []PartRun{{7, 1}}},
		{"even with a short tail", []int64{8, 8, 8, 3}, []PartRun{{8, 3}, {3, 1}}},
		{"sizes that come back", []int64{5, 6, 5}, []PartRun{{5, 1}, {6, 1}, {5, 1}}},
		{"too irregular to keep", many, nil},
		{"none", nil, nil},
	} {
		if got := PartRuns(tc.sizes); !slices.Equal(got, tc.want) {
			t.Errorf("%s: PartRuns(%v) = %v, want %v", tc.name, tc.sizes, got, tc.want)
		}
	}
}

func TestValidParts(t *testing.T) {
	for _, tc := range []struct {
		name string
		runs []PartRun
		size int64
		want bool
	}{
		{"adds up", []PartRun{{8, 3}, {3, 1}}, 27, true},
		{"short", []PartRun{{8, 3}}, 27, false},
		{"none", nil, 0, false},
		{"empty part count", []PartRun{{8, 0}}, 0, false},
		{"negative size", []PartRun{{-1, 1}, {2, 1}}, 1, false},
		{"too many parts", []PartRun{{1, MaxPartNumber + 1}}, MaxPartNumber + 1, false},
		{"overflowing product", []PartRun{{1 << 62, 8}}, 1 << 62, false},
		{"an empty last part", []PartRun{{5, 1}, {0, 1}}, 5, true},
	} {
		if got := ValidParts(tc.runs, tc.size); got != tc.want {
			t.Errorf("%s: ValidParts(%v, %d) = %v, want %v", tc.name, tc.runs, tc.size, got, tc.want)
		}
	}
}

func TestInfoPart(t *testing.T) {
	multi := Info{Size: 27, Parts: []PartRun{{8, 3}, {3, 1}}}
	single := Info{Size: 10}
	for _, tc := range []struct {
		name        string
		info        Info
		n           int
		off, length int64
		count       int
		ok          bool
	}{
		{"first", multi, 1, 0, 8, 4, true},
		{"inside the first run", multi, 3, 16, 8, 4, true},
		{"the tail", multi, 4, 24, 3, 4, true},
		{"past the last", multi, 5, 0, 0, 4, false},
		{"zero", multi, 0, 0, 0, 4, false},
		{"single-part object, part 1", single, 1, 0, 10, 1, true},
		{"single-part object, part 2", single, 2, 0, 10, 1, false},
	} {
		off, length, count, ok := tc.info.Part(tc.n)
		if ok != tc.ok || count != tc.count || ok && (off != tc.off || length != tc.length) {
			t.Errorf("%s: Part(%d) = %d, %d, %d, %v; want %d, %d, %d, %v", tc.name, tc.n, off, length, count, ok, tc.off, tc.length, tc.count, tc.ok)
		}
	}
}
