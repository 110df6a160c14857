// Package placement decides where data lives: rendezvous (highest random
// weight, HRW) hashing picks an ordered list of nodes for every object or
// chunk, then a mountpath inside the chosen node. The functions are pure:
// the same inputs give the same answer on every node, client and version,
// so a change of the hash is a change of the on-disk format.
package placement

import (
	"sort"

	"github.com/cespare/xxhash/v2"
)

// Score is the HRW weight of candidate for name. The candidate with the
// highest score owns the name.
func Score(candidate, name string) uint64 {
	var d xxhash.Digest
	d.Reset()
	_, _ = d.WriteString(candidate)
	_, _ = d.Write([]byte{0})
	_, _ = d.WriteString(name)
	return mix(d.Sum64())
}

// mix is the 64-bit finaliser of MurmurHash3; it spreads the xxhash output
// so that scores of similar candidate names are independent.
func mix(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// ObjectName is the name HRW hashes for an object.
func ObjectName(bucket, key string) string { return bucket + "/" + key }

// Order returns the candidates sorted by descending HRW score for name: the
// first is the owner, the next ones hold the replicas. The input slice is
// not modified.
func Order(candidates []string, name string) []string {
	type scored struct {
		id    string
		score uint64
	}
	s := make([]scored, len(candidates))
	for i, c := range candidates {
		s[i] = scored{c, Score(c, name)}
	}
	sort.Slice(s, func(i, j int) bool {
		if s[i].score != s[j].score {
			return s[i].score > s[j].score
		}
		return s[i].id < s[j].id
	})
	out := make([]string, len(s))
	for i := range s {
		out[i] = s[i].id
	}
	return out
}

// Owners returns the first n candidates in HRW order for name (fewer if
// there are fewer candidates).
func Owners(candidates []string, name string, n int) []string {
	o := Order(candidates, name)
	if n < len(o) {
		o = o[:n]
	}
	return o
}

// Owner returns the single highest-scoring candidate for name, or "" if
// there are none. It does not sort and does not allocate.
func Owner(candidates []string, name string) string {
	best, bestScore := "", uint64(0)
	for _, c := range candidates {
		sc := Score(c, name)
		if best == "" || sc > bestScore || sc == bestScore && c < best {
			best, bestScore = c, sc
		}
	}
	return best
}

// Mountpath returns the index of the mountpath that holds name inside a
// node, or -1 if there are none. Mountpaths are identified by their paths.
func Mountpath(mountpaths []string, name string) int {
	best, bestScore := -1, uint64(0)
	for i, m := range mountpaths {
		sc := Score(m, name)
		if best < 0 || sc > bestScore {
			best, bestScore = i, sc
		}
	}
	return best
}
