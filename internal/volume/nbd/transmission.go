package nbd

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"math/bits"
	"net"
	"sync"
	"time"

	"github.com/slipstream-io/slipstream/internal/combine"
)

// conn is one connection in the transmission phase. A reader goroutine
// parses requests and starts a handler per request (bounded by slots); the
// handlers queue their replies, and whichever handler finds the writer idle
// writes out everything queued with one writev. The bytes of replies not
// written yet are bounded (reserve), and each write has a deadline, so a
// client that stops reading its replies holds a bounded amount of memory
// and is disconnected after Config.ReplyTimeout.
type conn struct {
	s          *Server
	c          net.Conn
	br         *bufio.Reader
	dev        Device
	size       int64
	structured bool
	alloc      bool // base:allocation negotiated: BLOCK_STATUS allowed
	work       chan work
	workers    int
	slots      chan struct{} // one per request dispatched and not handled yet
	wg         sync.WaitGroup

	out    combine.Queue[reply] // flushed by writeReplies
	failed bool                 // writeReplies' own state
	bufs   net.Buffers
	// bw gathers a batch of replies into few TLS records on a TLS
	// connection, which has no writev (nil otherwise).
	bw *bufio.Writer

	// The bytes of replies reserved by handlers and not written yet are
	// bounded by Config.MaxReplyBytes (see reserve).
	rmu     sync.Mutex
	room    sync.Cond // signalled when reserved bytes are released
	held    int64     // bytes reserved
	waiting int       // handlers waiting in reserve
	dead    bool      // the connection failed: reserve no longer waits
}

// reserve takes n bytes of the connection's reply budget, waiting while
// they do not fit (a reply larger than the budget waits until nothing else
// is held). It does not wait once the connection failed: the reply is
// then dropped by writeReplies.
func (c *conn) reserve(n int64) {
	c.rmu.Lock()
	for !c.dead && c.held > 0 && c.held+n > c.s.cfg.MaxReplyBytes {
		c.waiting++
		c.room.Wait()
		c.waiting--
	}
	c.held += n
	c.rmu.Unlock()
}

// release gives back n bytes of the reply budget; with dead the
// connection has failed and no waiter waits any longer.
func (c *conn) release(n int64, dead bool) {
	c.rmu.Lock()
	c.held -= n
	c.dead = c.dead || dead
	if c.waiting > 0 {
		c.room.Broadcast()
	}
	c.rmu.Unlock()
}

// work is one request handed to a worker.
type work struct {
	req     Request
	payload *[]byte
}

// dispatch hands w, which holds a slot, to an idle worker, starting a new
// one while fewer than MaxInFlight exist; otherwise it waits for a worker
// (one that gave back its slot and is about to take work). Workers live as
// long as the connection, so their stacks stay grown.
func (c *conn) dispatch(ctx context.Context, w work) {
	select {
	case c.work <- w:
		return
	default:
	}
	if c.workers < c.s.cfg.MaxInFlight {
		c.workers++
		c.wg.Add(1)
		go c.worker(ctx, w)
		return
	}
	c.work <- w
}

func (c *conn) worker(ctx context.Context, w work) {
	defer c.wg.Done()
	for {
		if obs := c.s.cfg.Observe; obs != nil {
			start := time.Now()
			errno := c.handle(ctx, w.req, w.payload)
			obs(w.req.Type, w.req.Length, time.Since(start), errno)
		} else {
			c.handle(ctx, w.req, w.payload)
		}
		<-c.slots
		var ok bool
		if w, ok = <-c.work; !ok {
			return
		}
	}
}

// reply is one queued reply: a header and an optional payload that goes
// back to the pool once written.
type reply struct {
	hdr  [32]byte
	n    int
	data []byte
	pool *[]byte
	cost int64 // bytes reserved for it (reserve)
}

func (c *conn) serve(ctx context.Context) error {
	c.work = make(chan work)
	c.slots = make(chan struct{}, c.s.cfg.MaxInFlight)
	defer func() {
		close(c.work)
		c.wg.Wait()
	}()
	var hdr [requestHeaderLen]byte
	for {
		if _, err := io.ReadFull(c.br, hdr[:]); err != nil {
			return err
		}
		req, err := ParseRequest(hdr[:])
		if err != nil {
			// The stream cannot be resynchronised after a bad magic.
			return err
		}
		if req.Type == CmdDisc {
			return nil
		}
		if req.Type == CmdWrite && req.Length > c.s.cfg.MaxRequest {
			if _, err := io.CopyN(io.Discard, c.br, int64(req.Length)); err != nil {
				return err
			}
			errno := c.sendError(req, EINVAL)
			if obs := c.s.cfg.Observe; obs != nil {
				obs(req.Type, req.Length, 0, errno)
			}
			continue
		}
		// The request takes a slot before its payload takes room: a
		// payload held while every worker is busy would wait for one of
		// them, while their replies wait for the room it holds.
		select {
		case c.slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		var payload *[]byte
		if req.Type == CmdWrite {
			// Write payloads held in memory count against the same budget
			// as unsent replies: a slow device stops the reading of
			// requests instead of growing the connection's memory.
			c.reserve(int64(req.Length))
			payload = c.s.pool.get(int(req.Length))
			if _, err := io.ReadFull(c.br, *payload); err != nil {
				c.s.pool.put(payload)
				c.release(int64(req.Length), false)
				<-c.slots
				return err
			}
		}
		c.dispatch(ctx, work{req, payload})
	}
}

// allowedFlags are the command flags each command takes: FUA on every
// one, NO_HOLE on WRITE_ZEROES, DF on READ (advertised with structured
// replies), REQ_ONE on BLOCK_STATUS. FAST_ZERO is not advertised, so no
// command takes it.
func allowedFlags(cmd uint16) uint16 {
	f := uint16(CmdFlagFUA)
	switch cmd {
	case CmdWriteZeroes:
		f |= CmdFlagNoHole
	case CmdRead:
		f |= CmdFlagDF
	case CmdBlockStatus:
		f |= CmdFlagReqOne
	}
	return f
}

func (c *conn) handle(ctx context.Context, req Request, payload *[]byte) (errno uint32) {
	// A write's payload goes back, with its share of the budget, before its
	// reply reserves room: replies waiting for room held by payloads
	// whose replies wait would never move.
	free := func() {
		if payload != nil {
			c.s.pool.put(payload)
			c.release(int64(req.Length), false)
			payload = nil
		}
	}
	defer free()
	if req.Flags&^allowedFlags(req.Type) != 0 || req.Flags&CmdFlagDF != 0 && !c.structured {
		free()
		return c.sendError(req, EINVAL)
	}
	off, n := int64(req.Offset), int64(req.Length)
	inRange := req.Offset <= uint64(c.size) && n <= c.size-off
	fua := req.Flags&CmdFlagFUA != 0
	switch req.Type {
	case CmdRead:
		if !inRange || req.Length > c.s.cfg.MaxRequest {
			return c.sendError(req, EINVAL)
		}
		cost := int64(len(reply{}.hdr)) + n
		c.reserve(cost)
		buf := c.s.pool.get(int(n))
		if err := c.dev.ReadAt(ctx, *buf, off); err != nil {
			c.s.pool.put(buf)
			c.release(cost, false)
			return c.sendError(req, errnoOf(err))
		}
		c.sendRead(req, buf, cost)
		return 0
	case CmdWrite:
		if !inRange {
			free()
			return c.sendError(req, ENOSPC)
		}
		err := c.dev.WriteAt(ctx, *payload, off, fua)
		free()
		return c.done(req, err)
	case CmdFlush:
		return c.done(req, c.dev.Flush(ctx))
	case CmdTrim:
		if !inRange {
			return c.sendError(req, EINVAL)
		}
		err := c.dev.Trim(ctx, off, n)
		if err == nil && fua {
			err = c.dev.Flush(ctx)
		}
		return c.done(req, err)
	case CmdWriteZeroes:
		if !inRange {
			return c.sendError(req, ENOSPC)
		}
		return c.done(req, c.dev.WriteZeroes(ctx, off, n, fua, req.Flags&CmdFlagNoHole != 0))
	case CmdCache:
		if !inRange {
			return c.sendError(req, EINVAL)
		}
		return c.done(req, nil)
	case CmdBlockStatus:
		if !c.alloc || !inRange || n == 0 {
			return c.sendError(req, EINVAL)
		}
		return c.blockStatus(ctx, req, off, n)
	default:
		return c.sendError(req, EINVAL)
	}
}

// done answers req: success, or the error err maps to (returned).
func (c *conn) done(req Request, err error) uint32 {
	if err != nil {
		return c.sendError(req, errnoOf(err))
	}
	var r reply
	putSimpleReply(r.hdr[:], 0, req.Cookie)
	r.n = simpleReplyHeaderLen
	c.send(r)
	return 0
}

// sendError answers req with errno, and returns it.
func (c *conn) sendError(req Request, errno uint32) uint32 {
	var r reply
	if c.structured && (req.Type == CmdRead || req.Type == CmdBlockStatus && c.alloc) {
		putStructuredHeader(r.hdr[:], replyFlagDone, replyTypeError, req.Cookie, 6)
		binary.BigEndian.PutUint32(r.hdr[20:24], errno)
		binary.BigEndian.PutUint16(r.hdr[24:26], 0)
		r.n = 26
	} else {
		putSimpleReply(r.hdr[:], errno, req.Cookie)
		r.n = simpleReplyHeaderLen
	}
	c.send(r)
	return errno
}

// blockStatus answers NBD_CMD_BLOCK_STATUS in the base:allocation
// context with the device's extents, or one allocated extent for devices
// that do not know theirs.
func (c *conn) blockStatus(ctx context.Context, req Request, off, n int64) uint32 {
	es := []Extent{{Length: n}}
	if d, ok := c.dev.(ExtentsDevice); ok {
		got, err := d.Extents(ctx, off, n)
		if err != nil {
			return c.sendError(req, errnoOf(err))
		}
		es = got
	}
	data := binary.BigEndian.AppendUint32(make([]byte, 0, 4+8*len(es)), metaAllocID)
	total := int64(0)
	for _, e := range es {
		if e.Length <= 0 || total >= n {
			break
		}
		l := min(e.Length, n-total)
		var st uint32
		if e.Hole {
			st |= stateHole
		}
		if e.Zero {
			st |= stateZero
		}
		data = binary.BigEndian.AppendUint32(data, uint32(l))
		data = binary.BigEndian.AppendUint32(data, st)
		total += l
		if req.Flags&CmdFlagReqOne != 0 {
			break
		}
	}
	if total == 0 { // a device that described nothing: data, the safe answer
		data = binary.BigEndian.AppendUint32(data, uint32(n))
		data = binary.BigEndian.AppendUint32(data, 0)
	}
	r := reply{data: data}
	putStructuredHeader(r.hdr[:], replyFlagDone, replyTypeBlockStatus, req.Cookie, uint32(len(data)))
	r.n = structuredHeaderLen
	c.send(r)
	return 0
}

func (c *conn) sendRead(req Request, buf *[]byte, cost int64) {
	r := reply{data: *buf, pool: buf, cost: cost}
	switch {
	case c.structured && len(*buf) == 0:
		// A data chunk must carry at least one byte: an empty read is
		// answered with the final NONE chunk.
		putStructuredHeader(r.hdr[:], replyFlagDone, replyTypeNone, req.Cookie, 0)
		r.n = structuredHeaderLen
	case c.structured:
		putStructuredHeader(r.hdr[:], replyFlagDone, replyTypeOffsetData, req.Cookie, uint32(8+len(*buf)))
		binary.BigEndian.PutUint64(r.hdr[20:28], req.Offset)
		r.n = 28
	default:
		putSimpleReply(r.hdr[:], 0, req.Cookie)
		r.n = simpleReplyHeaderLen
	}
	c.send(r)
}

// send queues r; if no other goroutine is writing, this one writes out the
// queue (its own reply and any that arrive meanwhile) in batches. A reply
// that has no room reserved reserves it first.
func (c *conn) send(r reply) {
	if r.cost == 0 {
		r.cost = int64(r.n + len(r.data))
		c.reserve(r.cost)
	}
	c.out.Add(r)
}

// writeReplies writes a batch of replies with one writev (the out queue's
// Flush), within Config.ReplyTimeout, and returns their buffers to the
// pool and their bytes to the reply budget.
func (c *conn) writeReplies(batch []reply) {
	if !c.failed {
		_ = c.c.SetWriteDeadline(time.Now().Add(c.s.cfg.ReplyTimeout))
		c.bufs = c.bufs[:0]
		for i := range batch {
			c.bufs = append(c.bufs, batch[i].hdr[:batch[i].n])
			if len(batch[i].data) > 0 {
				c.bufs = append(c.bufs, batch[i].data)
			}
		}
		bufs := c.bufs
		var err error
		if c.bw != nil {
			if _, err = bufs.WriteTo(c.bw); err == nil {
				err = c.bw.Flush()
			}
		} else {
			_, err = bufs.WriteTo(c.c)
		}
		if err != nil {
			c.failed = true
			// Unblock the reader; the connection is lost.
			_ = c.c.Close()
		}
	}
	cost := int64(0)
	for i := range batch {
		if batch[i].pool != nil {
			c.s.pool.put(batch[i].pool)
		}
		cost += batch[i].cost
	}
	c.release(cost, c.failed)
}

// bufPool hands out byte slices in power-of-two size classes.
type bufPool struct {
	classes [27]sync.Pool // 1 B .. 64 MiB
}

func (p *bufPool) get(n int) *[]byte {
	if n == 0 {
		b := []byte{}
		return &b
	}
	cls := bits.Len(uint(n - 1))
	if cls >= len(p.classes) {
		b := make([]byte, n)
		return &b
	}
	if v := p.classes[cls].Get(); v != nil {
		b := v.(*[]byte)
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<cls)
	return &b
}

func (p *bufPool) put(b *[]byte) {
	c := cap(*b)
	if c == 0 || c&(c-1) != 0 {
		return
	}
	cls := bits.Len(uint(c - 1))
	if cls < len(p.classes) {
		p.classes[cls].Put(b)
	}
}
