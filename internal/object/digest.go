package object

import (
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"strconv"
	"strings"
	"sync"
)

// Castagnoli is the CRC32C table used for every checksum of object data.
var Castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Digest is what a body is checked against: its MD5 (the S3 ETag of a
// single-part object) and its CRC32C.
type Digest struct {
	MD5    []byte
	CRC32C uint32
}

// DigestLen is the size of an encoded Digest.
const DigestLen = md5.Size + 4

// AppendBinary appends the Digest as MD5 then big-endian CRC32C.
func (d Digest) AppendBinary(b []byte) ([]byte, error) {
	if len(d.MD5) != md5.Size {
		return b, fmt.Errorf("%w: digest MD5 of %d bytes", ErrInvalidArgument, len(d.MD5))
	}
	return binary.BigEndian.AppendUint32(append(b, d.MD5...), d.CRC32C), nil
}

// ParseDigest decodes what AppendBinary wrote.
func ParseDigest(b []byte) (Digest, error) {
	if len(b) != DigestLen {
		return Digest{}, fmt.Errorf("%w: digest of %d bytes, want %d", ErrInvalidArgument, len(b), DigestLen)
	}
	return Digest{MD5: append([]byte(nil), b[:md5.Size]...), CRC32C: binary.BigEndian.Uint32(b[md5.Size:])}, nil
}

// DigestReader computes the Digest of everything read through it.
type DigestReader struct {
	r   io.Reader
	md5 hash.Hash
	crc hash.Hash32

	mu   sync.Mutex
	done bool
	d    Digest
}

// NewDigestReader returns a DigestReader over r.
func NewDigestReader(r io.Reader) *DigestReader {
	return &DigestReader{r: r, md5: md5.New(), crc: crc32.New(Castagnoli)}
}

// Read implements io.Reader; io.EOF completes the digest.
func (d *DigestReader) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	if n > 0 {
		d.md5.Write(p[:n])
		d.crc.Write(p[:n])
	}
	if err == io.EOF {
		d.mu.Lock()
		if !d.done {
			d.done, d.d = true, Digest{MD5: d.md5.Sum(nil), CRC32C: d.crc.Sum32()}
		}
		d.mu.Unlock()
	}
	return n, err
}

// Digest returns the digest of the whole body; it fails if the body has
// not been read to its end. It fits PutOptions.Digest.
func (d *DigestReader) Digest() (Digest, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.done {
		return Digest{}, fmt.Errorf("%w: digest asked for before the end of the body", ErrIncompleteBody)
	}
	return d.d, nil
}

// MultipartETag is the ETag of an object completed from parts: the hex MD5
// of the parts' binary MD5s, then "-" and their number, as S3 gives it.
func MultipartETag(parts []CompletePart) (string, error) {
	h := md5.New()
	for _, p := range parts {
		raw, err := hex.DecodeString(strings.Trim(p.ETag, `"`))
		if err != nil || len(raw) != md5.Size {
			return "", fmt.Errorf("%w: part %d has ETag %q, not an MD5", ErrInvalidPart, p.PartNumber, p.ETag)
		}
		h.Write(raw)
	}
	return hex.EncodeToString(h.Sum(nil)) + "-" + strconv.Itoa(len(parts)), nil
}
