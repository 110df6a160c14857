package nbd_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/volume/nbd"
)

const (
	optReplyMagic = 0x0003e889045565a9
	repAck        = 1
	repServer     = 2
	repInfo       = 3
	repMetaCtx    = 4
	repErrUnsup   = 1<<31 | 1
	repErrInvalid = 1<<31 | 3
	repErrUnknown = 1<<31 | 6
	repErrTooBig  = 1<<31 | 9
)

// rawClient speaks the protocol byte by byte, to test what real clients
// never send.
type rawClient struct {
	t *testing.T
	c net.Conn
}

func dialRaw(t *testing.T, addr string) *rawClient {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	r := &rawClient{t: t, c: c}
	hello := r.read(18)
	if binary.BigEndian.Uint64(hello[0:8]) != 0x4e42444d41474943 || binary.BigEndian.Uint64(hello[8:16]) != 0x49484156454F5054 {
		t.Fatalf("bad greeting %x", hello)
	}
	if f := binary.BigEndian.Uint16(hello[16:]); f != 3 {
		t.Fatalf("handshake flags %#x, want fixed newstyle + no zeroes", f)
	}
	r.write(binary.BigEndian.AppendUint32(nil, 3))
	return r
}

func (r *rawClient) read(n int) []byte {
	r.t.Helper()
	b := make([]byte, n)
	if _, err := io.ReadFull(r.c, b); err != nil {
		r.t.Fatalf("read %d: %v", n, err)
	}
	return b
}

func (r *rawClient) write(b []byte) {
	r.t.Helper()
	if _, err := r.c.Write(b); err != nil {
		r.t.Fatal(err)
	}
}

// optReply reads one option reply: (option, type, data).
func (r *rawClient) optReply() (uint32, uint32, []byte) {
	r.t.Helper()
	h := r.read(20)
	if binary.BigEndian.Uint64(h[0:8]) != optReplyMagic {
		r.t.Fatalf("bad option reply magic %x", h)
	}
	return binary.BigEndian.Uint32(h[8:12]), binary.BigEndian.Uint32(h[12:16]), r.read(int(binary.BigEndian.Uint32(h[16:20])))
}

// goExport negotiates structured replies (optionally) and NBD_OPT_GO.
func (r *rawClient) goExport(name string, structured bool) {
	r.t.Helper()
	if structured {
		r.write(nbd.AppendOption(nil, nbd.OptStructuredReply, nil))
		if _, typ, _ := r.optReply(); typ != repAck {
			r.t.Fatalf("structured reply: %#x", typ)
		}
	}
	r.write(nbd.AppendOption(nil, nbd.OptGo, nbd.AppendInfoRequest(nil, nbd.InfoRequest{Name: name})))
	for {
		_, typ, _ := r.optReply()
		if typ == repAck {
			return
		}
		if typ != repInfo {
			r.t.Fatalf("GO reply %#x", typ)
		}
	}
}

// simpleReply reads a simple reply and returns (errno, cookie).
func (r *rawClient) simpleReply() (uint32, uint64) {
	r.t.Helper()
	h := r.read(16)
	if binary.BigEndian.Uint32(h[0:4]) != 0x67446698 {
		r.t.Fatalf("bad simple reply magic %x", h)
	}
	return binary.BigEndian.Uint32(h[4:8]), binary.BigEndian.Uint64(h[8:16])
}

func TestOptions(t *testing.T) {
	addr := serveTCP(t, nbd.Map{"a": newMem(1 << 20), "b": newMem(4096)})
	r := dialRaw(t, addr)

	r.write(nbd.AppendOption(nil, 42, []byte("junk")))
	if opt, typ, _ := r.optReply(); opt != 42 || typ != repErrUnsup {
		t.Errorf("unknown option: opt %d type %#x, want ERR_UNSUP", opt, typ)
	}
	r.write(nbd.AppendOption(nil, nbd.OptStartTLS, nil))
	if _, typ, _ := r.optReply(); typ != repErrUnsup {
		t.Errorf("STARTTLS: %#x", typ)
	}
	r.write(nbd.AppendOption(nil, nbd.OptList, nil))
	var names []string
	for {
		_, typ, d := r.optReply()
		if typ == repAck {
			break
		}
		if typ != repServer {
			t.Fatalf("LIST reply %#x", typ)
		}
		names = append(names, string(d[4:4+binary.BigEndian.Uint32(d)]))
	}
	if len(names) != 2 || names[0] != "a" || names[1] != "b" {
		t.Errorf("LIST = %q", names)
	}
	r.write(nbd.AppendOption(nil, nbd.OptList, []byte{1}))
	if _, typ, _ := r.optReply(); typ != repErrInvalid {
		t.Errorf("LIST with data: %#x", typ)
	}
	r.write(nbd.AppendOption(nil, nbd.OptInfo, []byte{0, 0, 0, 9, 'x'}))
	if _, typ, _ := r.optReply(); typ != repErrInvalid {
		t.Errorf("malformed INFO: %#x", typ)
	}
	r.write(nbd.AppendOption(nil, nbd.OptInfo, nbd.AppendInfoRequest(nil, nbd.InfoRequest{Name: "nope"})))
	if _, typ, _ := r.optReply(); typ != repErrUnknown {
		t.Errorf("INFO unknown export: %#x", typ)
	}
	r.write(nbd.AppendOption(nil, nbd.OptStructuredReply, []byte{1}))
	if _, typ, _ := r.optReply(); typ != repErrInvalid {
		t.Errorf("STRUCTURED_REPLY with data: %#x", typ)
	}
	big := make([]byte, 70<<10)
	r.write(nbd.AppendOption(nil, nbd.OptGo, big))
	if _, typ, _ := r.optReply(); typ != repErrTooBig {
		t.Errorf("oversized option: %#x", typ)
	}
	// INFO on a good export: size, flags and block sizes.
	r.write(nbd.AppendOption(nil, nbd.OptInfo, nbd.AppendInfoRequest(nil, nbd.InfoRequest{Name: "b", Infos: []uint16{1, 3}})))
	var gotSize, gotBlock, gotName bool
	for {
		_, typ, d := r.optReply()
		if typ == repAck {
			break
		}
		switch binary.BigEndian.Uint16(d) {
		case 0:
			gotSize = binary.BigEndian.Uint64(d[2:10]) == 4096
		case 1:
			gotName = string(d[2:]) == "b"
		case 3:
			gotBlock = binary.BigEndian.Uint32(d[2:]) == 1 && binary.BigEndian.Uint32(d[10:]) == 32<<20
		}
	}
	if !gotSize || !gotBlock || !gotName {
		t.Errorf("INFO replies: size %v block %v name %v", gotSize, gotBlock, gotName)
	}
	r.write(nbd.AppendOption(nil, nbd.OptAbort, nil))
	if _, typ, _ := r.optReply(); typ != repAck {
		t.Errorf("ABORT: %#x", typ)
	}
}

func TestExportNameOption(t *testing.T) {
	addr := serveTCP(t, nbd.Map{"a": newMem(8192)})
	r := dialRaw(t, addr)
	r.write(nbd.AppendOption(nil, nbd.OptExportName, []byte("a")))
	h := r.read(10)
	if binary.BigEndian.Uint64(h) != 8192 {
		t.Fatalf("size %x", h)
	}
	r.write(nbd.AppendRequest(nil, nbd.Request{Type: nbd.CmdWrite, Cookie: 7, Offset: 4096, Length: 3}))
	r.write([]byte("abc"))
	if e, c := r.simpleReply(); e != 0 || c != 7 {
		t.Fatalf("write: errno %d cookie %d", e, c)
	}
	r.write(nbd.AppendRequest(nil, nbd.Request{Type: nbd.CmdRead, Cookie: 8, Offset: 4095, Length: 5}))
	if e, c := r.simpleReply(); e != 0 || c != 8 {
		t.Fatalf("read: errno %d cookie %d", e, c)
	}
	if got := r.read(5); !bytes.Equal(got, []byte("\x00abc\x00")) {
		t.Fatalf("read back %q", got)
	}
	// An unknown export name closes the connection; the server lives on.
	r2 := dialRaw(t, addr)
	r2.write(nbd.AppendOption(nil, nbd.OptExportName, []byte("zz")))
	if _, err := r2.c.Read(make([]byte, 1)); err == nil {
		t.Fatal("unknown export via EXPORT_NAME did not close the connection")
	}
	dialRaw(t, addr)
}

func TestBadRequests(t *testing.T) {
	dev := newMem(1 << 20)
	addr := serveTCP(t, nbd.Map{"a": dev})
	for _, structured := range []bool{false, true} {
		r := dialRaw(t, addr)
		r.goExport("a", structured)
		tests := []struct {
			name  string
			req   nbd.Request
			data  int
			errno uint32
		}{
			{"write past end", nbd.Request{Type: nbd.CmdWrite, Offset: 1<<20 - 2, Length: 4}, 4, nbd.ENOSPC},
			{"write offset overflow", nbd.Request{Type: nbd.CmdWrite, Offset: 1<<64 - 2, Length: 4}, 4, nbd.ENOSPC},
			{"oversized write", nbd.Request{Type: nbd.CmdWrite, Length: 33 << 20}, 33 << 20, nbd.EINVAL},
			{"trim past end", nbd.Request{Type: nbd.CmdTrim, Offset: 1 << 20, Length: 1}, 0, nbd.EINVAL},
			{"zeroes past end", nbd.Request{Type: nbd.CmdWriteZeroes, Offset: 1 << 19, Length: 1 << 20}, 0, nbd.ENOSPC},
			{"cache past end", nbd.Request{Type: nbd.CmdCache, Offset: 1 << 21, Length: 1}, 0, nbd.EINVAL},
			{"unknown command", nbd.Request{Type: 99, Length: 0}, 0, nbd.EINVAL},
			{"block status not negotiated", nbd.Request{Type: nbd.CmdBlockStatus, Length: 4096}, 0, nbd.EINVAL},
			{"unknown flag", nbd.Request{Type: nbd.CmdFlush, Flags: 1 << 12}, 0, nbd.EINVAL},
			{"flush", nbd.Request{Type: nbd.CmdFlush}, 0, 0},
			{"fua write", nbd.Request{Type: nbd.CmdWrite, Flags: nbd.CmdFlagFUA, Offset: 10, Length: 10}, 10, 0},
			{"zeroes no hole", nbd.Request{Type: nbd.CmdWriteZeroes, Flags: nbd.CmdFlagNoHole, Offset: 0, Length: 4096}, 0, 0},
		}
		for i, tt := range tests {
			tt.req.Cookie = uint64(1000 + i)
			r.write(nbd.AppendRequest(nil, tt.req))
			if tt.data > 0 {
				r.write(make([]byte, tt.data))
			}
			e, c := r.simpleReply()
			if e != tt.errno || c != tt.req.Cookie {
				t.Errorf("structured=%v %s: errno %d cookie %d, want %d %d", structured, tt.name, e, c, tt.errno, tt.req.Cookie)
			}
		}
		// Reads past the end or too large get an error (structured: an error chunk).
		for _, req := range []nbd.Request{
			{Type: nbd.CmdRead, Cookie: 5, Offset: 1 << 20, Length: 1},
			{Type: nbd.CmdRead, Cookie: 6, Length: 33 << 20},
		} {
			r.write(nbd.AppendRequest(nil, req))
			if !structured {
				if e, c := r.simpleReply(); e != nbd.EINVAL || c != req.Cookie {
					t.Errorf("bad read: errno %d cookie %d", e, c)
				}
				continue
			}
			h := r.read(20)
			typ, cookie := binary.BigEndian.Uint16(h[6:8]), binary.BigEndian.Uint64(h[8:16])
			body := r.read(int(binary.BigEndian.Uint32(h[16:20])))
			if typ != 1<<15|1 || cookie != req.Cookie || binary.BigEndian.Uint32(body) != nbd.EINVAL || h[5]&1 == 0 {
				t.Errorf("bad structured read reply: %x %x", h, body)
			}
		}
		// The connection still works after all that.
		r.write(nbd.AppendRequest(nil, nbd.Request{Type: nbd.CmdFlush, Cookie: 77}))
		if e, c := r.simpleReply(); e != 0 || c != 77 {
			t.Errorf("flush after errors: %d %d", e, c)
		}
		// A bad magic ends this connection only.
		r.write(make([]byte, 28))
		if _, err := r.c.Read(make([]byte, 1)); err == nil {
			t.Error("bad request magic did not close the connection")
		}
	}
	dev.mu.Lock()
	flushes := dev.flushes
	dev.mu.Unlock()
	if flushes < 2 {
		t.Errorf("device saw %d flushes, want one per flush request on each connection", flushes)
	}
}

// slowDev delays reads of offset 0 so that later requests overtake them.
type slowDev struct{ *memDevice }

func (s slowDev) ReadAt(ctx context.Context, p []byte, off int64) error {
	if off == 0 {
		time.Sleep(100 * time.Millisecond)
	}
	return s.memDevice.ReadAt(ctx, p, off)
}

// TestPipelinedOutOfOrder sends many requests before reading any reply and
// checks that every one is answered once, the slow one last.
func TestPipelinedOutOfOrder(t *testing.T) {
	m := newMem(1 << 20)
	for i := range m.b {
		m.b[i] = byte(i / 4096)
	}
	addr := serveTCP(t, nbd.Map{"a": slowDev{m}})
	r := dialRaw(t, addr)
	r.goExport("a", true)
	const n = 64
	var reqs []byte
	for i := 0; i < n; i++ {
		reqs = nbd.AppendRequest(reqs, nbd.Request{Type: nbd.CmdRead, Cookie: uint64(i), Offset: uint64(i) * 4096, Length: 4096})
	}
	r.write(reqs)
	seen := map[uint64]bool{}
	var order []uint64
	for i := 0; i < n; i++ {
		h := r.read(20)
		cookie := binary.BigEndian.Uint64(h[8:16])
		body := r.read(int(binary.BigEndian.Uint32(h[16:20])))
		if off := binary.BigEndian.Uint64(body); off != cookie*4096 || body[8] != byte(cookie) || body[len(body)-1] != byte(cookie) {
			t.Fatalf("reply for cookie %d carries offset %d data %d", cookie, off, body[8])
		}
		if seen[cookie] {
			t.Fatalf("cookie %d answered twice", cookie)
		}
		seen[cookie] = true
		order = append(order, cookie)
	}
	if order[n-1] != 0 {
		t.Errorf("the slow request was not answered last: order %v", order)
	}
}

func TestServerCloseEndsConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := nbd.NewServer(nbd.Config{Exports: nbd.Map{"a": newMem(4096)}})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(context.Background(), ln) }()
	r := dialRaw(t, ln.Addr().String())
	r.goExport("a", false)
	srv.Close()
	if err := <-done; err != nbd.ErrServerClosed {
		t.Errorf("Serve returned %v", err)
	}
	if _, err := r.c.Read(make([]byte, 1)); err == nil {
		t.Error("connection survived Close")
	}
}

// metaContext sends a LIST or SET_META_CONTEXT option and returns the
// contexts replied (id and name) and the final reply type.
func (r *rawClient) metaContext(code uint32, name string, queries ...string) (ids []uint32, names []string, final uint32) {
	r.t.Helper()
	r.write(nbd.AppendOption(nil, code, nbd.AppendMetaContextRequest(nil, nbd.MetaContextRequest{Name: name, Queries: queries})))
	for {
		_, typ, d := r.optReply()
		if typ != repMetaCtx {
			return ids, names, typ
		}
		ids = append(ids, binary.BigEndian.Uint32(d[0:4]))
		names = append(names, string(d[4:]))
	}
}

// structuredReply reads one structured reply chunk: (flags, type, cookie, payload).
func (r *rawClient) structuredReply() (uint16, uint16, uint64, []byte) {
	r.t.Helper()
	h := r.read(20)
	if binary.BigEndian.Uint32(h[0:4]) != 0x668e33ef {
		r.t.Fatalf("bad structured reply magic %x", h)
	}
	return binary.BigEndian.Uint16(h[4:6]), binary.BigEndian.Uint16(h[6:8]), binary.BigEndian.Uint64(h[8:16]),
		r.read(int(binary.BigEndian.Uint32(h[16:20])))
}

func TestMetaContextAndBlockStatus(t *testing.T) {
	d := newExtentsMem(1<<20, []nbd.Extent{{Length: 4096}, {Length: 1<<20 - 4096, Hole: true, Zero: true}})
	addr := serveTCP(t, nbd.Map{"a": d, "plain": newMem(1 << 20)})

	r := dialRaw(t, addr)
	// SET before structured replies is invalid; LIST is fine.
	if _, _, final := r.metaContext(nbd.OptSetMetaContext, "a", nbd.MetaBaseAllocation); final != repErrInvalid {
		t.Errorf("SET_META_CONTEXT without structured replies: %#x, want ERR_INVALID", final)
	}
	for _, queries := range [][]string{nil, {"base:"}, {nbd.MetaBaseAllocation}} {
		ids, names, final := r.metaContext(nbd.OptListMetaContext, "a", queries...)
		if final != repAck || len(names) != 1 || names[0] != nbd.MetaBaseAllocation || ids[0] != 0 {
			t.Errorf("LIST_META_CONTEXT %q: %v %v %#x", queries, ids, names, final)
		}
	}
	if _, names, final := r.metaContext(nbd.OptListMetaContext, "a", "qemu:dirty-bitmap:x"); final != repAck || len(names) != 0 {
		t.Errorf("LIST of an unknown context: %v %#x", names, final)
	}
	if _, _, final := r.metaContext(nbd.OptListMetaContext, "nope"); final != repErrUnknown {
		t.Errorf("LIST for an unknown export: %#x", final)
	}
	r.write(nbd.AppendOption(nil, nbd.OptListMetaContext, []byte{0, 0, 0, 9}))
	if _, typ, _ := r.optReply(); typ != repErrInvalid {
		t.Errorf("malformed meta context request: %#x", typ)
	}
	r.write(nbd.AppendOption(nil, nbd.OptStructuredReply, nil))
	if _, typ, _ := r.optReply(); typ != repAck {
		t.Fatalf("structured reply: %#x", typ)
	}
	ids, names, final := r.metaContext(nbd.OptSetMetaContext, "a", "qemu:dirty-bitmap:x", nbd.MetaBaseAllocation)
	if final != repAck || len(ids) != 1 || ids[0] == 0 || names[0] != nbd.MetaBaseAllocation {
		t.Fatalf("SET_META_CONTEXT: %v %v %#x", ids, names, final)
	}
	r.goExport("a", false)

	status := func(cookie uint64, flags uint16, off uint64, n uint32) (uint16, []uint32) {
		t.Helper()
		r.write(nbd.AppendRequest(nil, nbd.Request{Type: nbd.CmdBlockStatus, Flags: flags, Cookie: cookie, Offset: off, Length: n}))
		rf, typ, c, p := r.structuredReply()
		if c != cookie || rf&1 == 0 {
			t.Fatalf("block status reply: cookie %d flags %#x", c, rf)
		}
		if typ != 5 {
			return typ, nil
		}
		if binary.BigEndian.Uint32(p[0:4]) != ids[0] || (len(p)-4)%8 != 0 {
			t.Fatalf("block status payload %x", p)
		}
		var desc []uint32
		for p = p[4:]; len(p) > 0; p = p[8:] {
			desc = append(desc, binary.BigEndian.Uint32(p[0:4]), binary.BigEndian.Uint32(p[4:8]))
		}
		return typ, desc
	}
	for _, tt := range []struct {
		name  string
		flags uint16
		off   uint64
		n     uint32
		want  []uint32 // length, status pairs
	}{
		{"whole device", 0, 0, 1 << 20, []uint32{4096, 0, 1<<20 - 4096, 3}},
		{"clipped to the request", 0, 0, 8192, []uint32{4096, 0, 4096, 3}},
		{"req one", nbd.CmdFlagReqOne, 0, 1 << 20, []uint32{4096, 0}},
		{"from the middle", 0, 2048, 4096, []uint32{2048, 0, 2048, 3}},
	} {
		if typ, got := status(7, tt.flags, tt.off, tt.n); typ != 5 || !slices.Equal(got, tt.want) {
			t.Errorf("%s: type %d descriptors %v, want %v", tt.name, typ, got, tt.want)
		}
	}
	for _, bad := range []nbd.Request{{Offset: 1 << 20, Length: 1}, {Offset: 0, Length: 0}} {
		if typ, _ := status(8, 0, bad.Offset, bad.Length); typ != 1<<15|1 {
			t.Errorf("block status %+v: reply type %d, want an error chunk", bad, typ)
		}
	}

	// SET for one export then GO to another: no context on this connection.
	r2 := dialRaw(t, addr)
	r2.write(nbd.AppendOption(nil, nbd.OptStructuredReply, nil))
	r2.optReply()
	r2.metaContext(nbd.OptSetMetaContext, "a", nbd.MetaBaseAllocation)
	r2.goExport("plain", false)
	r2.write(nbd.AppendRequest(nil, nbd.Request{Type: nbd.CmdBlockStatus, Cookie: 9, Length: 4096}))
	if e, c := r2.simpleReply(); e != nbd.EINVAL || c != 9 {
		t.Errorf("block status without a context for the export: errno %d cookie %d", e, c)
	}
}

// extentsMem is a memory device that reports fixed extents.
type extentsMem struct {
	*memDevice
	es []nbd.Extent
}

func newExtentsMem(size int, es []nbd.Extent) *extentsMem { return &extentsMem{newMem(size), es} }

func (d *extentsMem) Extents(_ context.Context, off, n int64) ([]nbd.Extent, error) {
	var out []nbd.Extent
	pos := int64(0)
	for _, e := range d.es {
		lo, hi := max(pos, off), min(pos+e.Length, off+n)
		if lo < hi {
			out = nbd.AppendExtent(out, nbd.Extent{Length: hi - lo, Hole: e.Hole, Zero: e.Zero})
		}
		pos += e.Length
	}
	return out, nil
}
