// Package hostlist converts between host name lists and the compact Slurm
// hostlist syntax, e.g. node[001-004,009],stor[1-2].
package hostlist

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// ErrSyntax is returned (wrapped) for a malformed hostlist expression.
var ErrSyntax = errors.New("hostlist: syntax error")

// MaxHosts bounds what Expand produces, so a short expression cannot ask
// for unbounded memory.
const MaxHosts = 1 << 18

// Compress writes names as a Slurm hostlist. Names that end in digits are
// grouped by prefix and digit width; ranges keep zero padding. Order: by
// prefix (a name without a numeric suffix is its own prefix, so "a" comes
// before "b[1-2]" and "node" before "node[1-2]"), then by digit width,
// then by number; duplicates are dropped.
func Compress(names []string) string {
	type key struct {
		prefix string
		width  int // 0: a name without a numeric suffix (in prefix)
	}
	groups := map[key][]int{}
	for _, n := range names {
		i := len(n)
		for i > 0 && n[i-1] >= '0' && n[i-1] <= '9' {
			i--
		}
		digits := n[i:]
		if digits == "" || len(digits) > 9 || strings.ContainsAny(n[:i], "[],") {
			groups[key{n, 0}] = nil
			continue
		}
		v, _ := strconv.Atoi(digits)
		groups[key{n[:i], len(digits)}] = append(groups[key{n[:i], len(digits)}], v)
	}
	keys := make([]key, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].prefix != keys[j].prefix {
			return keys[i].prefix < keys[j].prefix
		}
		return keys[i].width < keys[j].width
	})
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		if k.width == 0 {
			parts = append(parts, k.prefix)
			continue
		}
		vs := groups[k]
		sort.Ints(vs)
		var rs []string
		for i := 0; i < len(vs); {
			j := i
			for j+1 < len(vs) && vs[j+1] <= vs[j]+1 {
				j++
			}
			lo, hi := fmt.Sprintf("%0*d", k.width, vs[i]), fmt.Sprintf("%0*d", k.width, vs[j])
			if lo == hi {
				rs = append(rs, lo)
			} else {
				rs = append(rs, lo+"-"+hi)
			}
			i = j + 1
		}
		if len(rs) == 1 && !strings.Contains(rs[0], "-") {
			parts = append(parts, k.prefix+rs[0])
		} else {
			parts = append(parts, k.prefix+"["+strings.Join(rs, ",")+"]")
		}
	}
	return strings.Join(parts, ",")
}

// Expand parses a hostlist such as "node[001-003,007],stor1" or
// "rack[1-2]-n[01-04]" into names (several bracket groups multiply).
func Expand(s string) ([]string, error) {
	var out []string
	s = strings.TrimSpace(s)
	for len(s) > 0 {
		// split at the next comma outside brackets
		depth, i := 0, 0
		for ; i < len(s); i++ {
			switch s[i] {
			case '[':
				depth++
			case ']':
				depth--
			}
			if s[i] == ',' && depth == 0 {
				break
			}
		}
		item := strings.TrimSpace(s[:i])
		if i < len(s) {
			s = s[i+1:]
		} else {
			s = ""
		}
		if item == "" {
			continue
		}
		names, err := expandItem(item, MaxHosts-len(out))
		if err != nil {
			return nil, err
		}
		out = append(out, names...)
	}
	return out, nil
}

func expandItem(item string, limit int) ([]string, error) {
	lb := strings.IndexByte(item, '[')
	if lb < 0 {
		if strings.ContainsAny(item, "]") {
			return nil, fmt.Errorf("%w: stray ']' in %q", ErrSyntax, item)
		}
		return []string{item}, nil
	}
	rb := strings.IndexByte(item, ']')
	if rb < lb || strings.Contains(item[lb+1:rb], "[") {
		return nil, fmt.Errorf("%w: bad brackets in %q", ErrSyntax, item)
	}
	prefix, body := item[:lb], item[lb+1:rb]
	// the rest may hold further bracket groups: rack[1-2]-n[01-04]
	tails, err := expandItem(item[rb+1:], limit)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range strings.Split(body, ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		a, ok := parseNumber(lo)
		if !ok {
			return nil, fmt.Errorf("%w: bad number %q in %q", ErrSyntax, lo, item)
		}
		b := a
		width := len(lo)
		if isRange {
			b, ok = parseNumber(hi)
			if !ok || b < a {
				return nil, fmt.Errorf("%w: bad range %q in %q", ErrSyntax, r, item)
			}
		}
		// Numbers have at most maxDigits digits, so n cannot overflow; the
		// division keeps n*len(tails) from overflowing too.
		if n := b - a + 1; n <= 0 || n > (limit-len(out))/len(tails) {
			return nil, fmt.Errorf("%w: more than %d hosts", ErrSyntax, MaxHosts)
		}
		for v := a; v <= b; v++ {
			for _, t := range tails {
				out = append(out, fmt.Sprintf("%s%0*d%s", prefix, width, v, t))
			}
		}
	}
	return out, nil
}

// maxDigits bounds the digits of a number in a bracket group, so ranges
// stay far from int overflow.
const maxDigits = 9

// parseNumber parses a bracket-group number: 1 to maxDigits decimal
// digits, no sign.
func parseNumber(s string) (int, bool) {
	if s == "" || len(s) > maxDigits {
		return 0, false
	}
	v := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}
