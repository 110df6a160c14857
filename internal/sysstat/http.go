package sysstat

import (
	"encoding/json"
	"net/http"
)

// Path is where a node serves its stats snapshot.
const Path = "/slipstream/v1/stats"

// Handler serves a fresh Snapshot as JSON on GET. dirs are the node's
// mountpaths; counters (may be nil) supplies the node's own counters.
func Handler(node string, dirs []string, counters func() map[string]float64) http.Handler {
	s := &Sampler{Node: node, Dirs: dirs, Counters: counters}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		snap, err := s.Sample(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(snap)
	})
}
