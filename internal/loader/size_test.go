package loader

import (
	"errors"
	"testing"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"4096", 4096, true},
		{"4K", 4096, true},
		{"4k", 4096, true},
		{"4KB", 4096, true},
		{"4KiB", 4096, true},
		{"32KiB", 32 << 10, true},
		{"1.5M", 3 << 19, true},
		{"10GiB", 10 << 30, true},
		{"2T", 2 << 40, true},
		{"100B", 100, true},
		{" 7 MiB ", 7 << 20, true},
		{"", 0, false},
		{"K", 0, false},
		{"-1K", 0, false},
		{"abc", 0, false},
		{"99999999999T", 0, false},
		{"NaN", 0, false},
	}
	for _, tc := range tests {
		got, err := ParseSize(tc.in)
		if tc.ok && (err != nil || got != tc.want) {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
		if !tc.ok && !errors.Is(err, ErrConfig) {
			t.Errorf("ParseSize(%q) = %d, %v; want ErrConfig", tc.in, got, err)
		}
	}
	lo, hi, err := ParseSizeRange("4K-1M")
	if err != nil || lo != 4096 || hi != 1<<20 {
		t.Errorf("range = %d %d %v", lo, hi, err)
	}
	if _, _, err := ParseSizeRange("1M-4K"); err == nil {
		t.Error("inverted range accepted")
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"4K", "1.5MiB", "10GiB-20GiB", "0", "1e3K"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		lo, hi, err := ParseSizeRange(s)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("unwrapped error %v", err)
			}
			return
		}
		if lo < 0 || hi < lo {
			t.Fatalf("ParseSizeRange(%q) = %d, %d", s, lo, hi)
		}
	})
}
