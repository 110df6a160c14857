package s3api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/slipstream-io/slipstream/internal/s3api/sigv4"
)

// TestDispatch runs requests, already authenticated, through the router
// and the error mapping over an Objects that holds nothing.
func TestDispatch(t *testing.T) {
	hh, err := NewHandler(Config{}, nopObjects{})
	if err != nil {
		t.Fatal(err)
	}
	h := hh.(*handler)
	tests := []struct {
		method, target string
		hdr            map[string]string
		size           int64
		status         int
		code           string
	}{
		{"GET", "/", nil, 0, 200, ""},
		{"POST", "/", nil, 0, 405, "MethodNotAllowed"},
		{"GET", "/bkt?acl", nil, 0, 501, "NotImplemented"},
		{"PUT", "/bkt?policy", nil, 0, 501, "NotImplemented"},
		{"PUT", "/bkt?x-id=CreateBucket", nil, 0, 200, ""},
		{"GET", "/bkt", nil, 0, 404, "NoSuchBucket"},
		{"GET", "/bkt?list-type=2&max-keys=-1", nil, 0, 400, "InvalidArgument"},
		{"GET", "/bkt?list-type=2&max-keys=ten", nil, 0, 400, "InvalidArgument"},
		{"GET", "/bkt?list-type=2&encoding-type=xml", nil, 0, 400, "InvalidArgument"},
		{"GET", "/bkt?location", nil, 0, 404, "NoSuchBucket"},
		{"HEAD", "/bkt/key", nil, 0, 404, ""},
		{"GET", "/bkt/key", nil, 0, 404, "NoSuchKey"},
		{"GET", "/bkt/key?tagging", nil, 0, 501, "NotImplemented"},
		{"GET", "/bkt/key?partNumber=2", nil, 0, 404, "NoSuchKey"},
		{"GET", "/bkt/key?partNumber=0", nil, 0, 400, "InvalidArgument"},
		{"GET", "/bkt/key?partNumber=x", nil, 0, 400, "InvalidArgument"},
		{"GET", "/bkt/key?partNumber=1", map[string]string{"Range": "bytes=0-1"}, 0, 400, "InvalidRequest"},
		{"PATCH", "/bkt/key", nil, 0, 405, "MethodNotAllowed"},
		{"POST", "/bkt/key", nil, 0, 501, "NotImplemented"},
		{"PUT", "/bkt/key?partNumber=0&uploadId=x", nil, 1, 400, "InvalidArgument"},
		{"PUT", "/bkt/key?partNumber=1", nil, 1, 400, "InvalidArgument"},
		{"PUT", "/bkt/key", nil, -1, 411, "MissingContentLength"},
		{"PUT", "/bkt/key", map[string]string{"Content-MD5": "AAAA"}, 1, 400, "InvalidDigest"},
		{"PUT", "/bkt/key", nil, 6 << 40, 400, "EntityTooLarge"},
		{"PUT", "/bkt/key", map[string]string{"X-Amz-Copy-Source": "nokey"}, 0, 400, "InvalidArgument"},
		{"PUT", "/bkt/key", map[string]string{"X-Amz-Copy-Source": "Bad_Bucket/k"}, 0, 400, "InvalidBucketName"},
		{"PUT", "/bkt/key", map[string]string{"X-Amz-Copy-Source": "bkt/a/../b"}, 0, 400, "InvalidArgument"},
		{"PUT", "/bkt/key", map[string]string{"X-Amz-Copy-Source": "bkt/k", "X-Amz-Metadata-Directive": "BOGUS"}, 0, 400, "InvalidArgument"},
		{"PUT", "/bkt/key?partNumber=1&uploadId=x", map[string]string{"X-Amz-Copy-Source": "bkt/k", "X-Amz-Copy-Source-Range": "bytes=-5"}, 0, 400, "InvalidArgument"},
		{"DELETE", "/bkt/key", nil, 0, 204, ""},
		{"DELETE", "/bkt/key?uploadId=x", nil, 0, 404, "NoSuchUpload"},
		{"GET", "/bkt/key?uploadId=x&max-parts=-2", nil, 0, 400, "InvalidArgument"},
		{"POST", "/bkt/key?uploadId=x", nil, 0, 400, "MalformedXML"},
		{"GET", "/bkt/a%00b", nil, 0, 400, "InvalidArgument"},
		{"GET", "/b_k/key", nil, 0, 400, "InvalidBucketName"},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(tt.method, "http://127.0.0.1"+tt.target, strings.NewReader(""))
		for k, v := range tt.hdr {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		b, k, _ := h.route(r)
		rq := &request{Request: r, bucket: b, key: k, q: r.URL.Query(), auth: &sigv4.Result{Size: tt.size, Body: r.Body}, body: &errRecorder{r: r.Body}}
		if err := h.dispatch(w, rq); err != nil {
			h.writeError(w, r, err, rq.body.read)
		}
		code := ""
		if s := w.Body.String(); strings.Contains(s, "<Code>") {
			code = s[strings.Index(s, "<Code>")+6 : strings.Index(s, "</Code>")]
		}
		if w.Code != tt.status || code != tt.code {
			t.Errorf("%s %s: %d %q, want %d %q", tt.method, tt.target, w.Code, code, tt.status, tt.code)
		}
		if tt.method == http.MethodHead && w.Body.Len() != 0 {
			t.Errorf("%s %s: HEAD answered with a body", tt.method, tt.target)
		}
	}
}
