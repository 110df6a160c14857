package tier

import (
	"maps"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/backend"
)

func TestStamp(t *testing.T) {
	at := time.Date(2026, 11, 22, 7, 30, 0, 123456789, time.FixedZone("x", 3600))
	user := map[string]string{"owner": "team-a"}
	meta := withStamp(user, at)
	if _, ok := user[stampKey]; ok {
		t.Fatal("withStamp changed its argument")
	}
	for _, tc := range []struct {
		name     string
		meta     map[string]string
		wantOK   bool
		wantUser map[string]string
	}{
		{"stamped", meta, true, user},
		{"stamp only", withStamp(nil, at), true, nil},
		{"foreign object", user, false, user},
		{"no metadata", nil, false, nil},
		{"garbled stamp", map[string]string{stampKey: "yesterday"}, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := backend.Attrs{UserMeta: tc.meta}
			w, ok := stampOf(a)
			if ok != tc.wantOK || ok && !w.Equal(at) {
				t.Errorf("stampOf = %v %v, want %v %v", w, ok, at, tc.wantOK)
			}
			if got := userMeta(a); !maps.Equal(got, tc.wantUser) {
				t.Errorf("userMeta = %v, want %v", got, tc.wantUser)
			}
			if newerThan(a, at) || tc.wantOK != newerThan(a, at.Add(-time.Nanosecond)) {
				t.Errorf("newerThan wrong for %v", tc.meta)
			}
		})
	}
}
