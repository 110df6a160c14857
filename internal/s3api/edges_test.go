package s3api_test

import (
	"bytes"
	"encoding/xml"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// Edge cases that behave as S3 does (kept as regression checks).
func TestS3EdgeCases(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.mkBucket("edge")
	keys := []string{"a+b c", "dir/x%2Fy", "100%/ü", "dir/", "sp ace/plus+/tilde~"}
	for _, k := range keys {
		putString(t, e.client, "edge", k, "v:"+k)
	}
	// encoding-type=url round trip, with "+" and space kept apart.
	resp, body := e.do(e.rawRequest("GET", "/edge", "list-type=2&encoding-type=url", nil, "", nil))
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	for _, want := range []string{"<Key>a%2Bb%20c</Key>", "<Key>dir/x%252Fy</Key>", "<Key>100%25/%C3%BC</Key>"} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("listing lacks %s: %s", want, body)
		}
	}
	// Percent-encoded slash in the path is a slash.
	resp, body = e.do(e.rawRequest("GET", "/edge/dir%2Fx%252Fy", "", nil, "", nil))
	if resp.StatusCode != 200 || string(body) != "v:dir/x%2Fy" {
		t.Errorf("GET dir%%2Fx%%252Fy: %d %q", resp.StatusCode, body)
	}
	// Copy source URL-encoded, with ?versionId=null.
	resp, body = e.do(e.rawRequest("PUT", "/edge/copy", "", nil, "", map[string]string{"X-Amz-Copy-Source": "/edge/a%2Bb%20c?versionId=null"}))
	got, _ := getString(t, e.client, &s3.GetObjectInput{Bucket: aws.String("edge"), Key: aws.String("copy")})
	if resp.StatusCode != 200 || got != "v:a+b c" {
		t.Errorf("copy: %d %s -> %q", resp.StatusCode, body, got)
	}
	// Tampered continuation tokens.
	for _, tok := range []string{"!!!", "", "%00"} {
		resp, body = e.do(e.rawRequest("GET", "/edge", "list-type=2&continuation-token="+tok, nil, "", nil))
		if resp.StatusCode != 400 {
			t.Errorf("token %q: %d %s", tok, resp.StatusCode, body)
		}
	}
	// Paging with a delimiter over a prefix, one entry per page.
	var all []string
	var token *string
	for i := 0; i < 20; i++ {
		out, err := e.client.ListObjectsV2(ctx(), &s3.ListObjectsV2Input{Bucket: aws.String("edge"), Delimiter: aws.String("/"), MaxKeys: aws.Int32(1), ContinuationToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range out.Contents {
			all = append(all, *o.Key)
		}
		for _, p := range out.CommonPrefixes {
			all = append(all, *p.Prefix)
		}
		if !aws.ToBool(out.IsTruncated) {
			break
		}
		token = out.NextContinuationToken
	}
	if strings.Join(all, ",") != "100%/,a+b c,copy,dir/,sp ace/" {
		t.Errorf("paged listing: %q", all)
	}
	// Range: suffix longer than the object, multiple ranges, empty object.
	putString(t, e.client, "edge", "five", "12345")
	putString(t, e.client, "edge", "empty", "")
	for _, c := range []struct {
		key, rng string
		status   int
		body     string
	}{
		{"five", "bytes=-100", 206, "12345"},
		{"five", "bytes=0-0,2-3", 200, "12345"},
		{"five", "bytes=5-", 416, ""},
		{"empty", "bytes=0-0", 200, ""}, // S3 answers 416 here (deliberate deviation)
	} {
		resp, body = e.do(e.rawRequest("GET", "/edge/"+c.key, "", nil, "", map[string]string{"Range": c.rng}))
		if resp.StatusCode != c.status || (c.status != 416 && string(body) != c.body) {
			t.Errorf("%s %s: %d %q", c.key, c.rng, resp.StatusCode, body)
		}
	}
	// Multipart: bad part lists.
	up := must[*s3.CreateMultipartUploadOutput](t)(e.client.CreateMultipartUpload(ctx(), &s3.CreateMultipartUploadInput{Bucket: aws.String("edge"), Key: aws.String("mp")}))
	p1 := must[*s3.UploadPartOutput](t)(e.client.UploadPart(ctx(), &s3.UploadPartInput{Bucket: aws.String("edge"), Key: aws.String("mp"), UploadId: up.UploadId, PartNumber: aws.Int32(1), Body: bytes.NewReader([]byte("small"))}))
	p2 := must[*s3.UploadPartOutput](t)(e.client.UploadPart(ctx(), &s3.UploadPartInput{Bucket: aws.String("edge"), Key: aws.String("mp"), UploadId: up.UploadId, PartNumber: aws.Int32(2), Body: bytes.NewReader([]byte("last"))}))
	for _, pn := range []string{"0", "10001", "-1", "x"} {
		resp, body = e.do(e.rawRequest("PUT", "/edge/mp", "partNumber="+pn+"&uploadId="+*up.UploadId, []byte("x"), "", nil))
		if resp.StatusCode != 400 {
			t.Errorf("part %s: %d %s", pn, resp.StatusCode, body)
		}
	}
	complete := func(parts ...types.CompletedPart) error {
		_, err := e.client.CompleteMultipartUpload(ctx(), &s3.CompleteMultipartUploadInput{Bucket: aws.String("edge"), Key: aws.String("mp"), UploadId: up.UploadId, MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}})
		return err
	}
	cp := func(n int32, etag *string) types.CompletedPart {
		return types.CompletedPart{PartNumber: aws.Int32(n), ETag: etag}
	}
	wantCode(t, complete(cp(2, p2.ETag), cp(1, p1.ETag)), "InvalidPartOrder", 400)
	wantCode(t, complete(cp(1, p1.ETag), cp(1, p1.ETag)), "InvalidPartOrder", 400)
	wantCode(t, complete(cp(1, aws.String(`"0123"`))), "InvalidPart", 400)
	wantCode(t, complete(cp(1, p1.ETag), cp(2, p2.ETag)), "EntityTooSmall", 400)
	must[*s3.AbortMultipartUploadOutput](t)(e.client.AbortMultipartUpload(ctx(), &s3.AbortMultipartUploadInput{Bucket: aws.String("edge"), Key: aws.String("mp"), UploadId: up.UploadId}))
	wantCode(t, complete(cp(2, p2.ETag)), "NoSuchUpload", 404)
	if e.store.Len("edge") != 8 {
		t.Errorf("objects: %d", e.store.Len("edge"))
	}
	// PUT ?tagging must not overwrite the object.
	resp, body = e.do(e.rawRequest("PUT", "/edge/five", "tagging", []byte("<Tagging/>"), "", nil))
	got, _ = getString(t, e.client, &s3.GetObjectInput{Bucket: aws.String("edge"), Key: aws.String("five")})
	if resp.StatusCode != 501 || got != "12345" {
		t.Errorf("PUT ?tagging: %d %s, object %q", resp.StatusCode, body, got)
	}
	// Error body shape.
	resp, body = e.do(e.rawRequest("GET", "/edge/missing", "", nil, "", nil))
	var ex struct{ Code, Resource, RequestId string }
	_ = xml.Unmarshal(body, &ex)
	if resp.StatusCode != 404 || ex.Code != "NoSuchKey" || ex.Resource == "" || ex.RequestId == "" {
		t.Errorf("error: %d %s", resp.StatusCode, body)
	}
	resp, body = e.do(e.rawRequest("HEAD", "/edge/missing", "", nil, "", nil))
	if resp.StatusCode != 404 || len(body) != 0 {
		t.Errorf("HEAD error: %d %q", resp.StatusCode, body)
	}
}
