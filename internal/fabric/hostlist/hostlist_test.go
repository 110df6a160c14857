package hostlist

import (
	"errors"
	"reflect"
	"testing"
)

func TestCompress(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{[]string{"node001", "node002", "node003", "node004", "node009"}, "node[001-004,009]"},
		{[]string{"node3"}, "node3"},
		{[]string{"stor2", "node0001", "stor1", "node0002"}, "node[0001-0002],stor[1-2]"},
		{[]string{"b", "a", "a"}, "a,b"},
		{[]string{"n9", "n10", "n11"}, "n9,n[10-11]"},
		// names without a numeric suffix sort by prefix with the groups
		{[]string{"b1", "b2", "a"}, "a,b[1-2]"},
		{[]string{"node2", "zeta", "node", "node1", "alpha"}, "alpha,node,node[1-2],zeta"},
		{nil, ""},
	} {
		if got := Compress(tc.in); got != tc.want {
			t.Errorf("Compress(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestExpand(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []string
		wantErr bool
	}{
		{"node[001-003,007]", []string{"node001", "node002", "node003", "node007"}, false},
		{"a,b[1-2]", []string{"a", "b1", "b2"}, false},
		{"rack[1-2]-x", []string{"rack1-x", "rack2-x"}, false},
		{"r[1-2]n[01-02]", []string{"r1n01", "r1n02", "r2n01", "r2n02"}, false},
		{"a[1-2]b[1-2]", []string{"a1b1", "a1b2", "a2b1", "a2b2"}, false},
		{"a[[1]]", nil, true},
		{"node[3-1]", nil, true},
		{"node[1-2", nil, true},
		{"node]", nil, true},
		{"node[0-99999999]", nil, true},
	} {
		got, err := Expand(tc.in)
		if (err != nil) != tc.wantErr {
			t.Fatalf("Expand(%q) err = %v", tc.in, err)
		}
		if err != nil && !errors.Is(err, ErrSyntax) {
			t.Errorf("Expand(%q) error %v is not ErrSyntax", tc.in, err)
		}
		if !tc.wantErr && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Expand(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func FuzzRoundTrip(f *testing.F) {
	f.Add("node[001-004,009],stor[1-2]")
	f.Add("a,b,c")
	f.Add("x[1-3]y")
	f.Fuzz(func(t *testing.T, s string) {
		names, err := Expand(s)
		if err != nil {
			return
		}
		c := Compress(names)
		again, err := Expand(c)
		if err != nil {
			t.Fatalf("Expand(Compress(%v)) = %q: %v", names, c, err)
		}
		if Compress(again) != c {
			t.Fatalf("not stable: %q -> %q", c, Compress(again))
		}
	})
}
