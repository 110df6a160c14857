package s3api_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/s3api"
	"github.com/slipstream-io/slipstream/internal/s3api/s3mem"
	"github.com/slipstream-io/slipstream/internal/s3api/sigv4"
)

func (e *env) mkBucket(name string) {
	e.t.Helper()
	if _, err := e.client.CreateBucket(ctx(), &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		e.t.Fatal(err)
	}
}

func TestBadKeysStoreNothing(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.mkBucket("keys")
	tests := []struct {
		name, path, code string
	}{
		{"dotdot segment", "/keys/a/../b", "InvalidArgument"},
		{"dotdot alone", "/keys/..", "InvalidArgument"},
		// Signed as sent, but S3 canonicalises the path with ".." unencoded.
		{"encoded dotdot", "/keys/%2E%2E/etc", "SignatureDoesNotMatch"},
		{"dot segment", "/keys/a/./b", "InvalidArgument"},
		{"double slash", "/keys/a//b", "InvalidArgument"},
		{"leading slash", "/keys//abs", "InvalidArgument"},
		{"NUL", "/keys/nul%00byte", "InvalidArgument"},
		{"control char", "/keys/tab%09key", "InvalidArgument"},
		{"not utf-8", "/keys/bad%FFutf8", "InvalidArgument"},
		{"too long", "/keys/" + strings.Repeat("k", object.MaxKeyLen+1), "KeyTooLongError"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, method := range []string{"PUT", "GET", "DELETE", "POST"} {
				var body []byte
				query := ""
				switch method {
				case "PUT":
					body = []byte("payload")
				case "POST":
					query = "uploads="
				}
				resp, rb := e.do(e.rawRequest(method, tt.path, query, body, "", nil))
				if resp.StatusCode/100 != 4 || errorCode(rb) != tt.code {
					t.Errorf("%s %s: %d %s, want 400 %s", method, tt.path, resp.StatusCode, rb, tt.code)
				}
			}
		})
	}
	// A key of exactly 1024 bytes is fine.
	resp, rb := e.do(e.rawRequest("PUT", "/keys/"+strings.Repeat("k", object.MaxKeyLen), "", []byte("x"), "", nil))
	if resp.StatusCode != 200 {
		t.Fatalf("1024-byte key: %d %s", resp.StatusCode, rb)
	}
	if n := e.store.Len("keys"); n != 1 {
		t.Fatalf("bucket holds %d objects, want only the valid one", n)
	}
	ups, _ := e.store.ListMultipartUploads(ctx(), "keys", "")
	if len(ups) != 0 {
		t.Fatalf("bad keys started %d multipart uploads", len(ups))
	}
}

func TestBadBucketNames(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, name := range []string{"ab", "Upper", "-dash", "under_score", "192.168.1.1", "a..b", strings.Repeat("b", 64)} {
		for _, path := range []string{"/" + name, "/" + name + "/key"} {
			resp, rb := e.do(e.rawRequest("PUT", path, "", []byte{}, "", nil))
			if resp.StatusCode != 400 || errorCode(rb) != "InvalidBucketName" {
				t.Errorf("PUT %s: %d %s", path, resp.StatusCode, rb)
			}
		}
	}
	if bs, _ := e.store.ListBuckets(ctx()); len(bs) != 0 {
		t.Fatalf("bad names created %d buckets", len(bs))
	}
}

func TestPayloadChecks(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.mkBucket("pay")
	body := []byte("the real body")
	other := sha256.Sum256([]byte("another body"))
	md5Other := base64.StdEncoding.EncodeToString(make([]byte, 16))
	tests := []struct {
		name    string
		payload string
		hdr     map[string]string
		status  int
		code    string
	}{
		{"sha256 mismatch", hex.EncodeToString(other[:]), nil, 400, "XAmzContentSHA256Mismatch"},
		{"bad digest", "", map[string]string{"Content-MD5": md5Other}, 400, "BadDigest"},
		{"invalid digest", "", map[string]string{"Content-MD5": "abc"}, 400, "InvalidDigest"},
		{"bad crc32 header", sigv4.UnsignedPayload, map[string]string{"X-Amz-Checksum-Crc32": "AAAAAA=="}, 400, "BadDigest"},
		{"bad sha256 value", "nothex", nil, 400, "InvalidArgument"},
		{"metadata too large", "", map[string]string{"X-Amz-Meta-Big": strings.Repeat("m", 3000)}, 400, "MetadataTooLarge"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, rb := e.do(e.rawRequest("PUT", "/pay/obj", "", body, tt.payload, tt.hdr))
			if resp.StatusCode != tt.status || errorCode(rb) != tt.code {
				t.Fatalf("%d %s, want %d %s", resp.StatusCode, rb, tt.status, tt.code)
			}
			if e.store.Len("pay") != 0 {
				t.Fatal("object stored despite the error")
			}
		})
	}
	resp, rb := e.do(e.rawRequest("PUT", "/pay/obj", "", body, "", map[string]string{"X-Amz-Checksum-Crc32": crc32b64(body)}))
	if resp.StatusCode != 200 {
		t.Fatalf("good checksum: %d %s", resp.StatusCode, rb)
	}
}

func crc32b64(b []byte) string {
	var s [4]byte
	binary.BigEndian.PutUint32(s[:], crc32.ChecksumIEEE(b))
	return base64.StdEncoding.EncodeToString(s[:])
}

// chunkedPut builds a signed aws-chunked PUT: the seed signature comes from
// the SDK's SigV4 signer and the chunk signatures from its stream signer.
func (e *env) chunkedPut(path string, data []byte, chunk int, trailer bool, mutate func([]byte) []byte) *http.Request {
	e.t.Helper()
	mode := sigv4.StreamingPayload
	if trailer {
		mode = sigv4.StreamingPayloadTrailer
	}
	now := time.Now().UTC()
	var enc bytes.Buffer
	// Encode once with placeholder signatures to learn the length.
	build := func(sigs [][]byte, trailerSig string) []byte {
		enc.Reset()
		i := 0
		for off := 0; ; off += chunk {
			p := data[min(off, len(data)):min(off+chunk, len(data))]
			fmt.Fprintf(&enc, "%x;chunk-signature=%s\r\n", len(p), hex.EncodeToString(sigs[i]))
			i++
			if len(p) == 0 {
				break
			}
			enc.Write(p)
			enc.WriteString("\r\n")
		}
		if trailer {
			enc.WriteString("x-amz-checksum-crc32:" + crc32b64(data) + "\r\n")
			enc.WriteString("x-amz-trailer-signature:" + trailerSig + "\r\n")
		}
		enc.WriteString("\r\n")
		return append([]byte(nil), enc.Bytes()...)
	}
	nchunks := (len(data)+chunk-1)/chunk + 1
	sigs := make([][]byte, nchunks)
	for i := range sigs {
		sigs[i] = make([]byte, 32)
	}
	placeholder := build(sigs, strings.Repeat("0", 64))
	if mutate != nil {
		placeholder = mutate(placeholder) // mutations keep or cut the length the same way
	}
	size := len(placeholder)

	r, err := http.NewRequest("PUT", e.srv.URL+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	r.ContentLength = int64(size)
	r.Header.Set("Content-Encoding", "aws-chunked")
	r.Header.Set("X-Amz-Decoded-Content-Length", fmt.Sprint(len(data)))
	if trailer {
		r.Header.Set("X-Amz-Trailer", "x-amz-checksum-crc32")
	}
	e.sign(r, mode, testSecret, now)
	auth := r.Header.Get("Authorization")
	seed, _ := hex.DecodeString(auth[strings.Index(auth, "Signature=")+10:])
	ss := v4.NewStreamSigner(aws.Credentials{AccessKeyID: testKey, SecretAccessKey: testSecret}, "s3", testRegion, seed)
	for i := range sigs {
		p := data[min(i*chunk, len(data)):min((i+1)*chunk, len(data))]
		if sigs[i], err = ss.GetSignature(ctx(), nil, p, now); err != nil {
			e.t.Fatal(err)
		}
	}
	trailerSig := ""
	if trailer {
		canon := "x-amz-checksum-crc32:" + crc32b64(data) + "\n"
		sum := sha256.Sum256([]byte(canon))
		scope := now.Format("20060102") + "/" + testRegion + "/s3/aws4_request"
		key := sigv4.SigningKey(testSecret, now.Format("20060102"), testRegion, "s3")
		trailerSig = sigv4.Sign(key, "AWS4-HMAC-SHA256-TRAILER\n"+now.Format(sigv4.TimeFormat)+"\n"+scope+"\n"+hex.EncodeToString(sigs[len(sigs)-1])+"\n"+hex.EncodeToString(sum[:]))
	}
	body := build(sigs, trailerSig)
	if mutate != nil {
		body = mutate(body)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.GetBody = nil
	return r
}

func TestSignedChunkedUploads(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.mkBucket("chunks")
	data := bytes.Repeat([]byte("chunked upload payload "), 10000) // 230000 bytes
	tests := []struct {
		name    string
		trailer bool
		mutate  func([]byte) []byte
		status  int
		code    string
	}{
		{"signed", false, nil, 200, ""},
		{"signed trailer", true, nil, 200, ""},
		{"tampered data", false, func(b []byte) []byte { b[100000] ^= 1; return b }, 403, "SignatureDoesNotMatch"},
		{"tampered final chunk signature", false, func(b []byte) []byte {
			flipHex(b, bytes.LastIndex(b, []byte("0;chunk-signature="))+18)
			return b
		}, 403, "SignatureDoesNotMatch"},
		{"tampered trailer checksum", true, func(b []byte) []byte {
			i := bytes.Index(b, []byte("x-amz-checksum-crc32:")) + 21
			b[i] ^= 1
			return b
		}, 403, "SignatureDoesNotMatch"},
		{"truncated", false, func(b []byte) []byte { return b[:len(b)-1000] }, 400, "IncompleteBody"},
		{"truncated mid chunk", true, func(b []byte) []byte { return b[:70000] }, 400, "IncompleteBody"},
		{"garbage chunk header", false, func(b []byte) []byte { copy(b, "zz"); return b }, 400, "IncompleteBody"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := "obj-" + strings.ReplaceAll(tt.name, " ", "-")
			resp, rb := e.do(e.chunkedPut("/chunks/"+key, data, 65536, tt.trailer, tt.mutate))
			if resp.StatusCode != tt.status || (tt.code != "" && errorCode(rb) != tt.code) {
				t.Fatalf("%d %s, want %d %s", resp.StatusCode, rb, tt.status, tt.code)
			}
			out, err := e.client.GetObject(ctx(), &s3.GetObjectInput{Bucket: aws.String("chunks"), Key: aws.String(key)})
			if tt.status != 200 {
				wantCode(t, err, "NoSuchKey", 404)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(out.Body)
			out.Body.Close()
			if !bytes.Equal(got, data) {
				t.Fatalf("stored %d bytes, not the payload", len(got))
			}
		})
	}
}

// TestTruncatedBody sends fewer bytes than Content-Length and closes its
// side of the connection: IncompleteBody, and no object.
func TestTruncatedBody(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.mkBucket("trunc")
	for _, payload := range []string{sigv4.UnsignedPayload, ""} {
		body := bytes.Repeat([]byte("x"), 1000)
		r := e.rawRequest("PUT", "/trunc/obj", "", body, payload, nil)
		conn, err := net.Dial("tcp", e.srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		r.Body = io.NopCloser(bytes.NewReader(body[:500]))
		var buf bytes.Buffer
		if err := r.Write(&buf); err != nil && !strings.Contains(err.Error(), "ContentLength") {
			t.Fatal(err)
		}
		// r.Write refuses to send a short body; write the head and half the body by hand.
		head := buf.Bytes()
		if i := bytes.Index(head, []byte("\r\n\r\n")); i >= 0 {
			head = head[:i+4]
		}
		conn.Write(head)
		conn.Write(body[:500])
		conn.(*net.TCPConn).CloseWrite()
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), r)
		if err != nil {
			t.Fatal(err)
		}
		rb, _ := io.ReadAll(resp.Body)
		conn.Close()
		if resp.StatusCode != 400 || errorCode(rb) != "IncompleteBody" {
			t.Fatalf("payload %q: %d %s", payload, resp.StatusCode, rb)
		}
		if e.store.Len("trunc") != 0 {
			t.Fatal("truncated body stored")
		}
	}
}

func TestMissingContentLength(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.mkBucket("nolen")
	r := e.rawRequest("PUT", "/nolen/obj", "", nil, sigv4.UnsignedPayload, nil)
	r.Body = io.NopCloser(strings.NewReader("streamed without a length"))
	r.ContentLength = -1 // Transfer-Encoding: chunked
	resp, rb := e.do(r)
	if resp.StatusCode != 411 || errorCode(rb) != "MissingContentLength" {
		t.Fatalf("%d %s", resp.StatusCode, rb)
	}
}

func TestVirtualHostedStyle(t *testing.T) {
	e := newEnv(t, envOpts{})
	host := "vhost." + testDomain
	resp, rb := e.do(e.rawRequest("PUT", "/", "", []byte{}, "", map[string]string{"Host": host}))
	if resp.StatusCode != 200 {
		t.Fatalf("create bucket: %d %s", resp.StatusCode, rb)
	}
	resp, rb = e.do(e.rawRequest("PUT", "/dir/key.txt", "", []byte("virtual"), "", map[string]string{"Host": host + ":8080"}))
	if resp.StatusCode != 200 {
		t.Fatalf("put: %d %s", resp.StatusCode, rb)
	}
	resp, rb = e.do(e.rawRequest("GET", "/dir/key.txt", "", nil, "", map[string]string{"Host": host}))
	if resp.StatusCode != 200 || string(rb) != "virtual" {
		t.Fatalf("get: %d %s", resp.StatusCode, rb)
	}
	resp, rb = e.do(e.rawRequest("GET", "/", "list-type=2&prefix=dir%2F", nil, "", map[string]string{"Host": host}))
	if resp.StatusCode != 200 || !strings.Contains(string(rb), "<Key>dir/key.txt</Key>") {
		t.Fatalf("list: %d %s", resp.StatusCode, rb)
	}
	// Path-style on the bare domain reaches the same object.
	got, _ := getString(t, e.client, &s3.GetObjectInput{Bucket: aws.String("vhost"), Key: aws.String("dir/key.txt")})
	if got != "virtual" {
		t.Fatalf("path-style read %q", got)
	}
}

func TestDeleteObjectsBadMD5(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.mkBucket("delmd5")
	putString(t, e.client, "delmd5", "keep", "x")
	body := []byte(`<Delete><Object><Key>keep</Key></Object></Delete>`)
	resp, rb := e.do(e.rawRequest("POST", "/delmd5", "delete=", body, "", map[string]string{"Content-MD5": base64.StdEncoding.EncodeToString(make([]byte, 16))}))
	if resp.StatusCode != 400 || errorCode(rb) != "BadDigest" {
		t.Fatalf("%d %s", resp.StatusCode, rb)
	}
	resp, rb = e.do(e.rawRequest("POST", "/delmd5", "delete=", []byte("<Delete><Object>"), "", nil))
	if resp.StatusCode != 400 || errorCode(rb) != "MalformedXML" {
		t.Fatalf("%d %s", resp.StatusCode, rb)
	}
	if e.store.Len("delmd5") != 1 {
		t.Fatal("a refused DeleteObjects deleted the object")
	}
}

// fileObjects serves GETs from temporary files so that the handler takes
// its sendfile path.
type fileObjects struct {
	*s3mem.Store
	dir   string
	files atomic.Int64
}

type fileReader struct {
	object.Reader
	f         *os.File
	off, size int64
}

func (r *fileReader) File() (*os.File, int64, int64) { return r.f, r.off, r.size }
func (r *fileReader) Close() error                   { return r.f.Close() }

func (o *fileObjects) GetObject(c ctxT, bucket, key string, opts object.GetOptions) (object.Reader, error) {
	rd, err := o.Store.GetObject(c, bucket, key, object.GetOptions{})
	if err != nil {
		return nil, err
	}
	info := rd.Info()
	off, n := int64(0), info.Size
	if opts.Range != nil {
		if off, n, err = opts.Range.Resolve(info.Size); err != nil {
			return nil, err
		}
	}
	f, err := os.CreateTemp(o.dir, "obj")
	if err != nil {
		return nil, err
	}
	if _, err := io.Copy(f, rd); err != nil {
		return nil, err
	}
	o.files.Add(1)
	return &fileReader{Reader: rd, f: f, off: off, size: n}, nil
}

func (r *fileReader) Range() (int64, int64) { return r.off, r.size }

func TestSendfilePath(t *testing.T) {
	fo := &fileObjects{dir: t.TempDir()}
	e := newEnv(t, envOpts{objects: func(s *s3mem.Store) s3api.Objects { fo.Store = s; return fo }})
	e.mkBucket("files")
	data := bytes.Repeat([]byte("sendfile!"), 100000)
	must[*s3.PutObjectOutput](t)(e.client.PutObject(ctx(), &s3.PutObjectInput{Bucket: aws.String("files"), Key: aws.String("f"), Body: bytes.NewReader(data)}))
	got, _ := getString(t, e.client, &s3.GetObjectInput{Bucket: aws.String("files"), Key: aws.String("f")})
	if got != string(data) {
		t.Fatalf("full GET: %d bytes", len(got))
	}
	got, _ = getString(t, e.client, &s3.GetObjectInput{Bucket: aws.String("files"), Key: aws.String("f"), Range: aws.String("bytes=12345-23456")})
	if got != string(data[12345:23457]) {
		t.Fatalf("range GET: %d bytes", len(got))
	}
	if fo.files.Load() != 2 {
		t.Fatalf("file readers used: %d", fo.files.Load())
	}
}

// copyNObjects stores what io.CopyN(size) of the body gives when it
// reports no error: the way a store that trusts the declared size reads.
type copyNObjects struct{ *s3mem.Store }

func (o copyNObjects) PutObject(c ctxT, bucket, key string, body io.Reader, opts object.PutOptions) (object.Info, error) {
	var buf bytes.Buffer
	if _, err := io.CopyN(&buf, body, opts.Size); err != nil {
		return object.Info{}, fmt.Errorf("store: %w", err)
	}
	opts.Size = int64(buf.Len())
	return o.Store.PutObject(c, bucket, key, &buf, opts)
}

func (o copyNObjects) UploadPart(c ctxT, bucket, key, id string, n int, body io.Reader, opts object.PutOptions) (object.PartInfo, error) {
	var buf bytes.Buffer
	if _, err := io.CopyN(&buf, body, opts.Size); err != nil {
		return object.PartInfo{}, fmt.Errorf("store: %w", err)
	}
	opts.Size = int64(buf.Len())
	return o.Store.UploadPart(c, bucket, key, id, n, &buf, opts)
}

// TestSizeTrustingStoreStoresNoBadBody checks that a store reading exactly
// the declared size still sees the body's error.
func TestSizeTrustingStoreStoresNoBadBody(t *testing.T) {
	e := newEnv(t, envOpts{objects: func(s *s3mem.Store) s3api.Objects { return copyNObjects{s} }})
	e.mkBucket("copyn")
	data := bytes.Repeat([]byte("size trusting "), 20000)
	other := sha256.Sum256([]byte("x"))
	cases := []struct {
		name string
		req  *http.Request
		code string
	}{
		{"sha256 mismatch", e.rawRequest("PUT", "/copyn/a", "", data, hex.EncodeToString(other[:]), nil), "XAmzContentSHA256Mismatch"},
		{"bad crc32", e.rawRequest("PUT", "/copyn/b", "", data, sigv4.UnsignedPayload, map[string]string{"X-Amz-Checksum-Crc32": crc32b64([]byte("x"))}), "BadDigest"},
		{"bad final chunk signature", e.chunkedPut("/copyn/c", data, 65536, false, func(b []byte) []byte {
			flipHex(b, bytes.LastIndex(b, []byte("0;chunk-signature="))+18)
			return b
		}), "SignatureDoesNotMatch"},
		{"bad trailer checksum", e.chunkedPut("/copyn/d", data, 65536, true, func(b []byte) []byte {
			i := bytes.Index(b, []byte("x-amz-checksum-crc32:")) + 21
			b[i] ^= 1
			return b
		}), "SignatureDoesNotMatch"},
	}
	for _, c := range cases {
		resp, rb := e.do(c.req)
		if resp.StatusCode/100 != 4 || errorCode(rb) != c.code {
			t.Errorf("%s: %d %s, want %s", c.name, resp.StatusCode, rb, c.code)
		}
	}
	if n := e.store.Len("copyn"); n != 0 {
		t.Fatalf("%d bad bodies stored", n)
	}
	resp, rb := e.do(e.chunkedPut("/copyn/good", data, 65536, true, nil))
	if resp.StatusCode != 200 || e.store.Len("copyn") != 1 {
		t.Fatalf("good chunked upload: %d %s", resp.StatusCode, rb)
	}
}

// flipHex changes the hex digit at b[i] to another hex digit.
func flipHex(b []byte, i int) {
	if b[i] == '0' {
		b[i] = '1'
	} else {
		b[i] = '0'
	}
}

// The handler promises implementations (api.go, Objects) that a body that
// is not sound fails a Read, so that one that stores only bodies read in
// full without error (even with io.CopyN) never stores a bad one. An empty
// body is no exception: io.CopyN(w, body, 0) never calls Read, so the
// handler reads it (and so verifies its x-amz-checksum-* or
// x-amz-content-sha256) before calling the store. S3 answers 400
// BadDigest or XAmzContentSHA256Mismatch and stores nothing (PutObject
// and UploadPart API references, "Checking object integrity" in the
// Amazon S3 User Guide).
func TestEmptyBodyBadChecksumNotStored(t *testing.T) {
	e := newEnv(t, envOpts{objects: func(s *s3mem.Store) s3api.Objects { return copyNObjects{s} }})
	e.mkBucket("empty")
	up := must[*s3.CreateMultipartUploadOutput](t)(e.client.CreateMultipartUpload(ctx(), &s3.CreateMultipartUploadInput{Bucket: aws.String("empty"), Key: aws.String("mp")}))
	other := "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881" // sha256("x")
	cases := []struct {
		name, path, query, payload string
		hdr                        map[string]string
		code                       string
	}{
		{"PUT, bad crc32", "/empty/a", "", sigv4.UnsignedPayload, map[string]string{"X-Amz-Checksum-Crc32": crc32b64([]byte("x"))}, "BadDigest"},
		{"PUT, sha256 mismatch", "/empty/b", "", other, nil, "XAmzContentSHA256Mismatch"},
		{"UploadPart, bad crc32", "/empty/mp", "partNumber=1&uploadId=" + aws.ToString(up.UploadId), sigv4.UnsignedPayload, map[string]string{"X-Amz-Checksum-Crc32": crc32b64([]byte("x"))}, "BadDigest"},
		{"UploadPart, sha256 mismatch", "/empty/mp", "partNumber=2&uploadId=" + aws.ToString(up.UploadId), other, nil, "XAmzContentSHA256Mismatch"},
	}
	for _, c := range cases {
		resp, body := e.do(e.rawRequest("PUT", c.path, c.query, []byte{}, c.payload, c.hdr))
		if resp.StatusCode != http.StatusBadRequest || errorCode(body) != c.code {
			t.Errorf("%s on an empty body: %d %s, want 400 %s", c.name, resp.StatusCode, errorCode(body), c.code)
		}
	}
	if n := e.store.Len("empty"); n != 0 {
		t.Errorf("%d empty objects with a mismatching checksum stored and acknowledged", n)
	}
	parts := must[*s3.ListPartsOutput](t)(e.client.ListParts(ctx(), &s3.ListPartsInput{Bucket: aws.String("empty"), Key: aws.String("mp"), UploadId: up.UploadId}))
	if len(parts.Parts) != 0 {
		t.Errorf("%d empty parts with a mismatching checksum stored and acknowledged", len(parts.Parts))
	}
	resp, body := e.do(e.rawRequest("PUT", "/empty/good", "", []byte{}, sigv4.UnsignedPayload, map[string]string{"X-Amz-Checksum-Crc32": crc32b64(nil)}))
	if resp.StatusCode != http.StatusOK || e.store.Len("empty") != 1 {
		t.Errorf("empty PUT with a good checksum: %d %s", resp.StatusCode, errorCode(body))
	}
}
