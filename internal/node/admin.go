package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/slipstream-io/slipstream/internal/backend"
	"github.com/slipstream-io/slipstream/internal/backend/open"
	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/netx"
	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/store"
	"github.com/slipstream-io/slipstream/internal/tier"
)

// AdminPrefix is where the admin API is served on the intra-cluster
// listeners (guarded by the cluster secret).
const AdminPrefix = "/admin/v1/"

// Status is a node's answer to GET /admin/v1/status.
type Status struct {
	Node       string                 `json:"node"`
	Leader     string                 `json:"leader"`
	MapVersion uint64                 `json:"mapVersion"`
	Mountpaths []store.MountpathStats `json:"mountpaths"`
	Extra      Sections               `json:"extra"`
}

// Sections are a node's background work and traffic, as `admin status`
// shows them under each node.
type Sections struct {
	Destage    tier.Backlog                  `json:"destage"`
	Interfaces Interfaces                    `json:"interfaces"`
	Rebalance  PassStatus[RebalanceProgress] `json:"rebalance"`
	// Down are the nodes this node's rebalancer sees down, by ID.
	Down  map[string]DownNode       `json:"down,omitempty"`
	Scrub PassStatus[ScrubProgress] `json:"scrub"`
	// Volumes are the volumes the node has open (it serves a client, or
	// resynchronises).
	Volumes map[string]VolumeState `json:"volumes"`
}

// DownNode is a node that is down, as a node's rebalancer sees it.
type DownNode struct {
	// For is how long the rebalancer has seen it down (since the node
	// started, at most).
	For time.Duration `json:"for"`
	// After is rebalance.down_after: once the node has been down this
	// long, the others make new copies of its objects (0: never).
	After time.Duration `json:"after"`
}

// Interfaces are the byte counters of a node's listeners and the state of
// its intra-cluster paths, per local address and per path (local, remote).
type Interfaces struct {
	PeerTransport []netx.IfaceStats    `json:"peerTransport"`
	Paths         []netx.PairStats     `json:"paths"`
	Listeners     []netx.ListenerStats `json:"listeners"`
}

func (n *Node) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+AdminPrefix+"status", func(w http.ResponseWriter, r *http.Request) {
		st := Status{
			Node: n.cfg.ID, Leader: n.cluster.LeaderID(), MapVersion: n.cluster.Map().Version,
			Mountpaths: n.store.Mountpaths(),
		}
		for _, fill := range n.statusFill {
			fill(&st.Extra)
		}
		writeAdmin(w, st, nil)
	})
	mux.HandleFunc("POST "+AdminPrefix+"nodes/{id}/drain", func(w http.ResponseWriter, r *http.Request) {
		id, on := r.PathValue("id"), r.URL.Query().Get("off") == ""
		err := n.cluster.SetDraining(r.Context(), id, on)
		if err == nil {
			waitMap(r.Context(), n.cluster, func(m *cluster.Map) bool { ni, ok := m.Node(id); return ok && ni.Draining == on })
		}
		writeAdmin(w, struct{}{}, err)
	})
	mux.HandleFunc("GET "+AdminPrefix+"buckets", func(w http.ResponseWriter, r *http.Request) {
		m := n.cluster.Map()
		out := make([]cluster.BucketProps, 0, len(m.Buckets))
		for _, name := range m.BucketNames() {
			b, _ := m.Bucket(name)
			b.Backend.SecretKey = redact(b.Backend.SecretKey)
			out = append(out, b)
		}
		writeAdmin(w, out, nil)
	})
	mux.HandleFunc("POST "+AdminPrefix+"buckets", func(w http.ResponseWriter, r *http.Request) {
		var b cluster.BucketProps
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&b); err != nil {
			writeAdmin(w, nil, fmt.Errorf("%w: %v", object.ErrInvalidArgument, err))
			return
		}
		update := r.URL.Query().Get("update") == "true"
		if cur, ok := n.cluster.Map().Bucket(b.Name); ok && update && b.Backend.SecretKey == redact(cur.Backend.SecretKey) {
			b.Backend.SecretKey = cur.Backend.SecretKey // the redacted value came back unchanged
		}
		if b.Created.IsZero() {
			b.Created = n.gw.now().UTC()
		}
		b = b.WithDefaults()
		if err := b.Check(); err != nil {
			writeAdmin(w, nil, err)
			return
		}
		check := r.URL.Query().Get("check") != "false" // false: the remote is known to be down for now
		if cur, ok := n.cluster.Map().Bucket(b.Name); check && b.Mode != cluster.ModeLocal && (!update || !ok || cur.Backend != b.Backend) {
			if err := checkBackend(r.Context(), b); err != nil {
				writeAdmin(w, nil, err)
				return
			}
		}
		if cur, ok := n.cluster.Map().Bucket(b.Name); update && ok && cur.Mode != b.Mode {
			if err := n.checkEmpty(r.Context(), b.Name); err != nil {
				writeAdmin(w, nil, err)
				return
			}
		}
		var err error
		if update {
			err = n.cluster.UpdateBucket(r.Context(), b)
		} else {
			err = n.cluster.CreateBucket(r.Context(), b)
		}
		if err == nil {
			waitMap(r.Context(), n.cluster, func(m *cluster.Map) bool {
				cur, ok := m.Bucket(b.Name)
				if ok && update {
					// The map keeps a bucket's creation time, whatever the
					// update said: answer with the bucket as stored.
					b.Created = cur.Created
				}
				return ok && cur == b
			})
		}
		writeAdmin(w, b, err)
	})
	mux.HandleFunc("DELETE "+AdminPrefix+"buckets/{name}", func(w http.ResponseWriter, r *http.Request) {
		writeAdmin(w, struct{}{}, n.gw.DeleteBucket(r.Context(), r.PathValue("name")))
	})
	for path, h := range n.adminExtras {
		mux.Handle(path, h)
	}
	return mux
}

func redact(s string) string {
	if s == "" {
		return ""
	}
	return cluster.RedactedSecret
}

// checkEmpty refuses a change of mode of a bucket that holds objects (in
// the cluster or, for a tiered bucket, in its backend): a local bucket's
// objects were never uploaded, so a tiered mode would drop them as clean
// copies, and a tiered bucket's objects that only the backend holds would
// be gone in a local one.
func (n *Node) checkEmpty(ctx context.Context, bucket string) error {
	m := n.cluster.Map()
	res, err := n.gw.listAll(ctx, m, bucket, object.ListOptions{MaxKeys: 1}, nil)
	if err != nil {
		return err
	}
	if len(res.Objects) > 0 {
		return fmt.Errorf("%w: %s holds objects, and changing its mode would lose them; create a bucket with the new mode and copy them", object.ErrBucketNotEmpty, bucket)
	}
	return nil
}

// checkBackend lists one key of b's backend, so that a tiered bucket is
// not created over a remote that cannot serve it (a wrong endpoint, wrong
// credentials, a bucket or directory that does not exist): its GETs would
// answer "not found" and its listings "retry" for ever.
func checkBackend(ctx context.Context, b cluster.BucketProps) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if b.Backend.Kind == cluster.BackendFS {
		// The fs backend makes its directory: an NFS mount that is
		// missing would silently become a local directory.
		if fi, err := os.Stat(b.Backend.Path); err != nil || !fi.IsDir() {
			if err == nil {
				err = fmt.Errorf("%s is not a directory", b.Backend.Path)
			}
			return fmt.Errorf("%w: bucket %s: its fs backend must be an existing directory (mounted): %v", object.ErrInvalidArgument, b.Name, err)
		}
	}
	be, err := open.New(ctx, b.Backend)
	if err == nil {
		_, err = be.List(ctx, backend.ListOptions{Limit: 1})
	}
	if err != nil {
		return fmt.Errorf("%w: bucket %s: its backend cannot be listed: %v", object.ErrInvalidArgument, b.Name, err)
	}
	return nil
}

func writeAdmin(w http.ResponseWriter, v any, err error) {
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		status := http.StatusBadRequest
		switch {
		case errors.Is(err, object.ErrBucketNotFound):
			status = http.StatusNotFound
		case errors.Is(err, object.ErrBucketExists), errors.Is(err, object.ErrBucketNotEmpty):
			status = http.StatusConflict
		case errors.Is(err, object.ErrUnavailable), errors.Is(err, cluster.ErrNoLeader):
			status = http.StatusServiceUnavailable
		case !errors.Is(err, object.ErrInvalidArgument) && !errors.Is(err, object.ErrInvalidBucketName):
			status = http.StatusInternalServerError
		}
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": strings.TrimSpace(err.Error())})
		return
	}
	_ = json.NewEncoder(w).Encode(v)
}
