package object

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// ValidateKey rejects keys that S3 would reject and keys that could be used
// for path tricks: empty, over MaxKeyLen bytes, not UTF-8, containing NUL or
// other control characters, a leading '/', an empty segment ("//"), or a
// segment that is "." or "..". It also rejects U+FFFE and U+FFFF, which
// XML cannot carry: a listing would return another key. A single trailing
// '/' (a folder marker) is allowed.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: key is %d bytes, the limit is %d", ErrInvalidKey, len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: key is not valid UTF-8", ErrInvalidKey)
	case key[0] == '/':
		return fmt.Errorf("%w: key starts with '/'", ErrInvalidKey)
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: key contains control character %U", ErrInvalidKey, r)
		}
		if r == 0xfffe || r == 0xffff {
			return fmt.Errorf("%w: key contains %U, which XML listings cannot carry", ErrInvalidKey, r)
		}
	}
	segs := strings.Split(strings.TrimSuffix(key, "/"), "/")
	for _, s := range segs {
		switch s {
		case "":
			return fmt.Errorf("%w: key contains an empty path segment (\"//\")", ErrInvalidKey)
		case ".", "..":
			return fmt.Errorf("%w: key contains a %q path segment", ErrInvalidKey, s)
		}
	}
	return nil
}

// ValidateBucketName applies the S3 bucket naming rules: 3-63 characters of
// lower-case letters, digits, '.' and '-', starting and ending with a letter
// or digit, no "..", not shaped like an IP address, and none of the
// prefixes and suffixes S3 reserves.
func ValidateBucketName(name string) error {
	if len(name) < 3 || len(name) > 63 {
		return fmt.Errorf("%w: %q must be 3 to 63 characters long", ErrInvalidBucketName, name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-'
		if !ok {
			return fmt.Errorf("%w: %q contains %q", ErrInvalidBucketName, name, c)
		}
	}
	if !isAlnum(name[0]) || !isAlnum(name[len(name)-1]) {
		return fmt.Errorf("%w: %q must start and end with a letter or digit", ErrInvalidBucketName, name)
	}
	if strings.Contains(name, "..") || strings.Contains(name, ".-") || strings.Contains(name, "-.") {
		return fmt.Errorf("%w: %q has adjacent periods or a period next to a hyphen", ErrInvalidBucketName, name)
	}
	if isDottedQuad(name) {
		return fmt.Errorf("%w: %q is shaped like an IP address", ErrInvalidBucketName, name)
	}
	for _, p := range reservedBucketPrefixes {
		if strings.HasPrefix(name, p) {
			return fmt.Errorf("%w: %q starts with the reserved prefix %q", ErrInvalidBucketName, name, p)
		}
	}
	for _, sfx := range reservedBucketSuffixes {
		if strings.HasSuffix(name, sfx) {
			return fmt.Errorf("%w: %q ends with the reserved suffix %q", ErrInvalidBucketName, name, sfx)
		}
	}
	return nil
}

// The bucket name prefixes and suffixes S3 reserves.
var (
	reservedBucketPrefixes = []string{"xn--", "sthree-", "amzn-s3-demo-"}
	reservedBucketSuffixes = []string{"-s3alias", "--ol-s3", "--x-s3", ".mrap"}
)

// isDottedQuad reports whether name is four dot-separated groups of
// digits, such as 192.168.5.4 or 192.168.001.001.
func isDottedQuad(name string) bool {
	groups := strings.Split(name, ".")
	if len(groups) != 4 {
		return false
	}
	for _, g := range groups {
		if g == "" || strings.Trim(g, "0123456789") != "" {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }

// ValidateMeta rejects a Content-Type or user metadata that is not UTF-8.
// HTTP lets header values carry other bytes, but metadata is kept as
// text and must read back exactly as written, so such a value is refused
// rather than changed.
func ValidateMeta(contentType string, meta map[string]string) error {
	if !utf8.ValidString(contentType) {
		return fmt.Errorf("%w: Content-Type is not UTF-8", ErrInvalidArgument)
	}
	for k, v := range meta {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return fmt.Errorf("%w: metadata %q is not UTF-8", ErrInvalidArgument, strings.ToValidUTF8(k, "?"))
		}
	}
	return nil
}
