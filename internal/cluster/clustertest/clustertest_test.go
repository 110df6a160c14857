package clustertest_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/cluster/clustertest"
)

func TestMountAndRestart(t *testing.T) {
	starts := map[string]int{}
	tc := clustertest.Start(t, clustertest.Options{N: 2, Mount: func(n *clustertest.Node, mux *http.ServeMux) {
		starts[n.ID]++
		mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, n.ID) })
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	get := func(n *clustertest.Node) string {
		resp, err := http.Get(n.URL + "/hello")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	for _, n := range tc.Nodes() {
		if got := get(n); got != n.ID {
			t.Errorf("%s answered %q", n.ID, got)
		}
		if len(n.Mountpaths) != 2 {
			t.Errorf("%s mountpaths %v", n.ID, n.Mountpaths)
		}
	}
	n := tc.Node(1)
	tc.Stop(n)
	if n.Running() {
		t.Fatal("stopped node still running")
	}
	if _, err := http.Get(n.URL + "/hello"); err == nil {
		t.Error("stopped node still serves")
	}
	tc.Restart(n, true)
	if got := get(n); got != n.ID || starts[n.ID] != 2 {
		t.Errorf("after restart: %q, mounted %d times", got, starts[n.ID])
	}
	if err := tc.WaitAll(ctx, func(m *cluster.Map) bool { return len(m.UpNodeIDs()) == 2 }); err != nil {
		t.Fatal(err)
	}
	added := tc.AddNode()
	if added.ID != "n3" || len(tc.Seeds()) != 3 {
		t.Errorf("added %s, seeds %v", added.ID, tc.Seeds())
	}
}
