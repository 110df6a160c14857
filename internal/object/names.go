package object

import (
	"fmt"
	"net"
	"strings"
	"unicode/utf8"
)

// ValidateKey rejects keys that S3 would reject and keys that could be used
// for path tricks: empty, over MaxKeyLen bytes, not UTF-8, containing NUL or
// other control characters, a leading '/', an empty segment ("//"), or a
// segment that is "." or "..". A single trailing '/' (a folder marker) is
// allowed.
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
// or digit, no "..", and not shaped like an IP address.
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
	if net.ParseIP(name) != nil {
		return fmt.Errorf("%w: %q is shaped like an IP address", ErrInvalidBucketName, name)
	}
	return nil
}

func isAlnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
