package volume_test

import (
	"context"
	"math/rand"
	"sync/atomic"
	"testing"

	"github.com/slipstream-io/slipstream/internal/volume"
)

// BenchmarkLocalWrite4K: random 4 KiB writes over 128 prefilled 4 MiB
// chunks, 32 writers, buffered vs O_DIRECT.
func BenchmarkLocalWrite4K(b *testing.B) {
	for _, buffered := range []bool{true, false} {
		name := "direct"
		if buffered {
			name = "buffered"
		}
		b.Run(name, func(b *testing.B) {
			l, err := volume.NewLocal(volume.LocalConfig{Mountpaths: []string{b.TempDir()}, Buffered: buffered})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			ctx := context.Background()
			big := make([]byte, 4<<20)
			for c := int64(0); c < 128; c++ {
				if err := l.WriteAt(ctx, "bench", 0, c, big, 0, false); err != nil {
					b.Fatal(err)
				}
			}
			all := make([]int64, 128)
			for i := range all {
				all[i] = int64(i)
			}
			if err := l.Sync(ctx, "bench", all); err != nil {
				b.Fatal(err)
			}
			var seed atomic.Int64
			b.SetParallelism(16)
			b.ResetTimer()
			defer cpuPerOp(b)()
			b.RunParallel(func(pb *testing.PB) {
				r := rand.New(rand.NewSource(seed.Add(1)))
				p := make([]byte, 4096)
				for pb.Next() {
					if err := l.WriteAt(ctx, "bench", 0, r.Int63n(128), p, r.Int63n(1024)*4096, false); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
