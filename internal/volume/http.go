package volume

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The intra-cluster chunk protocol, served under /volume/:
//
//	GET    /volume/_ping
//	GET    /volume/_seen                            -> the map version this node's volumes have taken in (decimal)
//	GET    /volume/{vol}/{chunk}?off=O&n=N          -> N bytes
//	PUT    /volume/{vol}/{chunk}?off=O&epoch=E[&sync=1]   body: the data
//	POST   /volume/{vol}/{chunk}/zero?off=O&n=N&epoch=E[&punch=1]
//	POST   /volume/{vol}/_sync                      body: chunk numbers, comma-separated
//	POST   /volume/{vol}/_fence?epoch=E
//	POST   /volume/{vol}/_forward?op=write|zero|flush&off=O&n=N[&fua=1][&punch=1]   (forward.go)
//	DELETE /volume/{vol}
//	POST   /volume/_stream   (Upgrade: slipstream-volume/2; see stream.go)
//
// Errors are plain-text bodies with status 400 (bad request), 409 (a
// newer writer's epoch was seen: ErrFenced), 421 (a forwarded op for a
// node that does not write the volume: ErrNotWriter), 507 (out of space)
// or 500.

// MaxTransfer caps the data of one chunk request.
const MaxTransfer = 64 << 20

// Handler serves a Replica over HTTP under /volume/.
type Handler struct {
	mux *http.ServeMux
	h   *handler
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// NoteSeen records that every volume this node has open has taken in the
// cluster map of version ver (and any it opens later will have): a
// writer that ends a re-placement asks every node for it (Client.Seen),
// so that none reads an old owner that stops being written.
func (h *Handler) NoteSeen(ver uint64) {
	for {
		cur := h.h.seen.Load()
		if ver <= cur || h.h.seen.CompareAndSwap(cur, ver) {
			return
		}
	}
}

// Close ends the upgraded stream connections, which http.Server.Close and
// Shutdown do not track (register it with RegisterOnShutdown).
func (h *Handler) Close() error {
	h.h.smu.Lock()
	defer h.h.smu.Unlock()
	h.h.closed = true
	for c := range h.h.streams {
		_ = c.Close()
	}
	return nil
}

// NewHandler serves r over HTTP under /volume/.
func NewHandler(r Replica) *Handler {
	h := &handler{r: r, streams: map[net.Conn]struct{}{}, boot: rand.Text()}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /volume/_ping", func(w http.ResponseWriter, req *http.Request) {
		if err := r.Ping(req.Context()); err != nil {
			httpError(w, err)
		}
	})
	mux.HandleFunc("GET /volume/_seen", func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.WriteString(w, strconv.FormatUint(h.seen.Load(), 10))
	})
	mux.HandleFunc("POST /volume/_stream", h.serveStream)
	mux.HandleFunc("GET /volume/{vol}/{chunk}", h.read)
	mux.HandleFunc("PUT /volume/{vol}/{chunk}", h.write)
	mux.HandleFunc("POST /volume/{vol}/{chunk}/zero", h.zero)
	mux.HandleFunc("POST /volume/{vol}/_sync", h.sync)
	mux.HandleFunc("POST /volume/{vol}/_forward", h.forward)
	mux.HandleFunc("POST /volume/{vol}/_fence", func(w http.ResponseWriter, req *http.Request) {
		epoch, err := epochArg(req)
		if err == nil && !req.URL.Query().Has("epoch") {
			err = fmt.Errorf("%w: fence without an epoch", ErrOutOfRange)
		}
		if err == nil {
			err = r.Fence(req.Context(), req.PathValue("vol"), epoch)
		}
		if err != nil {
			httpError(w, err)
		}
	})
	mux.HandleFunc("DELETE /volume/{vol}", func(w http.ResponseWriter, req *http.Request) {
		if err := r.Delete(req.Context(), req.PathValue("vol")); err != nil {
			httpError(w, err)
		}
	})
	return &Handler{mux: mux, h: h}
}

type handler struct {
	r Replica
	// boot names this handler's life: a client that finds another one
	// after it dials again knows the node restarted, and what it wrote
	// there without a sync may be lost.
	boot string
	pool sync.Pool
	// open finds the Volume a forwarded op is for (see Coordinate).
	open atomic.Pointer[func(vol string) *Volume]
	// seen is the cluster map version this node's volumes have taken in
	// (NoteSeen).
	seen atomic.Uint64

	smu     sync.Mutex
	streams map[net.Conn]struct{}
	closed  bool
}

func (h *handler) buf(n int) *[]byte {
	if v := h.pool.Get(); v != nil {
		b := v.(*[]byte)
		if cap(*b) >= n {
			*b = (*b)[:n]
			return b
		}
	}
	b := make([]byte, n, max(n, 1<<20))
	return &b
}

func (h *handler) put(b *[]byte) {
	if cap(*b) <= 4<<20 {
		h.pool.Put(b)
	}
}

// args parses the chunk number and the off/n query values.
func args(req *http.Request, needN bool) (chunk, off, n int64, err error) {
	chunk, err = strconv.ParseInt(req.PathValue("chunk"), 10, 64)
	if err != nil || chunk < 0 {
		return 0, 0, 0, fmt.Errorf("%w: chunk %q", ErrOutOfRange, req.PathValue("chunk"))
	}
	q := req.URL.Query()
	off, err = strconv.ParseInt(q.Get("off"), 10, 64)
	if err != nil || off < 0 {
		return 0, 0, 0, fmt.Errorf("%w: off %q", ErrOutOfRange, q.Get("off"))
	}
	if needN {
		n, err = strconv.ParseInt(q.Get("n"), 10, 64)
		if err != nil || n < 0 {
			return 0, 0, 0, fmt.Errorf("%w: n %q", ErrOutOfRange, q.Get("n"))
		}
	}
	return chunk, off, n, nil
}

// epochArg parses the epoch query value (0 if absent).
func epochArg(req *http.Request) (uint64, error) {
	s := req.URL.Query().Get("epoch")
	if s == "" {
		return 0, nil
	}
	e, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: epoch %q", ErrOutOfRange, s)
	}
	return e, nil
}

func (h *handler) read(w http.ResponseWriter, req *http.Request) {
	chunk, off, n, err := args(req, true)
	if err == nil && n > MaxTransfer {
		err = fmt.Errorf("%w: n %d", ErrOutOfRange, n)
	}
	if err != nil {
		httpError(w, err)
		return
	}
	b := h.buf(int(n))
	defer h.put(b)
	if err := h.r.ReadAt(req.Context(), req.PathValue("vol"), chunk, *b, off); err != nil {
		httpError(w, err)
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(*b)))
	_, _ = w.Write(*b)
}

func (h *handler) write(w http.ResponseWriter, req *http.Request) {
	chunk, off, _, err := args(req, false)
	if err == nil && (req.ContentLength < 0 || req.ContentLength > MaxTransfer) {
		err = fmt.Errorf("%w: content length %d", ErrOutOfRange, req.ContentLength)
	}
	epoch, eerr := epochArg(req)
	if err == nil {
		err = eerr
	}
	if err != nil {
		httpError(w, err)
		return
	}
	b := h.buf(int(req.ContentLength))
	defer h.put(b)
	if _, err := io.ReadFull(req.Body, *b); err != nil {
		httpError(w, fmt.Errorf("volume: short body: %w", err))
		return
	}
	if err := h.r.WriteAt(req.Context(), req.PathValue("vol"), epoch, chunk, *b, off, req.URL.Query().Get("sync") == "1"); err != nil {
		httpError(w, err)
	}
}

func (h *handler) zero(w http.ResponseWriter, req *http.Request) {
	chunk, off, n, err := args(req, true)
	epoch, eerr := epochArg(req)
	if err == nil {
		err = eerr
	}
	if err != nil {
		httpError(w, err)
		return
	}
	if err := h.r.Zero(req.Context(), req.PathValue("vol"), epoch, chunk, off, n, req.URL.Query().Get("punch") == "1"); err != nil {
		httpError(w, err)
	}
}

func (h *handler) sync(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 16<<20))
	if err != nil {
		httpError(w, err)
		return
	}
	chunks, err := parseChunkList(string(body))
	if err != nil {
		httpError(w, err)
		return
	}
	if err := h.r.Sync(req.Context(), req.PathValue("vol"), chunks); err != nil {
		httpError(w, err)
	}
}

func parseChunkList(s string) ([]int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	out := make([]int64, len(parts))
	for i, p := range parts {
		c, err := strconv.ParseInt(p, 10, 64)
		if err != nil || c < 0 {
			return nil, fmt.Errorf("%w: chunk %q", ErrOutOfRange, p)
		}
		out[i] = c
	}
	return out, nil
}

func httpError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	if errors.Is(err, ErrOutOfRange) || errors.Is(err, ErrInvalidName) {
		code = http.StatusBadRequest
	} else if noSpace(err) {
		code = http.StatusInsufficientStorage
	} else if errors.Is(err, ErrFenced) {
		code = http.StatusConflict
	} else if errors.Is(err, ErrNotWriter) {
		code = http.StatusMisdirectedRequest
	}
	http.Error(w, err.Error(), code)
}

// Client is a Replica on another node, reached over HTTP: chunk data goes
// over a few upgraded, pipelined stream connections; ping and delete are
// plain requests.
type Client struct {
	base   string
	hc     *http.Client
	header http.Header
	stream *streamClient
	fwd    *streamClient // for Forward
}

var _ Replica = (*Client)(nil)

// ClientConfig configures a Client.
type ClientConfig struct {
	// BaseURL is the node's intra-cluster address, e.g. "http://10.0.0.2:9001".
	BaseURL string
	// HTTP is used for plain requests; nil means a pooled default.
	HTTP *http.Client
	// StreamConns is the number of stream connections; 0 means 1, and a
	// negative value sends chunk data over plain HTTP requests instead.
	// Calls of up to 64 KiB all go over the first connection (one
	// connection batches them best: many share each syscall); larger ones
	// are spread over every connection.
	StreamConns int
	// Timeout fails a stream connection (and every call on it) when one
	// call waits longer than this. Default 10s.
	Timeout time.Duration
	// Header is added to every request, stream upgrades included (the
	// cluster secret).
	Header http.Header
	// Dial dials the node for stream connections and, when HTTP is nil,
	// for plain requests; nil means a net.Dialer (TCP_NODELAY is Go's
	// default for TCP).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Addrs, if set, returns the node's addresses ("host:port") as they
	// are now: the client keeps a stream connection per address (at
	// least StreamConns), each dialing its own address first, and
	// spreads calls of more than 64 KiB over them (see streamClient).
	// Every dial (plain requests too, when HTTP is nil) falls back to the
	// node's other addresses, and skips one it no longer lists.
	Addrs func() []string
}

// dialAddrs returns dial, made to dial addr and, if it does not answer,
// the node's other addresses (addrs) in turn; an addr that addrs no
// longer lists (the node came back on other addresses) is not dialed, and
// addr alone is while addrs lists none (nil addrs: dial as it is).
func dialAddrs(dial dialFunc, addrs func() []string) dialFunc {
	if addrs == nil {
		return dial
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		hosts := []string{addr}
		if now := addrs(); len(now) > 0 {
			hosts = now
			if i := slices.Index(now, addr); i > 0 {
				hosts = append([]string{addr}, slices.Delete(slices.Clone(now), i, i+1)...)
			}
		}
		var errs []error
		for _, h := range hosts {
			c, err := dial(ctx, network, h)
			if err == nil {
				return c, nil
			}
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
		}
		return nil, errors.Join(errs...)
	}
}

// NewClient returns a replica client for the node at baseURL with the
// default configuration.
func NewClient(baseURL string, hc *http.Client) *Client {
	c, err := NewClientConfig(ClientConfig{BaseURL: baseURL, HTTP: hc})
	if err != nil {
		// Only a malformed URL fails; calls then fail with this error.
		return &Client{base: baseURL, hc: http.DefaultClient, stream: nil}
	}
	return c
}

// NewClientConfig returns a replica client for cfg.
func NewClientConfig(cfg ClientConfig) (*Client, error) {
	dial := cfg.Dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	dial = dialAddrs(dial, cfg.Addrs)
	hc := cfg.HTTP
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.DialContext = dial
		tr.MaxIdleConnsPerHost = 256
		tr.MaxIdleConns = 1024
		tr.Proxy = nil
		hc = &http.Client{Transport: tr}
	}
	for k, vs := range cfg.Header {
		for _, v := range vs {
			if strings.ContainsAny(k+v, "\r\n") {
				return nil, fmt.Errorf("volume: header %q has a line break", k)
			}
		}
	}
	c := &Client{base: strings.TrimRight(cfg.BaseURL, "/"), hc: hc, header: cfg.Header.Clone()}
	if cfg.StreamConns >= 0 {
		n := cfg.StreamConns
		if n == 0 {
			n = 1
		}
		if cfg.Addrs != nil {
			n = max(n, len(cfg.Addrs()))
		}
		if cfg.Timeout <= 0 {
			cfg.Timeout = 10 * time.Second
		}
		s, err := newStreamClient(c.base, n, cfg.Timeout)
		if err != nil {
			return nil, err
		}
		s.header, s.dial, s.addrs = c.header, dial, cfg.Addrs
		c.stream = s
		// Forwarded ops may wait on the holder's mirrors, for as long as
		// its replica calls may: their connection fails after longer.
		f, err := newStreamClient(c.base, n, 3*cfg.Timeout)
		if err != nil {
			return nil, err
		}
		f.header, f.dial, f.addrs = c.header, dial, cfg.Addrs
		c.fwd = f
	}
	return c, nil
}

var _ asyncReplica = (*Client)(nil)

// writeAsync sends a write and returns a function that waits for it.
func (c *Client) writeAsync(ctx context.Context, vol string, epoch uint64, chunk int64, p []byte, off int64, sync bool) func() error {
	if c.stream == nil {
		ch := make(chan error, 1)
		go func() { ch <- c.WriteAt(ctx, vol, epoch, chunk, p, off, sync) }()
		return func() error { return <-ch }
	}
	r := &streamReq{op: opWrite, vol: vol, epoch: epoch, chunk: chunk, off: off, payload: p}
	if sync {
		r.flags = flagSync
	}
	sc, err := c.stream.conn(ctx, len(p))
	if err != nil {
		return func() error { return err }
	}
	call, err := sc.start(r, nil)
	if err != nil {
		return func() error { return err }
	}
	return func() error { return sc.wait(ctx, r.id, call) }
}

// Close closes the stream connections.
func (c *Client) Close() error {
	if c.stream != nil {
		c.stream.close()
		c.fwd.close()
	}
	return nil
}

func (c *Client) streamDo(ctx context.Context, r *streamReq, dst []byte) error {
	sc, err := c.stream.conn(ctx, max(len(r.payload), len(dst)))
	if err != nil {
		return err
	}
	return sc.do(ctx, r, dst)
}

func (c *Client) url(vol string, chunk int64, suffix, query string) string {
	var b strings.Builder
	b.Grow(len(c.base) + len(vol) + 64)
	b.WriteString(c.base)
	b.WriteString("/volume/")
	b.WriteString(vol)
	if chunk >= 0 {
		b.WriteByte('/')
		b.WriteString(strconv.FormatInt(chunk, 10))
	}
	b.WriteString(suffix)
	if query != "" {
		b.WriteByte('?')
		b.WriteString(query)
	}
	return b.String()
}

func (c *Client) do(ctx context.Context, method, url string, body []byte, into []byte) error {
	resp, err := c.send(ctx, method, url, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if into != nil {
		if _, err := io.ReadFull(resp.Body, into); err != nil {
			return fmt.Errorf("%w: reading body: %w", ErrReplicaError, err)
		}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return nil
}

// send makes a request and returns its 200 OK answer, whose body the
// caller closes; any other status is an error.
func (c *Client) send(ctx context.Context, method, url string, body []byte) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, err
	}
	for k, vs := range c.header {
		req.Header[k] = vs
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrReplicaError, err)
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	switch resp.StatusCode {
	case http.StatusBadRequest:
		return nil, fmt.Errorf("%w: %s", ErrOutOfRange, strings.TrimSpace(string(msg)))
	case http.StatusInsufficientStorage:
		return nil, fmt.Errorf("%w: %s", ErrNoSpace, strings.TrimSpace(string(msg)))
	case http.StatusConflict:
		return nil, fmt.Errorf("%w: %s", ErrFenced, strings.TrimSpace(string(msg)))
	case http.StatusMisdirectedRequest:
		return nil, fmt.Errorf("%w: %s", ErrNotWriter, strings.TrimSpace(string(msg)))
	}
	return nil, fmt.Errorf("%w: %s %s: %s: %s", ErrReplicaError, method, url, resp.Status, strings.TrimSpace(string(msg)))
}

// ReadAt implements Replica.
func (c *Client) ReadAt(ctx context.Context, vol string, chunk int64, p []byte, off int64) error {
	if c.stream != nil {
		return c.streamDo(ctx, &streamReq{op: opRead, vol: vol, chunk: chunk, off: off, n: int64(len(p))}, p)
	}
	return c.do(ctx, http.MethodGet, c.url(vol, chunk, "", "off="+strconv.FormatInt(off, 10)+"&n="+strconv.Itoa(len(p))), nil, p)
}

// WriteAt implements Replica.
func (c *Client) WriteAt(ctx context.Context, vol string, epoch uint64, chunk int64, p []byte, off int64, sync bool) error {
	if c.stream != nil {
		r := &streamReq{op: opWrite, vol: vol, epoch: epoch, chunk: chunk, off: off, payload: p}
		if sync {
			r.flags = flagSync
		}
		return c.streamDo(ctx, r, nil)
	}
	q := "off=" + strconv.FormatInt(off, 10) + "&epoch=" + strconv.FormatUint(epoch, 10)
	if sync {
		q += "&sync=1"
	}
	return c.do(ctx, http.MethodPut, c.url(vol, chunk, "", q), p, nil)
}

// Zero implements Replica.
func (c *Client) Zero(ctx context.Context, vol string, epoch uint64, chunk int64, off, n int64, punch bool) error {
	if c.stream != nil {
		r := &streamReq{op: opZero, vol: vol, epoch: epoch, chunk: chunk, off: off, n: n}
		if punch {
			r.flags = flagPunch
		}
		return c.streamDo(ctx, r, nil)
	}
	q := "off=" + strconv.FormatInt(off, 10) + "&n=" + strconv.FormatInt(n, 10) + "&epoch=" + strconv.FormatUint(epoch, 10)
	if punch {
		q += "&punch=1"
	}
	return c.do(ctx, http.MethodPost, c.url(vol, chunk, "/zero", q), nil, nil)
}

// Fence implements Replica.
func (c *Client) Fence(ctx context.Context, vol string, epoch uint64) error {
	if c.stream != nil {
		return c.streamDo(ctx, &streamReq{op: opFence, vol: vol, epoch: epoch}, nil)
	}
	return c.do(ctx, http.MethodPost, c.url(vol, -1, "/_fence", "epoch="+strconv.FormatUint(epoch, 10)), nil, nil)
}

// Sync implements Replica.
func (c *Client) Sync(ctx context.Context, vol string, chunks []int64) error {
	if c.stream != nil {
		p := make([]byte, 0, 8*len(chunks))
		for _, ch := range chunks {
			p = binary.BigEndian.AppendUint64(p, uint64(ch))
		}
		return c.streamDo(ctx, &streamReq{op: opSync, vol: vol, payload: p}, nil)
	}
	var b []byte
	for i, ch := range chunks {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, ch, 10)
	}
	if b == nil {
		b = []byte{}
	}
	return c.do(ctx, http.MethodPost, c.url(vol, -1, "/_sync", ""), b, nil)
}

// Delete implements Replica.
func (c *Client) Delete(ctx context.Context, vol string) error {
	return c.do(ctx, http.MethodDelete, c.url(vol, -1, "", ""), nil, nil)
}

// Seen returns the cluster map version the node's volumes have taken in
// (Handler.NoteSeen).
func (c *Client) Seen(ctx context.Context) (uint64, error) {
	resp, err := c.send(ctx, http.MethodGet, c.base+"/volume/_seen", nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 32))
	if err != nil {
		return 0, fmt.Errorf("%w: reading body: %w", ErrReplicaError, err)
	}
	ver, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: map version %q: %w", ErrReplicaError, b, err)
	}
	return ver, nil
}

// Ping implements Replica. It also dials the chunk stream connections
// that are down, so that a node that restarted since this client last
// reached it is found by the Ping (ErrReplicaRestarted, once) rather than
// by the next call.
func (c *Client) Ping(ctx context.Context) error {
	if err := c.do(ctx, http.MethodGet, c.base+"/volume/_ping", nil, nil); err != nil {
		return err
	}
	if c.stream != nil {
		return c.stream.ready(ctx)
	}
	return nil
}
