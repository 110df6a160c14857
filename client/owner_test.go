package client

import (
	"strings"
	"testing"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/placement"
)

func testClient(states map[string]cluster.NodeState) *Client {
	m := cluster.NewMap()
	m.Version = 5
	for id, st := range states {
		m.Nodes[id] = cluster.NodeInfo{ID: id, State: st, PublicAddrs: []string{id + ".example:9000", id + "-2.example:9000"}}
	}
	c := &Client{changes: make(chan struct{}), scheme: "http"}
	c.setMap(m)
	return c
}

func TestOwner(t *testing.T) {
	ids := []string{"a", "b", "c", "d"}
	const bucket, key = "bk", "some/key"
	order := placement.Order(ids, placement.ObjectName(bucket, key))
	up, down := cluster.StateUp, cluster.StateDown
	allUp := map[string]cluster.NodeState{"a": up, "b": up, "c": up, "d": up}
	tests := []struct {
		name     string
		states   map[string]cluster.NodeState
		suspects []string // nodes a request could not reach
		want     string
	}{
		{"all up", allUp, nil, order[0]},
		{"first down", map[string]cluster.NodeState{"a": up, "b": up, "c": up, "d": up, order[0]: down}, nil, order[1]},
		{"first two down", map[string]cluster.NodeState{"a": up, "b": up, "c": up, "d": up, order[0]: down, order[1]: down}, nil, order[2]},
		{"none up", map[string]cluster.NodeState{"a": down, "b": down, "c": down, "d": down}, nil, order[0]},
		{"first unreachable, still up in the map", allUp, []string{order[0]}, order[1]},
		{"first down, second unreachable", map[string]cluster.NodeState{"a": up, "b": up, "c": up, "d": up, order[0]: down}, []string{order[1]}, order[2]},
		{"every node unreachable", allUp, ids, order[0]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testClient(tt.states)
			for _, id := range tt.suspects {
				c.suspect(id)
			}
			if got := c.Owner(bucket, key).ID; got != tt.want {
				t.Errorf("owner %q, want %q (HRW order %v)", got, tt.want, order)
			}
			host, id, err := c.hostFor(bucket, key)
			if err != nil || host != tt.want+".example:9000" || id != tt.want {
				t.Errorf("hostFor = %q, %q, %v", host, id, err)
			}
		})
	}
	if got := testClient(nil).Owner(bucket, key); got.ID != "" {
		t.Errorf("owner in an empty map: %+v", got)
	}
	if _, _, err := testClient(nil).hostFor(bucket, ""); err != ErrNoNodes {
		t.Errorf("hostFor in an empty map: %v", err)
	}
}

func TestSetMapKeepsNewest(t *testing.T) {
	c := testClient(map[string]cluster.NodeState{"a": cluster.StateUp})
	old := cluster.NewMap()
	old.Version = 3
	if c.setMap(old) || c.MapVersion() != 5 {
		t.Errorf("an older map replaced version 5: now %d", c.MapVersion())
	}
	nm := cluster.NewMap()
	nm.Version = 6
	if !c.setMap(nm) || c.MapVersion() != 6 {
		t.Errorf("a newer map was not taken: now %d", c.MapVersion())
	}
}

func TestSplitPath(t *testing.T) {
	tests := []struct{ in, bucket, key string }{
		{"/", "", ""},
		{"", "", ""},
		{"/bk", "bk", ""},
		{"/bk/", "bk", ""},
		{"/bk/a", "bk", "a"},
		{"/bk/a/b/c", "bk", "a/b/c"},
		{"/bk//x", "bk", "/x"},
	}
	for _, tt := range tests {
		if b, k := SplitPath(tt.in); b != tt.bucket || k != tt.key {
			t.Errorf("SplitPath(%q) = %q, %q; want %q, %q", tt.in, b, k, tt.bucket, tt.key)
		}
	}
}

func FuzzSplitPath(f *testing.F) {
	for _, s := range []string{"/", "/bk/a/b", "bk", "//", "/bk//x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		b, k := SplitPath(p)
		rest := trimSlash(p)
		want := b
		if strings.Contains(rest, "/") {
			want = b + "/" + k
		} else if k != "" {
			t.Errorf("SplitPath(%q) = %q, %q: a key without a '/'", p, b, k)
		}
		if rest != want || strings.Contains(b, "/") {
			t.Errorf("SplitPath(%q) = %q, %q does not split the path at its first '/'", p, b, k)
		}
	})
}

func trimSlash(p string) string {
	if len(p) > 0 && p[0] == '/' {
		return p[1:]
	}
	return p
}
