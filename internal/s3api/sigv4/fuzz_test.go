package sigv4

import (
	"bytes"
	"errors"
	"io"
	"net/url"
	"strings"
	"testing"
)

func FuzzParseAuthorization(f *testing.F) {
	f.Add(authHeader("host;range;x-amz-content-sha256;x-amz-date", "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"))
	f.Add("AWS4-HMAC-SHA256 Credential=a/b/c/d/e, SignedHeaders=host, Signature=00")
	f.Add("AWS4-HMAC-SHA256 ,,,=,")
	f.Add("AWS AKID:sig")
	f.Fuzz(func(t *testing.T, h string) {
		a, err := ParseAuthorization(h)
		if err != nil {
			if !errors.Is(err, ErrMalformedAuth) && !errors.Is(err, ErrUnsupportedAuth) {
				t.Fatalf("error %v wraps no sentinel", err)
			}
			return
		}
		if len(a.Signature) != 64 || a.AccessKey == "" || a.Service != "s3" || len(a.SignedHeaders) == 0 {
			t.Fatalf("accepted an incomplete authorization %+v from %q", a, h)
		}
		// Re-rendering the parsed header parses to the same value.
		again, err := ParseAuthorization(Algorithm + " Credential=" + a.AccessKey + "/" + a.Scope() +
			", SignedHeaders=" + strings.Join(a.SignedHeaders, ";") + ", Signature=" + a.Signature)
		if err != nil || again.Credential != a.Credential || again.Signature != a.Signature ||
			strings.Join(again.SignedHeaders, ";") != strings.Join(a.SignedHeaders, ";") {
			t.Fatalf("round trip of %+v: %+v, %v", a, again, err)
		}
	})
}

func FuzzParsePresigned(f *testing.F) {
	f.Add(examplePresigned().URL.RawQuery)
	f.Add("X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Expires=-1")
	f.Add("X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Algorithm=x")
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		p, err := ParsePresigned(q)
		if err != nil {
			if !errors.Is(err, ErrMalformedPresign) {
				t.Fatalf("error %v wraps no sentinel", err)
			}
			return
		}
		if p.Expires < 0 || p.Expires > MaxPresignExpiry || len(p.Signature) != 64 || p.Time.IsZero() {
			t.Fatalf("accepted %+v from %q", p, raw)
		}
	})
}

// FuzzChunkedReader feeds arbitrary bodies to the aws-chunked decoder,
// unsigned and signed: it must never panic, never return more bytes than
// declared, and succeed only with exactly the declared number of bytes.
// Bodies built from the seed corpus's payloads must round-trip.
func FuzzChunkedReader(f *testing.F) {
	f.Add([]byte("5\r\nhello\r\n0\r\n\r\n"), int64(5), false, false)
	f.Add([]byte("5\r\nhello\r\n0\r\nx-amz-checksum-crc32:NhCmhg==\r\n\r\n"), int64(5), true, false)
	f.Add([]byte("ffffffffffffffff\r\n"), int64(1), false, false)
	f.Add([]byte("0;chunk-signature=00\r\n\r\n"), int64(0), false, true)
	f.Add(encodeChunks([]byte("signed payload"), 4, SigningKey(exampleSecret, "20130524", "us-east-1", "s3"), strings.Repeat("0", 64), ""), int64(14), false, true)
	f.Fuzz(func(t *testing.T, body []byte, declared int64, trailer, signed bool) {
		if declared < 0 || declared > 1<<20 {
			return
		}
		var sc *streamContext
		if signed {
			sc = &streamContext{key: SigningKey(exampleSecret, "20130524", "us-east-1", "s3"), time: exampleTime,
				scope: "20130524/us-east-1/s3/aws4_request", seed: strings.Repeat("0", 64)}
		}
		hdr := ""
		if trailer {
			hdr = "x-amz-checksum-crc32"
		}
		r, err := newChunkReader(bytes.NewReader(body), declared, sc, trailer, hdr)
		if err != nil {
			t.Fatal(err)
		}
		out, err := io.ReadAll(io.LimitReader(r, declared+1))
		if int64(len(out)) > declared {
			t.Fatalf("decoded %d bytes, declared %d", len(out), declared)
		}
		if err == nil && int64(len(out)) != declared {
			t.Fatalf("success with %d of %d bytes", len(out), declared)
		}
		if err != nil && !errors.Is(err, ErrIncompleteBody) && !errors.Is(err, ErrSignatureMismatch) &&
			!errors.Is(err, ErrChecksumMismatch) && !errors.Is(err, ErrInvalidChecksum) {
			t.Fatalf("error %v wraps no sentinel", err)
		}
		// Round trip: encoding the decoded bytes again decodes to them.
		if signed && err == nil {
			enc := encodeChunks(out, 3, sc.key, sc.seed, "")
			r2, _ := newChunkReader(bytes.NewReader(enc), declared, sc, false, "")
			again, err := io.ReadAll(r2)
			if err != nil || !bytes.Equal(again, out) {
				t.Fatalf("round trip: %v", err)
			}
		}
	})
}
