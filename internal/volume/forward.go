package volume

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Forwarding: one node at a time writes a volume (it holds the claim,
// see fence.go). A client that writes through another node while the
// holder's own clients write too would take the claim from it, and the
// holder's writes in flight would be fenced off (EIO), and so on back
// and forth. Instead, a node that does not hold the claim sends its
// clients' writes, zeroes and trims to the holder (Config.Forward), which
// applies them as its own (Apply) while one of its own clients wrote in
// the last HoldIdle; otherwise it refuses (ErrNotWriter) and the sender
// claims the volume: the claim follows the clients that write, and two
// writing at once through two nodes share it. A holder that cannot be
// reached is claimed from, as before. A write fenced because another
// node claimed the volume meanwhile is sent again, to the new holder or
// here, while its client still waits for it (rerouteWithin); a claim
// names the claim it
// takes the volume from (Claims), so two nodes that decide to claim at
// once do not take it from each other in turn. Reads never move: every
// node reads the mirrors itself.
//
// A Flush on the sender asks every node it forwarded writes to since its
// last Flush to flush too; if one cannot be reached, it syncs the chunks
// of those writes on their mirrors itself.

// OpKind is what an Op does.
type OpKind uint8

// Op kinds.
const (
	OpWrite OpKind = iota + 1
	OpZero
	OpFlush
)

var opNames = [...]string{OpWrite: "write", OpZero: "zero", OpFlush: "flush"}

func (k OpKind) String() string {
	if int(k) < len(opNames) && opNames[k] != "" {
		return opNames[k]
	}
	return "op" + strconv.Itoa(int(k))
}

// Op is a client's mutation of a volume, as one node forwards it to the
// node that holds the volume's claim.
type Op struct {
	Kind   OpKind
	Off, N int64  // the range; N is len(Data) for a write
	Data   []byte // a write's data
	FUA    bool   // durable before it is acknowledged
	Punch  bool   // a zero may deallocate the range
}

// Forwarder sends a volume's ops to another node.
type Forwarder interface {
	// Forward applies op to the volume vol (its Spec.Key) through the
	// Volume open on node (Volume.Apply), and returns the map version
	// holding the stale marks node had made by then (see marksver.go).
	// It fails with ErrNotWriter if node does not write the volume, and
	// with ErrFenced if another node claimed it while op ran.
	Forward(ctx context.Context, node, vol string, op Op) (marksVer uint64, err error)
}

// claimHolder is a volume's claim as the cluster map showed it.
type claimHolder struct {
	node  string
	epoch uint64
}

// noteHolder records a claim, unless a newer one is known.
func (v *Volume) noteHolder(node string, epoch uint64) {
	for {
		cur := v.holder.Load()
		if cur != nil && cur.epoch >= epoch {
			return
		}
		if v.holder.CompareAndSwap(cur, &claimHolder{node: node, epoch: epoch}) {
			return
		}
	}
}

// route applies a client's op: here if this node writes the volume (or
// claims it), else through the holder of the claim.
func (v *Volume) route(ctx context.Context, op Op) error {
	if size := v.size.Load(); op.Kind != OpFlush && (op.Off < 0 || op.N < 0 || op.Off+op.N > size) {
		return fmt.Errorf("%w: [%d, +%d) beyond %d", ErrOutOfRange, op.Off, op.N, size)
	}
	defer v.ownOp()()
	start := time.Now()
	if h := v.handoff.Load(); h != nil {
		// This node just handed the volume to the node that forwarded to
		// it: let that node's claim reach the map rather than write on
		// under the old claim (its writes in flight would be fenced off).
		v.awaitClaim(ctx, h, v.cfg.HoldIdle)
		v.handoff.CompareAndSwap(h, nil)
	}
	for {
		h := v.holder.Load()
		err := v.routeOnce(ctx, h, op)
		left := rerouteWithin - time.Since(start)
		if v.cfg.Forward == nil || !errors.Is(err, ErrFenced) || ctx.Err() != nil || left <= 0 {
			return err
		}
		v.awaitClaim(ctx, h, left)
	}
}

// ownOp counts a client's op of this node (a write or a flush) as in
// flight until the function it returns is called: while one is, or for
// HoldIdle after the last, this node keeps the claim (see Apply).
func (v *Volume) ownOp() func() {
	v.own.Add(1)
	return func() {
		v.ownAt.Store(time.Now().UnixNano())
		v.own.Add(-1)
	}
}

// rerouteWithin bounds the time during which a client's op that was
// fenced off is sent again. A client gives up on a write only after far
// longer (the kernel's NBD client after 30 s), so an op sent again within
// it is one its client still waits for, not one it has written again
// through another node since; an op that was fenced off later than that
// fails (EIO), as the fence intends.
const rerouteWithin = 2 * time.Second

// routeOnce applies op once, deciding on h, the latest claim known.
func (v *Volume) routeOnce(ctx context.Context, h *claimHolder, op Op) error {
	if v.forwardTo(h) {
		fctx, cancel := v.opCtx(ctx)
		ver, err := v.cfg.Forward.Forward(fctx, h.node, v.key, op)
		cancel()
		switch {
		case err == nil:
			v.sent.Add(1)
			raise(&v.needVer, ver)
			if !op.FUA {
				v.fwd.note(h.node, op.Off>>v.shift, (op.Off+max(op.N, 1)-1)>>v.shift)
			}
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, ErrFenced), errors.Is(err, ErrNoSpace), errors.Is(err, ErrOutOfRange):
			return err
		case !errors.Is(err, ErrNotWriter):
			v.cfg.Logger.Warn("the node that writes the volume did not answer: this node claims it", "volume", v.spec.Name, "holder", h.node, "err", err)
		}
	}
	// Claimed from the claim this decision was made on: if another node
	// claimed the volume since, the claim fails (ErrFenced) and the op is
	// routed again.
	claim := claimFrom{ok: true}
	if h != nil {
		claim.epoch = h.epoch
	}
	return v.apply(ctx, op, claim)
}

// forwardTo reports whether this node's clients' ops go to the holder of
// claim h: another node, while this one does not write the volume.
func (v *Volume) forwardTo(h *claimHolder) bool {
	return v.cfg.Forward != nil && v.cfg.Claims != nil && !v.writer() && h != nil && h.node != v.cfg.Self
}

// claimFrom is what an op applied here may do when this node does not
// write the volume: claim it from the claim of epoch (ok; a client's op),
// or nothing (a forwarded op fails with ErrNotWriter).
type claimFrom struct {
	ok    bool
	epoch uint64
}

// awaitClaim waits, at most d, until the map shows another claim than
// h (the latest known when an op was fenced off), so that the op goes to
// the node that claimed the volume rather than claim it back.
func (v *Volume) awaitClaim(ctx context.Context, h *claimHolder, d time.Duration) {
	deadline := time.Now().Add(d)
	for v.holder.Load() == h && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(2 * time.Millisecond)
	}
}

// apply applies op here; claim says whether it may claim the volume
// first (a client's op) or must fail with ErrNotWriter (a forwarded one).
func (v *Volume) apply(ctx context.Context, op Op, claim claimFrom) error {
	switch op.Kind {
	case OpWrite: // N is len(Data): WriteAt sets it so, h.apply checks forwarded ones
		return v.writeAt(ctx, claim, op.Data, op.Off, op.FUA)
	case OpZero:
		return v.zero(ctx, claim, op.Off, op.N, op.FUA, op.Punch)
	case OpFlush:
		return v.flush(ctx)
	}
	return fmt.Errorf("%w: unknown op %v", ErrOutOfRange, op.Kind)
}

// Apply applies an op another node forwarded (see Forwarder; the handler
// has checked that a write's N is len(Data)). A write or
// zero is applied only while this node holds the claim and one of its
// own clients wrote in the last HoldIdle (or is writing). If they did not,
// it fails with ErrNotWriter, and the sender claims the volume itself; if
// they did but another node has claimed the volume since, with ErrFenced,
// and the sender sends it to that node once the map shows it (rather than
// claim the volume back from it). A flush needs no claim: it makes what
// this node applied durable.
//
// It returns the map version that holds the stale marks this node has
// made (see marksver.go).
//
// The refusal hands the volume over: no forwarded op is in flight here
// then (a refusal waits for none), and this node's clients' next writes
// wait, at most HoldIdle, for the sender's claim to reach the map and
// then go to it. So no write is in flight under the old claim when the
// new one fences it off, which would leave the mirrors that took it to
// be resynchronised in full.
func (v *Volume) Apply(ctx context.Context, op Op) (uint64, error) {
	if op.Kind == OpFlush {
		err := v.flush(ctx)
		return v.marksVer.Load(), err
	}
	v.applyMu.Lock()
	if v.own.Load() == 0 && v.applying.Load() == 0 && time.Since(time.Unix(0, v.ownAt.Load())) > v.cfg.HoldIdle {
		if v.writer() && v.handoff.Load() == nil {
			v.handoff.Store(v.holder.Load())
			v.cfg.Logger.Info("this node's clients stopped writing the volume: handing it over to a node that forwards writes", "volume", v.spec.Name)
		}
		v.applyMu.Unlock()
		return 0, fmt.Errorf("%w: %s", ErrNotWriter, v.spec.Name)
	}
	v.applying.Add(1)
	v.applyMu.Unlock()
	defer v.applying.Add(-1)
	if !v.writer() {
		return 0, fmt.Errorf("%w: %s", ErrFenced, v.spec.Name)
	}
	err := v.apply(ctx, op, claimFrom{})
	if err == nil {
		v.applied.Add(1)
	}
	return v.marksVer.Load(), err
}

// Forwarded returns how many of this node's clients' ops it forwarded to
// the claim's holder, and how many ops forwarded by other nodes it
// applied, since the volume was opened here.
func (v *Volume) Forwarded() (sent, applied int64) {
	return v.sent.Load(), v.applied.Load()
}

// forwarded records the ops a node forwarded without FUA and has not
// flushed: the nodes that applied them, which a Flush asks to flush, and
// their chunks, which it syncs itself when one of those nodes is gone.
// Generations keep what a concurrent op added for the next Flush.
type forwarded struct {
	mu     sync.Mutex
	gen    uint64
	nodes  map[string]uint64
	chunks map[int64]uint64
}

func (f *forwarded) note(node string, first, last int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.nodes == nil {
		f.nodes, f.chunks = map[string]uint64{}, map[int64]uint64{}
	}
	f.gen++
	f.nodes[node] = f.gen
	for c := first; c <= last; c++ {
		f.chunks[c] = f.gen
	}
}

// pending returns copies of the nodes and chunks to flush.
func (f *forwarded) pending() (map[string]uint64, map[int64]uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.nodes) == 0 {
		return nil, nil
	}
	return maps.Clone(f.nodes), maps.Clone(f.chunks)
}

// done forgets what pending returned, unless an op added it again since.
func (f *forwarded) done(nodes map[string]uint64, chunks map[int64]uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, g := range nodes {
		if f.nodes[k] == g {
			delete(f.nodes, k)
		}
	}
	for k, g := range chunks {
		if f.chunks[k] == g {
			delete(f.chunks, k)
		}
	}
}

// flushForwarded makes the ops this node forwarded durable: every node
// that applied one flushes; if one cannot, their chunks are synced here
// on every mirror that is up and in sync, and the Flush fails if one of
// them cannot sync (it may lose the data in a crash).
func (v *Volume) flushForwarded(ctx context.Context) error {
	nodes, chunks := v.fwd.pending()
	if len(nodes) == 0 {
		return nil
	}
	synced := true
	for node := range nodes {
		fctx, cancel := v.opCtx(ctx)
		ver, err := v.cfg.Forward.Forward(fctx, node, v.key, Op{Kind: OpFlush})
		cancel()
		raise(&v.needVer, ver)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			v.cfg.Logger.Warn("the node this node's writes went through did not flush them: syncing their chunks here", "volume", v.spec.Name, "holder", node, "err", err)
			synced = false
		}
	}
	if !synced {
		if err := v.syncChunks(ctx, chunks); err != nil {
			return err
		}
	}
	v.fwd.done(nodes, chunks)
	return nil
}

// syncChunks syncs chunks on every mirror of theirs that is up and in
// sync; it fails if one of them fails, or if a chunk has none.
func (v *Volume) syncChunks(ctx context.Context, chunks map[int64]uint64) error {
	per := map[*mirror][]int64{}
	for c := range chunks {
		n := 0
		for _, m := range v.current(c) {
			if !m.down.Load() && !v.stale.isStale(m.id, c) {
				per[m] = append(per[m], c)
				n++
			}
		}
		if n == 0 {
			return fmt.Errorf("%w: chunk %d of %s, to flush", ErrNoMirror, c, v.spec.Name)
		}
	}
	var errs []error
	for m, cs := range per {
		sctx, cancel := v.opCtx(ctx)
		if err := m.r.Sync(sctx, v.key, cs); err != nil {
			errs = append(errs, fmt.Errorf("%w: syncing on %s: %w", ErrNoMirror, m.id, err))
		}
		cancel()
	}
	return errors.Join(errs...)
}

// Coordinate makes h apply ops forwarded to the volumes open returns (by
// Spec.Key; nil if none is open here), under POST /volume/{vol}/_forward.
func (h *Handler) Coordinate(open func(vol string) *Volume) {
	h.h.open.Store(&open)
}

// apply applies a forwarded op to the volume vol open here and returns
// the map version holding its marks (Volume.Apply).
func (h *handler) apply(ctx context.Context, vol string, op Op) (uint64, error) {
	var v *Volume
	if open := h.open.Load(); open != nil {
		v = (*open)(vol)
	}
	if v == nil {
		return 0, fmt.Errorf("%w: volume %s is not open on this node", ErrNotWriter, vol)
	}
	if op.Kind == OpWrite && int64(len(op.Data)) != op.N {
		return 0, fmt.Errorf("%w: a write of %d bytes with %d bytes of data", ErrOutOfRange, op.N, len(op.Data))
	}
	return v.Apply(ctx, op)
}

// forward serves POST /volume/{vol}/_forward?op=write|zero|flush&off=O&n=N[&fua=1][&punch=1]
// (a write's body is its data), for clients without the chunk stream; the
// answer's headerMarks carries the map version holding the marks.
func (h *handler) forward(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	op := Op{FUA: q.Get("fua") == "1", Punch: q.Get("punch") == "1"}
	switch q.Get("op") {
	case "write":
		op.Kind = OpWrite
	case "zero":
		op.Kind = OpZero
	case "flush":
		op.Kind = OpFlush
	default:
		httpError(w, fmt.Errorf("%w: op %q", ErrOutOfRange, q.Get("op")))
		return
	}
	if op.Kind != OpFlush {
		var err error
		if op.Off, err = strconv.ParseInt(q.Get("off"), 10, 64); err == nil {
			op.N, err = strconv.ParseInt(q.Get("n"), 10, 64)
		}
		if err != nil || op.Off < 0 || op.N < 0 {
			httpError(w, fmt.Errorf("%w: off %q, n %q", ErrOutOfRange, q.Get("off"), q.Get("n")))
			return
		}
	}
	if op.Kind == OpWrite {
		if op.N > MaxTransfer || req.ContentLength != op.N {
			httpError(w, fmt.Errorf("%w: a write of %d bytes with %d bytes of data", ErrOutOfRange, op.N, req.ContentLength))
			return
		}
		b := h.buf(int(op.N))
		defer h.put(b)
		if _, err := io.ReadFull(req.Body, *b); err != nil {
			httpError(w, fmt.Errorf("volume: short body: %w", err))
			return
		}
		op.Data = *b
	}
	ver, err := h.apply(req.Context(), req.PathValue("vol"), op)
	if err != nil {
		httpError(w, err)
		return
	}
	w.Header().Set(headerMarks, strconv.FormatUint(ver, 10))
}

// headerMarks carries, in the answer to a forwarded op, the map version
// holding the stale marks of the node that applied it.
const headerMarks = "X-Slipstream-Marks-Version"

// Forward sends op to the volume vol open on the client's node (see
// Forwarder), over a stream connection of its own: an op the node takes
// long to apply (it waits for a mirror) does not hold up, or time out,
// the chunk calls of the connections the node's replica is reached by.
// It returns the map version holding the node's stale marks (0 from a
// node that does not tell).
func (c *Client) Forward(ctx context.Context, vol string, op Op) (uint64, error) {
	if c.fwd != nil {
		r := &streamReq{op: opForward, vol: vol, chunk: int64(op.Kind), off: op.Off, n: op.N}
		if op.FUA {
			r.flags |= flagSync
		}
		if op.Punch {
			r.flags |= flagPunch
		}
		if op.Kind == OpWrite {
			r.payload = op.Data
		}
		sc, err := c.fwd.conn(ctx, len(op.Data))
		if err != nil {
			return 0, err
		}
		var ver [8]byte
		err = sc.do(ctx, r, ver[:])
		return binary.BigEndian.Uint64(ver[:]), err
	}
	q := "op=" + op.Kind.String() + "&off=" + strconv.FormatInt(op.Off, 10) + "&n=" + strconv.FormatInt(op.N, 10)
	if op.FUA {
		q += "&fua=1"
	}
	if op.Punch {
		q += "&punch=1"
	}
	var body []byte
	if op.Kind == OpWrite {
		body = op.Data
	}
	resp, err := c.send(ctx, http.MethodPost, c.url(vol, -1, "/_forward", q), body)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	ver, _ := strconv.ParseUint(resp.Header.Get(headerMarks), 10, 64)
	return ver, nil
}
