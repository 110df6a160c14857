package sysstat

import (
	_ "embed"
	"encoding/json"
	"net/http"
	"strings"
)

// PagePath is where a node serves its live page.
const PagePath = "/slipstream/v1/live"

//go:embed page.html
var pageHTML string

// Page serves a self-contained HTML page (no external scripts, styles or
// fonts, so it works on an isolated cluster network) that polls the
// Snapshot at statsPath once a second and charts, over the last five
// minutes: S3 requests and bytes per second, warm and cold GETs, the
// destage backlog, and each disk's throughput and busy time and each
// interface's traffic. The counters it reads are the node's (see the
// node's stats counters); any missing one charts as zero.
func Page(statsPath string) http.Handler {
	q, _ := json.Marshal(statsPath) // a string always encodes
	page := strings.Replace(pageHTML, `"{{STATS}}"`, string(q), 1)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write([]byte(page))
	})
}
