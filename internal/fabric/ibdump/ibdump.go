// Package ibdump parses the text files an InfiniBand subnet manager and its
// diagnostic tools write: OpenSM's opensm-lfts.dump, opensm-subnet.lst,
// guid2lid, neighbors, opensm.fdbs, opensm-lid-matrix.dump and osm.log, and
// the output of ibnetdiscover and dump_fts/ibroute.
//
// Every parser streams its input line by line and hands records to a
// callback, so a dump of hundreds of megabytes is never held in memory.
// Errors are *ParseError values that name the file and line and wrap
// ErrSyntax. Open transparently decompresses files whose name ends in .gz.
package ibdump

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// ErrSyntax is wrapped by every *ParseError.
var ErrSyntax = errors.New("ibdump: syntax error")

// maxLine bounds a single input line; longer lines are a syntax error
// (except in logs, where they are skipped).
const maxLine = 1 << 20

// MaxUnicastLID is the highest unicast LID (0xBFFF); LIDs above it are rejected.
const MaxUnicastLID = 0xBFFF

// NoPort marks a LID a switch has no route for in LFT.Ports.
const NoPort = 0xFF

// ParseError reports where an input file is malformed.
type ParseError struct {
	File string
	Line int
	Msg  string
}

func (e *ParseError) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg) }

// Unwrap lets errors.Is(err, ErrSyntax) match.
func (e *ParseError) Unwrap() error { return ErrSyntax }

// lineReader yields lines without their terminator and counts them.
type lineReader struct {
	br   *bufio.Reader
	name string
	line int
	// skipLong makes next return a line longer than maxLine as an empty
	// line instead of failing.
	skipLong bool
}

func newLineReader(r io.Reader, name string) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, 256<<10), name: name}
}

// next returns the next line (valid until the following call), or io.EOF.
func (lr *lineReader) next() ([]byte, error) {
	b, err := lr.br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		// A long line: accumulate up to maxLine.
		buf := append([]byte(nil), b...)
		for err == bufio.ErrBufferFull {
			if len(buf) > maxLine {
				lr.line++
				if !lr.skipLong {
					return nil, lr.errf("line longer than %d bytes", maxLine)
				}
				// Discard the rest of the line and yield it as empty.
				for err == bufio.ErrBufferFull {
					_, err = lr.br.ReadSlice('\n')
				}
				if err != nil && err != io.EOF {
					return nil, fmt.Errorf("%s:%d: %w", lr.name, lr.line, err)
				}
				return nil, nil
			}
			b, err = lr.br.ReadSlice('\n')
			buf = append(buf, b...)
		}
		b = buf
	}
	if err != nil && err != io.EOF {
		return nil, fmt.Errorf("%s:%d: %w", lr.name, lr.line+1, err)
	}
	if len(b) == 0 && err == io.EOF {
		return nil, io.EOF
	}
	lr.line++
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
	}
	if n := len(b); n > 0 && b[n-1] == '\r' {
		b = b[:n-1]
	}
	return b, nil
}

// each calls fn with every line in turn (valid until fn returns) until
// the input ends, when it returns nil, or a read or fn fails.
func (lr *lineReader) each(fn func(line []byte) error) error {
	for {
		line, err := lr.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(line); err != nil {
			return err
		}
	}
}

// block holds the block of a dump being read (a switch's table, a node
// and its ports) until it is complete, then hands it to emit.
type block[T any] struct {
	cur  *T
	emit func(*T) error
}

// done hands the current block, if any, to emit.
func (b *block[T]) done() error {
	if b.cur == nil {
		return nil
	}
	c := b.cur
	b.cur = nil
	return b.emit(c)
}

func (lr *lineReader) errf(format string, args ...any) error {
	return &ParseError{File: lr.name, Line: lr.line, Msg: fmt.Sprintf(format, args...)}
}

// Open opens a dump file for streaming, decompressing it when the name ends
// in .gz. Decompression runs in its own goroutine, a few buffers ahead of
// the reader, so gunzip and parsing use two cores. The caller closes the
// result.
func Open(path string) (io.ReadCloser, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if !strings.HasSuffix(path, ".gz") {
		return f, nil
	}
	zr, err := gzip.NewReader(bufio.NewReaderSize(f, 256<<10))
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return newAsyncReader(zr, f, path), nil
}

// asyncReader reads ahead from src in a goroutine.
type asyncReader struct {
	full  chan chunk
	free  chan []byte
	done  chan struct{}
	cur   chunk
	off   int
	err   error
	close func() error
}

type chunk struct {
	b   []byte
	err error
}

const (
	asyncBufSize = 1 << 20
	asyncBufs    = 4
)

func newAsyncReader(src io.Reader, f *os.File, name string) *asyncReader {
	a := &asyncReader{full: make(chan chunk, asyncBufs), free: make(chan []byte, asyncBufs), done: make(chan struct{})}
	for i := 0; i < asyncBufs; i++ {
		a.free <- make([]byte, asyncBufSize)
	}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			var buf []byte
			select {
			case buf = <-a.free:
			case <-a.done:
				return
			}
			n, err := 0, error(nil)
			for n < len(buf) && err == nil {
				var k int
				k, err = src.Read(buf[n:])
				n += k
			}
			if err != nil && err != io.EOF {
				err = fmt.Errorf("%s: %w", name, err)
			}
			select {
			case a.full <- chunk{buf[:n], err}:
			case <-a.done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	a.close = func() error {
		close(a.done)
		<-finished
		return f.Close()
	}
	return a
}

func (a *asyncReader) Read(p []byte) (int, error) {
	for a.off >= len(a.cur.b) {
		if a.err != nil {
			return 0, a.err
		}
		if a.cur.b != nil {
			a.free <- a.cur.b[:cap(a.cur.b)]
		}
		a.cur, a.off = <-a.full, 0
		if a.cur.err != nil {
			a.err = a.cur.err
		}
	}
	n := copy(p, a.cur.b[a.off:])
	a.off += n
	return n, nil
}

func (a *asyncReader) Close() error { return a.close() }

// --- small byte-level scanners shared by the parsers ---

func isSpace(c byte) bool { return c == ' ' || c == '\t' }

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (isSpace(b[0]) || b[0] == '\r') {
		b = b[1:]
	}
	for len(b) > 0 && (isSpace(b[len(b)-1]) || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

func hexVal(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// parseHex parses hex digits (an optional 0x prefix) at the start of b and
// returns the value and the rest. ok is false when there are no digits or
// more than 16.
func parseHex(b []byte) (v uint64, rest []byte, ok bool) {
	if len(b) >= 2 && b[0] == '0' && (b[1] == 'x' || b[1] == 'X') {
		b = b[2:]
	}
	i := 0
	for i < len(b) {
		d := hexVal(b[i])
		if d < 0 {
			break
		}
		if i >= 16 {
			return 0, b, false
		}
		v = v<<4 | uint64(d)
		i++
	}
	return v, b[i:], i > 0
}

// parseDec parses decimal digits at the start of b (at most 9).
func parseDec(b []byte) (v int, rest []byte, ok bool) {
	i := 0
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		if i >= 9 {
			return 0, b, false
		}
		v = v*10 + int(b[i]-'0')
		i++
	}
	return v, b[i:], i > 0
}

// parseNum parses a number that is hex with a 0x prefix, decimal otherwise.
func parseNum(b []byte) (v uint64, rest []byte, ok bool) {
	if len(b) >= 2 && b[0] == '0' && (b[1] == 'x' || b[1] == 'X') {
		return parseHex(b)
	}
	d, rest, ok := parseDec(b)
	return uint64(d), rest, ok
}

func skipSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	return b
}

func hasPrefix(b []byte, p string) bool {
	return len(b) >= len(p) && string(b[:len(p)]) == p
}

func index(b []byte, s string) int { return bytes.Index(b, []byte(s)) }

func lastIndex(b []byte, s string) int { return bytes.LastIndex(b, []byte(s)) }
