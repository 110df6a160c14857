package cluster_test

import (
	"context"
	"fmt"
	"net"
	"net/http"

	"github.com/slipstream-io/slipstream/internal/cluster"
)

// A node builds its cluster handle before serving its intra-cluster
// listener, mounts the handler under "/cluster/", then waits to have joined.
func ExampleNew() {
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.2:9201")
	if err != nil {
		panic(err)
	}
	c, err := cluster.New(ctx, cluster.Config{
		NodeID:   "n2",
		DataDir:  "/var/lib/slipstream/n2",
		RaftBind: "127.0.0.2:9301",
		Self: cluster.NodeInfo{
			PublicAddrs: []string{"127.0.0.2:9000"},
			IntraAddrs:  []string{ln.Addr().String()},
			Mountpaths:  []string{"/mnt/nvme0/slipstream", "/mnt/nvme1/slipstream"},
		},
		Seeds: []string{"http://127.0.0.1:9201", "http://127.0.0.3:9201"},
	})
	if err != nil {
		panic(err)
	}
	defer c.Close(ctx)
	mux := http.NewServeMux()
	mux.Handle("/cluster/", c.Handler())
	go http.Serve(ln, mux)
	if err := c.WaitForLeader(ctx); err != nil {
		panic(err)
	}
	if err := c.CreateBucket(ctx, cluster.BucketProps{Name: "datasets", Copies: 2}); err != nil {
		fmt.Println(err)
	}
	for m := range c.Watch(ctx) {
		fmt.Println("map version", m.Version, "nodes up", m.UpNodeIDs())
	}
}
