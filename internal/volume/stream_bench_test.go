package volume_test

import (
	"context"
	"github.com/slipstream-io/slipstream/internal/volume"
	"os"
	"strconv"
	"syscall"
	"testing"
)

func BenchmarkStreamRead4K(b *testing.B) {
	t := &testing.T{}
	_ = t
	n := startNodeB(b)
	c := newClientB(b, n.url())
	ctx := context.Background()
	buf := make([]byte, 4096)
	if err := c.WriteAt(ctx, "bv", 0, make([]byte, 1<<20), 0, false); err != nil {
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
	_ = buf
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
			if err := c.WriteAt(ctx, "bv", 0, buf, (i%256)*4096, false); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
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
