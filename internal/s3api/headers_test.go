package s3api_test

import (
	"bytes"
	"crypto/md5"
	"encoding/base64"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/slipstream-io/slipstream/internal/s3api/sigv4"
)

// S3 stores Content-Encoding, Cache-Control, Content-Disposition,
// Content-Language and Expires with the object and returns them on GET and
// HEAD (aws s3 cp --content-encoding gzip; static sites; downloads named by
// a stored Content-Disposition).
func TestStoredHeaders(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.mkBucket("sysmeta")
	exp := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	_, err := e.client.PutObject(ctx(), &s3.PutObjectInput{
		Bucket: aws.String("sysmeta"), Key: aws.String("page.html.gz"),
		Body:               bytes.NewReader([]byte("gzipped bytes")),
		ContentType:        aws.String("text/html"),
		ContentEncoding:    aws.String("gzip"),
		CacheControl:       aws.String("max-age=3600"),
		ContentDisposition: aws.String(`attachment; filename="page.html"`),
		ContentLanguage:    aws.String("de"),
		Expires:            aws.Time(exp),
	})
	if err != nil {
		t.Fatal(err)
	}
	h, err := e.client.HeadObject(ctx(), &s3.HeadObjectInput{Bucket: aws.String("sysmeta"), Key: aws.String("page.html.gz")})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{
		"Content-Encoding":    aws.ToString(h.ContentEncoding),
		"Cache-Control":       aws.ToString(h.CacheControl),
		"Content-Disposition": aws.ToString(h.ContentDisposition),
		"Content-Language":    aws.ToString(h.ContentLanguage),
		"Expires":             aws.ToString(h.ExpiresString),
	}
	want := map[string]string{
		"Content-Encoding": "gzip", "Cache-Control": "max-age=3600",
		"Content-Disposition": `attachment; filename="page.html"`, "Content-Language": "de",
		"Expires": exp.Format(http.TimeFormat),
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("HEAD after PUT: %s = %q, want %q (accepted on PUT, silently not stored)", k, got[k], w)
		}
	}
}

// SSE-C: the client asks for the object to be encrypted under its key. S3
// then refuses a GET without the key. Not implemented here: the PUT is
// refused, rather than the data stored in the clear and served to anyone.
func TestSSECRefused(t *testing.T) {
	e := newEnv(t, envOpts{tls: true})
	e.mkBucket("ssec")
	key := bytes.Repeat([]byte{7}, 32)
	sum := md5.Sum(key)
	_, err := e.client.PutObject(ctx(), &s3.PutObjectInput{
		Bucket: aws.String("ssec"), Key: aws.String("secret"), Body: bytes.NewReader([]byte("customer secret")),
		SSECustomerAlgorithm: aws.String("AES256"),
		SSECustomerKey:       aws.String(base64.StdEncoding.EncodeToString(key)),
		SSECustomerKeyMD5:    aws.String(base64.StdEncoding.EncodeToString(sum[:])),
	})
	if err != nil {
		t.Logf("PUT with SSE-C refused: %v (good)", err)
		return
	}
	out, err := e.client.GetObject(ctx(), &s3.GetObjectInput{Bucket: aws.String("ssec"), Key: aws.String("secret")})
	if err == nil {
		b, _ := io.ReadAll(out.Body)
		out.Body.Close()
		t.Fatalf("PUT with SSE-C accepted, and a GET without the customer key returns %q; want the PUT refused (NotImplemented) or the GET refused", b)
	}
}

// Object Lock on PutObject: S3 refuses it on a bucket without Object Lock
// (InvalidRequest); here it is refused (NotImplemented) rather than
// accepted and ignored, with the "locked" object deletable at once.
func TestObjectLockHeadersRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.mkBucket("worm")
	_, err := e.client.PutObject(ctx(), &s3.PutObjectInput{
		Bucket: aws.String("worm"), Key: aws.String("record"), Body: bytes.NewReader([]byte("retain me")),
		ObjectLockMode:            types.ObjectLockModeCompliance,
		ObjectLockRetainUntilDate: aws.Time(time.Now().Add(365 * 24 * time.Hour)),
		ObjectLockLegalHoldStatus: types.ObjectLockLegalHoldStatusOn,
	})
	if err != nil {
		t.Logf("PUT with object lock refused: %v (good)", err)
		return
	}
	_, derr := e.client.DeleteObject(ctx(), &s3.DeleteObjectInput{Bucket: aws.String("worm"), Key: aws.String("record")})
	t.Fatalf("PUT with x-amz-object-lock-mode=COMPLIANCE and legal hold ON accepted (200), and DELETE then succeeds (err=%v, objects left=%d); want the PUT refused", derr, e.store.Len("worm"))
}

// x-amz-tagging on PutObject is refused, not accepted and dropped
// (tagging is not implemented).
func TestTaggingHeaderRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.mkBucket("tags")
	_, err := e.client.PutObject(ctx(), &s3.PutObjectInput{
		Bucket: aws.String("tags"), Key: aws.String("o"), Body: bytes.NewReader([]byte("x")),
		Tagging: aws.String("retention=30d&class=pii"),
	})
	if err == nil {
		t.Fatalf("PUT with x-amz-tagging accepted and the tags silently dropped; want NotImplemented")
	}
}

// S3 Express append (x-amz-write-offset-bytes): a PUT that asks to append
// at an offset must not replace the whole object with the appended piece.
func TestWriteOffsetRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.mkBucket("appnd")
	putString(t, e.client, "appnd", "log", "first part;")
	resp, body := e.do(e.rawRequest("PUT", "/appnd/log", "", []byte("second part"), "", map[string]string{"X-Amz-Write-Offset-Bytes": "11"}))
	got, _ := getString(t, e.client, &s3.GetObjectInput{Bucket: aws.String("appnd"), Key: aws.String("log")})
	if got != "first part;" && got != "first part;second part" {
		t.Fatalf("PUT with x-amz-write-offset-bytes: 11 -> %d %s; object now %q: the first 11 bytes are lost; want NotImplemented (or an append)", resp.StatusCode, body, got)
	}
}

// An aws-chunked body sent with x-amz-content-sha256: UNSIGNED-PAYLOAD and
// x-amz-decoded-content-length (S3 answers 400 InvalidArgument for this
// combination) is refused, not stored with its chunk framing as the
// object's bytes.
func TestAwsChunkedWithUnsignedPayloadRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.mkBucket("frame")
	payload := "hello world"
	framed := []byte("b\r\nhello world\r\n0\r\nx-amz-checksum-crc32:" + crc32b64([]byte(payload)) + "\r\n\r\n")
	resp, body := e.do(e.rawRequest("PUT", "/frame/obj", "", framed, sigv4.UnsignedPayload, map[string]string{
		"Content-Encoding":             "aws-chunked",
		"X-Amz-Decoded-Content-Length": "11",
		"X-Amz-Trailer":                "x-amz-checksum-crc32",
	}))
	if resp.StatusCode/100 != 2 {
		return // refused: fine
	}
	got, _ := getString(t, e.client, &s3.GetObjectInput{Bucket: aws.String("frame"), Key: aws.String("obj")})
	if got != payload {
		t.Fatalf("aws-chunked body with UNSIGNED-PAYLOAD: %d %s; stored %q (%d bytes), want the request refused (400 InvalidArgument, as S3) or %q", resp.StatusCode, body, got, len(got), payload)
	}
}

// S3 limits only the user metadata (x-amz-meta-*) to 2 KB; system metadata
// such as Content-Disposition counts against the 8 KB limit of the whole
// PUT request header instead ("Within the PUT request header, the
// user-defined metadata is limited to 2 KB in size", "The PUT request
// header is limited to 8 KB in size", Amazon S3 User Guide, "Working with
// object metadata"). A download name with non-ASCII characters (RFC 6266
// filename* in UTF-8, 9 bytes per CJK character) easily passes 2 KB, and
// such a PUT without any user metadata must be stored and its header
// returned. Metadata the store cannot hold (one xattr per object) is
// refused with MetadataTooLarge before anything is stored, on a PUT and on
// a copy that replaces the metadata.
func TestStoredHeadersNotCountedAsUserMetadata(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.mkBucket("sysmeta")
	name := func(n int) string { return "attachment; filename*=UTF-8''" + strings.Repeat("%E6%97%A5", n) + ".pdf" }
	cd := name(300) // 2733 bytes
	resp, body := e.do(e.rawRequest("PUT", "/sysmeta/report.pdf", "", []byte("pdf bytes"), "", map[string]string{"Content-Disposition": cd}))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT with a %d-byte Content-Disposition and no user metadata: %d %s, want 200 (S3's 2 KB limit is on x-amz-meta-* only)",
			len(cd), resp.StatusCode, errorCode(body))
	}
	h := must[*s3.HeadObjectOutput](t)(e.client.HeadObject(ctx(), &s3.HeadObjectInput{Bucket: aws.String("sysmeta"), Key: aws.String("report.pdf")}))
	if aws.ToString(h.ContentDisposition) != cd {
		t.Fatalf("Content-Disposition not kept: %q", aws.ToString(h.ContentDisposition))
	}

	big := name(400) // 3633 bytes: more than the store holds
	for _, c := range []struct {
		name string
		hdr  map[string]string
	}{
		{"PUT", map[string]string{"Content-Disposition": big}},
		{"PUT, user metadata within 2 KB", map[string]string{"Content-Disposition": cd, "X-Amz-Meta-Note": strings.Repeat("n", 1000)}},
		{"copy with REPLACE", map[string]string{"Content-Disposition": big, "X-Amz-Copy-Source": "/sysmeta/report.pdf", "X-Amz-Metadata-Directive": "REPLACE"}},
	} {
		var data []byte
		if c.hdr["X-Amz-Copy-Source"] == "" {
			data = []byte("pdf bytes")
		}
		resp, body := e.do(e.rawRequest("PUT", "/sysmeta/big.pdf", "", data, "", c.hdr))
		if resp.StatusCode != http.StatusBadRequest || errorCode(body) != "MetadataTooLarge" {
			t.Errorf("%s with metadata the store cannot hold: %d %s, want 400 MetadataTooLarge", c.name, resp.StatusCode, errorCode(body))
		}
	}
	if n := e.store.Len("sysmeta"); n != 1 {
		t.Errorf("%d objects stored, want 1", n)
	}
}
