package volume_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"

	"github.com/slipstream-io/slipstream/internal/volume"
)

func BenchmarkStreamRead4K(b *testing.B) {
	n := startNodeB(b)
	c := newClientB(b, n.url())
	ctx := context.Background()
	if err := c.WriteAt(ctx, "bv", 0, 0, make([]byte, 1<<20), 0, false); err != nil {
		b.Fatal(err)
	}
	b.SetParallelism(16)
	b.ResetTimer()
	defer cpuPerOp(b)()
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, 4096)
		i := int64(0)
		for pb.Next() {
			if err := c.ReadAt(ctx, "bv", 0, buf, (i%256)*4096); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}

func BenchmarkStreamWrite4K(b *testing.B) {
	n := startNodeB(b)
	c := newClientB(b, n.url())
	ctx := context.Background()
	b.SetParallelism(16)
	b.ResetTimer()
	defer cpuPerOp(b)()
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, 4096)
		i := int64(0)
		for pb.Next() {
			if err := c.WriteAt(ctx, "bv", 0, 0, buf, (i%256)*4096, false); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}

// BenchmarkWriteQD1 writes one block at a time (the latency of a single
// writer), on the node's own device and through the chunk stream to a
// node on loopback: the difference is what the stream adds to a mirror
// write.
func BenchmarkWriteQD1(b *testing.B) {
	for _, size := range []int{4 << 10, 256 << 10} {
		for _, path := range []string{"local", "stream"} {
			b.Run(fmt.Sprintf("%s/%dK", path, size>>10), func(b *testing.B) {
				n := startNodeB(b)
				var r volume.Replica = n.local
				if path == "stream" {
					r = newClientB(b, n.url())
				}
				ctx := context.Background()
				if err := r.WriteAt(ctx, "bv", 0, 0, make([]byte, 4<<20), 0, false); err != nil {
					b.Fatal(err)
				}
				buf := make([]byte, size)
				b.SetBytes(int64(size))
				b.ResetTimer()
				defer cpuPerOp(b)()
				for i := 0; i < b.N; i++ {
					if err := r.WriteAt(ctx, "bv", 0, 0, buf, int64(i%(4<<20/size))*int64(size), false); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func startNodeB(b *testing.B) *testNode { return startNode(b, "bn") }

func newClientB(b *testing.B, url string) *volume.Client {
	conns, _ := strconv.Atoi(os.Getenv("STREAM_CONNS"))
	c, err := volume.NewClientConfig(volume.ClientConfig{BaseURL: url, StreamConns: conns})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// cpuPerOp reports the process CPU time (user+system) per operation, a
// figure that other load on the machine disturbs far less than wall time.
func cpuPerOp(b *testing.B) func() {
	var r0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
	return func() {
		var r1 syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
		ns := (r1.Utime.Nano() - r0.Utime.Nano()) + (r1.Stime.Nano() - r0.Stime.Nano())
		b.ReportMetric(float64(ns)/float64(b.N)/1000, "cpu-us/op")
	}
}
