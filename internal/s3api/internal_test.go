package s3api

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/s3api/sigv4"
)

func TestParseRange(t *testing.T) {
	tests := []struct {
		h    string
		want *object.Range
		err  error
	}{
		{"", nil, nil},
		{"bytes=0-9", &object.Range{Offset: 0, Length: 10}, nil},
		{"bytes=5-", &object.Range{Offset: 5, Length: -1}, nil},
		{"bytes=-20", &object.Range{Suffix: 20}, nil},
		{" bytes=7-7 ", &object.Range{Offset: 7, Length: 1}, nil},
		{"bytes=0-9223372036854775807", &object.Range{Offset: 0, Length: -1}, nil},
		{"bytes=-0", nil, object.ErrInvalidRange},
		{"bytes=9-5", nil, errRangeIgnored},
		{"bytes=0-1,3-4", nil, errRangeIgnored},
		{"items=0-1", nil, errRangeIgnored},
		{"bytes=a-b", nil, errRangeIgnored},
		{"bytes=-", nil, errRangeIgnored},
		{"bytes=+1-2", nil, errRangeIgnored},
		{"bytes=1-99999999999999999999", nil, errRangeIgnored},
	}
	for _, tt := range tests {
		got, err := parseRange(tt.h)
		if !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
			t.Errorf("parseRange(%q) err = %v, want %v", tt.h, err, tt.err)
			continue
		}
		if (got == nil) != (tt.want == nil) || got != nil && *got != *tt.want {
			t.Errorf("parseRange(%q) = %+v, want %+v", tt.h, got, tt.want)
		}
	}
}

func TestConditions(t *testing.T) {
	mod := time.Date(2025, 1, 2, 3, 4, 5, 600, time.UTC)
	info := object.Info{ETag: "abc", ModTime: mod}
	before, after := mod.Add(-time.Hour).Format(http.TimeFormat), mod.Add(time.Hour).Format(http.TimeFormat)
	same := mod.Format(http.TimeFormat)
	tests := []struct {
		name   string
		hdr    map[string]string
		prefix string
		want   error
	}{
		{"none", nil, "", nil},
		{"if-match hit", map[string]string{"If-Match": `"abc"`}, "", nil},
		{"if-match list", map[string]string{"If-Match": `"x", "abc"`}, "", nil},
		{"if-match star", map[string]string{"If-Match": `*`}, "", nil},
		{"if-match miss", map[string]string{"If-Match": `"x"`}, "", object.ErrPrecondition},
		{"if-match weak", map[string]string{"If-Match": `W/"abc"`}, "", object.ErrPrecondition},
		{"if-match weak and strong", map[string]string{"If-Match": `W/"abc", "abc"`}, "", nil},
		{"if-none-match weak", map[string]string{"If-None-Match": `W/"abc"`}, "", object.ErrNotModified},
		{"if-none-match hit", map[string]string{"If-None-Match": `"abc"`}, "", object.ErrNotModified},
		{"if-none-match miss", map[string]string{"If-None-Match": `"x"`}, "", nil},
		{"modified since before", map[string]string{"If-Modified-Since": before}, "", nil},
		{"modified since same second", map[string]string{"If-Modified-Since": same}, "", object.ErrNotModified},
		{"modified since after", map[string]string{"If-Modified-Since": after}, "", object.ErrNotModified},
		{"unmodified since before", map[string]string{"If-Unmodified-Since": before}, "", object.ErrPrecondition},
		{"unmodified since after", map[string]string{"If-Unmodified-Since": after}, "", nil},
		{"if-match wins over unmodified-since", map[string]string{"If-Match": `"abc"`, "If-Unmodified-Since": before}, "", nil},
		{"if-none-match wins over modified-since", map[string]string{"If-None-Match": `"x"`, "If-Modified-Since": after}, "", nil},
		{"bad date ignored", map[string]string{"If-Modified-Since": "yesterday"}, "", nil},
		{"copy none-match", map[string]string{"X-Amz-Copy-Source-If-None-Match": `"abc"`}, "X-Amz-Copy-Source-", object.ErrPrecondition},
		{"copy modified-since", map[string]string{"X-Amz-Copy-Source-If-Modified-Since": after}, "X-Amz-Copy-Source-", object.ErrPrecondition},
		{"copy match", map[string]string{"X-Amz-Copy-Source-If-Match": `"abc"`}, "X-Amz-Copy-Source-", nil},
		{"copy match weak", map[string]string{"X-Amz-Copy-Source-If-Match": `W/"abc"`}, "X-Amz-Copy-Source-", object.ErrPrecondition},
		{"copy none-match weak", map[string]string{"X-Amz-Copy-Source-If-None-Match": `W/"abc"`}, "X-Amz-Copy-Source-", object.ErrPrecondition},
	}
	for _, tt := range tests {
		h := http.Header{}
		for k, v := range tt.hdr {
			h.Set(k, v)
		}
		if err := readConditions(h, tt.prefix).check(info); err != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
}

func TestParseCopySource(t *testing.T) {
	tests := []struct {
		s, bucket, key string
		ok             bool
	}{
		{"bkt/key", "bkt", "key", true},
		{"/bkt/dir/key", "bkt", "dir/key", true},
		{"bkt/a%20b%2Fc", "bkt", "a b/c", true},
		{"bkt/%C3%BC", "bkt", "ü", true},
		{"bkt/key?versionId=null", "bkt", "key", true},
		{"bkt/key?versionId=3", "", "", false},
		{"bkt", "", "", false},
		{"/bkt/", "", "", false},
		{"", "", "", false},
		{"bkt/%zz", "", "", false},
	}
	for _, tt := range tests {
		b, k, err := parseCopySource(tt.s)
		if (err == nil) != tt.ok || b != tt.bucket || k != tt.key {
			t.Errorf("parseCopySource(%q) = %q, %q, %v", tt.s, b, k, err)
		}
		if err != nil && !errors.Is(err, errInvalidCopySource) {
			t.Errorf("parseCopySource(%q) error %v does not wrap errInvalidCopySource", tt.s, err)
		}
	}
}

func TestErrorMapping(t *testing.T) {
	tests := []struct {
		err    error
		code   string
		status int
	}{
		{fmt.Errorf("node: %w", object.ErrNotFound), "NoSuchKey", 404},
		{fmt.Errorf("x: %w", object.ErrBucketNotFound), "NoSuchBucket", 404},
		{object.ErrBucketNotEmpty, "BucketNotEmpty", 409},
		{object.ErrNoSpace, "InsufficientStorage", 507},
		{object.ErrSlowDown, "SlowDown", 503},
		{object.ErrUnavailable, "ServiceUnavailable", 503},
		{fmt.Errorf("s3 backend: %w", object.ErrBackend), "ServiceUnavailable", 503},
		{fmt.Errorf("s3 backend: %w", object.ErrBackendDenied), "AccessDenied", 403},
		{object.ErrInvalidRange, "InvalidRange", 416},
		{object.ErrEntityTooSmall, "EntityTooSmall", 400},
		{fmt.Errorf("%w: %w", object.ErrIncompleteBody, sigv4.ErrSignatureMismatch), "SignatureDoesNotMatch", 403},
		{sigv4.ErrRequestExpired, "AccessDenied", 403},
		{sigv4.ErrTimeSkewed, "RequestTimeTooSkewed", 403},
		{sigv4.ErrContentSHA256Mismatch, "XAmzContentSHA256Mismatch", 400},
		{sigv4.ErrIncompleteBody, "IncompleteBody", 400},
		{sigv4.ErrChecksumMismatch, "BadDigest", 400},
		{errKeyTooLong, "KeyTooLongError", 400},
		{errMissingLength, "MissingContentLength", 411},
		{errors.New("disk on fire"), "InternalError", 500},
	}
	for _, tt := range tests {
		e := toAPIError(tt.err)
		if e.Code != tt.code || e.Status != tt.status || e.Message == "" {
			t.Errorf("toAPIError(%v) = %+v, want %s %d", tt.err, e, tt.code, tt.status)
		}
	}
	// Every sentinel of the object package has a mapping of its own.
	for _, err := range []error{object.ErrBucketNotFound, object.ErrBucketExists, object.ErrBucketNotEmpty, object.ErrInvalidBucketName,
		object.ErrNotFound, object.ErrInvalidKey, object.ErrBadDigest, object.ErrIncompleteBody, object.ErrTooLarge, object.ErrNoSpace,
		object.ErrPrecondition, object.ErrNotModified, object.ErrInvalidRange, object.ErrUploadNotFound, object.ErrInvalidPart,
		object.ErrInvalidPartOrder, object.ErrEntityTooSmall, object.ErrUnavailable, object.ErrBackend, object.ErrInvalidArgument, object.ErrSlowDown} {
		if toAPIError(err).Code == "InternalError" {
			t.Errorf("%v maps to InternalError", err)
		}
	}
}

func TestRoute(t *testing.T) {
	hh, err := NewHandler(Config{Domains: []string{"s3.example.com", ".s3.local."}}, nopObjects{})
	if err != nil {
		t.Fatal(err)
	}
	h := hh.(*handler)
	tests := []struct{ host, path, bucket, key string }{
		{"127.0.0.1:9000", "/", "", ""},
		{"127.0.0.1:9000", "/bkt", "bkt", ""},
		{"127.0.0.1:9000", "/bkt/", "bkt", ""},
		{"127.0.0.1:9000", "/bkt/a/b//c", "bkt", "a/b//c"},
		{"bkt.s3.example.com", "/a/b", "bkt", "a/b"},
		{"BKT.S3.Example.com:443", "/", "bkt", ""},
		{"my.dotted.bkt.s3.local", "/k", "my.dotted.bkt", "k"},
		{"s3.example.com", "/bkt/k", "bkt", "k"},
		{"other.example.com", "/bkt/k", "bkt", "k"},
		{"[::1]:9000", "/bkt/k", "bkt", "k"},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "http://x"+tt.path, nil)
		r.Host = tt.host
		b, k, _ := h.route(r)
		if b != tt.bucket || k != tt.key {
			t.Errorf("route(%s%s) = %q, %q, want %q, %q", tt.host, tt.path, b, k, tt.bucket, tt.key)
		}
	}
	if _, err := NewHandler(Config{Domains: []string{" "}}, nopObjects{}); err == nil {
		t.Error("an empty domain was accepted")
	}
	if _, err := NewHandler(Config{}, nil); err == nil {
		t.Error("nil Objects was accepted")
	}
}

func TestS3URLEncode(t *testing.T) {
	for in, want := range map[string]string{"a b": "a%20b", "c+d/e": "c%2Bd/e", "ü": "%C3%BC", "x~y_z.-": "x~y_z.-"} {
		if got := s3URLEncode(in); got != want {
			t.Errorf("s3URLEncode(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseBodies(t *testing.T) {
	parts, err := parseCompleteMultipartUpload(strings.NewReader(`<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>"aa"</ETag></Part><Part><ETag>bb</ETag><PartNumber>3</PartNumber></Part></CompleteMultipartUpload>`))
	if err != nil || len(parts) != 2 || parts[0] != (object.CompletePart{PartNumber: 1, ETag: "aa"}) || parts[1] != (object.CompletePart{PartNumber: 3, ETag: "bb"}) {
		t.Fatalf("parts %+v, %v", parts, err)
	}
	for body, want := range map[string]error{
		`<CompleteMultipartUpload></CompleteMultipartUpload>`:                                                                               errNoParts,
		`<CompleteMultipartUpload><Part><PartNumber>2</PartNumber></Part><Part><PartNumber>1</PartNumber></Part></CompleteMultipartUpload>`: object.ErrInvalidPartOrder,
		`<CompleteMultipartUpload><Part><PartNumber>0</PartNumber></Part></CompleteMultipartUpload>`:                                        errInvalidPartNumber,
		`<CompleteMultipartUpload><Part>`: errMalformedXML,
		`<Other/>`:                        errMalformedXML,
	} {
		if _, err := parseCompleteMultipartUpload(strings.NewReader(body)); !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", body, err, want)
		}
	}
	objs, quiet, err := parseDeleteObjects(strings.NewReader(`<Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Quiet>true</Quiet><Object><Key>a</Key></Object><Object><Key>b/c</Key><VersionId>null</VersionId></Object></Delete>`))
	if err != nil || !quiet || len(objs) != 2 || objs[0] != (deleteObject{Key: "a"}) || objs[1] != (deleteObject{Key: "b/c", VersionID: "null"}) {
		t.Fatalf("delete entries %v quiet %v err %v", objs, quiet, err)
	}
	many := "<Delete>" + strings.Repeat("<Object><Key>k</Key></Object>", 1001) + "</Delete>"
	if _, _, err := parseDeleteObjects(strings.NewReader(many)); !errors.Is(err, errTooManyDeleteObjects) {
		t.Errorf("1001 keys: %v", err)
	}
	if _, _, err := parseDeleteObjects(strings.NewReader("<Delete></Delete>")); !errors.Is(err, errEmptyDeleteObjects) {
		t.Errorf("no keys: %v", err)
	}
}
