package sigv4

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/crc64"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The examples of the AWS S3 SigV4 documentation (sig-v4-header-based-auth,
// sigv4-streaming, sigv4-query-string-auth) with their published signatures.
const (
	exampleKey    = "AKIAIOSFODNN7EXAMPLE"
	exampleSecret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
	exampleTime   = "20130524T000000Z"
)

var exampleNow = time.Date(2013, 5, 24, 0, 0, 0, 0, time.UTC)

func exampleVerifier(now time.Time) *Verifier {
	return NewVerifier(Config{Credentials: map[string]string{exampleKey: exampleSecret}, Now: func() time.Time { return now }})
}

func authHeader(signed, sig string) string {
	return Algorithm + " Credential=" + exampleKey + "/20130524/us-east-1/s3/aws4_request, SignedHeaders=" + signed + ", Signature=" + sig
}

func exampleGet() *http.Request {
	r := httptest.NewRequest("GET", "http://examplebucket.s3.amazonaws.com/test.txt", nil)
	r.Header.Set("Range", "bytes=0-9")
	r.Header.Set("X-Amz-Content-Sha256", EmptySHA256)
	r.Header.Set("X-Amz-Date", exampleTime)
	r.Header.Set("Authorization", authHeader("host;range;x-amz-content-sha256;x-amz-date", "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"))
	return r
}

func examplePut(body string) *http.Request {
	r := httptest.NewRequest("PUT", "http://examplebucket.s3.amazonaws.com/test$file.text", strings.NewReader(body))
	r.Header.Set("Date", "Fri, 24 May 2013 00:00:00 GMT")
	r.Header.Set("X-Amz-Content-Sha256", "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072")
	r.Header.Set("X-Amz-Date", exampleTime)
	r.Header.Set("X-Amz-Storage-Class", "REDUCED_REDUNDANCY")
	r.Header.Set("Authorization", authHeader("date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class", "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"))
	return r
}

// exampleChunked is the 66560-byte chunked PUT of the AWS documentation.
func exampleChunked(mutate func(body []byte) []byte) *http.Request {
	var b bytes.Buffer
	chunk := func(n int, sig string) {
		fmt.Fprintf(&b, "%x;chunk-signature=%s\r\n", n, sig)
		b.Write(bytes.Repeat([]byte{'a'}, n))
		b.WriteString("\r\n")
	}
	chunk(65536, "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648")
	chunk(1024, "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497")
	chunk(0, "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9")
	body := b.Bytes()
	if mutate != nil {
		body = mutate(body)
	}
	r := httptest.NewRequest("PUT", "http://s3.amazonaws.com/examplebucket/chunkObject.txt", bytes.NewReader(body))
	r.Header.Set("Content-Encoding", "aws-chunked")
	r.Header.Set("Content-Length", "66824")
	r.Header.Set("X-Amz-Content-Sha256", StreamingPayload)
	r.Header.Set("X-Amz-Date", exampleTime)
	r.Header.Set("X-Amz-Decoded-Content-Length", "66560")
	r.Header.Set("X-Amz-Storage-Class", "REDUCED_REDUNDANCY")
	r.Header.Set("Authorization", authHeader("content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;x-amz-decoded-content-length;x-amz-storage-class", "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"))
	return r
}

func examplePresigned() *http.Request {
	return httptest.NewRequest("GET", "http://examplebucket.s3.amazonaws.com/test.txt"+
		"?X-Amz-Algorithm=AWS4-HMAC-SHA256"+
		"&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request"+
		"&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host"+
		"&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404", nil)
}

// readAll verifies r and reads its body.
func readAll(v *Verifier, r *http.Request) ([]byte, error) {
	res, err := v.Verify(r, r.URL.Query(), "")
	if err != nil {
		return nil, err
	}
	return io.ReadAll(res.Body)
}

func TestVerifyExamples(t *testing.T) {
	const payload = "Welcome to Amazon S3."
	tests := []struct {
		name    string
		now     time.Time
		req     func() *http.Request
		want    error
		wantLen int
	}{
		{"get", exampleNow, exampleGet, nil, 0},
		{"get skewed", exampleNow.Add(16 * time.Minute), exampleGet, ErrTimeSkewed, 0},
		{"get skew within bound", exampleNow.Add(-14 * time.Minute), exampleGet, nil, 0},
		{"get tampered range", exampleNow, func() *http.Request { r := exampleGet(); r.Header.Set("Range", "bytes=0-10"); return r }, ErrSignatureMismatch, 0},
		{"get unknown key", exampleNow, func() *http.Request {
			r := exampleGet()
			r.Header.Set("Authorization", strings.Replace(r.Header.Get("Authorization"), exampleKey, "NOSUCHKEY", 1))
			return r
		}, ErrInvalidAccessKeyID, 0},
		{"get no auth", exampleNow, func() *http.Request { r := exampleGet(); r.Header.Del("Authorization"); return r }, ErrMissingAuth, 0},
		{"get sigv2 bad", exampleNow, func() *http.Request { r := exampleGet(); r.Header.Set("Authorization", "AWS AKID:sig"); return r }, ErrInvalidAccessKeyID, 0},
		{"get other scheme", exampleNow, func() *http.Request { r := exampleGet(); r.Header.Set("Authorization", "Bearer x"); return r }, ErrUnsupportedAuth, 0},
		{"get no date", exampleNow, func() *http.Request { r := exampleGet(); r.Header.Del("X-Amz-Date"); return r }, ErrMissingDate, 0},
		{"get no content sha", exampleNow, func() *http.Request { r := exampleGet(); r.Header.Del("X-Amz-Content-Sha256"); return r }, ErrMissingContentSHA256, 0},
		{"put", exampleNow, func() *http.Request { return examplePut(payload) }, nil, len(payload)},
		{"put tampered body", exampleNow, func() *http.Request { return examplePut("Welcome to Amazon S4.") }, ErrContentSHA256Mismatch, 0},
		{"chunked", exampleNow, func() *http.Request { return exampleChunked(nil) }, nil, 66560},
		{"chunked tampered data", exampleNow, func() *http.Request {
			return exampleChunked(func(b []byte) []byte { b[200] = 'b'; return b })
		}, ErrSignatureMismatch, 0},
		{"chunked tampered signature", exampleNow, func() *http.Request {
			return exampleChunked(func(b []byte) []byte { return bytes.Replace(b, []byte("0055627c"), []byte("1055627c"), 1) })
		}, ErrSignatureMismatch, 0},
		{"chunked truncated", exampleNow, func() *http.Request {
			return exampleChunked(func(b []byte) []byte { return b[:len(b)-100] })
		}, ErrIncompleteBody, 0},
		{"chunked truncated in data", exampleNow, func() *http.Request {
			return exampleChunked(func(b []byte) []byte { return b[:30000] })
		}, ErrIncompleteBody, 0},
		{"chunked garbage size", exampleNow, func() *http.Request {
			return exampleChunked(func(b []byte) []byte { b[0] = 'x'; return b })
		}, ErrIncompleteBody, 0},
		{"presigned", exampleNow.Add(time.Hour), examplePresigned, nil, 0},
		{"presigned expired", exampleNow.Add(24*time.Hour + time.Second), examplePresigned, ErrRequestExpired, 0},
		{"presigned not yet valid", exampleNow.Add(-time.Hour), examplePresigned, ErrNotYetValid, 0},
		{"presigned tampered path", exampleNow, func() *http.Request {
			r := examplePresigned()
			r.URL.Path = "/test2.txt"
			return r
		}, ErrSignatureMismatch, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, err := readAll(exampleVerifier(tt.now), tt.req())
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if err == nil && len(body) != tt.wantLen {
				t.Fatalf("body is %d bytes, want %d", len(body), tt.wantLen)
			}
		})
	}
}

// TestChunkedErrorWithLastByte checks that a consumer that reads exactly
// the declared size (and never sees EOF on its own) still gets the error.
func TestChunkedErrorWithLastByte(t *testing.T) {
	r := exampleChunked(func(b []byte) []byte { return bytes.Replace(b, []byte("b6c6ea8a"), []byte("a6c6ea8a"), 1) })
	res, err := exampleVerifier(exampleNow).Verify(r, r.URL.Query(), "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.CopyN(io.Discard, res.Body, 66560)
	if !errors.Is(err, ErrSignatureMismatch) {
		t.Fatalf("CopyN of the declared size: err = %v, want the final chunk's signature mismatch", err)
	}
	r = examplePut("Welcome to Amazon S4.")
	res, err = exampleVerifier(exampleNow).Verify(r, r.URL.Query(), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err = io.CopyN(io.Discard, res.Body, res.Size); !errors.Is(err, ErrContentSHA256Mismatch) {
		t.Fatalf("CopyN of the declared size: err = %v, want sha256 mismatch", err)
	}
}

func TestChecksums(t *testing.T) {
	tests := []struct {
		algo string
		want string // of "123456789", hex
	}{
		{"crc32", "cbf43926"},
		{"crc32c", "e3069283"},
		{"crc64nvme", "ae8b14860a799888"},
		{"sha1", "f7c3bc1d808e04732adf679965ccc34ca7ae3441"},
		{"sha256", "15e2b0d3c33891ebb0f1ef609ec419420c20e320ce94c65fbc8c3312448eb225"},
	}
	for _, tt := range tests {
		h := NewChecksum(tt.algo)
		h.Write([]byte("123456789"))
		if got := hex.EncodeToString(h.Sum(nil)); got != tt.want {
			t.Errorf("%s = %s, want %s", tt.algo, got, tt.want)
		}
	}
	if NewChecksum("md5") != nil {
		t.Error("md5 is not an S3 checksum")
	}
	// CRC64NVME over lengths around its folding widths and written in
	// pieces, against the table-driven definition of the polynomial.
	tab := crc64.MakeTable(0x9a6c9329ac4bc9b5)
	data := make([]byte, 70000)
	for i := range data {
		data[i] = byte(i*131 + i>>8)
	}
	for _, n := range []int{0, 1, 15, 16, 63, 64, 127, 128, 255, 4096, 65537, 70000} {
		h := NewChecksum("crc64nvme")
		h.Write(data[:n/3])
		h.Write(data[n/3 : n])
		if got, want := binary.BigEndian.Uint64(h.Sum(nil)), crc64.Checksum(data[:n], tab); got != want {
			t.Errorf("crc64nvme of %d bytes = %x, want %x", n, got, want)
		}
	}
}

// signedRequest signs r with the example credentials at exampleNow using
// this package's own canonicalisation (for the modes the AWS documentation
// has no example of).
func signedRequest(r *http.Request, payload string) (seed string, key []byte) {
	r.Header.Set("X-Amz-Date", exampleTime)
	r.Header.Set("X-Amz-Content-Sha256", payload)
	signed := []string{"host"}
	for h := range r.Header {
		if l := strings.ToLower(h); strings.HasPrefix(l, "x-amz-") {
			signed = append(signed, l) // every x-amz-* header, as the SDKs sign them
		}
	}
	key = SigningKey(exampleSecret, "20130524", "us-east-1", "s3")
	scope := "20130524/us-east-1/s3/aws4_request"
	seed = Sign(key, StringToSign(exampleNow, scope, CanonicalRequest(r, sortStrings(signed), payload, false)))
	r.Header.Set("Authorization", authHeader(strings.Join(sortStrings(signed), ";"), seed))
	return seed, key
}

func sortStrings(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func crc32b64(data []byte) string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], crc32.ChecksumIEEE(data))
	return base64.StdEncoding.EncodeToString(b[:])
}

// encodeChunks builds an aws-chunked body; key nil means unsigned chunks.
func encodeChunks(data []byte, chunk int, key []byte, seed string, trailer string) []byte {
	var b bytes.Buffer
	prev := seed
	scope := "20130524/us-east-1/s3/aws4_request"
	sign := func(p []byte) string {
		sum := sha256.Sum256(p)
		s := Sign(key, "AWS4-HMAC-SHA256-PAYLOAD\n"+exampleTime+"\n"+scope+"\n"+prev+"\n"+EmptySHA256+"\n"+hex.EncodeToString(sum[:]))
		prev = s
		return s
	}
	for off := 0; ; off += chunk {
		p := data[min(off, len(data)):min(off+chunk, len(data))]
		if key != nil {
			fmt.Fprintf(&b, "%x;chunk-signature=%s\r\n", len(p), sign(p))
		} else {
			fmt.Fprintf(&b, "%x\r\n", len(p))
		}
		if len(p) == 0 {
			break
		}
		b.Write(p)
		b.WriteString("\r\n")
	}
	if trailer != "" {
		b.WriteString(trailer + "\r\n")
		if key != nil {
			sum := sha256.Sum256([]byte(trailer + "\n"))
			s := Sign(key, "AWS4-HMAC-SHA256-TRAILER\n"+exampleTime+"\n"+scope+"\n"+prev+"\n"+hex.EncodeToString(sum[:]))
			b.WriteString("x-amz-trailer-signature:" + s + "\r\n")
		}
	}
	b.WriteString("\r\n")
	return b.Bytes()
}

func TestTrailers(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 5000)
	good := "x-amz-checksum-crc32:" + crc32b64(data)
	bad := "x-amz-checksum-crc32:" + crc32b64([]byte("other"))
	tests := []struct {
		name    string
		payload string
		trailer string
		mutate  func([]byte) []byte
		want    error
	}{
		{"unsigned trailer", StreamingUnsignedTrailer, good, nil, nil},
		{"unsigned bad checksum", StreamingUnsignedTrailer, bad, nil, ErrChecksumMismatch},
		{"unsigned missing trailer", StreamingUnsignedTrailer, "", nil, ErrIncompleteBody},
		{"unsigned truncated", StreamingUnsignedTrailer, good, func(b []byte) []byte { return b[:len(b)/2] }, ErrIncompleteBody},
		{"signed trailer", StreamingPayloadTrailer, good, nil, nil},
		{"signed bad checksum", StreamingPayloadTrailer, bad, nil, ErrChecksumMismatch},
		{"signed tampered trailer signature", StreamingPayloadTrailer, good, func(b []byte) []byte {
			i := bytes.Index(b, []byte("x-amz-trailer-signature:")) + 24
			b[i] ^= 1
			return b
		}, ErrSignatureMismatch},
		{"signed without trailer", StreamingPayload, "", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("PUT", "http://s3.local/bucket/key", nil)
			r.Header.Set("X-Amz-Decoded-Content-Length", fmt.Sprint(len(data)))
			if tt.payload != StreamingPayload {
				r.Header.Set("X-Amz-Trailer", "x-amz-checksum-crc32")
			}
			seed, key := signedRequest(r, tt.payload)
			if tt.payload == StreamingUnsignedTrailer {
				key = nil
			}
			body := encodeChunks(data, 8192, key, seed, tt.trailer)
			if tt.mutate != nil {
				body = tt.mutate(body)
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
			got, err := readAll(exampleVerifier(exampleNow), r)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if err == nil && !bytes.Equal(got, data) {
				t.Fatalf("decoded %d bytes, not the payload", len(got))
			}
		})
	}
}

func TestHeaderChecksum(t *testing.T) {
	data := []byte("hello checksum")
	for _, tc := range []struct {
		value string
		want  error
	}{{crc32b64(data), nil}, {crc32b64([]byte("x")), ErrChecksumMismatch}, {"!!", ErrInvalidChecksum}} {
		r := httptest.NewRequest("PUT", "http://s3.local/bucket/key", bytes.NewReader(data))
		r.Header.Set("X-Amz-Checksum-Crc32", tc.value)
		signedRequest(r, UnsignedPayload)
		_, err := readAll(exampleVerifier(exampleNow), r)
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("checksum %q: err = %v, want %v", tc.value, err, tc.want)
		}
	}
}

func TestParseAuthorization(t *testing.T) {
	good := authHeader("host;x-amz-date", strings.Repeat("a", 64))
	tests := []struct {
		h    string
		want error
	}{
		{good, nil},
		{strings.ReplaceAll(good, ", ", ","), nil},
		{"AWS4-HMAC-SHA256 Credential=a/20130524/us-east-1/s3/aws4_request", ErrMalformedAuth},
		{strings.Replace(good, "/s3/", "/ec2/", 1), ErrMalformedAuth},
		{strings.Replace(good, "aws4_request", "aws5_request", 1), ErrMalformedAuth},
		{strings.Replace(good, "20130524", "2013052", 1), ErrMalformedAuth},
		{strings.Replace(good, "host;", "", 1), ErrMalformedAuth},
		{strings.Replace(good, strings.Repeat("a", 64), strings.Repeat("A", 64), 1), ErrMalformedAuth},
		{good + ", Signature=" + strings.Repeat("b", 64), ErrMalformedAuth},
		{good + ", Extra=1", ErrMalformedAuth},
		{"AWS AKID:sig", ErrUnsupportedAuth},
		{"", ErrUnsupportedAuth},
	}
	for _, tt := range tests {
		_, err := ParseAuthorization(tt.h)
		if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Errorf("ParseAuthorization(%q) = %v, want %v", tt.h, err, tt.want)
		}
	}
}

func TestCanonicalURI(t *testing.T) {
	tests := []struct{ raw, want string }{
		{"/test$file.text", "/test%24file.text"},
		{"/bucket/a%20b/c+d", "/bucket/a%20b/c%2Bd"},
		{"/bucket/%2F", "/bucket/%2F"},
		{"/b/ü", "/b/%C3%BC"},
		{"", "/"},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "http://h"+tt.raw, nil)
		if tt.raw == "" {
			r.URL.Path, r.URL.RawPath = "", ""
		}
		if got := CanonicalURI(r.URL); got != tt.want {
			t.Errorf("CanonicalURI(%q) = %q, want %q", tt.raw, got, tt.want)
		}
	}
}

// TestV2Example is the GET example of the AWS S3 Signature Version 2
// documentation (virtual-hosted bucket johnsmith).
func TestV2Example(t *testing.T) {
	now := time.Date(2007, 3, 27, 19, 36, 42, 0, time.UTC)
	r := httptest.NewRequest("GET", "http://johnsmith.s3.amazonaws.com/photos/puppy.jpg", nil)
	r.Header.Set("Date", "Tue, 27 Mar 2007 19:36:42 +0000")
	r.Header.Set("Authorization", "AWS "+exampleKey+":bWq2s1WEIj+Ydj0vQ697zp+IXMU=")
	if _, err := exampleVerifier(now).Verify(r, r.URL.Query(), "johnsmith"); err != nil {
		t.Fatalf("documented V2 request: %v", err)
	}
	if _, err := exampleVerifier(now).Verify(r, r.URL.Query(), ""); !errors.Is(err, ErrSignatureMismatch) {
		t.Fatalf("without the virtual-host bucket: %v", err)
	}
	if _, err := exampleVerifier(now.Add(time.Hour)).Verify(r, r.URL.Query(), "johnsmith"); !errors.Is(err, ErrTimeSkewed) {
		t.Fatalf("an hour later: %v", err)
	}
}

// TestSigningKeyCache verifies requests of several access keys and regions
// on one Verifier, each twice, so that the second verification uses a
// cached signing key: none may be taken for another's, and the cache stays
// bounded.
func TestSigningKeyCache(t *testing.T) {
	const otherKey, otherSecret = "AKIDOTHEREXAMPLE", "other/secret"
	v := NewVerifier(Config{Credentials: map[string]string{exampleKey: exampleSecret, otherKey: otherSecret}, Now: func() time.Time { return exampleNow }})
	signAs := func(key, secret, region string) *http.Request {
		r := httptest.NewRequest("GET", "http://examplebucket.s3.amazonaws.com/test.txt", nil)
		r.Header.Set("X-Amz-Date", exampleTime)
		r.Header.Set("X-Amz-Content-Sha256", EmptySHA256)
		signed := []string{"host", "x-amz-content-sha256", "x-amz-date"}
		scope := "20130524/" + region + "/s3/aws4_request"
		sig := Sign(SigningKey(secret, "20130524", region, "s3"), StringToSign(exampleNow, scope, CanonicalRequest(r, signed, EmptySHA256, false)))
		r.Header.Set("Authorization", Algorithm+" Credential="+key+"/"+scope+", SignedHeaders="+strings.Join(signed, ";")+", Signature="+sig)
		return r
	}
	for round := 0; round < 2; round++ {
		for _, c := range []struct{ key, secret, region string }{
			{exampleKey, exampleSecret, "us-east-1"}, {exampleKey, exampleSecret, "eu-west-1"}, {otherKey, otherSecret, "us-east-1"},
		} {
			r := signAs(c.key, c.secret, c.region)
			if _, err := v.Verify(r, r.URL.Query(), ""); err != nil {
				t.Errorf("round %d, %s in %s: %v", round, c.key, c.region, err)
			}
		}
		// Another key's secret must not pass on the strength of a cached key.
		r := signAs(otherKey, exampleSecret, "us-east-1")
		if _, err := v.Verify(r, r.URL.Query(), ""); !errors.Is(err, ErrSignatureMismatch) {
			t.Errorf("round %d: %s signed with the wrong secret: %v", round, otherKey, err)
		}
	}
	for i := 0; i < 2*maxSigningKeys; i++ {
		r := signAs(exampleKey, exampleSecret, fmt.Sprintf("region-%d", i))
		if _, err := v.Verify(r, r.URL.Query(), ""); err != nil {
			t.Fatalf("region-%d: %v", i, err)
		}
	}
	if n := len(v.keys); n > maxSigningKeys {
		t.Errorf("%d signing keys cached, bound %d", n, maxSigningKeys)
	}
}
