package loader

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseSize parses a byte size: a number with an optional binary unit
// (K, M, G, T, written K, KB, KiB or k; all are powers of 1024), e.g.
// "4096", "4K", "1.5MiB", "10GiB".
func ParseSize(s string) (int64, error) {
	u, mult := splitUnit(strings.ToUpper(strings.TrimSpace(s)))
	if u == "" {
		return 0, fmt.Errorf("%w: size %q", ErrConfig, s)
	}
	if n, err := strconv.ParseInt(u, 10, 64); err == nil {
		if n < 0 || (n > 0 && mult > (1<<62)/n) {
			return 0, fmt.Errorf("%w: size %q out of range", ErrConfig, s)
		}
		return n * mult, nil
	}
	f, err := strconv.ParseFloat(u, 64)
	if err != nil || f < 0 || f*float64(mult) > 1<<62 || f != f {
		return 0, fmt.Errorf("%w: size %q", ErrConfig, s)
	}
	return int64(f * float64(mult)), nil
}

// splitUnit splits an upper-cased size into its number and multiplier.
func splitUnit(u string) (string, int64) {
	for _, suf := range []struct {
		s string
		m int64
	}{{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		for _, form := range []string{suf.s + "IB", suf.s + "B", suf.s} {
			if strings.HasSuffix(u, form) {
				return strings.TrimSpace(strings.TrimSuffix(u, form)), suf.m
			}
		}
	}
	return strings.TrimSpace(strings.TrimSuffix(u, "B")), 1
}

// ParseSizeRange parses "SIZE" or "MIN-MAX".
func ParseSizeRange(s string) (lo, hi int64, err error) {
	a, b, ok := strings.Cut(s, "-")
	if lo, err = ParseSize(a); err != nil {
		return 0, 0, err
	}
	if !ok {
		return lo, lo, nil
	}
	if hi, err = ParseSize(b); err != nil {
		return 0, 0, err
	}
	if hi < lo {
		return 0, 0, fmt.Errorf("%w: size range %q: max below min", ErrConfig, s)
	}
	return lo, hi, nil
}
