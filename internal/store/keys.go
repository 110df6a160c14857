package store

import (
	"slices"
	"sort"
)

// maxBlock is the most keys a block of sortedKeys holds before it splits.
const maxBlock = 512

// sortedKeys is an ordered set of strings kept in blocks of at most
// maxBlock keys. Inserting or deleting a key moves at most one block and
// the block directory (n/maxBlock entries), so a bucket of millions of keys
// filled in random order (a cold epoch) stays cheap, where one sorted slice
// would move megabytes per insert. Seeking is two binary searches.
type sortedKeys struct {
	blocks [][]string // each non-empty and sorted; blocks in order
	n      int
}

// cursor is a position in a sortedKeys; valid until the next change.
type cursor struct{ b, i int }

func sortedKeysFrom(sorted []string) sortedKeys {
	var s sortedKeys
	for len(sorted) > 0 {
		n := min(len(sorted), maxBlock/2)
		s.blocks = append(s.blocks, slices.Clone(sorted[:n]))
		sorted = sorted[n:]
		s.n += n
	}
	return s
}

// Len is the number of keys.
func (s *sortedKeys) Len() int { return s.n }

// blockGE is the first block whose last key is >= k.
func (s *sortedKeys) blockGE(k string) int {
	return sort.Search(len(s.blocks), func(i int) bool { b := s.blocks[i]; return b[len(b)-1] >= k })
}

// Insert adds k and reports whether it was absent.
func (s *sortedKeys) Insert(k string) bool {
	if len(s.blocks) == 0 {
		s.blocks = [][]string{{k}}
		s.n = 1
		return true
	}
	bi := s.blockGE(k)
	if bi == len(s.blocks) {
		bi-- // past every key: append to the last block
	}
	b := s.blocks[bi]
	i, found := slices.BinarySearch(b, k)
	if found {
		return false
	}
	b = slices.Insert(b, i, k)
	s.n++
	if len(b) <= maxBlock {
		s.blocks[bi] = b
		return true
	}
	half := len(b) / 2
	right := slices.Clone(b[half:])
	s.blocks[bi] = b[:half]
	s.blocks = slices.Insert(s.blocks, bi+1, right)
	return true
}

// Delete removes k and reports whether it was present.
func (s *sortedKeys) Delete(k string) bool {
	bi := s.blockGE(k)
	if bi == len(s.blocks) {
		return false
	}
	b := s.blocks[bi]
	i, found := slices.BinarySearch(b, k)
	if !found {
		return false
	}
	b = slices.Delete(b, i, i+1)
	s.n--
	switch {
	case len(b) == 0:
		s.blocks = slices.Delete(s.blocks, bi, bi+1)
	case bi+1 < len(s.blocks) && len(b)+len(s.blocks[bi+1]) <= maxBlock/2:
		// Merge small neighbours so mass deletes do not leave a
		// directory of tiny blocks.
		s.blocks[bi] = append(b, s.blocks[bi+1]...)
		s.blocks = slices.Delete(s.blocks, bi+1, bi+2)
	default:
		s.blocks[bi] = b
	}
	return true
}

// SeekGE is the position of the first key >= k.
func (s *sortedKeys) SeekGE(k string) cursor {
	bi := s.blockGE(k)
	if bi == len(s.blocks) {
		return cursor{b: bi}
	}
	return cursor{bi, sort.SearchStrings(s.blocks[bi], k)}
}

// SeekGT is the position of the first key > k.
func (s *sortedKeys) SeekGT(k string) cursor {
	bi := sort.Search(len(s.blocks), func(i int) bool { b := s.blocks[i]; return b[len(b)-1] > k })
	if bi == len(s.blocks) {
		return cursor{b: bi}
	}
	b := s.blocks[bi]
	return cursor{bi, sort.Search(len(b), func(j int) bool { return b[j] > k })}
}

// At returns the key at c, or false at the end.
func (s *sortedKeys) At(c cursor) (string, bool) {
	if c.b >= len(s.blocks) {
		return "", false
	}
	return s.blocks[c.b][c.i], true
}

// Next is the position after c.
func (s *sortedKeys) Next(c cursor) cursor {
	c.i++
	if c.i >= len(s.blocks[c.b]) {
		c.b++
		c.i = 0
	}
	return c
}

// prefixEnd returns the smallest string greater than every string that
// starts with p, or ok=false if there is none (p is all 0xff bytes).
func prefixEnd(p string) (string, bool) {
	b := []byte(p)
	for len(b) > 0 {
		if b[len(b)-1] < 0xff {
			b[len(b)-1]++
			return string(b), true
		}
		b = b[:len(b)-1]
	}
	return "", false
}
