package node

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/store"
	"github.com/slipstream-io/slipstream/internal/volume"
)

// holdsData tells a node that was a member before (objects or volume
// chunks on its drives) from a new one, whatever its raft state says.
func TestHoldsData(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		fill func(t *testing.T, st *store.Store, mp string)
		want bool
	}{
		{"empty drives", func(*testing.T, *store.Store, string) {}, false},
		{"an object", func(t *testing.T, st *store.Store, _ string) {
			if _, err := st.Put(ctx, "bucket", "k", bytes.NewReader([]byte("x")), store.PutOptions{PutOptions: object.PutOptions{Size: 1}}); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"volume chunks", func(t *testing.T, _ *store.Store, mp string) {
			vl, err := volume.NewLocal(volume.LocalConfig{Mountpaths: []string{mp}})
			if err != nil {
				t.Fatal(err)
			}
			defer vl.Close()
			if err := vl.WriteAt(ctx, "vol@1", 0, 0, []byte("x"), 0, true); err != nil {
				t.Fatal(err)
			}
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mp := filepath.Join(t.TempDir(), "mp")
			st, err := store.Open(ctx, store.Config{Mountpaths: []string{mp}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			tt.fill(t, st, mp)
			if got := holdsData(st, []string{mp}); got != tt.want {
				t.Errorf("holdsData = %v, want %v", got, tt.want)
			}
		})
	}
}
