package sigv4

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"sort"
	"strconv"
	"strings"
)

// streamContext carries what chunk signatures are computed from.
type streamContext struct {
	key   []byte // signing key
	time  string // X-Amz-Date
	scope string
	seed  string // the request signature
}

const (
	maxChunkLine    = 4096
	maxTrailerLines = 16
)

// chunkReader decodes an aws-chunked body:
//
//	hex-size[;chunk-signature=sig]\r\n data \r\n ... 0[;chunk-signature=sig]\r\n
//	[trailer-name:value\r\n ...] [x-amz-trailer-signature:sig\r\n] \r\n
//
// verifying each chunk's signature (when sc is set), the trailing checksum
// and the trailer signature. Once the declared number of bytes is decoded it
// reads and verifies the end of the stream before handing out the last
// bytes, and withholds them on a failure, so a consumer that stops at the
// declared size still gets the error.
type chunkReader struct {
	br       *bufio.Reader
	sc       *streamContext
	prev     string
	trailer  bool
	ck       *checksum // announced by x-amz-trailer
	declared int64
	decoded  int64
	left     int64 // bytes left in the current chunk
	chunkSig string
	ch       hash.Hash // sha256 of the current chunk (signed mode)
	done     bool
	err      error
}

// NewChunkedReader returns a reader of the decoded payload of an aws-chunked
// body that is not signed chunk by chunk (STREAMING-UNSIGNED-PAYLOAD-TRAILER
// when trailer is true). declared is x-amz-decoded-content-length; trailerHdr
// is the x-amz-trailer header. It is exported for fuzzing and tools.
func NewChunkedReader(body io.Reader, declared int64, trailer bool, trailerHdr string) (io.Reader, error) {
	return newChunkReader(body, declared, nil, trailer, trailerHdr)
}

func newChunkReader(body io.Reader, declared int64, sc *streamContext, trailer bool, trailerHdr string) (*chunkReader, error) {
	c := &chunkReader{br: bufio.NewReaderSize(body, 64<<10), sc: sc, trailer: trailer, declared: declared}
	if sc != nil {
		c.prev = sc.seed
		c.ch = sha256.New()
	}
	if trailerHdr = strings.ToLower(strings.TrimSpace(trailerHdr)); trailerHdr != "" {
		if !trailer {
			return nil, fmt.Errorf("%w: x-amz-trailer without a trailer payload mode", ErrInvalidChecksum)
		}
		algo, ok := strings.CutPrefix(trailerHdr, "x-amz-checksum-")
		h := NewChecksum(algo)
		if !ok || h == nil {
			return nil, fmt.Errorf("%w: unsupported x-amz-trailer %.40q", ErrInvalidChecksum, trailerHdr)
		}
		c.ck = &checksum{name: trailerHdr, h: h}
	}
	return c, nil
}

func (c *chunkReader) fail(err error) error {
	c.err = err
	return err
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if c.done {
		return 0, io.EOF
	}
	for c.left == 0 {
		if err := c.nextHeader(); err != nil {
			return 0, c.fail(err)
		}
		if c.done {
			return 0, io.EOF
		}
	}
	if len(p) == 0 {
		return 0, nil
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.br.Read(p)
	if n == 0 {
		if err == nil {
			return 0, nil
		}
		return 0, c.fail(fmt.Errorf("%w: body ended inside a chunk (%v)", ErrIncompleteBody, err))
	}
	if c.ch != nil {
		c.ch.Write(p[:n])
	}
	if c.ck != nil {
		c.ck.h.Write(p[:n])
	}
	c.left -= int64(n)
	c.decoded += int64(n)
	if c.left > 0 {
		return n, nil
	}
	// A failed check withholds the bytes just read, so that even a
	// consumer that stops at the declared size (io.CopyN ignores an error
	// that comes with the last byte) falls short and sees the error.
	if err := c.endChunk(); err != nil {
		return 0, c.fail(err)
	}
	if c.decoded == c.declared {
		// All the payload is here: verify the end of the stream now.
		if err := c.nextHeader(); err != nil {
			return 0, c.fail(err)
		}
		if !c.done {
			return 0, c.fail(fmt.Errorf("%w: more data than x-amz-decoded-content-length", ErrIncompleteBody))
		}
		return n, io.EOF
	}
	return n, nil
}

func (c *chunkReader) readLine() (string, error) {
	var line []byte
	for {
		frag, err := c.br.ReadSlice('\n')
		line = append(line, frag...)
		if len(line) > maxChunkLine {
			return "", fmt.Errorf("%w: chunk header line too long", ErrIncompleteBody)
		}
		if err == nil {
			break
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == io.EOF && len(line) == 0 {
			return "", io.EOF
		}
		return "", fmt.Errorf("%w: body ended inside a chunk header (%v)", ErrIncompleteBody, err)
	}
	s, ok := strings.CutSuffix(string(line), "\r\n")
	if !ok {
		return "", fmt.Errorf("%w: chunk header line not ended by CRLF", ErrIncompleteBody)
	}
	return s, nil
}

// nextHeader reads a chunk header; a zero-size chunk ends the stream.
func (c *chunkReader) nextHeader() error {
	line, err := c.readLine()
	if err == io.EOF {
		return fmt.Errorf("%w: body ended before the final chunk", ErrIncompleteBody)
	}
	if err != nil {
		return err
	}
	sizeStr, ext, hasExt := strings.Cut(line, ";")
	if sizeStr == "" || len(sizeStr) > 16 {
		return fmt.Errorf("%w: bad chunk size %.20q", ErrIncompleteBody, sizeStr)
	}
	size, err := strconv.ParseInt(sizeStr, 16, 64)
	if err != nil || size < 0 {
		return fmt.Errorf("%w: bad chunk size %.20q", ErrIncompleteBody, sizeStr)
	}
	if size > c.declared-c.decoded {
		return fmt.Errorf("%w: chunks longer than x-amz-decoded-content-length", ErrIncompleteBody)
	}
	if c.sc != nil {
		sig, ok := strings.CutPrefix(ext, "chunk-signature=")
		if !hasExt || !ok || len(sig) != 64 || !isLowerHex(sig) {
			return fmt.Errorf("%w: chunk without a chunk-signature", ErrIncompleteBody)
		}
		c.chunkSig = sig
	}
	if size > 0 {
		c.left = size
		return nil
	}
	if c.decoded != c.declared {
		return fmt.Errorf("%w: decoded %d bytes, x-amz-decoded-content-length is %d", ErrIncompleteBody, c.decoded, c.declared)
	}
	if err := c.verifyChunkSig(); err != nil {
		return err
	}
	if err := c.readTrailers(); err != nil {
		return err
	}
	c.done = true
	return nil
}

// endChunk reads the CRLF after a chunk's data and checks its signature.
func (c *chunkReader) endChunk() error {
	var crlf [2]byte
	if _, err := io.ReadFull(c.br, crlf[:]); err != nil {
		return fmt.Errorf("%w: body ended after chunk data", ErrIncompleteBody)
	}
	if crlf != [2]byte{'\r', '\n'} {
		return fmt.Errorf("%w: chunk data not followed by CRLF", ErrIncompleteBody)
	}
	return c.verifyChunkSig()
}

func (c *chunkReader) verifyChunkSig() error {
	if c.sc == nil {
		return nil
	}
	sum := c.ch.Sum(nil)
	c.ch.Reset()
	sts := "AWS4-HMAC-SHA256-PAYLOAD\n" + c.sc.time + "\n" + c.sc.scope + "\n" + c.prev + "\n" + EmptySHA256 + "\n" + hex.EncodeToString(sum)
	sig := hexHMAC(c.sc.key, sts)
	if !hmac.Equal([]byte(sig), []byte(c.chunkSig)) {
		return fmt.Errorf("%w: chunk signature", ErrSignatureMismatch)
	}
	c.prev = sig
	return nil
}

// readTrailers reads what follows the final chunk: trailer lines (in the
// trailer modes) and the closing empty line.
func (c *chunkReader) readTrailers() error {
	trailers := map[string]string{}
	var trailerSig string
	for i := 0; ; i++ {
		line, err := c.readLine()
		if err == io.EOF {
			break // the closing CRLF is optional at the very end
		}
		if err != nil {
			return err
		}
		if line == "" {
			break
		}
		if !c.trailer || i >= maxTrailerLines {
			return fmt.Errorf("%w: unexpected data after the final chunk", ErrIncompleteBody)
		}
		name, val, ok := strings.Cut(line, ":")
		if !ok {
			return fmt.Errorf("%w: malformed trailer line", ErrIncompleteBody)
		}
		name = strings.ToLower(strings.TrimSpace(name))
		val = strings.TrimSpace(val)
		if name == "x-amz-trailer-signature" {
			trailerSig = val
			continue
		}
		if _, dup := trailers[name]; dup {
			return fmt.Errorf("%w: trailer %.40q given twice", ErrIncompleteBody, name)
		}
		trailers[name] = val
	}
	if c.br.Buffered() > 0 {
		return fmt.Errorf("%w: data after the end of the aws-chunked body", ErrIncompleteBody)
	}
	if c.sc != nil && c.trailer && (len(trailers) > 0 || trailerSig != "") {
		names := make([]string, 0, len(trailers))
		for n := range trailers {
			names = append(names, n)
		}
		sort.Strings(names)
		var canon bytes.Buffer
		for _, n := range names {
			canon.WriteString(n + ":" + trailers[n] + "\n")
		}
		sum := sha256.Sum256(canon.Bytes())
		sts := "AWS4-HMAC-SHA256-TRAILER\n" + c.sc.time + "\n" + c.sc.scope + "\n" + c.prev + "\n" + hex.EncodeToString(sum[:])
		if !hmac.Equal([]byte(hexHMAC(c.sc.key, sts)), []byte(trailerSig)) {
			return fmt.Errorf("%w: trailer signature", ErrSignatureMismatch)
		}
	}
	for name, val := range trailers {
		algo, ok := strings.CutPrefix(name, "x-amz-checksum-")
		if !ok {
			continue
		}
		if c.ck == nil || c.ck.name != name {
			return fmt.Errorf("%w: trailer %.40q was not announced in x-amz-trailer", ErrInvalidChecksum, name)
		}
		if b, err := base64.StdEncoding.DecodeString(val); err != nil || len(b) != c.ck.h.Size() {
			return fmt.Errorf("%w: %s trailer is not a base64 %s", ErrInvalidChecksum, name, algo)
		}
		c.ck.want = val
	}
	if c.ck != nil {
		if c.ck.want == "" {
			return fmt.Errorf("%w: announced trailer %s is missing", ErrIncompleteBody, c.ck.name)
		}
		return c.ck.verify(c.ck.h.Sum(nil))
	}
	return nil
}
