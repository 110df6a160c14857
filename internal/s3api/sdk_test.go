package s3api_test

import (
	"bytes"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

func TestSDKBuckets(t *testing.T) {
	e := newEnv(t, envOpts{})
	c := e.client
	for _, b := range []string{"alpha", "beta"} {
		must[*s3.CreateBucketOutput](t)(c.CreateBucket(ctx(), &s3.CreateBucketInput{Bucket: aws.String(b)}))
	}
	_, err := c.CreateBucket(ctx(), &s3.CreateBucketInput{Bucket: aws.String("alpha")})
	wantCode(t, err, "BucketAlreadyOwnedByYou", 409)
	_, err = c.CreateBucket(ctx(), &s3.CreateBucketInput{Bucket: aws.String("Bad_Name")})
	wantCode(t, err, "InvalidBucketName", 400)

	out := must[*s3.ListBucketsOutput](t)(c.ListBuckets(ctx(), &s3.ListBucketsInput{}))
	var names []string
	for _, b := range out.Buckets {
		names = append(names, *b.Name)
		if b.CreationDate == nil || time.Since(*b.CreationDate) > time.Minute {
			t.Errorf("bucket %s creation date %v", *b.Name, b.CreationDate)
		}
	}
	if strings.Join(names, ",") != "alpha,beta" {
		t.Fatalf("ListBuckets = %v", names)
	}
	must[*s3.HeadBucketOutput](t)(c.HeadBucket(ctx(), &s3.HeadBucketInput{Bucket: aws.String("alpha")}))
	_, err = c.HeadBucket(ctx(), &s3.HeadBucketInput{Bucket: aws.String("nope")})
	wantCode(t, err, "", 404)
	loc := must[*s3.GetBucketLocationOutput](t)(c.GetBucketLocation(ctx(), &s3.GetBucketLocationInput{Bucket: aws.String("alpha")}))
	if loc.LocationConstraint != "" {
		t.Errorf("location of a us-east-1 bucket = %q, want empty", loc.LocationConstraint)
	}

	must[*s3.PutObjectOutput](t)(c.PutObject(ctx(), &s3.PutObjectInput{Bucket: aws.String("beta"), Key: aws.String("k"), Body: strings.NewReader("x")}))
	_, err = c.DeleteBucket(ctx(), &s3.DeleteBucketInput{Bucket: aws.String("beta")})
	wantCode(t, err, "BucketNotEmpty", 409)
	must[*s3.DeleteBucketOutput](t)(c.DeleteBucket(ctx(), &s3.DeleteBucketInput{Bucket: aws.String("alpha")}))
	_, err = c.DeleteBucket(ctx(), &s3.DeleteBucketInput{Bucket: aws.String("alpha")})
	wantCode(t, err, "NoSuchBucket", 404)
}

func putString(t *testing.T, c *s3.Client, bucket, key, body string) *s3.PutObjectOutput {
	t.Helper()
	return must[*s3.PutObjectOutput](t)(c.PutObject(ctx(), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(body)}))
}

func getString(t *testing.T, c *s3.Client, in *s3.GetObjectInput) (string, *s3.GetObjectOutput) {
	t.Helper()
	out := must[*s3.GetObjectOutput](t)(c.GetObject(ctx(), in))
	defer out.Body.Close()
	b := must[[]byte](t)(io.ReadAll(out.Body))
	return string(b), out
}

func md5hex(b []byte) string { s := md5.Sum(b); return hex.EncodeToString(s[:]) }

func TestSDKObjects(t *testing.T) {
	for _, tls := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", tls), func(t *testing.T) { testSDKObjects(t, tls) })
	}
}

func testSDKObjects(t *testing.T, tls bool) {
	e := newEnv(t, envOpts{tls: tls})
	c := e.client
	must[*s3.CreateBucketOutput](t)(c.CreateBucket(ctx(), &s3.CreateBucketInput{Bucket: aws.String("data")}))
	body := strings.Repeat("0123456789", 1000)
	sum := md5.Sum([]byte(body))
	put := must[*s3.PutObjectOutput](t)(c.PutObject(ctx(), &s3.PutObjectInput{
		Bucket: aws.String("data"), Key: aws.String("dir/file one.txt"), Body: strings.NewReader(body),
		ContentType: aws.String("text/plain"), Metadata: map[string]string{"color": "blue"},
		ContentMD5: aws.String(base64.StdEncoding.EncodeToString(sum[:])),
	}))
	if *put.ETag != `"`+md5hex([]byte(body))+`"` {
		t.Fatalf("PUT ETag = %s", *put.ETag)
	}

	got, out := getString(t, c, &s3.GetObjectInput{Bucket: aws.String("data"), Key: aws.String("dir/file one.txt")})
	if got != body || *out.ContentType != "text/plain" || out.Metadata["color"] != "blue" || *out.ETag != *put.ETag || *out.ContentLength != int64(len(body)) {
		t.Fatalf("GET: %d bytes, type %v, meta %v, etag %v", len(got), *out.ContentType, out.Metadata, *out.ETag)
	}

	// Ranges.
	for _, tc := range []struct{ rng, want, cr string }{
		{"bytes=10-19", body[10:20], "bytes 10-19/10000"},
		{"bytes=9995-", body[9995:], "bytes 9995-9999/10000"},
		{"bytes=-3", body[9997:], "bytes 9997-9999/10000"},
		{"bytes=9990-20000", body[9990:], "bytes 9990-9999/10000"},
	} {
		got, out := getString(t, c, &s3.GetObjectInput{Bucket: aws.String("data"), Key: aws.String("dir/file one.txt"), Range: aws.String(tc.rng)})
		if got != tc.want || aws.ToString(out.ContentRange) != tc.cr {
			t.Errorf("range %s: %q, Content-Range %q", tc.rng, got, aws.ToString(out.ContentRange))
		}
	}
	_, err := c.GetObject(ctx(), &s3.GetObjectInput{Bucket: aws.String("data"), Key: aws.String("dir/file one.txt"), Range: aws.String("bytes=10000-")})
	wantCode(t, err, "InvalidRange", 416)

	// Conditionals.
	_, err = c.GetObject(ctx(), &s3.GetObjectInput{Bucket: aws.String("data"), Key: aws.String("dir/file one.txt"), IfNoneMatch: put.ETag})
	wantCode(t, err, "", 304)
	_, err = c.GetObject(ctx(), &s3.GetObjectInput{Bucket: aws.String("data"), Key: aws.String("dir/file one.txt"), IfMatch: aws.String(`"0000"`)})
	wantCode(t, err, "PreconditionFailed", 412)
	_, err = c.GetObject(ctx(), &s3.GetObjectInput{Bucket: aws.String("data"), Key: aws.String("dir/file one.txt"), IfModifiedSince: aws.Time(time.Now().Add(time.Hour))})
	wantCode(t, err, "", 304)
	_, err = c.GetObject(ctx(), &s3.GetObjectInput{Bucket: aws.String("data"), Key: aws.String("dir/file one.txt"), IfUnmodifiedSince: aws.Time(time.Now().Add(-time.Hour))})
	wantCode(t, err, "PreconditionFailed", 412)
	_, err = c.HeadObject(ctx(), &s3.HeadObjectInput{Bucket: aws.String("data"), Key: aws.String("dir/file one.txt"), IfMatch: aws.String(`"0000"`)})
	wantCode(t, err, "", 412)
	got, _ = getString(t, c, &s3.GetObjectInput{Bucket: aws.String("data"), Key: aws.String("dir/file one.txt"), IfMatch: put.ETag, IfModifiedSince: aws.Time(time.Now().Add(-time.Hour))})
	if got != body {
		t.Fatal("GET with conditions that hold did not return the object")
	}

	// Response overrides.
	_, out = getString(t, c, &s3.GetObjectInput{Bucket: aws.String("data"), Key: aws.String("dir/file one.txt"),
		ResponseContentType: aws.String("application/x-test"), ResponseContentDisposition: aws.String("attachment"), ResponseCacheControl: aws.String("no-cache")})
	if *out.ContentType != "application/x-test" || *out.ContentDisposition != "attachment" || *out.CacheControl != "no-cache" {
		t.Errorf("overrides: %v %v %v", *out.ContentType, *out.ContentDisposition, *out.CacheControl)
	}

	head := must[*s3.HeadObjectOutput](t)(c.HeadObject(ctx(), &s3.HeadObjectInput{Bucket: aws.String("data"), Key: aws.String("dir/file one.txt")}))
	if *head.ContentLength != int64(len(body)) || *head.ETag != *put.ETag || head.Metadata["color"] != "blue" || head.LastModified == nil {
		t.Fatalf("HEAD: %+v", head)
	}
	_, err = c.HeadObject(ctx(), &s3.HeadObjectInput{Bucket: aws.String("data"), Key: aws.String("missing")})
	wantCode(t, err, "NotFound", 404)
	_, err = c.GetObject(ctx(), &s3.GetObjectInput{Bucket: aws.String("data"), Key: aws.String("missing")})
	wantCode(t, err, "NoSuchKey", 404)
	_, err = c.GetObject(ctx(), &s3.GetObjectInput{Bucket: aws.String("nobucket"), Key: aws.String("missing")})
	wantCode(t, err, "NoSuchBucket", 404)

	// Wrong Content-MD5: BadDigest, and nothing replaces the object.
	_, err = c.PutObject(ctx(), &s3.PutObjectInput{Bucket: aws.String("data"), Key: aws.String("dir/file one.txt"),
		Body: strings.NewReader("other"), ContentMD5: aws.String(base64.StdEncoding.EncodeToString(sum[:]))})
	wantCode(t, err, "BadDigest", 400)
	_, err = c.PutObject(ctx(), &s3.PutObjectInput{Bucket: aws.String("data"), Key: aws.String("md5"),
		Body: strings.NewReader("other"), ContentMD5: aws.String("not-base64!")})
	wantCode(t, err, "InvalidDigest", 400)
	if got, _ := getString(t, c, &s3.GetObjectInput{Bucket: aws.String("data"), Key: aws.String("dir/file one.txt")}); got != body {
		t.Fatal("a refused PUT changed the object")
	}

	// Empty object.
	putString(t, c, "data", "empty", "")
	if got, _ := getString(t, c, &s3.GetObjectInput{Bucket: aws.String("data"), Key: aws.String("empty")}); got != "" {
		t.Fatalf("empty object read back as %q", got)
	}
	if got, out := getString(t, c, &s3.GetObjectInput{Bucket: aws.String("data"), Key: aws.String("empty"), Range: aws.String("bytes=0-1023")}); got != "" || out.ContentRange != nil {
		t.Fatalf("ranged GET of an empty object: %q, Content-Range %v", got, out.ContentRange)
	}
	if got, out := getString(t, c, &s3.GetObjectInput{Bucket: aws.String("data"), Key: aws.String("empty"), Range: aws.String("bytes=-5")}); got != "" || out.ContentRange != nil {
		t.Fatalf("suffix-ranged GET of an empty object: %q, Content-Range %v", got, out.ContentRange)
	}
	if h := must[*s3.HeadObjectOutput](t)(c.HeadObject(ctx(), &s3.HeadObjectInput{Bucket: aws.String("data"), Key: aws.String("empty"), Range: aws.String("bytes=0-10")})); *h.ContentLength != 0 {
		t.Fatalf("ranged HEAD of an empty object: length %d", *h.ContentLength)
	}

	// Copy, with an encoded source, metadata directive and conditions.
	src := url.PathEscape("data") + "/" + strings.ReplaceAll(url.PathEscape("dir/file one.txt"), "%2F", "/")
	cp := must[*s3.CopyObjectOutput](t)(c.CopyObject(ctx(), &s3.CopyObjectInput{Bucket: aws.String("data"), Key: aws.String("copy/ü.txt"), CopySource: aws.String(src)}))
	if *cp.CopyObjectResult.ETag != *put.ETag {
		t.Fatalf("copy ETag %s", *cp.CopyObjectResult.ETag)
	}
	got, out = getString(t, c, &s3.GetObjectInput{Bucket: aws.String("data"), Key: aws.String("copy/ü.txt")})
	if got != body || out.Metadata["color"] != "blue" {
		t.Fatal("copy differs from its source")
	}
	must[*s3.CopyObjectOutput](t)(c.CopyObject(ctx(), &s3.CopyObjectInput{Bucket: aws.String("data"), Key: aws.String("copy/ü.txt"), CopySource: aws.String("/" + src),
		MetadataDirective: types.MetadataDirectiveReplace, Metadata: map[string]string{"shape": "round"}, ContentType: aws.String("text/x-new")}))
	_, out = getString(t, c, &s3.GetObjectInput{Bucket: aws.String("data"), Key: aws.String("copy/ü.txt")})
	if out.Metadata["shape"] != "round" || out.Metadata["color"] != "" || *out.ContentType != "text/x-new" {
		t.Fatalf("REPLACE copy: meta %v type %s", out.Metadata, *out.ContentType)
	}
	_, err = c.CopyObject(ctx(), &s3.CopyObjectInput{Bucket: aws.String("data"), Key: aws.String("copy2"), CopySource: aws.String(src), CopySourceIfMatch: aws.String(`"beef"`)})
	wantCode(t, err, "PreconditionFailed", 412)
	_, err = c.CopyObject(ctx(), &s3.CopyObjectInput{Bucket: aws.String("data"), Key: aws.String("copy2"), CopySource: aws.String(src), CopySourceIfNoneMatch: put.ETag})
	wantCode(t, err, "PreconditionFailed", 412)
	_, err = c.CopyObject(ctx(), &s3.CopyObjectInput{Bucket: aws.String("data"), Key: aws.String("copy2"), CopySource: aws.String("data/missing")})
	wantCode(t, err, "NoSuchKey", 404)
	_, err = c.CopyObject(ctx(), &s3.CopyObjectInput{Bucket: aws.String("data"), Key: aws.String("dir/file one.txt"), CopySource: aws.String(src)})
	wantCode(t, err, "InvalidRequest", 400)

	// Delete and DeleteObjects.
	must[*s3.DeleteObjectOutput](t)(c.DeleteObject(ctx(), &s3.DeleteObjectInput{Bucket: aws.String("data"), Key: aws.String("empty")}))
	must[*s3.DeleteObjectOutput](t)(c.DeleteObject(ctx(), &s3.DeleteObjectInput{Bucket: aws.String("data"), Key: aws.String("empty")}))
	for i := 0; i < 5; i++ {
		putString(t, c, "data", fmt.Sprintf("del/%d", i), "x")
	}
	del := must[*s3.DeleteObjectsOutput](t)(c.DeleteObjects(ctx(), &s3.DeleteObjectsInput{Bucket: aws.String("data"), Delete: &types.Delete{
		Objects: []types.ObjectIdentifier{{Key: aws.String("del/0")}, {Key: aws.String("del/1")}, {Key: aws.String("del/missing")}, {Key: aws.String("bad/../key")}},
	}}))
	if len(del.Deleted) != 3 || len(del.Errors) != 1 || *del.Errors[0].Key != "bad/../key" || *del.Errors[0].Code != "InvalidArgument" {
		t.Fatalf("DeleteObjects: deleted %d, errors %+v", len(del.Deleted), del.Errors)
	}
	del = must[*s3.DeleteObjectsOutput](t)(c.DeleteObjects(ctx(), &s3.DeleteObjectsInput{Bucket: aws.String("data"), Delete: &types.Delete{
		Objects: []types.ObjectIdentifier{{Key: aws.String("del/2")}, {Key: aws.String("del/3")}}, Quiet: aws.Bool(true),
	}}))
	if len(del.Deleted) != 0 || len(del.Errors) != 0 {
		t.Fatalf("quiet DeleteObjects answered %d deleted, %d errors", len(del.Deleted), len(del.Errors))
	}
	lst := must[*s3.ListObjectsV2Output](t)(c.ListObjectsV2(ctx(), &s3.ListObjectsV2Input{Bucket: aws.String("data"), Prefix: aws.String("del/")}))
	if len(lst.Contents) != 1 || *lst.Contents[0].Key != "del/4" {
		t.Fatalf("after deletes, del/ holds %d keys", len(lst.Contents))
	}

	// Which payload modes the SDK used: over TLS it streams aws-chunked
	// with a trailing checksum, over plain HTTP it signs the SHA-256.
	modes := map[string]bool{}
	for _, p := range e.seenPayloads() {
		modes[p] = true
	}
	if tls && !modes["STREAMING-UNSIGNED-PAYLOAD-TRAILER"] {
		t.Errorf("over TLS the SDK never sent an aws-chunked trailer upload; modes %v", modes)
	}
	if !tls && len(modes) < 2 {
		t.Errorf("payload modes seen: %v", modes)
	}
}

func TestSDKChecksumAlgorithms(t *testing.T) {
	for _, tls := range []bool{false, true} {
		e := newEnv(t, envOpts{tls: tls})
		must[*s3.CreateBucketOutput](t)(e.client.CreateBucket(ctx(), &s3.CreateBucketInput{Bucket: aws.String("cksum")}))
		body := bytes.Repeat([]byte("checksum me "), 30000)
		for _, algo := range []types.ChecksumAlgorithm{types.ChecksumAlgorithmCrc32, types.ChecksumAlgorithmCrc32c, types.ChecksumAlgorithmSha1, types.ChecksumAlgorithmSha256, types.ChecksumAlgorithmCrc64nvme} {
			key := fmt.Sprintf("obj-%s", algo)
			_, err := e.client.PutObject(ctx(), &s3.PutObjectInput{Bucket: aws.String("cksum"), Key: aws.String(key), Body: bytes.NewReader(body), ChecksumAlgorithm: algo})
			if err != nil {
				t.Fatalf("tls=%v %s: %v", tls, algo, err)
			}
			got, _ := getString(t, e.client, &s3.GetObjectInput{Bucket: aws.String("cksum"), Key: aws.String(key)})
			if got != string(body) {
				t.Fatalf("tls=%v %s: read back %d bytes", tls, algo, len(got))
			}
		}
	}
}

func TestSDKList(t *testing.T) {
	e := newEnv(t, envOpts{})
	c := e.client
	must[*s3.CreateBucketOutput](t)(c.CreateBucket(ctx(), &s3.CreateBucketInput{Bucket: aws.String("lst")}))
	keys := []string{"a", "b/1", "b/2", "b/3/x", "c d", "c+e", "d/", "e", "f/g/h"}
	for _, k := range keys {
		putString(t, c, "lst", k, k)
	}
	// Paging one key at a time visits every key once, in order.
	var seen []string
	p := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: aws.String("lst"), MaxKeys: aws.Int32(2)})
	for p.HasMorePages() {
		out := must[*s3.ListObjectsV2Output](t)(p.NextPage(ctx()))
		if int(*out.KeyCount) != len(out.Contents) || len(out.Contents) > 2 {
			t.Fatalf("page KeyCount %d, %d contents", *out.KeyCount, len(out.Contents))
		}
		for _, o := range out.Contents {
			seen = append(seen, *o.Key)
			if *o.Size != int64(len(*o.Key)) || *o.ETag != `"`+md5hex([]byte(*o.Key))+`"` {
				t.Errorf("listing of %s: size %d etag %s", *o.Key, *o.Size, *o.ETag)
			}
		}
	}
	if strings.Join(seen, "|") != strings.Join(keys, "|") {
		t.Fatalf("paged listing %v", seen)
	}
	// Delimiter with paging: common prefixes are not repeated.
	var entries []string
	p = s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: aws.String("lst"), Delimiter: aws.String("/"), MaxKeys: aws.Int32(1)})
	for p.HasMorePages() {
		out := must[*s3.ListObjectsV2Output](t)(p.NextPage(ctx()))
		for _, o := range out.Contents {
			entries = append(entries, *o.Key)
		}
		for _, cp := range out.CommonPrefixes {
			entries = append(entries, *cp.Prefix)
		}
	}
	if want := "a|b/|c d|c+e|d/|e|f/"; strings.Join(entries, "|") != want {
		t.Fatalf("delimited listing %v, want %s", entries, want)
	}
	out := must[*s3.ListObjectsV2Output](t)(c.ListObjectsV2(ctx(), &s3.ListObjectsV2Input{Bucket: aws.String("lst"), Prefix: aws.String("b/"), Delimiter: aws.String("/")}))
	if len(out.Contents) != 2 || len(out.CommonPrefixes) != 1 || *out.CommonPrefixes[0].Prefix != "b/3/" {
		t.Fatalf("prefix b/: %d contents, prefixes %v", len(out.Contents), out.CommonPrefixes)
	}
	out = must[*s3.ListObjectsV2Output](t)(c.ListObjectsV2(ctx(), &s3.ListObjectsV2Input{Bucket: aws.String("lst"), StartAfter: aws.String("c d")}))
	if len(out.Contents) != 4 || *out.Contents[0].Key != "c+e" {
		t.Fatalf("start-after: %d contents", len(out.Contents))
	}
	out = must[*s3.ListObjectsV2Output](t)(c.ListObjectsV2(ctx(), &s3.ListObjectsV2Input{Bucket: aws.String("lst"), Prefix: aws.String("c"), EncodingType: types.EncodingTypeUrl}))
	if len(out.Contents) != 2 || *out.Contents[0].Key != "c%20d" || *out.Contents[1].Key != "c%2Be" {
		t.Fatalf("encoding-type=url: %v", out.Contents)
	}
	out = must[*s3.ListObjectsV2Output](t)(c.ListObjectsV2(ctx(), &s3.ListObjectsV2Input{Bucket: aws.String("lst"), MaxKeys: aws.Int32(0)}))
	if len(out.Contents) != 0 || *out.IsTruncated {
		t.Fatal("max-keys=0 returned keys")
	}
	_, err := c.ListObjectsV2(ctx(), &s3.ListObjectsV2Input{Bucket: aws.String("lst"), ContinuationToken: aws.String("!!!")})
	wantCode(t, err, "InvalidArgument", 400)
	_, err = c.ListObjectsV2(ctx(), &s3.ListObjectsV2Input{Bucket: aws.String("nolst")})
	wantCode(t, err, "NoSuchBucket", 404)

	// ListObjects v1 with markers.
	var v1 []string
	marker := ""
	for i := 0; i < 20; i++ {
		o := must[*s3.ListObjectsOutput](t)(c.ListObjects(ctx(), &s3.ListObjectsInput{Bucket: aws.String("lst"), Marker: aws.String(marker), MaxKeys: aws.Int32(3)}))
		for _, c := range o.Contents {
			v1 = append(v1, *c.Key)
		}
		if !*o.IsTruncated {
			break
		}
		marker = *o.NextMarker
	}
	if strings.Join(v1, "|") != strings.Join(keys, "|") {
		t.Fatalf("v1 listing %v", v1)
	}
}

func TestSDKMultipart(t *testing.T) {
	e := newEnv(t, envOpts{})
	c := e.client
	must[*s3.CreateBucketOutput](t)(c.CreateBucket(ctx(), &s3.CreateBucketInput{Bucket: aws.String("mpu")}))
	src := bytes.Repeat([]byte("source-object-"), 1000)
	must[*s3.PutObjectOutput](t)(c.PutObject(ctx(), &s3.PutObjectInput{Bucket: aws.String("mpu"), Key: aws.String("src"), Body: bytes.NewReader(src)}))

	cr := must[*s3.CreateMultipartUploadOutput](t)(c.CreateMultipartUpload(ctx(), &s3.CreateMultipartUploadInput{
		Bucket: aws.String("mpu"), Key: aws.String("big"), ContentType: aws.String("application/x-big"), Metadata: map[string]string{"m": "1"}}))
	id := cr.UploadId
	part1 := bytes.Repeat([]byte{'1'}, 4096)
	part3 := []byte("tail")
	up1 := must[*s3.UploadPartOutput](t)(c.UploadPart(ctx(), &s3.UploadPartInput{Bucket: aws.String("mpu"), Key: aws.String("big"), UploadId: id, PartNumber: aws.Int32(1), Body: bytes.NewReader(part1)}))
	upc := must[*s3.UploadPartCopyOutput](t)(c.UploadPartCopy(ctx(), &s3.UploadPartCopyInput{Bucket: aws.String("mpu"), Key: aws.String("big"), UploadId: id, PartNumber: aws.Int32(2),
		CopySource: aws.String("mpu/src"), CopySourceRange: aws.String("bytes=100-2147")}))
	up3 := must[*s3.UploadPartOutput](t)(c.UploadPart(ctx(), &s3.UploadPartInput{Bucket: aws.String("mpu"), Key: aws.String("big"), UploadId: id, PartNumber: aws.Int32(3), Body: bytes.NewReader(part3)}))
	_, err := c.UploadPartCopy(ctx(), &s3.UploadPartCopyInput{Bucket: aws.String("mpu"), Key: aws.String("big"), UploadId: id, PartNumber: aws.Int32(4),
		CopySource: aws.String("mpu/src"), CopySourceRange: aws.String("bytes=0-999999")})
	wantCode(t, err, "InvalidRange", 416)
	_, err = c.UploadPart(ctx(), &s3.UploadPartInput{Bucket: aws.String("mpu"), Key: aws.String("big"), UploadId: aws.String("nope"), PartNumber: aws.Int32(1), Body: bytes.NewReader(part3)})
	wantCode(t, err, "NoSuchUpload", 404)
	_, err = c.UploadPart(ctx(), &s3.UploadPartInput{Bucket: aws.String("mpu"), Key: aws.String("big"), UploadId: id, PartNumber: aws.Int32(10001), Body: bytes.NewReader(part3)})
	wantCode(t, err, "InvalidArgument", 400)

	parts := must[*s3.ListPartsOutput](t)(c.ListParts(ctx(), &s3.ListPartsInput{Bucket: aws.String("mpu"), Key: aws.String("big"), UploadId: id}))
	if len(parts.Parts) != 3 || *parts.Parts[1].Size != 2048 || *parts.Parts[0].ETag != *up1.ETag {
		t.Fatalf("ListParts: %+v", parts.Parts)
	}
	paged := must[*s3.ListPartsOutput](t)(c.ListParts(ctx(), &s3.ListPartsInput{Bucket: aws.String("mpu"), Key: aws.String("big"), UploadId: id, MaxParts: aws.Int32(2)}))
	if len(paged.Parts) != 2 || !*paged.IsTruncated || *paged.NextPartNumberMarker != "2" {
		t.Fatalf("ListParts max-parts=2: %d parts, truncated %v", len(paged.Parts), *paged.IsTruncated)
	}
	ups := must[*s3.ListMultipartUploadsOutput](t)(c.ListMultipartUploads(ctx(), &s3.ListMultipartUploadsInput{Bucket: aws.String("mpu")}))
	if len(ups.Uploads) != 1 || *ups.Uploads[0].UploadId != *id || *ups.Uploads[0].Key != "big" {
		t.Fatalf("ListMultipartUploads: %+v", ups.Uploads)
	}

	completed := []types.CompletedPart{
		{PartNumber: aws.Int32(1), ETag: up1.ETag},
		{PartNumber: aws.Int32(2), ETag: upc.CopyPartResult.ETag},
		{PartNumber: aws.Int32(3), ETag: up3.ETag},
	}
	_, err = c.CompleteMultipartUpload(ctx(), &s3.CompleteMultipartUploadInput{Bucket: aws.String("mpu"), Key: aws.String("big"), UploadId: id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{completed[1], completed[0]}}})
	wantCode(t, err, "InvalidPartOrder", 400)
	_, err = c.CompleteMultipartUpload(ctx(), &s3.CompleteMultipartUploadInput{Bucket: aws.String("mpu"), Key: aws.String("big"), UploadId: id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{completed[0], {PartNumber: aws.Int32(2), ETag: aws.String(`"ffff"`)}}}})
	wantCode(t, err, "InvalidPart", 400)
	_, err = c.CompleteMultipartUpload(ctx(), &s3.CompleteMultipartUploadInput{Bucket: aws.String("mpu"), Key: aws.String("big"), UploadId: id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{completed[2], {PartNumber: aws.Int32(5), ETag: up1.ETag}}}})
	wantCode(t, err, "", 400)

	done := must[*s3.CompleteMultipartUploadOutput](t)(c.CompleteMultipartUpload(ctx(), &s3.CompleteMultipartUploadInput{Bucket: aws.String("mpu"), Key: aws.String("big"), UploadId: id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: completed}}))
	want := append(append(append([]byte(nil), part1...), src[100:2148]...), part3...)
	var sums []byte
	for _, p := range [][]byte{part1, src[100:2148], part3} {
		s := md5.Sum(p)
		sums = append(sums, s[:]...)
	}
	wantETag := fmt.Sprintf(`"%s-3"`, md5hex(sums))
	if *done.ETag != wantETag {
		t.Fatalf("multipart ETag %s, want %s", *done.ETag, wantETag)
	}
	got, out := getString(t, c, &s3.GetObjectInput{Bucket: aws.String("mpu"), Key: aws.String("big")})
	if got != string(want) || *out.ContentType != "application/x-big" || out.Metadata["m"] != "1" || *out.ETag != wantETag {
		t.Fatalf("completed object: %d bytes, type %s, meta %v", len(got), *out.ContentType, out.Metadata)
	}
	if out.PartsCount != nil {
		t.Errorf("a whole GET names the part count (%d); S3 names it only for a part", *out.PartsCount)
	}
	// Reads by part number serve what each part uploaded, with the count,
	// as the transfer managers that download by part expect.
	for i, p := range [][]byte{part1, src[100:2148], part3} {
		n := int32(i + 1)
		got, out := getString(t, c, &s3.GetObjectInput{Bucket: aws.String("mpu"), Key: aws.String("big"), PartNumber: aws.Int32(n)})
		off := strings.Index(string(want), string(p))
		wantRange := fmt.Sprintf("bytes %d-%d/%d", off, off+len(p)-1, len(want))
		if got != string(p) || aws.ToInt32(out.PartsCount) != 3 || aws.ToString(out.ContentRange) != wantRange || *out.ETag != wantETag {
			t.Errorf("GET part %d: %d bytes, parts count %v, range %v, ETag %s; want %d bytes, 3, %s", n, len(got), out.PartsCount, aws.ToString(out.ContentRange), *out.ETag, len(p), wantRange)
		}
		h := must[*s3.HeadObjectOutput](t)(c.HeadObject(ctx(), &s3.HeadObjectInput{Bucket: aws.String("mpu"), Key: aws.String("big"), PartNumber: aws.Int32(n)}))
		if aws.ToInt64(h.ContentLength) != int64(len(p)) || aws.ToInt32(h.PartsCount) != 3 || aws.ToString(h.ContentRange) != wantRange {
			t.Errorf("HEAD part %d: length %v, parts count %v, range %v", n, aws.ToInt64(h.ContentLength), h.PartsCount, aws.ToString(h.ContentRange))
		}
	}
	_, err = c.GetObject(ctx(), &s3.GetObjectInput{Bucket: aws.String("mpu"), Key: aws.String("big"), PartNumber: aws.Int32(4)})
	wantCode(t, err, "InvalidPartNumber", 416)
	_, err = c.GetObject(ctx(), &s3.GetObjectInput{Bucket: aws.String("mpu"), Key: aws.String("big"), PartNumber: aws.Int32(1), Range: aws.String("bytes=0-1")})
	wantCode(t, err, "InvalidRequest", 400)
	// An object put in one piece is part 1, and has no other; a copy of a
	// multipart object is one part too.
	got, out = getString(t, c, &s3.GetObjectInput{Bucket: aws.String("mpu"), Key: aws.String("src"), PartNumber: aws.Int32(1)})
	if got != string(src) || out.PartsCount != nil || aws.ToString(out.ContentRange) != fmt.Sprintf("bytes 0-%d/%d", len(src)-1, len(src)) {
		t.Errorf("GET part 1 of a single-part object: %d bytes, parts count %v, range %v", len(got), out.PartsCount, aws.ToString(out.ContentRange))
	}
	_, err = c.GetObject(ctx(), &s3.GetObjectInput{Bucket: aws.String("mpu"), Key: aws.String("src"), PartNumber: aws.Int32(2)})
	wantCode(t, err, "InvalidPartNumber", 416)
	must[*s3.CopyObjectOutput](t)(c.CopyObject(ctx(), &s3.CopyObjectInput{Bucket: aws.String("mpu"), Key: aws.String("copy"), CopySource: aws.String("mpu/big")}))
	if h := must[*s3.HeadObjectOutput](t)(c.HeadObject(ctx(), &s3.HeadObjectInput{Bucket: aws.String("mpu"), Key: aws.String("copy"), PartNumber: aws.Int32(1)})); h.PartsCount != nil || aws.ToInt64(h.ContentLength) != int64(len(want)) {
		t.Errorf("HEAD part 1 of a copy: parts count %v, length %d", h.PartsCount, aws.ToInt64(h.ContentLength))
	}

	// Abort.
	cr2 := must[*s3.CreateMultipartUploadOutput](t)(c.CreateMultipartUpload(ctx(), &s3.CreateMultipartUploadInput{Bucket: aws.String("mpu"), Key: aws.String("gone")}))
	must[*s3.AbortMultipartUploadOutput](t)(c.AbortMultipartUpload(ctx(), &s3.AbortMultipartUploadInput{Bucket: aws.String("mpu"), Key: aws.String("gone"), UploadId: cr2.UploadId}))
	_, err = c.ListParts(ctx(), &s3.ListPartsInput{Bucket: aws.String("mpu"), Key: aws.String("gone"), UploadId: cr2.UploadId})
	wantCode(t, err, "NoSuchUpload", 404)
	ups = must[*s3.ListMultipartUploadsOutput](t)(c.ListMultipartUploads(ctx(), &s3.ListMultipartUploadsInput{Bucket: aws.String("mpu")}))
	if len(ups.Uploads) != 0 {
		t.Fatalf("uploads left: %d", len(ups.Uploads))
	}

	// A part under the minimum size that is not the last: EntityTooSmall.
	cr3 := must[*s3.CreateMultipartUploadOutput](t)(c.CreateMultipartUpload(ctx(), &s3.CreateMultipartUploadInput{Bucket: aws.String("mpu"), Key: aws.String("small")}))
	var small []types.CompletedPart
	for i := int32(1); i <= 2; i++ {
		u := must[*s3.UploadPartOutput](t)(c.UploadPart(ctx(), &s3.UploadPartInput{Bucket: aws.String("mpu"), Key: aws.String("small"), UploadId: cr3.UploadId, PartNumber: aws.Int32(i), Body: strings.NewReader("tiny")}))
		small = append(small, types.CompletedPart{PartNumber: aws.Int32(i), ETag: u.ETag})
	}
	_, err = c.CompleteMultipartUpload(ctx(), &s3.CompleteMultipartUploadInput{Bucket: aws.String("mpu"), Key: aws.String("small"), UploadId: cr3.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: small}})
	wantCode(t, err, "EntityTooSmall", 400)
}

func TestSDKAuth(t *testing.T) {
	e := newEnv(t, envOpts{})
	must[*s3.CreateBucketOutput](t)(e.client.CreateBucket(ctx(), &s3.CreateBucketInput{Bucket: aws.String("auth")}))
	putString(t, e.client, "auth", "obj", "secret data")

	_, err := e.newClient(testKey, "wrong-secret").PutObject(ctx(), &s3.PutObjectInput{Bucket: aws.String("auth"), Key: aws.String("evil"), Body: strings.NewReader("x")})
	wantCode(t, err, "SignatureDoesNotMatch", 403)
	_, err = e.newClient("NOSUCHKEY", testSecret).ListBuckets(ctx(), &s3.ListBucketsInput{})
	wantCode(t, err, "InvalidAccessKeyId", 403)
	if e.store.Len("auth") != 1 {
		t.Fatal("a refused PUT stored an object")
	}

	// Presigned GET and PUT.
	ps := s3.NewPresignClient(e.client)
	g := must[*v4PresignedRequest](t)(presignGet(ps, "auth", "obj", time.Minute))
	resp, body := e.do(must[*http.Request](t)(http.NewRequest("GET", g.URL, nil)))
	if resp.StatusCode != 200 || string(body) != "secret data" {
		t.Fatalf("presigned GET: %d %s", resp.StatusCode, body)
	}
	pu := must[*v4PresignedRequest](t)(presignPut(ps, "auth", "uploaded", time.Minute))
	resp, body = e.do(must[*http.Request](t)(http.NewRequest("PUT", pu.URL, strings.NewReader("via presigned"))))
	if resp.StatusCode != 200 {
		t.Fatalf("presigned PUT: %d %s", resp.StatusCode, body)
	}
	if got, _ := getString(t, e.client, &s3.GetObjectInput{Bucket: aws.String("auth"), Key: aws.String("uploaded")}); got != "via presigned" {
		t.Fatalf("presigned PUT stored %q", got)
	}
	// A presigned URL whose path is changed, and one signed with another secret.
	bad := strings.Replace(g.URL, "/obj?", "/uploaded?", 1)
	resp, body = e.do(must[*http.Request](t)(http.NewRequest("GET", bad, nil)))
	if resp.StatusCode != 403 || errorCode(body) != "SignatureDoesNotMatch" {
		t.Fatalf("tampered presigned URL: %d %s", resp.StatusCode, body)
	}

	// Expired: signed two hours ago, valid for one.
	r := must[*http.Request](t)(http.NewRequest("GET", e.srv.URL+"/auth/obj?X-Amz-Expires=3600", nil))
	u, _ := presignAt(r, time.Now().Add(-2*time.Hour))
	resp, body = e.do(must[*http.Request](t)(http.NewRequest("GET", u, nil)))
	if resp.StatusCode != 403 || errorCode(body) != "AccessDenied" || !strings.Contains(string(body), "Request has expired") {
		t.Fatalf("expired presigned URL: %d %s", resp.StatusCode, body)
	}

	// Header auth with a clock 20 minutes off.
	r = e.rawRequest("GET", "/auth/obj", "", nil, "", nil)
	e.sign(r, r.Header.Get("X-Amz-Content-Sha256"), testSecret, time.Now().Add(-20*time.Minute))
	resp, body = e.do(r)
	if resp.StatusCode != 403 || errorCode(body) != "RequestTimeTooSkewed" {
		t.Fatalf("skewed request: %d %s", resp.StatusCode, body)
	}
	// Unsigned request.
	resp, body = e.do(must[*http.Request](t)(http.NewRequest("GET", e.srv.URL+"/auth/obj", nil)))
	if resp.StatusCode != 403 || errorCode(body) != "AccessDenied" {
		t.Fatalf("anonymous request: %d %s", resp.StatusCode, body)
	}
}

func TestSDKNoCredentialsRejectsAll(t *testing.T) {
	h, err := newHandlerNoCreds()
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t}
	e.srv = newServer(t, h)
	c := e.newClient(testKey, testSecret)
	_, err = c.ListBuckets(ctx(), &s3.ListBucketsInput{})
	wantCode(t, err, "InvalidAccessKeyId", 403)
}
