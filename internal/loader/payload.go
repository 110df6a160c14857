package loader

import (
	"errors"
	"io"
	"math/rand/v2"
)

// blockSize is the size of the random block that payloads repeat.
const blockSize = 1 << 20

// newBlock returns blockSize bytes of seeded pseudo-random data, shared by
// all payloads of a run (read-only).
func newBlock(seed int64) []byte {
	b := make([]byte, blockSize)
	r := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	for i := 0; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// payload is an io.ReadSeeker of size bytes generated from the shared block
// at a per-object shift, so objects differ without being held in memory.
type payload struct {
	block []byte
	size  int64
	shift int64
	off   int64
}

func newPayload(block []byte, size int64, shift uint64) *payload {
	return &payload{block: block, size: size, shift: int64(shift % uint64(len(block)))}
}

func (p *payload) Read(b []byte) (int, error) {
	if p.off >= p.size {
		return 0, io.EOF
	}
	n := 0
	for n < len(b) && p.off < p.size {
		pos := (p.off + p.shift) % int64(len(p.block))
		c := copy(b[n:], p.block[pos:])
		if rest := p.size - p.off; int64(c) > rest {
			c = int(rest)
		}
		n += c
		p.off += int64(c)
	}
	return n, nil
}

func (p *payload) Seek(offset int64, whence int) (int64, error) {
	var abs int64
	switch whence {
	case io.SeekStart:
		abs = offset
	case io.SeekCurrent:
		abs = p.off + offset
	case io.SeekEnd:
		abs = p.size + offset
	default:
		return 0, errors.New("loader: bad whence")
	}
	if abs < 0 {
		return 0, errors.New("loader: negative position")
	}
	p.off = abs
	return abs, nil
}
