package nbd_test

// Tests checking the server against the NBD protocol specification
// (doc/proto.md of github.com/NetworkBlockDevice/nbd). Each test names the
// requirement it checks.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/volume/nbd"
)

const (
	structuredMagic   = 0x668e33ef
	simpleMagic       = 0x67446698
	replyTypeNone     = 0
	replyTypeData     = 1
	replyTypeBStatus  = 5
	replyTypeErr      = 1<<15 | 1
	cmdFlagFastZero   = 1 << 4
	tfSendDF          = 1 << 7
	infoExportType    = 0
	infoNameType      = 1
	structuredHdrSize = 20
)

// anyReply reads one reply of either kind and returns its magic, the
// error (simple) or type (structured), the cookie, and the structured
// payload. A simple reply's data (READ) is not read.
func (r *rawClient) anyReply() (magic uint32, errOrType uint32, flags uint16, cookie uint64, payload []byte) {
	r.t.Helper()
	h := r.read(16)
	magic = binary.BigEndian.Uint32(h[0:4])
	switch magic {
	case simpleMagic:
		return magic, binary.BigEndian.Uint32(h[4:8]), 0, binary.BigEndian.Uint64(h[8:16]), nil
	case structuredMagic:
		h = append(h, r.read(4)...)
		n := binary.BigEndian.Uint32(h[16:20])
		return magic, uint32(binary.BigEndian.Uint16(h[6:8])), binary.BigEndian.Uint16(h[4:6]), binary.BigEndian.Uint64(h[8:16]), r.read(int(n))
	}
	r.t.Fatalf("bad reply magic %x", h)
	return
}

// goFlags enters export name with NBD_OPT_GO and returns its transmission
// flags.
func (r *rawClient) goFlags(name string) uint16 {
	r.t.Helper()
	r.write(nbd.AppendOption(nil, nbd.OptGo, nbd.AppendInfoRequest(nil, nbd.InfoRequest{Name: name})))
	var tflags uint16
	for {
		_, typ, d := r.optReply()
		if typ == repAck {
			return tflags
		}
		if binary.BigEndian.Uint16(d) == infoExportType {
			tflags = binary.BigEndian.Uint16(d[10:12])
		}
	}
}

// "NBD_OPT_STRUCTURED_REPLY ... NBD_REP_ACK: Structured replies have been
// negotiated; the server MUST use structured replies to the NBD_CMD_READ
// transmission request." That holds however transmission is entered, also
// through NBD_OPT_EXPORT_NAME (the fallback qemu and libnbd use when GO is
// refused, and what simple clients send).
func TestSpecExportNameKeepsStructuredReplies(t *testing.T) {
	m := newMem(8192)
	copy(m.b[4096:], "hello")
	addr := serveTCP(t, nbd.Map{"a": m})
	r := dialRaw(t, addr)
	r.write(nbd.AppendOption(nil, nbd.OptStructuredReply, nil))
	if _, typ, _ := r.optReply(); typ != repAck {
		t.Fatalf("structured reply: %#x", typ)
	}
	r.write(nbd.AppendOption(nil, nbd.OptExportName, []byte("a")))
	h := r.read(10) // size + flags, no zeroes (NBD_FLAG_C_NO_ZEROES)
	if binary.BigEndian.Uint64(h) != 8192 {
		t.Fatalf("export size %x", h)
	}
	r.write(nbd.AppendRequest(nil, nbd.Request{Type: nbd.CmdRead, Cookie: 1, Offset: 4096, Length: 5}))
	magic, typ, _, cookie, p := r.anyReply()
	if magic != structuredMagic {
		t.Fatalf("READ after STRUCTURED_REPLY ACK + EXPORT_NAME answered with a simple reply (magic %#x); the client expects structured chunks", magic)
	}
	if typ != replyTypeData || cookie != 1 || len(p) != 13 || !bytes.Equal(p[8:], []byte("hello")) {
		t.Fatalf("structured read reply: type %d cookie %d payload %x", typ, cookie, p)
	}
}

// "A client MUST NOT use NBD_CMD_BLOCK_STATUS unless it selected a nonzero
// number of metadata contexts during negotiation, and used the same export
// name for the subsequent NBD_OPT_GO (or NBD_OPT_EXPORT_NAME)." A context
// set for the export entered with EXPORT_NAME must therefore be usable.
func TestSpecExportNameKeepsMetaContext(t *testing.T) {
	addr := serveTCP(t, nbd.Map{"a": newMem(1 << 20)})
	r := dialRaw(t, addr)
	r.write(nbd.AppendOption(nil, nbd.OptStructuredReply, nil))
	if _, typ, _ := r.optReply(); typ != repAck {
		t.Fatalf("structured reply: %#x", typ)
	}
	ids, _, final := r.metaContext(nbd.OptSetMetaContext, "a", nbd.MetaBaseAllocation)
	if final != repAck || len(ids) != 1 {
		t.Fatalf("SET_META_CONTEXT: %v %#x", ids, final)
	}
	r.write(nbd.AppendOption(nil, nbd.OptExportName, []byte("a")))
	r.read(10)
	r.write(nbd.AppendRequest(nil, nbd.Request{Type: nbd.CmdBlockStatus, Cookie: 2, Length: 4096}))
	magic, typ, _, cookie, p := r.anyReply()
	if magic != structuredMagic || typ != replyTypeBStatus || cookie != 2 {
		t.Fatalf("BLOCK_STATUS after SET_META_CONTEXT + EXPORT_NAME: magic %#x type/errno %d cookie %d payload %x, want a block status chunk", magic, typ, cookie, p)
	}
}

// NBD_REPLY_TYPE_OFFSET_DATA: "*length* MUST be at least 9"; a READ
// "MUST result in a structured reply ... each chunk MUST describe at least
// one byte"; for a read of length 0 "the server SHOULD NOT disconnect".
// A zero-length READ must therefore get NBD_REPLY_TYPE_NONE (or an error
// chunk), never a content chunk without content, which qemu's client
// treats as a protocol error and hangs up on.
func TestSpecZeroLengthStructuredRead(t *testing.T) {
	addr := serveTCP(t, nbd.Map{"a": newMem(8192)})
	r := dialRaw(t, addr)
	r.goExport("a", true)
	r.write(nbd.AppendRequest(nil, nbd.Request{Type: nbd.CmdRead, Cookie: 3, Offset: 4096, Length: 0}))
	magic, typ, flags, cookie, p := r.anyReply()
	if magic != structuredMagic || cookie != 3 || flags&1 == 0 {
		t.Fatalf("zero-length read: magic %#x cookie %d flags %#x", magic, cookie, flags)
	}
	if typ == replyTypeData && len(p) < 9 {
		t.Fatalf("zero-length read answered with an OFFSET_DATA chunk of length %d (the spec requires at least 9)", len(p))
	}
	if typ != replyTypeNone && typ != replyTypeErr {
		t.Fatalf("zero-length read: chunk type %d", typ)
	}
}

// "bit 4, NBD_CMD_FLAG_FAST_ZERO ... The client MUST NOT set this unless
// the server advertised NBD_FLAG_SEND_FAST_ZERO"; "If the server did not
// advertise NBD_FLAG_SEND_FAST_ZERO, then it ... SHOULD fail with
// NBD_EINVAL if the NBD_CMD_FLAG_FAST_ZERO flag was set." The server does
// does not advertise it, so such a request fails and zeroes nothing.
func TestSpecFastZeroNotAdvertised(t *testing.T) {
	m := newMem(8192)
	copy(m.b, "data")
	addr := serveTCP(t, nbd.Map{"a": m})
	r := dialRaw(t, addr)
	tflags := r.goFlags("a")
	if tflags&(1<<11) != 0 {
		t.Skip("server advertises NBD_FLAG_SEND_FAST_ZERO")
	}
	r.write(nbd.AppendRequest(nil, nbd.Request{Type: nbd.CmdWriteZeroes, Flags: cmdFlagFastZero, Cookie: 4, Offset: 0, Length: 4096}))
	errno, cookie := r.simpleReply()
	m.mu.Lock()
	zeroed := !bytes.Equal(m.b[:4], []byte("data"))
	m.mu.Unlock()
	if errno != nbd.EINVAL || cookie != 4 || zeroed {
		t.Fatalf("WRITE_ZEROES with unadvertised FAST_ZERO: errno %d (want EINVAL), export zeroed %v", errno, zeroed)
	}
}

// NBD_CMD_CACHE: "if it advertised the command, the server MUST reject
// any command flags it does not recognize"; generally "It also SHOULD
// return NBD_EINVAL if it receives a request with a flag not explicitly
// documented as applicable to the given request." Flags are checked per
// command.
func TestSpecFlagsNotApplicableToCommand(t *testing.T) {
	addr := serveTCP(t, nbd.Map{"a": newMem(8192)})
	r := dialRaw(t, addr)
	r.goExport("a", false)
	for i, req := range []nbd.Request{
		{Type: nbd.CmdCache, Flags: nbd.CmdFlagReqOne, Length: 4096},
		{Type: nbd.CmdCache, Flags: cmdFlagFastZero, Length: 4096},
		{Type: nbd.CmdFlush, Flags: nbd.CmdFlagNoHole},
		{Type: nbd.CmdTrim, Flags: nbd.CmdFlagDF, Length: 4096},
		{Type: nbd.CmdRead, Flags: nbd.CmdFlagReqOne, Length: 16},
	} {
		req.Cookie = uint64(100 + i)
		r.write(nbd.AppendRequest(nil, req))
		errno, cookie := r.simpleReply()
		if errno == 0 && req.Type == nbd.CmdRead {
			r.read(int(req.Length))
		}
		if errno != nbd.EINVAL || cookie != req.Cookie {
			t.Errorf("command %d with flags %#x: errno %d, want EINVAL", req.Type, req.Flags, errno)
		}
	}
}

// NBD_OPT_EXPORT_NAME cannot be answered with an option reply: "The server
// will reply to any option apart from NBD_OPT_EXPORT_NAME with reply
// packets ..."; "If the chosen export does not exist or requirements for
// the chosen export are not met ..., the server MUST terminate the
// session." An EXPORT_NAME whose data is over the option size limit ends
// the session rather than getting NBD_REP_ERR_TOO_BIG, which a client
// waiting for the export size and flags would read as a size.
func TestSpecOversizedExportNameEndsSession(t *testing.T) {
	addr := serveTCP(t, nbd.Map{"a": newMem(8192)})
	r := dialRaw(t, addr)
	r.write(nbd.AppendOption(nil, nbd.OptExportName, make([]byte, 70<<10)))
	_ = r.c.SetReadDeadline(time.Now().Add(3 * time.Second))
	h := make([]byte, 8)
	_, err := io.ReadFull(r.c, h)
	if err == nil {
		if binary.BigEndian.Uint64(h) == optReplyMagic {
			t.Fatalf("EXPORT_NAME answered with an option reply (%x...); it must end the session", h)
		}
		t.Fatalf("EXPORT_NAME of an unknown export answered with %x", h)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("the session stays open")
	}
}

// "bit 7, NBD_FLAG_SEND_DF ... The server MUST set this transmission flag
// to 1 if the NBD_CMD_READ request supports the NBD_CMD_FLAG_DF flag". READ
// always sends one content chunk, so with structured replies DF is
// accepted and advertised.
func TestSpecDFAdvertised(t *testing.T) {
	addr := serveTCP(t, nbd.Map{"a": newMem(8192)})
	r := dialRaw(t, addr)
	r.write(nbd.AppendOption(nil, nbd.OptStructuredReply, nil))
	r.optReply()
	tflags := r.goFlags("a")
	r.write(nbd.AppendRequest(nil, nbd.Request{Type: nbd.CmdRead, Flags: nbd.CmdFlagDF, Cookie: 5, Length: 16}))
	_, typ, _, _, _ := r.anyReply()
	if typ == replyTypeData && tflags&tfSendDF == 0 {
		t.Fatalf("READ with DF succeeds but NBD_FLAG_SEND_DF is not advertised (flags %#x)", tflags)
	}
}

// NBD_INFO_NAME "Represents the server's canonical name of the export ...
// the same name that would appear in the name portion of an
// NBD_REP_SERVER in response to NBD_OPT_LIST". For the default export
// (empty name) the empty name is never returned as its name.
func TestSpecInfoNameIsCanonical(t *testing.T) {
	addr := serveTCP(t, nbd.Map{"disk": newMem(8192)})
	r := dialRaw(t, addr)
	r.write(nbd.AppendOption(nil, nbd.OptInfo, nbd.AppendInfoRequest(nil, nbd.InfoRequest{Name: "", Infos: []uint16{infoNameType}})))
	name, got := "", false
	for {
		_, typ, d := r.optReply()
		if typ == repAck {
			break
		}
		if typ != repInfo {
			t.Fatalf("INFO reply %#x", typ)
		}
		if binary.BigEndian.Uint16(d) == infoNameType {
			name, got = string(d[2:]), true
		}
	}
	if got && name != "disk" {
		t.Fatalf("NBD_INFO_NAME for the default export = %q, want the canonical name %q", name, "disk")
	}
}

// gateDev blocks WriteAt until released.
type gateDev struct {
	*memDevice
	gate    chan struct{}
	started chan struct{}
}

func (g *gateDev) WriteAt(ctx context.Context, p []byte, off int64, fua bool) error {
	g.started <- struct{}{}
	<-g.gate
	return g.memDevice.WriteAt(ctx, p, off, fua)
}

// NBD_CMD_DISC: "The server MUST handle all outstanding requests". A write
// in flight when DISC arrives gets its reply before the connection closes.
func TestSpecDiscFinishesInFlight(t *testing.T) {
	g := &gateDev{newMem(8192), make(chan struct{}), make(chan struct{}, 4)}
	addr := serveTCP(t, nbd.Map{"a": g})
	r := dialRaw(t, addr)
	r.goExport("a", false)
	var b []byte
	b = nbd.AppendRequest(b, nbd.Request{Type: nbd.CmdWrite, Cookie: 6, Length: 3})
	b = append(b, "abc"...)
	b = nbd.AppendRequest(b, nbd.Request{Type: nbd.CmdDisc})
	r.write(b)
	<-g.started
	time.Sleep(100 * time.Millisecond)
	close(g.gate)
	errno, cookie := r.simpleReply()
	if errno != 0 || cookie != 6 {
		t.Fatalf("write before DISC: errno %d cookie %d", errno, cookie)
	}
	if _, err := r.c.Read(make([]byte, 1)); err == nil {
		t.Fatal("connection open after DISC")
	}
}

// NBD_OPT_ABORT followed at once by more bytes (a client that pipelines):
// the server answers the abort with NBD_REP_ACK and ends the session
// without answering the rest.
func TestSpecAbortThenData(t *testing.T) {
	addr := serveTCP(t, nbd.Map{"a": newMem(8192)})
	r := dialRaw(t, addr)
	b := nbd.AppendOption(nil, nbd.OptAbort, nil)
	b = nbd.AppendOption(b, nbd.OptList, nil)
	r.write(b)
	if opt, typ, _ := r.optReply(); opt != nbd.OptAbort || typ != repAck {
		t.Fatalf("ABORT: opt %d type %#x", opt, typ)
	}
	if n, err := r.c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("more data after the ABORT reply (%d bytes)", n)
	}
}

// Concurrency sanity: many writes in flight on several connections, then
// a flush; every reply comes back once.
func TestSpecManyInFlight(t *testing.T) {
	addr := serveCfg(t, nbd.Config{Exports: nbd.Map{"a": newMem(1 << 20)}, MaxInFlight: 4, MaxReplyBytes: 64 << 10})
	var wg sync.WaitGroup
	for c := 0; c < 3; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := dialRaw(t, addr)
			r.goExport("a", true)
			var b []byte
			for i := 0; i < 200; i++ {
				b = nbd.AppendRequest(b, nbd.Request{Type: nbd.CmdWrite, Cookie: uint64(i), Offset: uint64(i%16) * 4096, Length: 4096})
				b = append(b, make([]byte, 4096)...)
				b = nbd.AppendRequest(b, nbd.Request{Type: nbd.CmdRead, Cookie: uint64(1000 + i), Offset: uint64(i%16) * 4096, Length: 4096})
			}
			go r.c.Write(b)
			seen := map[uint64]bool{}
			for range 400 {
				_, _, _, cookie, _ := r.anyReplyRead(4096)
				if seen[cookie] {
					t.Errorf("cookie %d answered twice", cookie)
				}
				seen[cookie] = true
			}
		}()
	}
	wg.Wait()
}

// anyReplyRead is anyReply that also consumes the data of a successful
// simple READ reply of n bytes (cookies >= 1000 are reads).
func (r *rawClient) anyReplyRead(n int) (uint32, uint32, uint16, uint64, []byte) {
	magic, e, f, c, p := r.anyReply()
	if magic == simpleMagic && e == 0 && c >= 1000 {
		r.read(n)
	}
	return magic, e, f, c, p
}

// "On a server shutdown, the server SHOULD wait for inflight requests to be
// serviced prior to initiating a hard disconnect. ... The error value
// issued in respect of these requests and any subsequently received
// requests SHOULD be NBD_ESHUTDOWN." Server.Close lets a write in flight
// finish and answers it before it hangs up, so the client does not fail
// a write that was in fact done.
func TestSpecCloseAnswersInFlight(t *testing.T) {
	g := &gateDev{newMem(8192), make(chan struct{}), make(chan struct{}, 4)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := nbd.NewServer(nbd.Config{Exports: nbd.Map{"a": g}})
	go srv.Serve(context.Background(), ln)
	r := dialRaw(t, ln.Addr().String())
	r.goExport("a", false)
	r.write(append(nbd.AppendRequest(nil, nbd.Request{Type: nbd.CmdWrite, Cookie: 7, Length: 3}), "abc"...))
	<-g.started
	closed := make(chan struct{})
	go func() { srv.Close(); close(closed) }()
	time.Sleep(100 * time.Millisecond)
	close(g.gate)
	<-closed
	h := make([]byte, 16)
	if _, err := io.ReadFull(r.c, h); err != nil {
		g.mu.Lock()
		written := string(g.b[:3])
		g.mu.Unlock()
		t.Fatalf("in-flight write got no reply on Close (%v); the device holds %q", err, written)
	}
	if e := binary.BigEndian.Uint32(h[4:8]); e != 0 && e != nbd.ESHUTDOWN {
		t.Fatalf("in-flight write on Close: errno %d", e)
	}
}

// Write payloads count against the connection's byte budget: while the
// device is slow, a connection does not hold MaxInFlight payloads of up to
// MaxRequest bytes each (128 x 32 MiB = 4 GiB with the defaults). Here:
// 1 MiB writes against a device that blocks, with a 1 MiB budget.
func TestSpecWritePayloadsBounded(t *testing.T) {
	g := &gateDev{newMem(2 << 20), make(chan struct{}), make(chan struct{}, 1024)}
	addr := serveCfg(t, nbd.Config{Exports: nbd.Map{"a": g}, MaxRequest: 1 << 20, MaxReplyBytes: 1 << 20})
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r := dialRaw(t, addr)
	r.goExport("a", false)
	const n = 100
	payload := make([]byte, 1<<20)
	go func() {
		for i := range n {
			b := append(nbd.AppendRequest(nil, nbd.Request{Type: nbd.CmdWrite, Cookie: uint64(i), Length: 1 << 20}), payload...)
			if _, err := r.c.Write(b); err != nil {
				return
			}
		}
	}()
	deadline := time.After(5 * time.Second)
	started := 0
loop:
	for started < n {
		select {
		case <-g.started:
			started++
		case <-deadline:
			break loop
		}
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapInuse) - int64(before.HeapInuse)
	close(g.gate)
	t.Logf("%d writes of 1 MiB in the device at once; heap grew by %d MiB", started, grown>>20)
	if grown > 32<<20 {
		t.Errorf("one connection holds %d MiB of write payloads (MaxReplyBytes 1 MiB)", grown>>20)
	}
}

// The handshake has a deadline: a client that connects and never sends
// its flags (or never reads its option replies) does not keep its
// connection, goroutine and 256 KiB read buffer for ever.
func TestSpecIdleHandshakeDropped(t *testing.T) {
	addr := serveCfg(t, nbd.Config{Exports: nbd.Map{"a": newMem(4096)}, HandshakeTimeout: 500 * time.Millisecond})
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const n = 100
	var conns []net.Conn
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	time.Sleep(2 * time.Second)
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapInuse) - int64(before.HeapInuse)
	open := 0
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		if _, err := io.Copy(io.Discard, c); errors.Is(err, os.ErrDeadlineExceeded) {
			open++
		}
	}
	t.Logf("%d idle connections: %d still open after 2s, heap grew by %d KiB", n, open, grown>>10)
	if open != 0 {
		t.Errorf("%d idle pre-handshake connections are not dropped (each holds a goroutine and a 256 KiB read buffer)", open)
	}
}

// errDev fails writes with a fixed error.
type errDev struct {
	*memDevice
	err error
}

func (d errDev) WriteAt(context.Context, []byte, int64, bool) error { return d.err }

// "It also SHOULD map the EDQUOT and EFBIG errors to NBD_ENOSPC."
func TestSpecEFBIGIsENOSPC(t *testing.T) {
	addr := serveTCP(t, nbd.Map{"a": errDev{newMem(8192), fmt.Errorf("write: %w", syscall.EFBIG)}})
	r := dialRaw(t, addr)
	r.goExport("a", false)
	r.write(append(nbd.AppendRequest(nil, nbd.Request{Type: nbd.CmdWrite, Cookie: 8, Length: 4}), "abcd"...))
	if errno, _ := r.simpleReply(); errno != nbd.ENOSPC {
		t.Fatalf("EFBIG from the device: errno %d, want ENOSPC", errno)
	}
}

// "The preferred block size MUST be a power of 2 and at least as large as
// the larger of the minimum block size and 512 ... The maximum block size
// ... SHOULD be at least as large as the preferred block size": a server
// configured otherwise is refused rather than advertising constraints
// clients reject.
func TestSpecBlockSizeConfig(t *testing.T) {
	for _, tc := range []struct {
		pref, max uint32
		ok        bool
	}{
		{0, 0, true}, // defaults: 4096 and 32 MiB
		{512, 0, true},
		{65536, 1 << 20, true},
		{256, 0, false},
		{3000, 0, false},
		{4096, 2048, false},
	} {
		_, err := nbd.NewServer(nbd.Config{Exports: nbd.Map{"a": newMem(4096)}, PreferredBlock: tc.pref, MaxRequest: tc.max})
		if (err == nil) != tc.ok {
			t.Errorf("preferred %d, max %d: %v; want ok %v", tc.pref, tc.max, err, tc.ok)
		}
	}
}
