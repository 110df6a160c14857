// Package nbd implements the server side of the Network Block Device
// protocol (https://github.com/NetworkBlockDevice/nbd/blob/master/doc/proto.md):
// the fixed newstyle handshake with its options (export name, GO, INFO,
// LIST, ABORT, structured replies, block size constraints, the
// base:allocation metadata context) and the transmission phase (READ,
// WRITE, FLUSH, TRIM, WRITE_ZEROES, CACHE, BLOCK_STATUS, DISC, the FUA
// flag), with many requests in flight per connection answered out of
// order and several connections per export. Exports are block devices found
// by name through the Exports interface; the package does no storage itself.
package nbd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Handshake magics and flags.
const (
	nbdMagic      = 0x4e42444d41474943 // "NBDMAGIC"
	optMagic      = 0x49484156454F5054 // "IHAVEOPT"
	optReplyMagic = 0x0003e889045565a9

	flagFixedNewstyle = 1 << 0
	flagNoZeroes      = 1 << 1

	clientFlagFixedNewstyle = 1 << 0
	clientFlagNoZeroes      = 1 << 1
)

// Options.
const (
	OptExportName      = 1
	OptAbort           = 2
	OptList            = 3
	OptStartTLS        = 5
	OptInfo            = 6
	OptGo              = 7
	OptStructuredReply = 8
	OptListMetaContext = 9
	OptSetMetaContext  = 10
)

// Option reply types.
const (
	repAck            = 1
	repServer         = 2
	repInfo           = 3
	repMetaContext    = 4
	repFlagError      = 1 << 31
	repErrUnsup       = repFlagError | 1
	repErrPolicy      = repFlagError | 2
	repErrInvalid     = repFlagError | 3
	repErrTLSReqd     = repFlagError | 5
	repErrUnknown     = repFlagError | 6
	repErrBlockSizeRq = repFlagError | 8
	repErrTooBig      = repFlagError | 9
)

// Info types of NBD_REP_INFO.
const (
	infoExport      = 0
	infoName        = 1
	infoDescription = 2
	infoBlockSize   = 3
)

// Transmission flags.
const (
	tfHasFlags        = 1 << 0
	tfReadOnly        = 1 << 1
	tfSendFlush       = 1 << 2
	tfSendFUA         = 1 << 3
	tfSendTrim        = 1 << 5
	tfSendWriteZeroes = 1 << 6
	tfSendDF          = 1 << 7
	tfCanMultiConn    = 1 << 8
	tfSendCache       = 1 << 10
)

// Commands.
const (
	CmdRead        = 0
	CmdWrite       = 1
	CmdDisc        = 2
	CmdFlush       = 3
	CmdTrim        = 4
	CmdCache       = 5
	CmdWriteZeroes = 6
	CmdBlockStatus = 7
)

// Command flags.
const (
	CmdFlagFUA    = 1 << 0
	CmdFlagNoHole = 1 << 1
	CmdFlagDF     = 1 << 2
	CmdFlagReqOne = 1 << 3
)

// The one metadata context the server offers, and its ID on a connection.
const (
	MetaBaseAllocation = "base:allocation"
	metaAllocID        = 1
	stateHole          = 1 << 0
	stateZero          = 1 << 1
)

// Request and reply magics.
const (
	requestMagic          = 0x25609513
	simpleReplyMagic      = 0x67446698
	structuredReplyMagic  = 0x668e33ef
	replyFlagDone         = 1 << 0
	replyTypeNone         = 0
	replyTypeOffsetData   = 1
	replyTypeBlockStatus  = 5
	replyTypeError        = 1<<15 | 1
	requestHeaderLen      = 28
	simpleReplyHeaderLen  = 16
	structuredHeaderLen   = 20
	maxOptionLen          = 64 << 10
	maxExportNameLen      = 4096
	defaultMaxRequestSize = 32 << 20
)

// Error values carried in replies (Linux errno numbers, as the protocol says).
const (
	EPERM     = 1
	EIO       = 5
	ENOMEM    = 12
	EINVAL    = 22
	ENOSPC    = 28
	EOVERFLOW = 75
	ENOTSUP   = 95
	ESHUTDOWN = 108
)

// Sentinel errors of the codec.
var (
	ErrBadMagic     = errors.New("nbd: bad magic")
	ErrOptionTooBig = errors.New("nbd: option data too large")
	ErrBadOption    = errors.New("nbd: malformed option data")
)

// Request is one transmission-phase request header.
type Request struct {
	Flags  uint16
	Type   uint16
	Cookie uint64
	Offset uint64
	Length uint32
}

// ParseRequest decodes a 28-byte request header.
func ParseRequest(b []byte) (Request, error) {
	if len(b) < requestHeaderLen {
		return Request{}, io.ErrUnexpectedEOF
	}
	if binary.BigEndian.Uint32(b[0:4]) != requestMagic {
		return Request{}, fmt.Errorf("%w: request magic %#x", ErrBadMagic, binary.BigEndian.Uint32(b[0:4]))
	}
	return Request{
		Flags:  binary.BigEndian.Uint16(b[4:6]),
		Type:   binary.BigEndian.Uint16(b[6:8]),
		Cookie: binary.BigEndian.Uint64(b[8:16]),
		Offset: binary.BigEndian.Uint64(b[16:24]),
		Length: binary.BigEndian.Uint32(b[24:28]),
	}, nil
}

// AppendRequest encodes r (used by tests and clients).
func AppendRequest(b []byte, r Request) []byte {
	b = binary.BigEndian.AppendUint32(b, requestMagic)
	b = binary.BigEndian.AppendUint16(b, r.Flags)
	b = binary.BigEndian.AppendUint16(b, r.Type)
	b = binary.BigEndian.AppendUint64(b, r.Cookie)
	b = binary.BigEndian.AppendUint64(b, r.Offset)
	return binary.BigEndian.AppendUint32(b, r.Length)
}

// putSimpleReply writes a simple reply header into b[:16].
func putSimpleReply(b []byte, errno uint32, cookie uint64) {
	binary.BigEndian.PutUint32(b[0:4], simpleReplyMagic)
	binary.BigEndian.PutUint32(b[4:8], errno)
	binary.BigEndian.PutUint64(b[8:16], cookie)
}

// putStructuredHeader writes a structured reply chunk header into b[:20].
func putStructuredHeader(b []byte, flags, typ uint16, cookie uint64, length uint32) {
	binary.BigEndian.PutUint32(b[0:4], structuredReplyMagic)
	binary.BigEndian.PutUint16(b[4:6], flags)
	binary.BigEndian.PutUint16(b[6:8], typ)
	binary.BigEndian.PutUint64(b[8:16], cookie)
	binary.BigEndian.PutUint32(b[16:20], length)
}

// Option is one option the client sent during the handshake.
type Option struct {
	Code uint32
	Data []byte
}

// readOption reads one option; data longer than maxOptionLen is rejected
// after being discarded so that the handshake can continue.
func readOption(r io.Reader, hdr []byte) (Option, error) {
	if _, err := io.ReadFull(r, hdr[:16]); err != nil {
		return Option{}, err
	}
	if binary.BigEndian.Uint64(hdr[0:8]) != optMagic {
		return Option{}, fmt.Errorf("%w: option magic", ErrBadMagic)
	}
	o := Option{Code: binary.BigEndian.Uint32(hdr[8:12])}
	n := binary.BigEndian.Uint32(hdr[12:16])
	if n > maxOptionLen {
		if _, err := io.CopyN(io.Discard, r, int64(n)); err != nil {
			return o, err
		}
		return o, ErrOptionTooBig
	}
	o.Data = make([]byte, n)
	if _, err := io.ReadFull(r, o.Data); err != nil {
		return o, err
	}
	return o, nil
}

// AppendOption encodes an option (used by tests and clients).
func AppendOption(b []byte, code uint32, data []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, optMagic)
	b = binary.BigEndian.AppendUint32(b, code)
	b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
	return append(b, data...)
}

// appendOptReply encodes an option reply.
func appendOptReply(b []byte, opt, typ uint32, data []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, optReplyMagic)
	b = binary.BigEndian.AppendUint32(b, opt)
	b = binary.BigEndian.AppendUint32(b, typ)
	b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
	return append(b, data...)
}

// InfoRequest is the payload of NBD_OPT_INFO and NBD_OPT_GO.
type InfoRequest struct {
	Name  string
	Infos []uint16
}

// ParseInfoRequest decodes the payload of NBD_OPT_INFO / NBD_OPT_GO.
func ParseInfoRequest(d []byte) (InfoRequest, error) {
	if len(d) < 4 {
		return InfoRequest{}, fmt.Errorf("%w: short info request", ErrBadOption)
	}
	n := binary.BigEndian.Uint32(d[0:4])
	if n > maxExportNameLen || uint64(n)+6 > uint64(len(d)) {
		return InfoRequest{}, fmt.Errorf("%w: export name length %d", ErrBadOption, n)
	}
	req := InfoRequest{Name: string(d[4 : 4+n])}
	rest := d[4+n:]
	k := int(binary.BigEndian.Uint16(rest[0:2]))
	rest = rest[2:]
	if len(rest) != 2*k {
		return InfoRequest{}, fmt.Errorf("%w: %d info requests in %d bytes", ErrBadOption, k, len(rest))
	}
	req.Infos = make([]uint16, k)
	for i := range req.Infos {
		req.Infos[i] = binary.BigEndian.Uint16(rest[2*i:])
	}
	return req, nil
}

// AppendInfoRequest encodes the payload of NBD_OPT_INFO / NBD_OPT_GO.
func AppendInfoRequest(b []byte, r InfoRequest) []byte {
	b = appendString(b, r.Name)
	b = binary.BigEndian.AppendUint16(b, uint16(len(r.Infos)))
	for _, t := range r.Infos {
		b = binary.BigEndian.AppendUint16(b, t)
	}
	return b
}

// MetaContextRequest is the payload of NBD_OPT_LIST_META_CONTEXT and
// NBD_OPT_SET_META_CONTEXT.
type MetaContextRequest struct {
	Name    string
	Queries []string
}

// ParseMetaContextRequest decodes the payload of the meta context options.
func ParseMetaContextRequest(d []byte) (MetaContextRequest, error) {
	str := func() (string, bool) {
		if len(d) < 4 {
			return "", false
		}
		n := binary.BigEndian.Uint32(d[0:4])
		if n > maxExportNameLen || uint64(n) > uint64(len(d)-4) {
			return "", false
		}
		s := string(d[4 : 4+n])
		d = d[4+n:]
		return s, true
	}
	var r MetaContextRequest
	var ok bool
	if r.Name, ok = str(); !ok || len(d) < 4 {
		return MetaContextRequest{}, fmt.Errorf("%w: meta context request: export name", ErrBadOption)
	}
	k := binary.BigEndian.Uint32(d[0:4])
	d = d[4:]
	if uint64(k)*4 > uint64(len(d)) {
		return MetaContextRequest{}, fmt.Errorf("%w: %d meta context queries in %d bytes", ErrBadOption, k, len(d))
	}
	for range k {
		q, ok := str()
		if !ok {
			return MetaContextRequest{}, fmt.Errorf("%w: meta context query", ErrBadOption)
		}
		r.Queries = append(r.Queries, q)
	}
	if len(d) != 0 {
		return MetaContextRequest{}, fmt.Errorf("%w: %d bytes after the meta context queries", ErrBadOption, len(d))
	}
	return r, nil
}

// AppendMetaContextRequest encodes the payload of the meta context options.
func AppendMetaContextRequest(b []byte, r MetaContextRequest) []byte {
	b = appendString(b, r.Name)
	b = binary.BigEndian.AppendUint32(b, uint32(len(r.Queries)))
	for _, q := range r.Queries {
		b = appendString(b, q)
	}
	return b
}

// appendString encodes s with its 32-bit length first.
func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}
