package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster"
)

// mapSeed serves the cluster map: an empty one of version 0 (a node that
// has just restarted and not heard from the leader yet) for the first
// `empty` requests, then one that lists a node.
func mapSeed(t *testing.T, empty int64) (url string, requests, longPolls *atomic.Int64) {
	requests, longPolls = new(atomic.Int64), new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != cluster.PathMap {
			http.NotFound(w, r)
			return
		}
		m := cluster.NewMap()
		if r.URL.Query().Has("after") {
			longPolls.Add(1)
		}
		if requests.Add(1) > empty {
			m.Version = 7
			m.Nodes["a"] = cluster.NodeInfo{ID: "a", State: cluster.StateUp, PublicAddrs: []string{"127.0.0.1:1"}}
		} else if r.URL.Query().Has("after") {
			time.Sleep(50 * time.Millisecond) // the long poll's wait, shortened
		}
		_ = json.NewEncoder(w).Encode(m)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, requests, longPolls
}

func TestFirstMapWaitsForANodeToCatchUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dead := "http://127.60.255.254:1" // nothing listens there
	url, requests, longPolls := mapSeed(t, 3)
	m, err := firstMap(ctx, http.DefaultClient, []string{dead, url}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !usable(m) || m.Version != 7 {
		t.Fatalf("got map version %d with nodes %v, want version 7 listing a", m.Version, m.Nodes)
	}
	if requests.Load() != 4 || longPolls.Load() != 3 {
		t.Errorf("the seed got %d requests, %d of them long polls; want 4 and 3", requests.Load(), longPolls.Load())
	}
}

func TestFirstMapErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	url, _, _ := mapSeed(t, 1<<40)
	start := time.Now()
	if _, err := firstMap(ctx, http.DefaultClient, []string{url}, 300*time.Millisecond); !errors.Is(err, ErrNoNodes) {
		t.Errorf("a seed with an empty map: got %v, want ErrNoNodes", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("gave up after %v, want about 300ms", d)
	}
	if _, err := firstMap(ctx, http.DefaultClient, []string{"http://127.60.255.254:1"}, time.Minute); !errors.Is(err, ErrNoMap) {
		t.Errorf("a dead seed: got %v, want ErrNoMap", err)
	}
}

// s3Node answers the intra map path as a node's S3 address does (403 with
// an S3 XML error) and serves the map at cluster.PublicMapPath when
// withMap.
func s3Node(t *testing.T, withMap bool) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if withMap && r.URL.Path == cluster.PublicMapPath {
			m := cluster.NewMap()
			m.Version = 3
			m.Nodes["a"] = cluster.NodeInfo{ID: "a", State: cluster.StateUp, PublicAddrs: []string{"127.0.0.1:1"}}
			_ = json.NewEncoder(w).Encode(m)
			return
		}
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`<Error><Code>AccessDenied</Code></Error>`))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// A seed that is a node's S3 address is read at its public map path, and
// the seed becomes that URL, so the client follows the map there.
func TestFirstMapS3Address(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	url := s3Node(t, true)
	seeds := []string{url + "/"}
	m, err := firstMap(ctx, http.DefaultClient, seeds, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if m.Version != 3 || seeds[0] != url+cluster.PublicMapPath {
		t.Errorf("map version %d, seeds %v; want 3 and the public map URL", m.Version, seeds)
	}
	// Neither path serves a map: the error names both.
	other := s3Node(t, false)
	_, err = firstMap(ctx, http.DefaultClient, []string{other}, time.Second)
	if !errors.Is(err, ErrNoMap) || !errors.Is(err, cluster.ErrNotMapEndpoint) || !strings.Contains(err.Error(), other+cluster.PublicMapPath) {
		t.Errorf("no map at either path: got %v", err)
	}
}
