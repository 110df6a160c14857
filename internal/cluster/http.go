package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/slipstream-io/slipstream/internal/object"
)

// Paths served by Handler. The node mounts Handler under "/cluster/".
const (
	PathJoin   = "/cluster/join"
	PathApply  = "/cluster/apply"
	PathLeave  = "/cluster/leave"
	PathMap    = "/cluster/map"
	PathHealth = "/cluster/health"
	PathStatus = "/cluster/status"
)

// PublicMapPath serves the map on a node's public (S3) addresses as well,
// for clients that cannot reach the intra-cluster ones (which need the
// cluster secret when intra_tls is set). S3 bucket names cannot start with
// "_", so it shadows no object.
const PublicMapPath = "/_slipstream/map"

// HeaderVersion carries the map version on GET /cluster/map answers.
const HeaderVersion = "X-Slipstream-Map-Version"

// headerForwarded marks a request that a node already forwarded to whom it
// believed to be the leader; it is never forwarded again.
const headerForwarded = "X-Slipstream-Forwarded"

// maxLongPoll bounds the wait of GET /cluster/map?after=V.
const maxLongPoll = 60 * time.Second

// errUnreachable means no address of the target node answered.
var errUnreachable = errors.New("cluster: node unreachable")

// errorCodes maps errors to the codes that travel over HTTP, in one place.
var errorCodes = []struct {
	code   string
	status int
	err    error
}{
	{"bucket_exists", http.StatusConflict, object.ErrBucketExists},
	{"no_such_bucket", http.StatusNotFound, object.ErrBucketNotFound},
	{"invalid_bucket_name", http.StatusBadRequest, object.ErrInvalidBucketName},
	{"invalid_argument", http.StatusBadRequest, object.ErrInvalidArgument},
	{"no_such_node", http.StatusNotFound, ErrNodeNotFound},
	{"no_such_volume", http.StatusNotFound, ErrVolumeNotFound},
	{"invalid", http.StatusBadRequest, ErrInvalid},
	{"no_leader", http.StatusServiceUnavailable, ErrNoLeader},
	{"not_leader", http.StatusServiceUnavailable, ErrNotLeader},
	{"not_leader", http.StatusServiceUnavailable, raft.ErrNotLeader},
	// Its own code: the entry may have been committed, which the
	// forwarding node must know (a retried delete that finds nothing).
	{"leadership_lost", http.StatusServiceUnavailable, raft.ErrLeadershipLost},
	{"not_leader", http.StatusServiceUnavailable, raft.ErrLeadershipTransferInProgress},
	{"closed", http.StatusServiceUnavailable, ErrClosed},
	{"closed", http.StatusServiceUnavailable, raft.ErrRaftShutdown},
	{"forbidden", http.StatusForbidden, ErrForbidden},
}

// authorized reports whether r carries the cluster's credentials.
func (c *Cluster) authorized(r *http.Request) bool {
	return c.cfg.Authorized == nil || c.cfg.Authorized(r)
}

type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// remoteError is an error returned by another node: its message, and the
// sentinel its code names.
type remoteError struct {
	msg string
	err error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.err }

func errorFromBody(status int, b errorBody) error {
	if b.Code == "closed" {
		// The other node is shutting down (a leader restarted): for this
		// one it went away mid-request, which the next leader can retry.
		return &remoteError{msg: b.Message, err: errUnreachable}
	}
	for _, ec := range errorCodes {
		if ec.code == b.Code {
			return &remoteError{msg: b.Message, err: ec.err}
		}
	}
	if status == http.StatusServiceUnavailable {
		return &remoteError{msg: b.Message, err: ErrNoLeader}
	}
	return fmt.Errorf("cluster: remote error (HTTP %d): %s", status, b.Message)
}

func writeError(w http.ResponseWriter, err error) {
	code, status := "internal", http.StatusInternalServerError
	for _, ec := range errorCodes {
		if errors.Is(err, ec.err) {
			code, status = ec.code, ec.status
			break
		}
	}
	writeJSON(w, status, errorBody{Code: code, Message: err.Error()})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func encodeJSON(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("cluster: encode: %w", err)
	}
	return b, nil
}

// applyResponse tells a forwarding node which map version includes its change.
type applyResponse struct {
	Version uint64 `json:"version"`
}

type leaveRequest struct {
	ID string `json:"id"`
}

// Health is the answer of GET /cluster/health.
type Health struct {
	ID        string `json:"id"`
	RaftState string `json:"raftState"`
	Leader    string `json:"leader"`
	Version   uint64 `json:"version"`
}

// Handler serves the cluster endpoints under "/cluster/" (full paths, no
// prefix stripping):
//
//	POST /cluster/join    body NodeInfo: admit a node (forwarded to the leader)
//	POST /cluster/apply   body: a mutation (forwarded to the leader)
//	POST /cluster/leave   body {"id"}: remove a node (forwarded to the leader)
//	GET  /cluster/map     the map as JSON; ?after=V waits (up to ?wait=, default
//	                      30s, max 60s) for a version newer than V; ?sync first
//	                      catches up with the leader (every change acknowledged
//	                      anywhere is in it; 503 if no leader answers)
//	GET  /cluster/health  this node's raft state, leader and map version; with
//	                      ?sync, a leader answers with a version that holds
//	                      every acknowledged change (what Sync waits for)
//	GET  /cluster/status  Status: raft term, indexes and membership
//	POST /cluster/refused a member that refused a node's connections: the
//	                      leader marks it down if it refuses the leader's
//	                      too (ConfirmRefused)
func (c *Cluster) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+PathJoin, c.serveJoin)
	mux.HandleFunc("POST "+PathApply, c.serveApply)
	mux.HandleFunc("POST "+PathLeave, c.serveLeave)
	mux.HandleFunc("POST "+PathRefused, c.serveRefused)
	mux.HandleFunc("GET "+PathMap, c.serveMap)
	mux.HandleFunc("GET "+PathHealth, c.serveHealth)
	mux.HandleFunc("GET "+PathStatus, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, c.Status())
	})
	return mux
}

// leaderOnly runs f if this node leads; otherwise it relays the request to
// the leader once.
func (c *Cluster) leaderOnly(w http.ResponseWriter, r *http.Request, path string, body any, f func(ctx context.Context) (any, error)) {
	ctx := r.Context()
	if c.IsLeader() {
		out, err := f(ctx)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	if r.Header.Get(headerForwarded) != "" {
		writeError(w, ErrNotLeader)
		return
	}
	var out json.RawMessage
	if err := c.postLeader(ctx, path, body, &out); err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

func decodeBody(r *http.Request, v any) error {
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(v); err != nil {
		return fmt.Errorf("%w: body: %v", ErrInvalid, err)
	}
	return nil
}

func (c *Cluster) serveJoin(w http.ResponseWriter, r *http.Request) {
	if !c.authorized(r) {
		writeError(w, ErrForbidden)
		return
	}
	var info NodeInfo
	if err := decodeBody(r, &info); err != nil {
		writeError(w, err)
		return
	}
	c.leaderOnly(w, r, PathJoin, info, func(ctx context.Context) (any, error) { return c.admit(ctx, info) })
}

func (c *Cluster) serveApply(w http.ResponseWriter, r *http.Request) {
	if !c.authorized(r) {
		writeError(w, ErrForbidden)
		return
	}
	var cmd command
	if err := decodeBody(r, &cmd); err != nil {
		writeError(w, err)
		return
	}
	if err := checkApply(cmd); err != nil {
		writeError(w, err)
		return
	}
	c.leaderOnly(w, r, PathApply, cmd, func(ctx context.Context) (any, error) {
		if err := c.applyLocal(ctx, cmd); err != nil {
			return nil, err
		}
		return applyResponse{Version: c.Map().Version}, nil
	})
}

func (c *Cluster) serveLeave(w http.ResponseWriter, r *http.Request) {
	if !c.authorized(r) {
		writeError(w, ErrForbidden)
		return
	}
	var req leaveRequest
	if err := decodeBody(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.ID == "" {
		writeError(w, fmt.Errorf("%w: leave needs a node id", ErrInvalid))
		return
	}
	c.leaderOnly(w, r, PathLeave, req, func(ctx context.Context) (any, error) {
		return struct{}{}, c.removeMember(ctx, req.ID)
	})
}

// checkApply refuses a forwarded mutation that no node proposes: the
// membership operations (node.put, node.remove, node.voter) change the map
// only with the raft configuration, on the leader (join and leave), and
// bucket and volume properties must pass the checks their proposer runs.
func checkApply(cmd command) error {
	switch cmd.Op {
	case opNodePut, opNodeRemove, opNodeVoter:
		return fmt.Errorf("%w: %s is not applied over HTTP (join or leave)", ErrInvalid, cmd.Op)
	case opBucketCreate, opBucketUpdate:
		if cmd.Bucket == nil {
			return fmt.Errorf("%w: %s without props", ErrInvalid, cmd.Op)
		}
		return cmd.Bucket.Check()
	case opVolumePut:
		if cmd.Volume == nil {
			return fmt.Errorf("%w: volume.put without a spec", ErrInvalid)
		}
		return cmd.Volume.Check()
	}
	return nil
}

func (c *Cluster) serveMap(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Has("sync") {
		// Read-your-writes for a caller that changed the map through
		// another node: this node catches up with the leader first.
		ctx, cancel := context.WithTimeout(r.Context(), syncMapTimeout)
		err := c.Sync(ctx)
		cancel()
		if err != nil {
			writeError(w, err)
			return
		}
	}
	m, changed := c.pub.snapshot()
	if s := r.URL.Query().Get("after"); s != "" {
		after, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			writeError(w, fmt.Errorf("%w: after=%q", ErrInvalid, s))
			return
		}
		wait := 30 * time.Second
		if s := r.URL.Query().Get("wait"); s != "" {
			if wait, err = time.ParseDuration(s); err != nil || wait < 0 {
				writeError(w, fmt.Errorf("%w: wait=%q", ErrInvalid, s))
				return
			}
		}
		wait = min(wait, maxLongPoll)
		timer := time.NewTimer(wait)
		defer timer.Stop()
	poll:
		for m.Version <= after {
			select {
			case <-changed:
				m, changed = c.pub.snapshot()
			case <-timer.C:
				break poll
			case <-r.Context().Done():
				return
			case <-c.ctx.Done():
				break poll
			}
		}
	}
	if !c.authorized(r) {
		m = m.Redacted()
	}
	w.Header().Set(HeaderVersion, strconv.FormatUint(m.Version, 10))
	writeJSON(w, http.StatusOK, m)
}

// syncMapTimeout bounds the catch-up of GET /cluster/map?sync.
const syncMapTimeout = 10 * time.Second

func (c *Cluster) serveHealth(w http.ResponseWriter, r *http.Request) {
	var version uint64
	if r.URL.Query().Has("sync") && c.IsLeader() {
		v, err := c.syncedVersion(r.Context())
		if err != nil {
			writeError(w, err)
			return
		}
		version = v
	} else {
		version = c.Map().Version
	}
	writeJSON(w, http.StatusOK, Health{
		ID: c.self.ID, RaftState: c.raft.State().String(), Leader: c.LeaderID(), Version: version,
	})
}

// FetchMap gets the map from a node's intra base URL (e.g.
// "http://127.0.0.2:9201", to which PathMap is added) or from the URL of a
// node's public map (ending in PublicMapPath). With after > 0 it waits up to wait for a version
// newer than after and returns the current map when the wait ends. A URL
// that answers with an error that is not the cluster API's (a node's
// public S3 address, whose map is at PublicMapPath) gives
// ErrNotMapEndpoint.
func FetchMap(ctx context.Context, hc *http.Client, baseURL string, after uint64, wait time.Duration) (*Map, error) {
	if hc == nil {
		hc = http.DefaultClient
	}
	u := BaseURL(baseURL)
	if !strings.HasSuffix(u, PublicMapPath) {
		u += PathMap
	}
	if after > 0 {
		u += "?after=" + strconv.FormatUint(after, 10) + "&wait=" + wait.String()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("cluster: fetch map: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: fetch map from %s: %v", errUnreachable, baseURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			return nil, fmt.Errorf("%w: %s answers HTTP %d with %q", ErrNotMapEndpoint, u, resp.StatusCode, ct)
		}
		var eb errorBody
		_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&eb)
		return nil, errorFromBody(resp.StatusCode, eb)
	}
	m := NewMap()
	if err := json.NewDecoder(resp.Body).Decode(m); err != nil {
		return nil, fmt.Errorf("cluster: fetch map from %s: %w", baseURL, err)
	}
	return m, nil
}

// postLeader sends a request to the current leader, trying each of its intra
// addresses.
func (c *Cluster) postLeader(ctx context.Context, path string, body, out any) error {
	_, id := c.raft.LeaderWithID()
	if id == "" {
		return ErrNoLeader
	}
	if string(id) == c.self.ID {
		return ErrNotLeader // leadership is moving; try again
	}
	leader, ok := c.Map().Nodes[string(id)]
	if !ok || len(leader.IntraAddrs) == 0 {
		return fmt.Errorf("%w: leader %q is not in the map yet", ErrNoLeader, id)
	}
	return c.postAny(ctx, leader.IntraURLs(), path, body, out, true)
}

// postAny POSTs to each base URL in turn until one answers.
func (c *Cluster) postAny(ctx context.Context, bases []string, path string, body, out any, forwarded bool) error {
	data, err := encodeJSON(body)
	if err != nil {
		return err
	}
	var last error = errUnreachable
	for _, base := range bases {
		err := c.post(ctx, BaseURL(base)+path, data, out, forwarded)
		if err == nil || !errors.Is(err, errUnreachable) {
			return err
		}
		last = err
	}
	return last
}

func (c *Cluster) post(ctx context.Context, url string, data []byte, out any, forwarded bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeoutFrom(ctx, 15*time.Second))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if forwarded {
		req.Header.Set(headerForwarded, "1")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", errUnreachable, url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var eb errorBody
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&eb); err != nil {
			eb.Message = fmt.Sprintf("%s: HTTP %d", url, resp.StatusCode)
		}
		return errorFromBody(resp.StatusCode, eb)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return fmt.Errorf("%w: %s: bad answer: %v", errUnreachable, url, err)
		}
	}
	return nil
}

// WatchRemote long-polls the map from the given intra base URLs, moving to
// the next URL when one fails, and delivers the first map and then every newer
// version in increasing order (a slow reader skips versions). It is how a
// node-external smart client follows the cluster. The channel is closed when
// ctx ends.
func WatchRemote(ctx context.Context, hc *http.Client, baseURLs []string) <-chan *Map {
	out := make(chan *Map)
	go func() {
		defer close(out)
		if len(baseURLs) == 0 {
			return
		}
		var last uint64
		sent := false
		i := 0
		delay := 50 * time.Millisecond
		for ctx.Err() == nil {
			m, err := FetchMap(ctx, hc, baseURLs[i%len(baseURLs)], last, 30*time.Second)
			if err != nil {
				i++
				select {
				case <-ctx.Done():
					return
				case <-time.After(delay):
				}
				delay = min(2*delay, 2*time.Second)
				continue
			}
			delay = 50 * time.Millisecond
			if sent && m.Version <= last {
				continue
			}
			select {
			case out <- m:
				last, sent = m.Version, true
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// get fetches a JSON document with a timeout.
func (c *Cluster) get(ctx context.Context, url string, timeout time.Duration, out any) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", errUnreachable, url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: %s: HTTP %d", errUnreachable, url, resp.StatusCode)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(out)
}
