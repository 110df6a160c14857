package evict

import "container/list"

// S3-FIFO parameters, the defaults of the paper.
const (
	smallRatio = 0.10 // share of the bytes held by the small queue before it is drained first
	maxFreq    = 3    // 2-bit access counter
)

// S3FIFO is the S3-FIFO policy: small FIFO, main FIFO (2-bit clock) and a
// ghost FIFO of keys recently evicted from small.
type S3FIFO struct {
	small, main list.List // front = newest, back = next to leave
	items       map[string]*list.Element
	smallBytes  int64
	mainBytes   int64

	// ghost remembers keys evicted from small, in eviction order; a key's
	// entry in ghostSeq names its live position so stale ring entries are
	// skipped. Its length is bounded by the number of objects in main.
	ghostQ   []ghostRef
	ghostSeq map[string]uint64
	seq      uint64
}

type fifoItem struct {
	key    string
	size   int64
	freq   uint8
	inMain bool
}

type ghostRef struct {
	key string
	seq uint64
}

var _ Policy = (*S3FIFO)(nil)

// NewS3FIFO returns an empty S3-FIFO policy.
func NewS3FIFO() *S3FIFO {
	p := &S3FIFO{items: make(map[string]*list.Element), ghostSeq: make(map[string]uint64)}
	p.small.Init()
	p.main.Init()
	return p
}

// Name implements Policy.
func (p *S3FIFO) Name() string { return "s3fifo" }

// Add implements Policy. A key found in the ghost queue goes straight to
// main; any other new key enters small.
func (p *S3FIFO) Add(key string, size int64) {
	if e, ok := p.items[key]; ok {
		it := e.Value.(*fifoItem)
		if it.inMain {
			p.mainBytes += size - it.size
		} else {
			p.smallBytes += size - it.size
		}
		it.size = size
		p.hit(it)
		return
	}
	it := &fifoItem{key: key, size: size}
	if _, ghost := p.ghostSeq[key]; ghost {
		delete(p.ghostSeq, key)
		it.inMain = true
		p.items[key] = p.main.PushFront(it)
		p.mainBytes += size
		return
	}
	p.items[key] = p.small.PushFront(it)
	p.smallBytes += size
}

func (p *S3FIFO) hit(it *fifoItem) {
	if it.freq < maxFreq {
		it.freq++
	}
}

// Touch implements Policy: a hit only bumps the counter.
func (p *S3FIFO) Touch(key string) bool {
	e, ok := p.items[key]
	if ok {
		p.hit(e.Value.(*fifoItem))
	}
	return ok
}

// Remove implements Policy.
func (p *S3FIFO) Remove(key string) bool {
	e, ok := p.items[key]
	if !ok {
		delete(p.ghostSeq, key)
		return false
	}
	p.unlink(e)
	return true
}

func (p *S3FIFO) unlink(e *list.Element) *fifoItem {
	it := e.Value.(*fifoItem)
	if it.inMain {
		p.main.Remove(e)
		p.mainBytes -= it.size
	} else {
		p.small.Remove(e)
		p.smallBytes -= it.size
	}
	delete(p.items, it.key)
	return it
}

// Evict implements Policy.
func (p *S3FIFO) Evict() (string, int64, bool) {
	for len(p.items) > 0 {
		total := p.smallBytes + p.mainBytes
		if p.small.Len() > 0 && (float64(p.smallBytes) >= smallRatio*float64(total) || p.main.Len() == 0) {
			e := p.small.Back()
			it := e.Value.(*fifoItem)
			if it.freq >= 1 {
				// Hit again while on probation: promote to main.
				p.small.Remove(e)
				p.smallBytes -= it.size
				it.freq, it.inMain = 0, true
				p.items[it.key] = p.main.PushFront(it)
				p.mainBytes += it.size
				continue
			}
			p.unlink(e)
			p.addGhost(it.key)
			return it.key, it.size, true
		}
		e := p.main.Back()
		it := e.Value.(*fifoItem)
		if it.freq > 0 {
			it.freq--
			p.main.MoveToFront(e)
			continue
		}
		p.unlink(e)
		return it.key, it.size, true
	}
	return "", 0, false
}

func (p *S3FIFO) addGhost(key string) {
	p.seq++
	p.ghostSeq[key] = p.seq
	p.ghostQ = append(p.ghostQ, ghostRef{key, p.seq})
	limit := p.main.Len() + p.small.Len()
	if limit < 16 {
		limit = 16
	}
	for len(p.ghostSeq) > limit && len(p.ghostQ) > 0 {
		g := p.ghostQ[0]
		p.ghostQ = p.ghostQ[1:]
		if s, ok := p.ghostSeq[g.key]; ok && s == g.seq {
			delete(p.ghostSeq, g.key)
		}
	}
	// Compact the ring when stale entries dominate.
	if len(p.ghostQ) > 2*limit+64 {
		q := make([]ghostRef, 0, len(p.ghostSeq))
		for _, g := range p.ghostQ {
			if s, ok := p.ghostSeq[g.key]; ok && s == g.seq {
				q = append(q, g)
			}
		}
		p.ghostQ = q
	}
}

// Contains implements Policy.
func (p *S3FIFO) Contains(key string) bool { _, ok := p.items[key]; return ok }

// Len implements Policy.
func (p *S3FIFO) Len() int { return len(p.items) }

// Bytes implements Policy.
func (p *S3FIFO) Bytes() int64 { return p.smallBytes + p.mainBytes }

// Ghosts is the number of keys remembered in the ghost queue.
func (p *S3FIFO) Ghosts() int { return len(p.ghostSeq) }
