package volume_test

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/volume"
)

// TestStreamLongVolumeKey writes and reads, over the chunk stream, a
// volume whose storage key is as long as ValidKey allows (a 128-character
// name and a 64-character ID): every valid volume must reach its remote
// mirrors.
func TestStreamLongVolumeKey(t *testing.T) {
	ctx := context.Background()
	l, _ := newLocal(t, 1)
	srv := httptest.NewServer(volume.NewHandler(l))
	t.Cleanup(srv.Close)
	c, err := volume.NewClientConfig(volume.ClientConfig{BaseURL: srv.URL, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for _, spec := range []volume.Spec{
		{Name: strings.Repeat("v", 128), ID: "0123456789abcdef"}, // the node's IDs are 16 hex digits
		{Name: strings.Repeat("w", 128), ID: strings.Repeat("a", 64)},
	} {
		key := spec.Key()
		if err := volume.ValidKey(key); err != nil {
			t.Fatal(err)
		}
		want := bytes.Repeat([]byte{7}, 4096)
		if err := c.WriteAt(ctx, key, 0, 0, want, 0, false); err != nil {
			t.Fatalf("write to %d-byte key: %v", len(key), err)
		}
		got := make([]byte, len(want))
		if err := c.ReadAt(ctx, key, 0, got, 0); err != nil {
			t.Fatalf("read of %d-byte key: %v", len(key), err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("read back other data")
		}
	}
}
