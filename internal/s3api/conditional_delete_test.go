package s3api_test

import (
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// S3 supports conditional deletes (If-Match on DeleteObject, for general
// purpose buckets too; <ETag> per object in DeleteObjects). A client using
// them to delete "only the version I read" (lock release, compare-and-
// delete) gets NotImplemented (the check is not implemented), never an
// unconditional delete of an object someone else wrote since.
func TestConditionalDeleteRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.mkBucket("cdel")
	putString(t, e.client, "cdel", "lock", "written by someone else")
	_, err := e.client.DeleteObject(ctx(), &s3.DeleteObjectInput{
		Bucket: aws.String("cdel"), Key: aws.String("lock"),
		IfMatch: aws.String(`"00000000000000000000000000000000"`), // a stale ETag
	})
	_, herr := e.client.HeadObject(ctx(), &s3.HeadObjectInput{Bucket: aws.String("cdel"), Key: aws.String("lock")})
	if herr != nil {
		t.Fatalf("DeleteObject with a non-matching If-Match: err=%v, and the object is gone (HEAD: %v); want 412 PreconditionFailed (or 501) and the object kept", err, herr)
	}
}

func TestConditionalDeleteHeadersRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.mkBucket("cdel2")
	for _, h := range []struct{ name, value string }{
		{"If-Match", `"00000000000000000000000000000000"`},
		{"X-Amz-If-Match-Size", "1"},
		{"X-Amz-If-Match-Last-Modified-Time", "Mon, 01 Jan 2001 00:00:00 GMT"},
	} {
		t.Run(h.name, func(t *testing.T) {
			putString(t, e.client, "cdel2", "obj", "keep me")
			resp, body := e.do(e.rawRequest("DELETE", "/cdel2/obj", "", nil, "", map[string]string{h.name: h.value}))
			if e.store.Len("cdel2") == 0 {
				t.Fatalf("DELETE with %s: %s -> %d %s; object deleted unconditionally, want 412 (or 501) and the object kept", h.name, h.value, resp.StatusCode, body)
			}
			if resp.StatusCode != http.StatusPreconditionFailed && resp.StatusCode != http.StatusNotImplemented {
				t.Fatalf("DELETE with %s: %d %s", h.name, resp.StatusCode, body)
			}
		})
	}
}

func TestConditionalDeleteObjectsRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.mkBucket("cdel3")
	putString(t, e.client, "cdel3", "a", "newer data")
	out, err := e.client.DeleteObjects(ctx(), &s3.DeleteObjectsInput{
		Bucket: aws.String("cdel3"),
		Delete: &types.Delete{Objects: []types.ObjectIdentifier{{Key: aws.String("a"), ETag: aws.String(`"00000000000000000000000000000000"`)}}},
	})
	if err != nil {
		t.Logf("DeleteObjects: %v", err)
	}
	if e.store.Len("cdel3") == 0 {
		n := 0
		if out != nil {
			n = len(out.Deleted)
		}
		t.Fatalf("DeleteObjects with a non-matching <ETag> deleted the object (Deleted=%d); want a per-key PreconditionFailed error (or the request refused)", n)
	}
}
