package object

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateKey(t *testing.T) {
	tests := []struct {
		key string
		ok  bool
	}{
		{"a", true},
		{"dir/sub/file.bin", true},
		{"folder/", true},
		{"with space and ünïcode", true},
		{"a..b", true},
		{"", false},
		{"../etc/passwd", false},
		{"a/../b", false},
		{"a/./b", false},
		{"..", false},
		{"a//b", false},
		{"/abs", false},
		{"nul\x00byte", false},
		{"tab\tkey", false},
		{"bad\xffutf8", false},
		{"file\uffff.txt", false},
		{"file\ufffe.txt", false},
		{"file\ufffd.txt", true},
		{strings.Repeat("k", MaxKeyLen), true},
		{strings.Repeat("k", MaxKeyLen+1), false},
	}
	for _, tt := range tests {
		err := ValidateKey(tt.key)
		if (err == nil) != tt.ok {
			t.Errorf("ValidateKey(%q) = %v, want ok=%v", tt.key, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidKey) {
			t.Errorf("ValidateKey(%q) error %v does not wrap ErrInvalidKey", tt.key, err)
		}
	}
}

func TestValidateBucketName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"data", true},
		{"my-bucket.v2", true},
		{"ab", false},
		{strings.Repeat("b", 64), false},
		{"Upper", false},
		{"-start", false},
		{"end-", false},
		{"a..b", false},
		{"a.-b", false},
		{"192.168.1.1", false},
		{"192.168.001.001", false},
		{"1.2.3", true},
		{"under_score", false},
		{"xn--bucket", false},
		{"sthree-bucket", false},
		{"amzn-s3-demo-bucket", false},
		{"bucket-s3alias", false},
		{"bucket--ol-s3", false},
		{"bucket--x-s3", false},
		{"bucket.mrap", false},
		{"xn-bucket", true},
	}
	for _, tt := range tests {
		err := ValidateBucketName(tt.name)
		if (err == nil) != tt.ok {
			t.Errorf("ValidateBucketName(%q) = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

func TestRangeResolve(t *testing.T) {
	tests := []struct {
		r       Range
		size    int64
		off, n  int64
		wantErr bool
	}{
		{Range{Offset: 0, Length: 10}, 100, 0, 10, false},
		{Range{Offset: 90, Length: -1}, 100, 90, 10, false},
		{Range{Offset: 90, Length: 50}, 100, 90, 10, false},
		{Range{Suffix: 10}, 100, 90, 10, false},
		{Range{Suffix: 500}, 100, 0, 100, false},
		{Range{Offset: 100, Length: 1}, 100, 0, 0, true},
	}
	for _, tt := range tests {
		off, n, err := tt.r.Resolve(tt.size)
		if (err != nil) != tt.wantErr || off != tt.off || n != tt.n {
			t.Errorf("%+v.Resolve(%d) = %d,%d,%v want %d,%d,err=%v", tt.r, tt.size, off, n, err, tt.off, tt.n, tt.wantErr)
		}
	}
}
