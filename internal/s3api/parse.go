package s3api

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/slipstream-io/slipstream/internal/object"
)

// errRangeIgnored marks a Range header that is not a single valid byte
// range; like S3, the handler then serves the whole object.
var errRangeIgnored = errors.New("s3api: range header ignored")

// parseRange parses a Range header value "bytes=first-last", "bytes=first-"
// or "bytes=-suffix". It returns nil for an empty header, errRangeIgnored for
// anything that is not one well-formed range, and object.ErrInvalidRange for
// a well-formed range that no object can satisfy ("bytes=-0").
func parseRange(h string) (*object.Range, error) {
	if h == "" {
		return nil, nil
	}
	spec, ok := strings.CutPrefix(strings.TrimSpace(h), "bytes=")
	if !ok || strings.Contains(spec, ",") {
		return nil, errRangeIgnored
	}
	first, last, ok := strings.Cut(strings.TrimSpace(spec), "-")
	if !ok {
		return nil, errRangeIgnored
	}
	num := func(s string) (int64, bool) {
		if s == "" || len(s) > 19 {
			return 0, false
		}
		for i := 0; i < len(s); i++ {
			if s[i] < '0' || s[i] > '9' {
				return 0, false
			}
		}
		n, err := strconv.ParseInt(s, 10, 64)
		return n, err == nil
	}
	if first == "" {
		n, ok := num(last)
		if !ok {
			return nil, errRangeIgnored
		}
		if n == 0 {
			return nil, object.ErrInvalidRange
		}
		return &object.Range{Suffix: n}, nil
	}
	off, ok := num(first)
	if !ok {
		return nil, errRangeIgnored
	}
	if last == "" {
		return &object.Range{Offset: off, Length: -1}, nil
	}
	end, ok := num(last)
	if !ok || end < off {
		return nil, errRangeIgnored
	}
	if end == 1<<63-1 {
		return &object.Range{Offset: off, Length: -1}, nil
	}
	return &object.Range{Offset: off, Length: end - off + 1}, nil
}

// maxXMLBody bounds the XML request bodies the handler reads into memory.
const maxXMLBody = 4 << 20

// parseCompleteMultipartUpload parses a CompleteMultipartUpload body and
// checks the part numbers (1..10000, ascending).
func parseCompleteMultipartUpload(r io.Reader) ([]object.CompletePart, error) {
	var body completeMultipartUpload
	if err := xml.NewDecoder(io.LimitReader(r, maxXMLBody)).Decode(&body); err != nil {
		return nil, fmt.Errorf("%w: %v", errMalformedXML, err)
	}
	if len(body.Parts) == 0 {
		return nil, errNoParts
	}
	if len(body.Parts) > object.MaxPartNumber {
		return nil, fmt.Errorf("%w: more than %d parts", errMalformedXML, object.MaxPartNumber)
	}
	parts := make([]object.CompletePart, len(body.Parts))
	for i, p := range body.Parts {
		if p.PartNumber < 1 || p.PartNumber > object.MaxPartNumber {
			return nil, errInvalidPartNumber
		}
		if i > 0 && p.PartNumber <= body.Parts[i-1].PartNumber {
			return nil, object.ErrInvalidPartOrder
		}
		parts[i] = object.CompletePart{PartNumber: p.PartNumber, ETag: trimETag(p.ETag)}
	}
	return parts, nil
}

// maxDeleteObjects is the most keys one DeleteObjects may name.
const maxDeleteObjects = 1000

// deleteObject is one entry of a DeleteObjects body.
type deleteObject struct {
	Key       string `xml:"Key"`
	VersionID string `xml:"VersionId"`
	// A conditional delete of the key (not implemented: refused).
	ETag             string `xml:"ETag"`
	LastModifiedTime string `xml:"LastModifiedTime"`
	Size             string `xml:"Size"`
}

// parseDeleteObjects parses a DeleteObjects body.
func parseDeleteObjects(r io.Reader) (objs []deleteObject, quiet bool, err error) {
	var body deleteRequest
	if err := xml.NewDecoder(io.LimitReader(r, maxXMLBody)).Decode(&body); err != nil {
		return nil, false, fmt.Errorf("%w: %v", errMalformedXML, err)
	}
	if len(body.Objects) == 0 {
		return nil, false, errEmptyDeleteObjects
	}
	if len(body.Objects) > maxDeleteObjects {
		return nil, false, errTooManyDeleteObjects
	}
	return body.Objects, body.Quiet, nil
}

// checkVersionID accepts the version IDs of the only version objects here
// have: none, or "null" (as S3 calls the version of an unversioned object).
func checkVersionID(v string) error {
	if v != "" && v != "null" {
		return fmt.Errorf("%w: Invalid version id specified", object.ErrInvalidArgument)
	}
	return nil
}

// trimETag removes the quotes (and a weak prefix) around an ETag.
func trimETag(s string) string {
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(s, "W/")
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
	}
	return s
}

func quoteETag(s string) string { return `"` + s + `"` }

// parseCopySource parses x-amz-copy-source: "[/]bucket/key[?versionId=v]",
// URL-encoded.
func parseCopySource(s string) (bucket, key string, err error) {
	if s == "" {
		return "", "", fmt.Errorf("%w: empty", errInvalidCopySource)
	}
	if i := strings.Index(s, "?"); i >= 0 {
		q, perr := url.ParseQuery(s[i+1:])
		if perr != nil || len(q) != 1 || !q.Has("versionId") || checkVersionID(q.Get("versionId")) != nil {
			return "", "", fmt.Errorf("%w: versions are not supported", errInvalidCopySource)
		}
		s = s[:i]
	}
	dec, err := url.PathUnescape(s)
	if err != nil {
		return "", "", fmt.Errorf("%w: %v", errInvalidCopySource, err)
	}
	dec = strings.TrimPrefix(dec, "/")
	bucket, key, ok := strings.Cut(dec, "/")
	if !ok || bucket == "" || key == "" {
		return "", "", fmt.Errorf("%w: %.100q is not bucket/key", errInvalidCopySource, s)
	}
	return bucket, key, nil
}

// conditions are the conditional request headers of a GET, HEAD or copy.
type conditions struct {
	ifMatch, ifNoneMatch             string
	ifModifiedSince, ifUnmodifiedSin time.Time
	copy                             bool // copy-source conditions: every failure is 412
}

func readConditions(h http.Header, prefix string) conditions {
	var c conditions
	c.ifMatch = h.Get(prefix + "If-Match")
	c.ifNoneMatch = h.Get(prefix + "If-None-Match")
	if t, err := http.ParseTime(h.Get(prefix + "If-Modified-Since")); err == nil {
		c.ifModifiedSince = t
	}
	if t, err := http.ParseTime(h.Get(prefix + "If-Unmodified-Since")); err == nil {
		c.ifUnmodifiedSin = t
	}
	c.copy = prefix != ""
	return c
}

// ifRangeHolds evaluates an If-Range validator (RFC 9110 section 13.1.5)
// against info: a strong ETag that matches, or the object's Last-Modified
// date exactly. A weak ETag never holds. An empty validator holds.
func ifRangeHolds(v string, info object.Info) bool {
	switch {
	case v == "":
		return true
	case strings.HasPrefix(v, `"`):
		return v == `"`+info.ETag+`"`
	case strings.HasPrefix(v, "W/"):
		return false
	}
	t, err := http.ParseTime(v)
	return err == nil && info.ModTime.Truncate(time.Second).Equal(t)
}

// check evaluates the conditions against info in the order of RFC 9110
// section 13.2.2, returning object.ErrPrecondition or object.ErrNotModified.
func (c conditions) check(info object.Info) error {
	mod := info.ModTime.Truncate(time.Second)
	if c.ifMatch != "" {
		if !etagMatches(c.ifMatch, info.ETag, false) {
			return object.ErrPrecondition
		}
	} else if !c.ifUnmodifiedSin.IsZero() && mod.After(c.ifUnmodifiedSin) {
		return object.ErrPrecondition
	}
	notModified := object.ErrNotModified
	if c.copy {
		notModified = object.ErrPrecondition
	}
	if c.ifNoneMatch != "" {
		if etagMatches(c.ifNoneMatch, info.ETag, true) {
			return notModified
		}
	} else if !c.ifModifiedSince.IsZero() && !mod.After(c.ifModifiedSince) {
		return notModified
	}
	return nil
}

// etagMatches reports whether the entity-tag list of an If-Match or
// If-None-Match header is "*" or names etag (the object's, always strong).
// The weak comparison (If-None-Match, RFC 9110 section 13.1.2) ignores a
// W/ prefix; the strong one (If-Match, section 13.1.1) never matches a
// weak tag.
func etagMatches(list, etag string, weak bool) bool {
	for _, e := range strings.Split(list, ",") {
		e = strings.TrimSpace(e)
		if e == "*" {
			return true
		}
		if strings.HasPrefix(e, "W/") && !weak {
			continue
		}
		if trimETag(e) == etag {
			return true
		}
	}
	return false
}
