package cluster

import (
	"errors"
	"testing"
)

// TestVolumeClaims: a claim by a new node makes it the writer and raises
// the epoch; a claim by the writer changes nothing; a resize keeps the
// claim; a covered clear spares the current writer's mark, and clears a
// fenced writer's only if the volume was not claimed again since the
// covering resync began; a claim names the volume's ID; a claim from an
// epoch that is not the volume's any more (another node claimed it since
// the claimer decided) changes nothing.
func TestVolumeClaims(t *testing.T) {
	m := NewMap()
	spec := VolumeSpec{Name: "v", Size: 1 << 30, ChunkSize: 4 << 20, Copies: 2, Created: t0, ID: "aaaa", Nodes: []string{"n1", "n2"}}
	claim := func(node, id string) command {
		return command{Op: opVolumeClaim, Name: "v", Volume: &VolumeSpec{Name: "v", ID: id}, Node: &NodeInfo{ID: node}}
	}
	claimFrom := func(node string, from uint64) command {
		c := claim(node, "aaaa")
		c.IfEpoch = &from
		return c
	}
	mark := func(mirror, writer string, stale, covered bool, epoch uint64) command {
		st := StateUp
		if stale {
			st = StateDown
		}
		return command{Op: opVolumeStale, Name: "v", Node: &NodeInfo{ID: mirror}, State: st, Writer: writer, Covered: covered, Epoch: epoch}
	}
	grown := spec
	grown.Size = 2 << 30
	steps := []struct {
		name      string
		c         command
		err       error
		writer    string
		epoch     uint64
		marksOfN2 []string
		unchanged bool
	}{
		{"create", command{Op: opVolumePut, Volume: &spec}, nil, "", 0, nil, false},
		{"n1 claims", claim("n1", "aaaa"), nil, "n1", 1, nil, false},
		{"n1 claims again", claim("n1", "aaaa"), nil, "n1", 1, nil, true},
		{"n1 marks n2", mark("n2", "n1", true, false, 0), nil, "n1", 1, []string{"n1"}, false},
		{"covered clear spares the writer", mark("n2", "n1", false, true, 1), nil, "n1", 1, []string{"n1"}, true},
		{"n3 claims", claim("n3", "aaaa"), nil, "n3", 2, []string{"n1"}, false},
		{"resize keeps the claim", command{Op: opVolumePut, Volume: &grown}, nil, "n3", 2, []string{"n1"}, false},
		{"claim of another volume ID", claim("n2", "bbbb"), ErrVolumeNotFound, "n3", 2, []string{"n1"}, true},
		{"covered clear by a resync begun under an older claim", mark("n2", "n1", false, true, 1), nil, "n3", 2, []string{"n1"}, true},
		{"covered clear of a fenced writer", mark("n2", "n1", false, true, 2), nil, "n3", 2, nil, false},
		{"n1 claims back", claim("n1", "aaaa"), nil, "n1", 3, nil, false},
		{"n2 claims from an older claim", claimFrom("n2", 2), nil, "n1", 3, nil, true},
		{"n2 claims from none", claimFrom("n2", 0), nil, "n1", 3, nil, true},
		{"n1 claims from an older claim: it holds it", claimFrom("n1", 2), nil, "n1", 3, nil, true},
		{"n2 claims from the current claim", claimFrom("n2", 3), nil, "n2", 4, nil, false},
	}
	for _, st := range steps {
		n, err := applyCommand(m, st.c)
		if !errors.Is(err, st.err) || st.err == nil && err != nil {
			t.Fatalf("%s: %v, want %v", st.name, err, st.err)
		}
		if (n == m) != st.unchanged {
			t.Errorf("%s: map changed %v, want %v", st.name, n != m, !st.unchanged)
		}
		v := n.Volumes["v"]
		if v.Writer != st.writer || v.Epoch != st.epoch {
			t.Errorf("%s: writer %q epoch %d, want %q %d", st.name, v.Writer, v.Epoch, st.writer, st.epoch)
		}
		if got := v.StaleMarks()["n2"]; len(got) != len(st.marksOfN2) || len(got) > 0 && got[0] != st.marksOfN2[0] {
			t.Errorf("%s: marks of n2 %q, want %q", st.name, got, st.marksOfN2)
		}
		m = n
	}
}
