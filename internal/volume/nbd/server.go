package nbd

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Config configures a Server.
type Config struct {
	// Exports resolves export names. Required.
	Exports Exports
	// MaxRequest caps the payload of one READ or WRITE (the maximum block
	// size advertised). Default 32 MiB.
	MaxRequest uint32
	// MaxInFlight bounds the requests one connection runs at once; the
	// reader stops reading while the bound is reached. Default 128.
	MaxInFlight int
	// MaxReplyBytes bounds the bytes one connection holds in memory:
	// replies (READ data included) not written to the client yet, and
	// WRITE payloads not written to the device yet. A handler waits for
	// room before it reads into a new buffer or queues a reply, and the
	// reader before it reads a payload, so a client that does not read its
	// replies, or writes faster than the device, stops the server from
	// reading its requests instead of growing the queue. A reply or
	// payload larger than the bound goes alone. Default 32 MiB.
	MaxReplyBytes int64
	// ReplyTimeout bounds the writing of each batch of replies; a client
	// that does not take them in time is disconnected, which ends the
	// connection's requests and frees its buffers. Default 60s.
	ReplyTimeout time.Duration
	// HandshakeTimeout bounds the whole negotiation of a connection; a
	// client that does not finish it in time is disconnected. Default 30s.
	HandshakeTimeout time.Duration
	// CloseTimeout bounds how long Close lets the requests in flight
	// finish and their replies go out before it hangs up. Default 10s.
	CloseTimeout time.Duration
	// PreferredBlock is the advertised preferred block size. Default 4096.
	PreferredBlock uint32
	// Logger receives connection-level errors. Default: discard.
	Logger *slog.Logger
	// TLS, when set, makes the server offer NBD_OPT_STARTTLS with this
	// configuration (require and verify client certificates in it to
	// authenticate clients). TLS is then mandatory on every connection
	// but those over a Unix socket (the protocol's FORCEDTLS mode):
	// before STARTTLS every other option is refused with
	// NBD_REP_ERR_TLS_REQD, and NBD_OPT_EXPORT_NAME hangs up. On a Unix
	// socket, which its file permissions guard, TLS is the client's choice.
	TLS *tls.Config
	// Observe, if set, is told of every request once its reply is queued:
	// its command, its length, the time from its dispatch, and the error
	// value answered (0: none). It runs on the request's goroutine, so it
	// must be quick (metrics).
	Observe func(cmd uint16, length uint32, took time.Duration, errno uint32)
}

// Server serves NBD exports over any number of listeners.
type Server struct {
	cfg  Config
	pool bufPool

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	lns    map[net.Listener]struct{}
	closed bool
	wg     sync.WaitGroup
}

// NewServer checks cfg and returns a server.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Exports == nil {
		return nil, errors.New("nbd: Config.Exports is required")
	}
	if cfg.MaxRequest == 0 {
		cfg.MaxRequest = defaultMaxRequestSize
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 128
	}
	if cfg.MaxReplyBytes <= 0 {
		cfg.MaxReplyBytes = 32 << 20
	}
	if cfg.ReplyTimeout <= 0 {
		cfg.ReplyTimeout = 60 * time.Second
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = 30 * time.Second
	}
	if cfg.CloseTimeout <= 0 {
		cfg.CloseTimeout = 10 * time.Second
	}
	if cfg.PreferredBlock == 0 {
		cfg.PreferredBlock = 4096
	}
	// The block size constraints the server advertises (minimum 1): the
	// preferred size a power of 2 of at least 512, the maximum at least
	// the preferred one.
	if p := cfg.PreferredBlock; p < 512 || p&(p-1) != 0 {
		return nil, fmt.Errorf("nbd: preferred block size %d is not a power of 2 of at least 512", p)
	}
	if cfg.MaxRequest < cfg.PreferredBlock {
		return nil, fmt.Errorf("nbd: maximum request %d is below the preferred block size %d", cfg.MaxRequest, cfg.PreferredBlock)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.TLS != nil && len(cfg.TLS.Certificates) == 0 && cfg.TLS.GetCertificate == nil && cfg.TLS.GetConfigForClient == nil {
		return nil, errors.New("nbd: Config.TLS has no server certificate")
	}
	return &Server{cfg: cfg, conns: map[net.Conn]struct{}{}, lns: map[net.Listener]struct{}{}}, nil
}

// ErrServerClosed is returned by Serve after Close.
var ErrServerClosed = errors.New("nbd: server closed")

// Serve accepts connections on ln until ctx ends or Close is called.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrServerClosed
	}
	s.lns[ln] = struct{}{}
	s.mu.Unlock()
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			delete(s.lns, ln)
			s.mu.Unlock()
			if closed {
				return ErrServerClosed
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		if !s.track(c) {
			_ = c.Close()
			return ErrServerClosed
		}
		go func() {
			defer s.wg.Done()
			defer s.untrack(c)
			if err := s.ServeConn(ctx, c); err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				s.cfg.Logger.Debug("nbd connection ended", "remote", c.RemoteAddr().String(), "err", err)
			}
		}()
	}
}

func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1) // under mu: Close cannot be waiting already
	return true
}

// Conns counts the connections the server holds (in negotiation or
// transmission).
func (s *Server) Conns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

func (s *Server) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// Close stops every listener, stops reading requests, lets the requests
// in flight finish and their replies go out (for up to CloseTimeout, as
// the protocol asks of a server that shuts down), then closes every
// connection and waits for them.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	for ln := range s.lns {
		_ = ln.Close()
	}
	for c := range s.conns {
		_ = c.SetReadDeadline(time.Now())
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-time.After(s.cfg.CloseTimeout):
	}
	s.mu.Lock()
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	<-done
	return nil
}

// errAbort ends a handshake the client aborted.
var errAbort = errors.New("nbd: client aborted the handshake")

// ServeConn runs the handshake and the transmission phase on c and closes
// it. It returns when the client disconnects or the connection fails.
func (s *Server) ServeConn(ctx context.Context, c net.Conn) error {
	defer c.Close()
	br := bufio.NewReaderSize(c, 256<<10)
	_ = c.SetDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	dev, neg, err := s.handshake(ctx, c, br)
	if neg.conn != nil {
		c, br = neg.conn, neg.br // TLS was started
		defer c.Close()
	}
	if err != nil {
		if errors.Is(err, errAbort) {
			return nil
		}
		return err
	}
	if err := c.SetDeadline(time.Time{}); err != nil {
		return err
	}
	if s.isClosed() {
		return ErrServerClosed // Close came during the handshake: its read deadline was cleared
	}
	tc := &conn{
		s:          s,
		c:          c,
		br:         br,
		dev:        dev,
		size:       dev.Size(),
		structured: neg.structured,
		alloc:      neg.alloc,
	}
	if neg.conn != nil {
		tc.bw = bufio.NewWriterSize(c, 64<<10)
	}
	tc.room.L = &tc.rmu
	tc.out.Flush = tc.writeReplies
	return tc.serve(ctx)
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// transmissionFlags are the flags of dev's export; with structured replies
// READ also takes DF (its data always goes in one chunk).
func (s *Server) transmissionFlags(dev Device, structured bool) uint16 {
	f := uint16(tfHasFlags | tfSendFlush | tfSendFUA | tfSendTrim | tfSendWriteZeroes | tfSendCache)
	if structured {
		f |= tfSendDF
	}
	if m, ok := dev.(MultiConnDevice); ok && m.MultiConn() {
		f |= tfCanMultiConn
	}
	return f
}

// negotiated is what the handshake settled besides the device.
type negotiated struct {
	structured bool // structured replies
	alloc      bool // the base:allocation context (BLOCK_STATUS)
	// conn and br replace the connection and its reader once STARTTLS
	// succeeded (nil without TLS); they are set even when the handshake
	// fails afterwards, so the TLS session is closed properly.
	conn net.Conn
	br   *bufio.Reader
}

// ErrTLSRequired ends a connection that asked to enter transmission with
// NBD_OPT_EXPORT_NAME before starting TLS on a server that requires it.
var ErrTLSRequired = errors.New("nbd: TLS is required")

// handshake runs the fixed newstyle negotiation and returns the chosen
// device and what was negotiated.
func (s *Server) handshake(ctx context.Context, c net.Conn, br *bufio.Reader) (Device, negotiated, error) {
	var b []byte
	b = binary.BigEndian.AppendUint64(b, nbdMagic)
	b = binary.BigEndian.AppendUint64(b, optMagic)
	b = binary.BigEndian.AppendUint16(b, flagFixedNewstyle|flagNoZeroes)
	if _, err := c.Write(b); err != nil {
		return nil, negotiated{}, err
	}
	var hdr [16]byte
	if _, err := io.ReadFull(br, hdr[:4]); err != nil {
		return nil, negotiated{}, err
	}
	cflags := binary.BigEndian.Uint32(hdr[:4])
	if cflags&^uint32(clientFlagFixedNewstyle|clientFlagNoZeroes) != 0 {
		return nil, negotiated{}, fmt.Errorf("nbd: unknown client flags %#x", cflags)
	}
	noZeroes := cflags&clientFlagNoZeroes != 0
	structured := false
	metaName, metaAlloc := "", false // the last SET_META_CONTEXT
	var secure *tls.Conn             // set once STARTTLS succeeded
	// fail returns err with the TLS connection, if any, to close.
	fail := func(err error) (Device, negotiated, error) {
		return nil, secured(negotiated{}, secure, br), err
	}
	needTLS := s.cfg.TLS != nil && c.LocalAddr().Network() != "unix"
	const maxOptions = 4096
	for i := 0; i < maxOptions; i++ {
		opt, err := readOption(br, hdr[:])
		if err == nil && needTLS && secure == nil && opt.Code != OptStartTLS && opt.Code != OptAbort {
			if opt.Code == OptExportName {
				return fail(fmt.Errorf("%w: NBD_OPT_EXPORT_NAME before STARTTLS", ErrTLSRequired))
			}
			if err := s.optReply(c, opt.Code, repErrTLSReqd, nil); err != nil {
				return fail(err)
			}
			continue
		}
		if errors.Is(err, ErrOptionTooBig) {
			switch opt.Code {
			case OptExportName:
				// No option reply may answer it; an export that cannot be
				// chosen ends the session.
				return fail(err)
			case OptAbort:
				_ = s.optReply(c, opt.Code, repAck, nil)
				return fail(errAbort)
			}
			if err := s.optReply(c, opt.Code, repErrTooBig, nil); err != nil {
				return fail(err)
			}
			continue
		}
		if err != nil {
			return fail(err)
		}
		switch opt.Code {
		case OptStartTLS:
			switch {
			case s.cfg.TLS == nil:
				err = s.optReply(c, opt.Code, repErrUnsup, nil)
			case secure != nil || len(opt.Data) != 0:
				err = s.optReply(c, opt.Code, repErrInvalid, nil)
			case br.Buffered() != 0:
				// The client must wait for the ACK before it starts TLS.
				return fail(errors.New("nbd: client sent data after NBD_OPT_STARTTLS before its reply"))
			default:
				if err := s.optReply(c, opt.Code, repAck, nil); err != nil {
					return fail(err)
				}
				tc := tls.Server(c, s.cfg.TLS)
				secure, br = tc, bufio.NewReaderSize(tc, 256<<10)
				if err := tc.HandshakeContext(ctx); err != nil {
					return fail(fmt.Errorf("nbd: TLS handshake: %w", err))
				}
				c = tc
			}
		case OptExportName:
			dev, err := s.cfg.Exports.Lookup(ctx, string(opt.Data))
			if err != nil {
				// The protocol has no way to refuse this option but to hang up.
				return fail(err)
			}
			var out []byte
			out = binary.BigEndian.AppendUint64(out, uint64(dev.Size()))
			out = binary.BigEndian.AppendUint16(out, s.transmissionFlags(dev, structured))
			if !noZeroes {
				out = append(out, make([]byte, 124)...)
			}
			_, err = c.Write(out)
			// What was negotiated holds however transmission is entered.
			return dev, secured(negotiated{structured: structured, alloc: metaAlloc && metaName == string(opt.Data)}, secure, br), err
		case OptAbort:
			_ = s.optReply(c, opt.Code, repAck, nil)
			return fail(errAbort)
		case OptList:
			if len(opt.Data) != 0 {
				err = s.optReply(c, opt.Code, repErrInvalid, nil)
				break
			}
			names, lerr := s.cfg.Exports.List(ctx)
			if lerr != nil {
				err = s.optReply(c, opt.Code, repErrPolicy, nil)
				break
			}
			var out []byte
			for _, n := range names {
				out = appendOptReply(out, opt.Code, repServer, appendString(nil, n))
			}
			out = appendOptReply(out, opt.Code, repAck, nil)
			_, err = c.Write(out)
		case OptStructuredReply:
			if len(opt.Data) != 0 {
				err = s.optReply(c, opt.Code, repErrInvalid, nil)
				break
			}
			structured = true
			err = s.optReply(c, opt.Code, repAck, nil)
		case OptInfo, OptGo:
			req, perr := ParseInfoRequest(opt.Data)
			if perr != nil {
				err = s.optReply(c, opt.Code, repErrInvalid, nil)
				break
			}
			dev, lerr := s.cfg.Exports.Lookup(ctx, req.Name)
			if lerr != nil {
				err = s.optReply(c, opt.Code, repErrUnknown, []byte(lerr.Error()))
				break
			}
			var out []byte
			d := binary.BigEndian.AppendUint16(nil, infoExport)
			d = binary.BigEndian.AppendUint64(d, uint64(dev.Size()))
			d = binary.BigEndian.AppendUint16(d, s.transmissionFlags(dev, structured))
			out = appendOptReply(out, opt.Code, repInfo, d)
			for _, t := range req.Infos {
				// The canonical name of the default export is not known
				// here; the name is a hint the server may leave out.
				if t == infoName && req.Name != "" {
					d := binary.BigEndian.AppendUint16(nil, infoName)
					out = appendOptReply(out, opt.Code, repInfo, append(d, req.Name...))
				}
			}
			d = binary.BigEndian.AppendUint16(nil, infoBlockSize)
			d = binary.BigEndian.AppendUint32(d, 1)
			d = binary.BigEndian.AppendUint32(d, s.cfg.PreferredBlock)
			d = binary.BigEndian.AppendUint32(d, s.cfg.MaxRequest)
			out = appendOptReply(out, opt.Code, repInfo, d)
			out = appendOptReply(out, opt.Code, repAck, nil)
			if _, err := c.Write(out); err != nil {
				return fail(err)
			}
			if opt.Code == OptGo {
				return dev, secured(negotiated{structured: structured, alloc: metaAlloc && metaName == req.Name}, secure, br), nil
			}
		case OptListMetaContext, OptSetMetaContext:
			set := opt.Code == OptSetMetaContext
			if set {
				metaName, metaAlloc = "", false
			}
			req, perr := ParseMetaContextRequest(opt.Data)
			if perr != nil || set && !structured {
				err = s.optReply(c, opt.Code, repErrInvalid, nil)
				break
			}
			if _, lerr := s.cfg.Exports.Lookup(ctx, req.Name); lerr != nil {
				err = s.optReply(c, opt.Code, repErrUnknown, []byte(lerr.Error()))
				break
			}
			match := len(req.Queries) == 0 && !set
			for _, q := range req.Queries {
				match = match || q == MetaBaseAllocation || !set && q == "base:"
			}
			var out []byte
			if match {
				id := uint32(0) // LIST: reserved
				if set {
					id, metaName, metaAlloc = metaAllocID, req.Name, true
				}
				d := binary.BigEndian.AppendUint32(nil, id)
				out = appendOptReply(out, opt.Code, repMetaContext, append(d, MetaBaseAllocation...))
			}
			out = appendOptReply(out, opt.Code, repAck, nil)
			_, err = c.Write(out)
		default:
			err = s.optReply(c, opt.Code, repErrUnsup, nil)
		}
		if err != nil {
			return fail(err)
		}
	}
	return fail(errors.New("nbd: too many options"))
}

// secured adds the TLS connection, if one was started, to n.
func secured(n negotiated, secure *tls.Conn, br *bufio.Reader) negotiated {
	if secure != nil {
		n.conn, n.br = secure, br
	}
	return n
}

func (s *Server) optReply(c net.Conn, opt, typ uint32, data []byte) error {
	_, err := c.Write(appendOptReply(nil, opt, typ, data))
	return err
}
