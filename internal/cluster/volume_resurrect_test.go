package cluster

import (
	"errors"
	"testing"
)

// TestVolumeResizeAfterDeleteDoesNotResurrect: a resize (volume.put of the
// volume as the resizer read it, with a larger size) that commits after a
// delete of that volume, or a create retried after its volume was deleted,
// must not bring the deleted volume back: its chunks are gone, its key is
// in DeletedVolumes (so every node removes what it still holds of it), and
// the operator deleted it.
func TestVolumeResizeAfterDeleteDoesNotResurrect(t *testing.T) {
	m := NewMap()
	v := VolumeSpec{Name: "v", Size: 1 << 30, ChunkSize: 4 << 20, Copies: 2, Created: t0, ID: "abcd", Nodes: []string{"n1", "n2"}}
	var err error
	if m, err = applyCommand(m, command{Op: opVolumePut, Volume: &v}); err != nil {
		t.Fatal(err)
	}
	// The resizer read the volume here; a delete commits first.
	grown := v
	grown.Size = 2 << 30
	if m, err = applyCommand(m, command{Op: opVolumeDelete, Name: "v", Volume: &VolumeSpec{Name: "v", ID: "abcd"}}); err != nil {
		t.Fatal(err)
	}
	m2, err := applyCommand(m, command{Op: opVolumePut, Volume: &grown})
	if got, ok := m2.Volumes["v"]; ok {
		t.Fatalf("a resize that committed after the delete brought volume %s (key %s, listed as deleted: %v) back: %+v",
			v.Name, v.Key(), m2.DeletedVolumes, got)
	}
	if !errors.Is(err, ErrVolumeNotFound) {
		t.Errorf("resize of a deleted volume: %v, want ErrVolumeNotFound", err)
	}
	// A new volume of the name (another ID) may still be created.
	again := VolumeSpec{Name: "v", Size: 1 << 30, ChunkSize: 4 << 20, Copies: 1, Created: t0, ID: "ef01"}
	if m2, err = applyCommand(m, command{Op: opVolumePut, Volume: &again}); err != nil || m2.Volumes["v"].ID != "ef01" {
		t.Fatalf("create of a new volume under a deleted one's name: %v, %+v", err, m2.Volumes["v"])
	}
}
