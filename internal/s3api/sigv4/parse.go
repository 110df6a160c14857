package sigv4

import (
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Credential is the parsed credential of a signature: the access key and
// the scope (date, region, service).
type Credential struct {
	AccessKey string
	Date      string // yyyymmdd
	Region    string
	Service   string
}

// Scope is "date/region/service/aws4_request".
func (c Credential) Scope() string {
	return c.Date + "/" + c.Region + "/" + c.Service + "/aws4_request"
}

// Authorization is a parsed "AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=..." header.
type Authorization struct {
	Credential
	SignedHeaders []string // lower case, sorted
	Signature     string   // lower-case hex
}

// Presigned is the parsed X-Amz-* query of a presigned URL.
type Presigned struct {
	Authorization
	Time    time.Time
	Expires time.Duration
}

const maxAuthLen = 16 << 10

// ParseAuthorization parses an Authorization header value.
func ParseAuthorization(h string) (Authorization, error) {
	var a Authorization
	if len(h) > maxAuthLen {
		return a, fmt.Errorf("%w: header too long", ErrMalformedAuth)
	}
	rest, ok := strings.CutPrefix(h, Algorithm+" ")
	if !ok {
		return a, ErrUnsupportedAuth
	}
	var cred, signed, sig string
	var haveCred, haveSigned, haveSig bool
	for _, part := range strings.Split(rest, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return a, fmt.Errorf("%w: %.60q is not key=value", ErrMalformedAuth, part)
		}
		switch strings.TrimSpace(k) {
		case "Credential":
			if haveCred {
				return a, fmt.Errorf("%w: Credential given twice", ErrMalformedAuth)
			}
			cred, haveCred = v, true
		case "SignedHeaders":
			if haveSigned {
				return a, fmt.Errorf("%w: SignedHeaders given twice", ErrMalformedAuth)
			}
			signed, haveSigned = v, true
		case "Signature":
			if haveSig {
				return a, fmt.Errorf("%w: Signature given twice", ErrMalformedAuth)
			}
			sig, haveSig = v, true
		default:
			return a, fmt.Errorf("%w: unknown component %.40q", ErrMalformedAuth, k)
		}
	}
	if !haveCred || !haveSigned || !haveSig {
		return a, fmt.Errorf("%w: Credential, SignedHeaders and Signature are all required", ErrMalformedAuth)
	}
	var err error
	if a.Credential, err = parseCredential(cred); err != nil {
		return a, fmt.Errorf("%w: %w", ErrMalformedAuth, err)
	}
	if a.SignedHeaders, err = parseSignedHeaders(signed); err != nil {
		return a, fmt.Errorf("%w: %w", ErrMalformedAuth, err)
	}
	if len(sig) != 64 || !isLowerHex(sig) {
		return a, fmt.Errorf("%w: signature is not 64 lower-case hex digits", ErrMalformedAuth)
	}
	a.Signature = sig
	return a, nil
}

// ParsePresigned parses the X-Amz-* parameters of a presigned URL's query.
func ParsePresigned(q url.Values) (Presigned, error) {
	var p Presigned
	get := func(name string) (string, error) {
		vs := q[name]
		if len(vs) != 1 || vs[0] == "" {
			return "", fmt.Errorf("%w: %s must be given once", ErrMalformedPresign, name)
		}
		return vs[0], nil
	}
	alg, err := get("X-Amz-Algorithm")
	if err != nil {
		return p, err
	}
	if alg != Algorithm {
		return p, fmt.Errorf("%w: algorithm %.40q", ErrMalformedPresign, alg)
	}
	cred, err := get("X-Amz-Credential")
	if err != nil {
		return p, err
	}
	if p.Credential, err = parseCredential(cred); err != nil {
		return p, fmt.Errorf("%w: %w", ErrMalformedPresign, err)
	}
	date, err := get("X-Amz-Date")
	if err != nil {
		return p, err
	}
	if p.Time, err = time.Parse(TimeFormat, date); err != nil {
		return p, fmt.Errorf("%w: X-Amz-Date %.40q", ErrMalformedPresign, date)
	}
	if p.Time.Format(DateFormat) != p.Date {
		return p, fmt.Errorf("%w: credential date does not match X-Amz-Date", ErrMalformedPresign)
	}
	exp, err := get("X-Amz-Expires")
	if err != nil {
		return p, err
	}
	secs, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || secs < 0 || time.Duration(secs)*time.Second > MaxPresignExpiry {
		return p, fmt.Errorf("%w: X-Amz-Expires must be 0 to %d seconds", ErrMalformedPresign, int64(MaxPresignExpiry/time.Second))
	}
	p.Expires = time.Duration(secs) * time.Second
	signed, err := get("X-Amz-SignedHeaders")
	if err != nil {
		return p, err
	}
	if p.SignedHeaders, err = parseSignedHeaders(signed); err != nil {
		return p, fmt.Errorf("%w: %w", ErrMalformedPresign, err)
	}
	sig, err := get("X-Amz-Signature")
	if err != nil {
		return p, err
	}
	if len(sig) != 64 || !isLowerHex(sig) {
		return p, fmt.Errorf("%w: signature is not 64 lower-case hex digits", ErrMalformedPresign)
	}
	p.Signature = sig
	return p, nil
}

func parseCredential(s string) (Credential, error) {
	var c Credential
	parts := strings.Split(s, "/")
	if len(parts) != 5 {
		return c, fmt.Errorf("credential %.80q is not key/date/region/service/aws4_request", s)
	}
	if parts[0] == "" || parts[2] == "" {
		return c, fmt.Errorf("credential %.80q has an empty access key or region", s)
	}
	if _, err := time.Parse(DateFormat, parts[1]); err != nil || len(parts[1]) != 8 {
		return c, fmt.Errorf("credential date %.20q is not yyyymmdd", parts[1])
	}
	if parts[3] != "s3" {
		return c, fmt.Errorf("credential service %.20q is not s3", parts[3])
	}
	if parts[4] != "aws4_request" {
		return c, fmt.Errorf("credential terminator %.20q is not aws4_request", parts[4])
	}
	return Credential{AccessKey: parts[0], Date: parts[1], Region: parts[2], Service: parts[3]}, nil
}

func parseSignedHeaders(s string) ([]string, error) {
	if s == "" {
		return nil, fmt.Errorf("empty SignedHeaders")
	}
	hs := strings.Split(s, ";")
	for _, h := range hs {
		if h == "" || h != strings.ToLower(h) || strings.ContainsAny(h, " \t\r\n:") {
			return nil, fmt.Errorf("bad signed header name %.40q", h)
		}
	}
	if !sort.StringsAreSorted(hs) {
		sort.Strings(hs)
	}
	hasHost := false
	for _, h := range hs {
		if h == "host" {
			hasHost = true
		}
	}
	if !hasHost {
		return nil, fmt.Errorf("SignedHeaders must include host")
	}
	return hs, nil
}
