package volume_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/volume"
)

// TestCancelledWriteMarksMirrors: a write whose context ends while a
// mirror is slow (the client went away, the node shuts down) is not
// acknowledged, but one mirror may have it and the other not: the slow
// mirror is marked stale at once and resynchronised, so the mirrors agree
// again instead of reads depending on which one serves them.
func TestCancelledWriteMarksMirrors(t *testing.T) {
	a, b := startNode(t, "a"), startNode(t, "b")
	v := openVolume(t, volume.Spec{Name: "v", Size: 8 << 20, ChunkSize: 1 << 20, Copies: 2}, t.TempDir(), a, b)
	data := make([]byte, 4096)
	for i := range data {
		data[i] = byte(i)
	}
	b.hang.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := v.WriteAt(ctx, data, 0, false); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("write whose context ended: %v, want its context's error", err)
	}
	if got := v.StaleChunks()["b"]; got != 1 {
		t.Errorf("the mirror that did not finish the write: %d stale chunks, want 1 (%v)", got, v.StaleChunks())
	}
	b.hang.Store(false)
	waitInSync(t, v, 10*time.Second)
	compareMirrors(t, v, a, b)
}
