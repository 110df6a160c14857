package volume

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
)

// staleStore records, per node, the chunks that node missed. A newly set
// bit is saved (fsynced) before the write that set it is acknowledged;
// cleared bits are saved lazily (a bit that survives a crash only costs a
// redundant copy).
type staleStore struct {
	path   string
	chunks atomic.Int64 // grows (grow), never shrinks

	mu        sync.Mutex // guards nodes map creation and transient
	nodes     map[string]*bitmap
	transient map[string]bool // nodes whose marks are not saved (learnt, not found)

	gen   atomic.Uint64 // bumped on every change
	total atomic.Int64  // stale bits over all nodes
	saveM sync.Mutex
	saved atomic.Uint64 // gen the file holds (written under saveM)

	markM    sync.Mutex    // held while a bit is newly set and its gen taken
	lastMark atomic.Uint64 // gen of the last newly set bit (or kept node)
}

// bitmap is a node's stale bits, in segments that growing the volume
// adds to without moving the others, so that lookups and marks need no
// lock: a caller that indexes the segments loaded before a grow reaches
// the same words as one that indexes those loaded after.
type bitmap struct {
	segs  atomic.Pointer[[]*bitSeg]
	count atomic.Int64
}

const segWords = 64 // 4096 chunks per segment

type bitSeg [segWords]atomic.Uint64

// word returns the word holding chunk c's bit.
func (b *bitmap) word(c int64) *atomic.Uint64 {
	w := c / 64
	return &(*b.segs.Load())[w/segWords][w%segWords]
}

// extend makes the bitmap hold chunks bits; the caller holds s.mu.
func (b *bitmap) extend(chunks int64) {
	old := b.segs.Load()
	n := int((chunks + 64*segWords - 1) / (64 * segWords))
	var segs []*bitSeg
	if old != nil {
		if len(*old) >= n {
			return
		}
		segs = append(segs, *old...)
	}
	for len(segs) < n {
		segs = append(segs, new(bitSeg))
	}
	b.segs.Store(&segs)
}

// staleFile is the on-disk form.
type staleFile struct {
	Chunks int64              `json:"chunks"`
	Stale  map[string][]int64 `json:"stale"`
}

func openStaleStore(dir, vol string, chunks int64) (*staleStore, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	s := &staleStore{path: filepath.Join(dir, vol+".stale.json"), nodes: map[string]*bitmap{}}
	s.chunks.Store(chunks)
	b, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, err
	}
	var f staleFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, err
	}
	for node, cs := range f.Stale {
		for _, c := range cs {
			if c >= 0 && c < chunks {
				s.mark(node, c)
			}
		}
	}
	s.saved.Store(s.gen.Load())
	s.lastMark.Store(s.gen.Load())
	return s, nil
}

func (s *staleStore) bm(node string, create bool) *bitmap {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.nodes[node]
	if b == nil && create {
		b = &bitmap{}
		b.extend(s.chunks.Load())
		s.nodes[node] = b
	}
	return b
}

// isStale is the hot-path check; it takes no lock while nothing is stale.
func (s *staleStore) isStale(node string, c int64) bool {
	if s.total.Load() == 0 {
		return false
	}
	b := s.bm(node, false)
	if b == nil || b.count.Load() == 0 {
		return false
	}
	return b.word(c).Load()&(1<<(c%64)) != 0
}

// mark sets the bit; it reports whether it was newly set. A caller that
// finds the bit already set may see it before the one that set it is done
// here; marksSaved waits for both.
func (s *staleStore) mark(node string, c int64) bool {
	b := s.bm(node, true)
	bit := uint64(1) << (c % 64)
	w := b.word(c)
	if w.Load()&bit != 0 {
		return false
	}
	s.markM.Lock()
	defer s.markM.Unlock()
	if w.Or(bit)&bit != 0 {
		return false
	}
	b.count.Add(1)
	s.total.Add(1)
	s.lastMark.Store(s.gen.Add(1))
	return true
}

// marksSaved returns once every bit set so far, by this caller or another
// one, is in the saved file (it saves the map if need be; concurrent
// callers share one write). Cleared bits are not waited for.
func (s *staleStore) marksSaved() error {
	s.markM.Lock() // a mark whose bit the caller saw has taken its gen
	want := s.lastMark.Load()
	s.markM.Unlock()
	if s.saved.Load() >= want {
		return nil
	}
	return s.saveUpTo(want)
}

func (s *staleStore) clear(node string, c int64) {
	b := s.bm(node, false)
	if b == nil {
		return
	}
	bit := uint64(1) << (c % 64)
	if b.word(c).And(^bit)&bit != 0 {
		b.count.Add(-1)
		s.total.Add(-1)
		s.gen.Add(1)
	}
}

// grow makes the store hold chunks chunks if it held fewer.
func (s *staleStore) grow(chunks int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if chunks <= s.chunks.Load() {
		return
	}
	for _, b := range s.nodes {
		b.extend(chunks)
	}
	s.chunks.Store(chunks)
}

// count is the number of chunks node misses.
func (s *staleStore) count(node string) int64 {
	if b := s.bm(node, false); b != nil {
		return b.count.Load()
	}
	return 0
}

// markAll marks every chunk of node; with transient the marks are not
// saved until keep.
func (s *staleStore) markAll(node string, transient bool) {
	s.mu.Lock()
	if s.transient == nil {
		s.transient = map[string]bool{}
	}
	s.transient[node] = transient
	s.mu.Unlock()
	for c := range s.chunks.Load() {
		s.mark(node, c)
	}
}

// keep makes node's marks saved from now on.
func (s *staleStore) keep(node string) {
	s.mu.Lock()
	delete(s.transient, node)
	s.mu.Unlock()
	s.markM.Lock()
	s.lastMark.Store(s.gen.Add(1))
	s.markM.Unlock()
}

// clearAll clears every mark of node.
func (s *staleStore) clearAll(node string) {
	for _, c := range s.list(node) {
		s.clear(node, c)
	}
	s.mu.Lock()
	delete(s.transient, node)
	s.mu.Unlock()
}

func (s *staleStore) list(node string) []int64 {
	b := s.bm(node, false)
	if b == nil || b.count.Load() == 0 {
		return nil
	}
	var out []int64
	words := (s.chunks.Load() + 63) / 64
	for i := range words {
		w := b.word(i * 64).Load()
		for w != 0 {
			j := int64(0)
			for w&(1<<j) == 0 {
				j++
			}
			out = append(out, int64(i)*64+j)
			w &^= 1 << j
		}
	}
	return out
}

func (s *staleStore) counts() map[string]int {
	s.mu.Lock()
	names := make([]string, 0, len(s.nodes))
	for n := range s.nodes {
		names = append(names, n)
	}
	s.mu.Unlock()
	out := map[string]int{}
	for _, n := range names {
		if k := s.bm(n, false).count.Load(); k > 0 {
			out[n] = int(k)
		}
	}
	return out
}

// save writes the map if it changed since the last save; concurrent
// callers share one write.
func (s *staleStore) save() error {
	return s.saveUpTo(s.gen.Load())
}

// saveUpTo writes the map unless the file already holds generation want.
func (s *staleStore) saveUpTo(want uint64) error {
	s.saveM.Lock()
	defer s.saveM.Unlock()
	if s.saved.Load() >= want {
		return nil
	}
	gen := s.gen.Load()
	f := staleFile{Chunks: s.chunks.Load(), Stale: map[string][]int64{}}
	s.mu.Lock()
	names := make([]string, 0, len(s.nodes))
	for n := range s.nodes {
		names = append(names, n)
	}
	s.mu.Unlock()
	sort.Strings(names)
	for _, n := range names {
		s.mu.Lock()
		skip := s.transient[n]
		s.mu.Unlock()
		if skip {
			continue
		}
		if l := s.list(n); len(l) > 0 {
			f.Stale[n] = l
		}
	}
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	tmp := s.path + ".tmp"
	fh, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := fh.Write(b); err != nil {
		fh.Close()
		return err
	}
	if err := fh.Sync(); err != nil {
		fh.Close()
		return err
	}
	if err := fh.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, s.path); err != nil {
		return err
	}
	if err := syncDir(filepath.Dir(s.path)); err != nil {
		return err
	}
	s.saved.Store(gen)
	return nil
}
