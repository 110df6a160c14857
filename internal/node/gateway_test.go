package node

import (
	"errors"
	"reflect"
	"testing"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/placement"
)

func keys(r object.ListResult) (objs, prefixes []string) {
	for _, o := range r.Objects {
		objs = append(objs, o.Key)
	}
	return objs, r.CommonPrefixes
}

func TestMergePages(t *testing.T) {
	page := func(truncated bool, prefixes []string, ks ...string) object.ListResult {
		var r object.ListResult
		for _, k := range ks {
			r.Objects = append(r.Objects, object.Info{Key: k})
		}
		r.CommonPrefixes, r.IsTruncated = prefixes, truncated
		return r
	}
	tests := []struct {
		name      string
		pages     []object.ListResult
		max       int
		objs, pfx []string
		truncated bool
		next      string
	}{
		{"replicas collapse", []object.ListResult{page(false, nil, "a", "c"), page(false, nil, "a", "b")}, 10,
			[]string{"a", "b", "c"}, nil, false, ""},
		{"cut at max", []object.ListResult{page(false, nil, "a", "d"), page(false, nil, "b", "c")}, 3,
			[]string{"a", "b", "c"}, nil, true, "c"},
		{"a node truncated", []object.ListResult{page(true, nil, "a"), page(false, nil, "b")}, 10,
			[]string{"a", "b"}, nil, true, "b"},
		{"prefixes count and sort with keys", []object.ListResult{page(false, []string{"dir/"}, "a", "z"), page(false, []string{"dir/"}, "e")}, 3,
			[]string{"a", "e"}, []string{"dir/"}, true, "e"},
		{"empty", nil, 10, nil, nil, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mergePages(tt.pages, tt.max)
			objs, pfx := keys(r)
			if !reflect.DeepEqual(objs, tt.objs) || !reflect.DeepEqual(pfx, tt.pfx) || r.IsTruncated != tt.truncated || r.NextMarker != tt.next {
				t.Fatalf("got objs %v prefixes %v truncated %v next %q", objs, pfx, r.IsTruncated, r.NextMarker)
			}
		})
	}
}

func TestUploadIDRoundTrip(t *testing.T) {
	for _, owner := range []string{"node1", "a.b.c", "n-1_x"} {
		id := newUploadID(owner, "local.id-42")
		o, l, err := parseUploadID(id)
		if err != nil || o != owner || l != "local.id-42" {
			t.Fatalf("parseUploadID(%q) = %q, %q, %v", id, o, l, err)
		}
	}
	for _, bad := range []string{"", "nodot", ".x", "!!!.x", "bm9kZQ."} {
		if _, _, err := parseUploadID(bad); !errors.Is(err, object.ErrUploadNotFound) {
			t.Errorf("parseUploadID(%q) = %v, want ErrUploadNotFound", bad, err)
		}
	}
}

func TestPlacementSkipsDownNodes(t *testing.T) {
	m := cluster.NewMap()
	for _, id := range []string{"n1", "n2", "n3", "n4"} {
		m.Nodes[id] = cluster.NodeInfo{ID: id, State: cluster.StateUp}
	}
	order := placement.Order(m.NodeIDs(), placement.ObjectName("b", "k"))
	m.Nodes[order[0]] = cluster.NodeInfo{ID: order[0], State: cluster.StateDown}
	up, down := placementOf(m, "b", "k")
	if !reflect.DeepEqual(up, order[1:]) || !reflect.DeepEqual(down, order[:1]) {
		t.Fatalf("up %v down %v, HRW order %v with %s down", up, down, order, order[0])
	}
	g := &gateway{}
	b := cluster.BucketProps{Name: "b", Copies: 2, Mode: cluster.ModeLocal}
	targets, err := g.writeTargets(m, b, "k")
	if err != nil || !reflect.DeepEqual(targets, order[1:3]) {
		t.Fatalf("write targets %v, %v", targets, err)
	}
	b.Mode = cluster.ModeWriteback
	if targets, _ := g.writeTargets(m, b, "k"); !reflect.DeepEqual(targets, order[1:2]) {
		t.Fatalf("writeback goes to the owner only, got %v", targets)
	}
	b.Copies = 4
	if _, err := g.writeTargets(m, b, "k"); !errors.Is(err, object.ErrUnavailable) {
		t.Fatalf("4 copies with 3 nodes up: %v", err)
	}
}
