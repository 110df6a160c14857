package netx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Sentinel errors of this package.
var (
	// ErrNoHost is returned for a listen address without a host part
	// (":9000"): listening on all interfaces must be asked for explicitly.
	ErrNoHost = errors.New("netx: address has no host (list each interface address)")
	// ErrNoAddrs is returned when there is no address to listen on or to send to.
	ErrNoAddrs = errors.New("netx: no addresses")
	// ErrBadAddr is returned for an address that cannot be parsed.
	ErrBadAddr = errors.New("netx: bad address")
)

// SplitAddrs parses a comma-separated list of addresses ("a:1,b:2"),
// dropping blanks. It is meant for flags.
func SplitAddrs(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// CheckListenAddr reports whether addr is a host:port with a non-empty host.
func CheckListenAddr(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: %q: %v", ErrBadAddr, addr, err)
	}
	if host == "" {
		return fmt.Errorf("%w: %q", ErrNoHost, addr)
	}
	return nil
}

// Listen opens a TCP listener on every address (host:port, the host being
// required). On any error it closes the listeners it opened and returns the
// error; the listeners are returned in the order of addrs.
func Listen(ctx context.Context, addrs []string) ([]net.Listener, error) {
	if len(addrs) == 0 {
		return nil, ErrNoAddrs
	}
	for _, a := range addrs {
		if err := CheckListenAddr(a); err != nil {
			return nil, err
		}
	}
	var lc net.ListenConfig
	lns := make([]net.Listener, 0, len(addrs))
	for _, a := range addrs {
		ln, err := lc.Listen(ctx, "tcp", a)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, fmt.Errorf("netx: listen %s: %w", a, err)
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

// Serve runs srv on every listener until ctx is done (then shuts the server
// down gracefully, waiting at most grace) or until one listener fails (then
// closes the server and returns that error).
func Serve(ctx context.Context, srv *http.Server, lns []net.Listener, grace time.Duration) error {
	if len(lns) == 0 {
		return ErrNoAddrs
	}
	errc := make(chan error, len(lns))
	for _, ln := range lns {
		go func(ln net.Listener) { errc <- srv.Serve(ln) }(ln)
	}
	var err error
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		if serr := srv.Shutdown(sctx); serr != nil {
			srv.Close()
		}
	case err = <-errc:
		srv.Close()
	}
	for i := 0; i < len(lns); i++ {
		if err != nil {
			break
		}
		if e := <-errc; e != nil && !errors.Is(e, http.ErrServerClosed) {
			err = e
		}
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// ListenerStats are the counters of one counted listener (one interface
// address on the serving side).
type ListenerStats struct {
	Addr      string `json:"addr"`
	BytesSent uint64 `json:"bytes_sent"`
	BytesRecv uint64 `json:"bytes_recv"`
	Accepted  uint64 `json:"accepted"`
	Open      int64  `json:"open"`
}

// CountingListener is a net.Listener whose connections count the bytes they
// carry. Connections keep the underlying io.ReaderFrom, so net/http still
// uses sendfile/splice when serving files.
type CountingListener struct {
	net.Listener
	c        ifaceCounters
	accepted atomic.Uint64
	open     atomic.Int64
}

// CountListener wraps ln with byte counters.
func CountListener(ln net.Listener) *CountingListener {
	return &CountingListener{Listener: ln}
}

// Accept implements net.Listener.
func (l *CountingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.accepted.Add(1)
	l.open.Add(1)
	return newCountConn(c, &l.c, nil, func() { l.open.Add(-1) }), nil
}

// Stats returns the counters so far.
func (l *CountingListener) Stats() ListenerStats {
	return ListenerStats{
		Addr:      l.Addr().String(),
		BytesSent: l.c.sent.Load(),
		BytesRecv: l.c.recv.Load(),
		Accepted:  l.accepted.Load(),
		Open:      l.open.Load(),
	}
}

// ifaceCounters count bytes on one interface.
type ifaceCounters struct {
	sent, recv atomic.Uint64
}

// countConn counts bytes into one or two sets of counters and, when
// progress is not nil, records the time of the last byte there (its pair's
// clock) and in last (its own clock).
type countConn struct {
	net.Conn
	a, b      *ifaceCounters
	progress  *atomic.Int64
	last      atomic.Int64 // unix ns of the last byte; only with progress
	closeOnce sync.Once
	onClose   func()
}

func newCountConn(c net.Conn, a *ifaceCounters, progress *atomic.Int64, onClose func()) *countConn {
	return &countConn{Conn: c, a: a, progress: progress, onClose: onClose}
}

func (c *countConn) add(sent bool, n int) {
	if n <= 0 {
		return
	}
	for _, k := range [...]*ifaceCounters{c.a, c.b} {
		if k == nil {
			continue
		}
		if sent {
			k.sent.Add(uint64(n))
		} else {
			k.recv.Add(uint64(n))
		}
	}
	if c.progress != nil {
		now := time.Now().UnixNano()
		c.progress.Store(now)
		c.last.Store(now)
	}
}

func (c *countConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.add(false, n)
	return n, err
}

func (c *countConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.add(true, n)
	return n, err
}

// progressChunk is the most a kernel copy (sendfile) moves between two
// marks of progress on a connection that records progress: small enough
// that a healthy but slow link moves a chunk well within FailAfter.
const progressChunk = 128 << 10

// ReadFrom keeps the kernel copy (sendfile/splice) of *net.TCPConn. On a
// connection that records progress (a transport's data connection), every
// chunk moved must count as progress, not only the end of the copy: a body
// that is not a file is copied through Write, and a file is sent by
// sendfile in chunks of progressChunk.
func (c *countConn) ReadFrom(r io.Reader) (int64, error) {
	rf, ok := c.Conn.(io.ReaderFrom)
	if !ok {
		return io.Copy(struct{ io.Writer }{c}, r) // Write counts each chunk
	}
	if c.progress == nil {
		n, err := rf.ReadFrom(r)
		c.add(true, int(n))
		return n, err
	}
	// A file, possibly under a limit (as io.CopyN and http.ServeContent
	// pass it): sendfile chunk by chunk.
	outer, _ := r.(*io.LimitedReader)
	src := r
	if outer != nil {
		src = outer.R
	}
	if _, isFile := src.(*os.File); !isFile {
		return io.Copy(struct{ io.Writer }{c}, r)
	}
	var total int64
	for {
		lr := &io.LimitedReader{R: src, N: progressChunk}
		if outer != nil {
			if outer.N <= 0 {
				return total, nil
			}
			lr.N = min(lr.N, outer.N)
		}
		want := lr.N
		n, err := rf.ReadFrom(lr)
		total += n
		if outer != nil {
			outer.N -= n
		}
		c.add(true, int(n))
		if err != nil || n < want { // n < want: the end of the file
			return total, err
		}
	}
}

func (c *countConn) Close() error {
	c.closeOnce.Do(func() {
		if c.onClose != nil {
			c.onClose()
		}
	})
	return c.Conn.Close()
}
