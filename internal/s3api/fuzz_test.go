package s3api

import (
	"bytes"
	"errors"
	"testing"

	"github.com/slipstream-io/slipstream/internal/object"
)

func FuzzParseRange(f *testing.F) {
	for _, s := range []string{"bytes=0-9", "bytes=5-", "bytes=-20", "bytes=-0", "bytes=9-5", "bytes=0-1,2-3", "bytes=0-9223372036854775807"} {
		f.Add(s, int64(100))
	}
	f.Fuzz(func(t *testing.T, h string, size int64) {
		r, err := parseRange(h)
		if err != nil {
			if !errors.Is(err, errRangeIgnored) && !errors.Is(err, object.ErrInvalidRange) {
				t.Fatalf("parseRange(%q): unexpected error %v", h, err)
			}
			return
		}
		if r == nil {
			if h != "" {
				t.Fatalf("parseRange(%q) = nil, nil", h)
			}
			return
		}
		if r.Offset < 0 || r.Suffix < 0 || (r.Length < 1 && r.Length != -1 && r.Suffix == 0) {
			t.Fatalf("parseRange(%q) = %+v", h, *r)
		}
		if size < 0 {
			return
		}
		off, n, err := r.Resolve(size)
		if err == nil && (off < 0 || n < 0 || off+n > size) {
			t.Fatalf("%+v.Resolve(%d) = %d, %d", *r, size, off, n)
		}
	})
}

func FuzzParseCompleteMultipartUpload(f *testing.F) {
	f.Add([]byte(`<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>"aa"</ETag></Part><Part><PartNumber>2</PartNumber><ETag>bb</ETag></Part></CompleteMultipartUpload>`))
	f.Add([]byte(`<CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Part><ETag>&quot;x&quot;</ETag><PartNumber>10000</PartNumber></Part></CompleteMultipartUpload>`))
	f.Add([]byte(`<CompleteMultipartUpload><Part><PartNumber>-1</PartNumber></Part>`))
	f.Fuzz(func(t *testing.T, body []byte) {
		parts, err := parseCompleteMultipartUpload(bytes.NewReader(body))
		if err != nil {
			return
		}
		if len(parts) == 0 {
			t.Fatal("success without parts")
		}
		for i, p := range parts {
			if p.PartNumber < 1 || p.PartNumber > object.MaxPartNumber || i > 0 && p.PartNumber <= parts[i-1].PartNumber {
				t.Fatalf("accepted part list %+v", parts)
			}
		}
	})
}

func FuzzParseDeleteObjects(f *testing.F) {
	f.Add([]byte(`<Delete><Quiet>true</Quiet><Object><Key>a</Key></Object><Object><Key>b</Key><VersionId>v</VersionId></Object></Delete>`))
	f.Add([]byte(`<Delete><Object><Key>&lt;&amp;</Key></Object></Delete>`))
	f.Add([]byte(`<Delete><Quiet>maybe</Quiet></Delete>`))
	f.Fuzz(func(t *testing.T, body []byte) {
		objs, _, err := parseDeleteObjects(bytes.NewReader(body))
		if err != nil {
			if !errors.Is(err, errMalformedXML) && !errors.Is(err, errEmptyDeleteObjects) && !errors.Is(err, errTooManyDeleteObjects) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if len(objs) == 0 || len(objs) > maxDeleteObjects {
			t.Fatalf("accepted %d keys", len(objs))
		}
	})
}

func FuzzParseCopySource(f *testing.F) {
	for _, s := range []string{"bkt/key", "/bkt/a%20b", "bkt/key?versionId=null", "%", "/", "b/k?x=1&y=2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, k, err := parseCopySource(s)
		if err != nil {
			if !errors.Is(err, errInvalidCopySource) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if b == "" || k == "" {
			t.Fatalf("parseCopySource(%q) = %q, %q", s, b, k)
		}
	})
}
