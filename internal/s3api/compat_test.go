package s3api_test

// Where the API must behave as S3 does: unsigned headers, ranges,
// conditions, paging, limits, names and subresources.

import (
	"encoding/xml"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/s3api"
	"github.com/slipstream-io/slipstream/internal/s3api/s3mem"
	"github.com/slipstream-io/slipstream/internal/s3api/sigv4"
)

// A SigV4 request carrying an x-amz-* header that is not in SignedHeaders
// is refused, as S3 does (403 AccessDenied "There were headers present in
// the request which were not signed"): otherwise the holder of a presigned
// PUT URL for one key could add X-Amz-Copy-Source and copy any object of
// the cluster into that key.
func TestPresignedPutUnsignedCopySource(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.mkBucket("private")
	e.mkBucket("public")
	putString(t, e.client, "private", "secret", "top secret data")

	ps := s3.NewPresignClient(e.client)
	pu := must[*v4PresignedRequest](t)(presignPut(ps, "public", "upload", time.Minute))
	r := must[*http.Request](t)(http.NewRequest("PUT", pu.URL, nil))
	r.Header.Set("X-Amz-Copy-Source", "/private/secret") // not signed
	resp, body := e.do(r)
	if resp.StatusCode != http.StatusForbidden {
		got, _ := getString(t, e.client, &s3.GetObjectInput{Bucket: aws.String("public"), Key: aws.String("upload")})
		t.Fatalf("presigned PUT + unsigned X-Amz-Copy-Source: %d %s; public/upload now holds %q, want 403 AccessDenied", resp.StatusCode, body, got)
	}
}

// The same with header authentication: x-amz-* headers added after signing
// (metadata directive, user metadata, copy source) must be refused.
func TestHeaderAuthUnsignedAmzHeaders(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.mkBucket("hdrs")
	putString(t, e.client, "hdrs", "src", "source")
	tests := []struct {
		name, method, path string
		body               []byte
		hdr                map[string]string
	}{
		{"user metadata", "PUT", "/hdrs/a", []byte("data"), map[string]string{"X-Amz-Meta-Owner": "mallory"}},
		{"copy source", "PUT", "/hdrs/b", nil, map[string]string{"X-Amz-Copy-Source": "/hdrs/src"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.rawRequest(tt.method, tt.path, "", tt.body, "", nil)
			for k, v := range tt.hdr {
				r.Header.Set(k, v) // after signing
			}
			resp, body := e.do(r)
			if resp.StatusCode != http.StatusForbidden || errorCode(body) != "AccessDenied" {
				t.Fatalf("unsigned %v accepted: %d %s, want 403 AccessDenied", tt.hdr, resp.StatusCode, body)
			}
		})
	}
}

// S3's conditional writes (If-None-Match: * and If-Match on PutObject)
// are refused with 501 NotImplemented rather than ignored: a client that
// uses them as a lock or for optimistic concurrency must not have its
// condition silently dropped and the object overwritten.
func TestConditionalPutRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.mkBucket("cond")
	putString(t, e.client, "cond", "lock", "first writer")
	tests := []struct{ name, header, value string }{
		{"if-none-match star", "If-None-Match", "*"},
		{"if-match stale etag", "If-Match", `"00000000000000000000000000000000"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := e.do(e.rawRequest("PUT", "/cond/lock", "", []byte("second writer"), "", map[string]string{tt.header: tt.value}))
			got, _ := getString(t, e.client, &s3.GetObjectInput{Bucket: aws.String("cond"), Key: aws.String("lock")})
			if resp.StatusCode != http.StatusNotImplemented || errorCode(body) != "NotImplemented" || got != "first writer" {
				t.Fatalf("PUT %s: %s: %d %s, object now %q; want 501 NotImplemented and the object unchanged", tt.header, tt.value, resp.StatusCode, body, got)
			}
		})
	}
}

// A 416 says how long the object is (Content-Range: bytes */size,
// RFC 9110 15.5.17), on GET and HEAD.
func TestInvalidRangeContentRange(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.mkBucket("rng")
	putString(t, e.client, "rng", "five", "12345")
	for _, method := range []string{"GET", "HEAD"} {
		resp, body := e.do(e.rawRequest(method, "/rng/five", "", nil, "", map[string]string{"Range": "bytes=10-20"}))
		if resp.StatusCode != http.StatusRequestedRangeNotSatisfiable {
			t.Fatalf("%s: %d %s, want 416", method, resp.StatusCode, body)
		}
		if got := resp.Header.Get("Content-Range"); got != "bytes */5" {
			t.Errorf("%s 416: Content-Range %q, want \"bytes */5\"", method, got)
		}
	}
}

// "Range: bytes=-0" asks for the last 0 bytes, which no range of a
// non-empty object satisfies: GET and HEAD answer 416 with Content-Range:
// bytes */size, as for any other unsatisfiable range (RFC 9110 section
// 15.5.17: a server that generates a 416 to a byte-range request SHOULD
// send Content-Range with the current length). HEAD takes another path
// than GET here (parseRange refuses "-0" before the object's size is
// known) and used to leave the header out.
func TestHeadSuffixZeroContentRange(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.mkBucket("rng0")
	putString(t, e.client, "rng0", "five", "12345")
	for _, method := range []string{"GET", "HEAD"} {
		resp, body := e.do(e.rawRequest(method, "/rng0/five", "", nil, "", map[string]string{"Range": "bytes=-0"}))
		if resp.StatusCode != http.StatusRequestedRangeNotSatisfiable {
			t.Fatalf("%s bytes=-0: %d %s, want 416", method, resp.StatusCode, body)
		}
		if got := resp.Header.Get("Content-Range"); got != "bytes */5" {
			t.Errorf("%s bytes=-0: 416 with Content-Range %q, want \"bytes */5\"", method, got)
		}
	}
}

// If-Range (RFC 9110 13.1.5): a Range is honoured only while the validator
// (a strong ETag, or the Last-Modified date) still matches the object;
// otherwise the whole object is served with 200, for GET and HEAD, even if
// the range would not be satisfiable. A resumed download never gets a
// piece of another version.
func TestIfRange(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.mkBucket("ifr")
	putString(t, e.client, "ifr", "obj", "0123456789")
	head := must[*s3.HeadObjectOutput](t)(e.client.HeadObject(ctx(), &s3.HeadObjectInput{Bucket: aws.String("ifr"), Key: aws.String("obj")}))
	etag, date := aws.ToString(head.ETag), head.LastModified.UTC().Format(http.TimeFormat)
	stale := `"` + strings.Repeat("0", 32) + `"`
	old := head.LastModified.Add(-time.Hour).UTC().Format(http.TimeFormat)
	cases := []struct {
		name, rng, ifRange string
		status             int
		body               string
	}{
		{"etag matches", "bytes=2-4", etag, 206, "234"},
		{"date matches", "bytes=2-4", date, 206, "234"},
		{"no If-Range", "bytes=2-4", "", 206, "234"},
		{"etag changed", "bytes=2-4", stale, 200, "0123456789"},
		{"weak etag", "bytes=2-4", "W/" + etag, 200, "0123456789"},
		{"date changed", "bytes=2-4", old, 200, "0123456789"},
		{"garbage", "bytes=2-4", "yesterday", 200, "0123456789"},
		{"unsatisfiable range, etag changed", "bytes=50-60", stale, 200, "0123456789"},
		{"unsatisfiable range, etag matches", "bytes=50-60", etag, 416, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hdr := map[string]string{"Range": c.rng}
			if c.ifRange != "" {
				hdr["If-Range"] = c.ifRange
			}
			resp, body := e.do(e.rawRequest("GET", "/ifr/obj", "", nil, "", hdr))
			if resp.StatusCode != c.status || (c.status != 416 && string(body) != c.body) {
				t.Errorf("GET: %d %q, want %d %q", resp.StatusCode, body, c.status, c.body)
			}
			resp, _ = e.do(e.rawRequest("HEAD", "/ifr/obj", "", nil, "", hdr))
			if resp.StatusCode != c.status || (c.status != 416 && resp.ContentLength != int64(len(c.body))) {
				t.Errorf("HEAD: %d length %d, want %d length %d", resp.StatusCode, resp.ContentLength, c.status, len(c.body))
			}
		})
	}
}

// If-Match uses the strong comparison function (RFC 9110 section 13.1.1:
// "An origin server MUST use the strong comparison function when comparing
// entity tags for If-Match"), so a weak validator W/"x" never matches: GET
// and HEAD answer 412, and so does a copy with x-amz-copy-source-if-match
// (the same comparison, "Copies the object if its entity tag (ETag)
// matches the specified tag", CopyObject API reference). If-None-Match
// uses the weak comparison (section 13.1.2), so W/"x" matches "x" there:
// 304.
func TestIfMatchWeakETagFails(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.mkBucket("weak")
	put := putString(t, e.client, "weak", "obj", "12345")
	weak := "W/" + aws.ToString(put.ETag)
	for _, method := range []string{"GET", "HEAD"} {
		resp, _ := e.do(e.rawRequest(method, "/weak/obj", "", nil, "", map[string]string{"If-Match": weak}))
		if resp.StatusCode != http.StatusPreconditionFailed {
			t.Errorf("%s If-Match: %s: %d, want 412 (strong comparison)", method, weak, resp.StatusCode)
		}
		resp, _ = e.do(e.rawRequest(method, "/weak/obj", "", nil, "", map[string]string{"If-None-Match": weak}))
		if resp.StatusCode != http.StatusNotModified {
			t.Errorf("%s If-None-Match: %s: %d, want 304 (weak comparison)", method, weak, resp.StatusCode)
		}
	}
	resp, body := e.do(e.rawRequest("PUT", "/weak/copy", "", nil, "", map[string]string{
		"X-Amz-Copy-Source": "/weak/obj", "X-Amz-Copy-Source-If-Match": weak,
	}))
	if resp.StatusCode != http.StatusPreconditionFailed || e.store.Len("weak") != 1 {
		t.Errorf("copy with x-amz-copy-source-if-match: %s: %d %s, %d objects; want 412 and no copy", weak, resp.StatusCode, errorCode(body), e.store.Len("weak"))
	}
}

// racyCopy simulates another client's PUT of the copy source that lands
// after the handler read the x-amz-copy-source-if-* conditions and before
// the copy reads the source.
type racyCopy struct{ *s3mem.Store }

func (r racyCopy) CopyObject(c ctxT, sb, sk, db, dk string, opts object.CopyOptions) (object.Info, error) {
	if _, err := r.Store.PutObject(c, sb, sk, strings.NewReader("version 2"), object.PutOptions{Size: 9}); err != nil {
		return object.Info{}, err
	}
	return r.Store.CopyObject(c, sb, sk, db, dk, opts)
}

// CopyObject with x-amz-copy-source-if-match copies the source only if its
// ETag matches ("Copies the object if its entity tag (ETag) matches the
// specified tag", CopyObject API reference): clients use it for optimistic
// concurrency, to copy exactly the version they checked. The conditions
// are checked against the version the copy reads (object.CopyOptions
// CheckSource), as UploadPartCopy checks the reader it copies from: a
// check by a separate HEAD first would let a write in between be copied
// and acknowledged. Here that write's version does not match: 412 and no
// copy.
func TestCopySourceIfMatchIsAtomic(t *testing.T) {
	e := newEnv(t, envOpts{objects: func(s *s3mem.Store) s3api.Objects { return racyCopy{s} }})
	e.mkBucket("cpy")
	put := putString(t, e.client, "cpy", "src", "version 1")
	resp, body := e.do(e.rawRequest("PUT", "/cpy/dst", "", nil, "", map[string]string{
		"X-Amz-Copy-Source":          "/cpy/src",
		"X-Amz-Copy-Source-If-Match": aws.ToString(put.ETag),
	}))
	if resp.StatusCode != http.StatusPreconditionFailed || errorCode(body) != "PreconditionFailed" {
		t.Errorf("copy with x-amz-copy-source-if-match %s of a source replaced meanwhile: %d %s, want 412 PreconditionFailed",
			aws.ToString(put.ETag), resp.StatusCode, errorCode(body))
	}
	if n := e.store.Len("cpy"); n != 1 {
		got, out := getString(t, e.client, &s3.GetObjectInput{Bucket: aws.String("cpy"), Key: aws.String("dst")})
		t.Errorf("the copy wrote %q (ETag %s), whose ETag is not the one the client named", got, aws.ToString(out.ETag))
	}
}

type uploadsPage struct {
	IsTruncated        bool
	NextKeyMarker      string
	NextUploadIdMarker string
	Uploads            []struct{ Key, UploadId string } `xml:"Upload"`
	CommonPrefixes     []struct{ Prefix string }
}

// ListMultipartUploads with a delimiter: a common prefix is listed once
// over all pages and counts towards max-uploads, as in S3.
func TestListMultipartUploadsPagingWithDelimiter(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.mkBucket("mpl")
	for _, k := range []string{"a", "b/1", "b/2", "c"} {
		must[*s3.CreateMultipartUploadOutput](t)(e.client.CreateMultipartUpload(ctx(), &s3.CreateMultipartUploadInput{Bucket: aws.String("mpl"), Key: aws.String(k)}))
	}
	seen := map[string]int{}
	var pages []string
	keyMarker, idMarker := "", ""
	for page := 0; page < 10; page++ {
		q := "uploads=&delimiter=%2F&max-uploads=1"
		if keyMarker != "" {
			q += "&key-marker=" + keyMarker + "&upload-id-marker=" + idMarker
		}
		resp, body := e.do(e.rawRequest("GET", "/mpl", q, nil, "", nil))
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		var res uploadsPage
		if err := xml.Unmarshal(body, &res); err != nil {
			t.Fatal(err)
		}
		var entries []string
		for _, u := range res.Uploads {
			seen[u.Key]++
			entries = append(entries, u.Key)
		}
		for _, p := range res.CommonPrefixes {
			seen[p.Prefix]++
			entries = append(entries, p.Prefix)
		}
		pages = append(pages, strings.Join(entries, ","))
		if !res.IsTruncated {
			break
		}
		keyMarker, idMarker = res.NextKeyMarker, res.NextUploadIdMarker
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("%q listed %d times over the pages %q", k, n, pages)
		}
	}
	for i, p := range pages {
		if strings.Count(p, ",")+1 > 1 {
			t.Errorf("page %d holds %q: more entries than max-uploads=1", i, p)
		}
	}
}

// fixedUploads answers ListMultipartUploads with given uploads (in no
// particular order, as the node gathers them from every node), the rest
// from s3mem.
type fixedUploads struct {
	*s3mem.Store
	ups []object.UploadInfo
}

func (f fixedUploads) ListMultipartUploads(_ ctxT, bucket, prefix string) ([]object.UploadInfo, error) {
	var out []object.UploadInfo
	for _, u := range f.ups {
		if u.Bucket == bucket && strings.HasPrefix(u.Key, prefix) {
			out = append(out, u)
		}
	}
	return out, nil
}

// "Uploads are sorted in ascending order within each key by the upload
// initiation time" (ListMultipartUploads API reference), not by upload ID,
// which is random (s3mem) or names the owner node (the cluster): a client
// that keeps the newest upload of a key and aborts the others (or resumes
// the latest one) must find it last. Pages resume after the
// upload-id-marker's place in that order; if that upload is gone, the
// key's uploads are listed from the first, so that none is skipped.
func TestListMultipartUploadsSameKeyByInitiation(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	ups := []object.UploadInfo{
		{Bucket: "mpo", Key: "k", UploadID: "b-second", Initiated: t0.Add(time.Minute)},
		{Bucket: "mpo", Key: "k", UploadID: "z-first", Initiated: t0},
		{Bucket: "mpo", Key: "k", UploadID: "a-third", Initiated: t0.Add(2 * time.Minute)},
		{Bucket: "mpo", Key: "j", UploadID: "y-other", Initiated: t0.Add(time.Hour)},
	}
	e := newEnv(t, envOpts{objects: func(s *s3mem.Store) s3api.Objects { return fixedUploads{s, ups} }})
	e.mkBucket("mpo")
	list := func(query string) uploadsPage {
		t.Helper()
		resp, body := e.do(e.rawRequest("GET", "/mpo", "uploads="+query, nil, "", nil))
		var res uploadsPage
		if resp.StatusCode != 200 || xml.Unmarshal(body, &res) != nil {
			t.Fatalf("?uploads=%s: %d %s", query, resp.StatusCode, body)
		}
		return res
	}
	ids := func(p uploadsPage) string {
		var got []string
		for _, u := range p.Uploads {
			got = append(got, u.UploadId)
		}
		return strings.Join(got, ",")
	}
	if got := ids(list("")); got != "y-other,z-first,b-second,a-third" {
		t.Errorf("uploads listed as %s, want by key, then by initiation time: y-other,z-first,b-second,a-third", got)
	}
	var paged []string
	q := "&max-uploads=1"
	for range 10 {
		p := list(q)
		paged = append(paged, ids(p))
		if !p.IsTruncated {
			break
		}
		q = "&max-uploads=1&key-marker=" + p.NextKeyMarker + "&upload-id-marker=" + p.NextUploadIdMarker
	}
	if got := strings.Join(paged, ","); got != "y-other,z-first,b-second,a-third" {
		t.Errorf("paging one upload at a time: %s, want y-other,z-first,b-second,a-third", got)
	}
	if got := ids(list("&key-marker=k&upload-id-marker=aborted")); got != "z-first,b-second,a-third" {
		t.Errorf("upload-id-marker of an upload no longer there: %s, want all of the key's uploads", got)
	}
}

// ListMultipartUploads takes encoding-type=url: "If you specify the
// encoding-type request parameter, Amazon S3 includes this element
// [EncodingType] in the response, and returns encoded key name values in
// the following response elements: Delimiter, KeyMarker, Prefix,
// NextKeyMarker, Key" (ListMultipartUploads API reference), and the
// common prefixes, as ListObjectsV2 does. A client that asked for encoded
// keys and got them raw decodes "100%" or "a+b" into another key (or
// fails), and then aborts or completes an upload that is not there.
func TestListMultipartUploadsEncodingType(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.mkBucket("mpenc")
	for _, k := range []string{"a b+c 100%", "a b/ü/1"} {
		must[*s3.CreateMultipartUploadOutput](t)(e.client.CreateMultipartUpload(ctx(), &s3.CreateMultipartUploadInput{Bucket: aws.String("mpenc"), Key: aws.String(k)}))
	}
	type result struct {
		EncodingType, Prefix, Delimiter, KeyMarker, NextKeyMarker string
		Uploads                                                   []struct{ Key string } `xml:"Upload"`
		CommonPrefixes                                            []struct{ Prefix string }
	}
	list := func(query string) (result, []byte) {
		t.Helper()
		resp, body := e.do(e.rawRequest("GET", "/mpenc", "uploads=&encoding-type=url&prefix=a%20b&delimiter=%2F"+query, nil, "", nil))
		var res result
		if resp.StatusCode != 200 || xml.Unmarshal(body, &res) != nil {
			t.Fatalf("%s: %d %s", query, resp.StatusCode, body)
		}
		return res, body
	}
	res, body := list("&key-marker=a%20a")
	if res.EncodingType != "url" || res.Prefix != "a%20b" || res.Delimiter != "/" || res.KeyMarker != "a%20a" ||
		len(res.Uploads) != 1 || res.Uploads[0].Key != "a%20b%2Bc%20100%25" ||
		len(res.CommonPrefixes) != 1 || res.CommonPrefixes[0].Prefix != "a%20b/" {
		t.Errorf("encoding-type=url: got %+v, want EncodingType url, Prefix a%%20b, KeyMarker a%%20a, the key a%%20b%%2Bc%%20100%%25 and the prefix a%%20b/\n%s", res, body)
	}
	if res, body := list("&max-uploads=1"); res.NextKeyMarker != "a%20b%2Bc%20100%25" {
		t.Errorf("encoding-type=url: NextKeyMarker %q, want a%%20b%%2Bc%%20100%%25\n%s", res.NextKeyMarker, body)
	}
	resp, body := e.do(e.rawRequest("GET", "/mpenc", "uploads=&encoding-type=base64", nil, "", nil))
	if resp.StatusCode != 400 || errorCode(body) != "InvalidArgument" {
		t.Errorf("encoding-type=base64: %d %s, want 400 InvalidArgument", resp.StatusCode, errorCode(body))
	}
}

// max-uploads=0 and max-parts=0, like max-keys=0, ask for an empty page
// that is not truncated (a truncated page with no marker would send a
// paginating client round for ever).
func TestZeroMaxIsNotTruncated(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.mkBucket("zero")
	up := must[*s3.CreateMultipartUploadOutput](t)(e.client.CreateMultipartUpload(ctx(), &s3.CreateMultipartUploadInput{Bucket: aws.String("zero"), Key: aws.String("k")}))
	must[*s3.UploadPartOutput](t)(e.client.UploadPart(ctx(), &s3.UploadPartInput{Bucket: aws.String("zero"), Key: aws.String("k"), UploadId: up.UploadId,
		PartNumber: aws.Int32(1), Body: strings.NewReader("part")}))
	must[*s3.PutObjectOutput](t)(e.client.PutObject(ctx(), &s3.PutObjectInput{Bucket: aws.String("zero"), Key: aws.String("obj"), Body: strings.NewReader("x")}))
	for _, tc := range []struct{ path, query string }{
		{"/zero", "uploads=&max-uploads=0"},
		{"/zero/k", "uploadId=" + aws.ToString(up.UploadId) + "&max-parts=0"},
		{"/zero", "list-type=2&max-keys=0"},
		{"/zero", "max-keys=0"},
	} {
		resp, body := e.do(e.rawRequest("GET", tc.path, tc.query, nil, "", nil))
		var res struct {
			IsTruncated bool
			Upload      []struct{ Key string }
			Part        []struct{ PartNumber int }
			Contents    []struct{ Key string }
		}
		if resp.StatusCode != 200 || xml.Unmarshal(body, &res) != nil {
			t.Fatalf("%s?%s: %d %s", tc.path, tc.query, resp.StatusCode, body)
		}
		if res.IsTruncated || len(res.Upload)+len(res.Part)+len(res.Contents) != 0 {
			t.Errorf("%s?%s: %s; want an empty page, not truncated", tc.path, tc.query, body)
		}
	}
}

// At most 5 GiB go in one PutObject or UploadPart (400 EntityTooLarge, as
// in S3); 5 TiB is the limit of a whole multipart object only.
func TestSinglePutOver5GiB(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.mkBucket("big")
	cr := must[*s3.CreateMultipartUploadOutput](t)(e.client.CreateMultipartUpload(ctx(), &s3.CreateMultipartUploadInput{Bucket: aws.String("big"), Key: aws.String("mp")}))
	for _, tc := range []struct{ name, path, query string }{
		{"PutObject", "/big/obj", ""},
		{"UploadPart", "/big/mp", "partNumber=1&uploadId=" + *cr.UploadId},
	} {
		u := e.srv.URL + tc.path
		if tc.query != "" {
			u += "?" + tc.query
		}
		r := must[*http.Request](t)(http.NewRequest("PUT", u, nil))
		r.ContentLength = 6 << 30
		e.sign(r, sigv4.UnsignedPayload, testSecret, time.Now())
		r.Body = io.NopCloser(strings.NewReader("only a few bytes")) // served in-process: never sent
		w := httptest.NewRecorder()
		e.srv.Config.Handler.ServeHTTP(w, r)
		if code := errorCode(w.Body.Bytes()); w.Code != 400 || code != "EntityTooLarge" {
			t.Errorf("%s of 6 GiB: %d %s, want 400 EntityTooLarge", tc.name, w.Code, code)
		}
	}
}

// DELETE /bucket?<subresource> for a bucket API this layer does not know
// (here the S3 Metadata API's DeleteBucketMetadataTableConfiguration)
// answers 501 and is not taken for a DeleteBucket.
func TestUnknownBucketSubresourceKeepsBucket(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, sub := range []string{"metadataTable", "metadataConfiguration"} {
		e.mkBucket("sub-" + strings.ToLower(sub))
		resp, body := e.do(e.rawRequest("DELETE", "/sub-"+strings.ToLower(sub), sub+"=", nil, "", nil))
		_, err := e.client.HeadBucket(ctx(), &s3.HeadBucketInput{Bucket: aws.String("sub-" + strings.ToLower(sub))})
		if err != nil {
			t.Errorf("DELETE /bucket?%s: %d %s, and the bucket is gone (%v); want 501 NotImplemented and the bucket kept", sub, resp.StatusCode, body, err)
		}
	}
}

// Objects here have one version ("null"): GET, HEAD and DELETE of another
// version id answer 400 InvalidArgument ("Invalid version id specified"),
// as S3 does on an unversioned bucket, and delete nothing.
func TestOtherVersionIDRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.mkBucket("ver")
	putString(t, e.client, "ver", "obj", "current version")
	for _, method := range []string{"GET", "HEAD", "DELETE"} {
		resp, body := e.do(e.rawRequest(method, "/ver/obj", "versionId=3HL4kqtJlcpXroDTDmJ.rmSpXd3dIbrHY", nil, "", nil))
		if resp.StatusCode/100 == 2 {
			t.Errorf("%s ?versionId=<other version>: %d %.80s, want 400 InvalidArgument or 404 NoSuchVersion", method, resp.StatusCode, body)
		}
	}
	if e.store.Len("ver") != 1 {
		t.Errorf("DELETE of another version deleted the current object")
	}
}

// Keys with U+FFFE or U+FFFF, which XML 1.0 cannot carry, are refused: a
// listing would return another key (the encoder writes U+FFFD), which GET
// and DeleteObjects would then miss.
func TestKeyXMLCannotCarryRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.mkBucket("xmlkeys")
	for _, path := range []string{"/xmlkeys/file%EF%BF%BF.txt", "/xmlkeys/file%EF%BF%BE.txt"} {
		resp, body := e.do(e.rawRequest("PUT", path, "", []byte("x"), "", nil))
		if resp.StatusCode != 400 {
			t.Errorf("PUT %s: %d %s, want 400", path, resp.StatusCode, errorCode(body))
		}
	}
	if n := e.store.Len("xmlkeys"); n != 0 {
		t.Errorf("%d objects stored", n)
	}
}

// Header values may carry bytes that are not UTF-8; metadata made of them
// could not read back as written, so PUT, multipart creation and a copy
// with new metadata refuse them, and nothing is stored.
func TestMetaNotUTF8Refused(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.mkBucket("meta")
	putString(t, e.client, "meta", "src", "x")
	cases := []struct {
		name, method, path, query string
		hdr                       map[string]string
	}{
		{"user meta", "PUT", "/meta/k", "", map[string]string{"X-Amz-Meta-Name": "caf\xe9"}},
		{"content type", "PUT", "/meta/k", "", map[string]string{"Content-Type": "text/plain; charset=\xe9"}},
		{"multipart", "POST", "/meta/k", "uploads=", map[string]string{"X-Amz-Meta-Name": "caf\xe9"}},
		{"copy", "PUT", "/meta/k", "", map[string]string{"X-Amz-Copy-Source": "/meta/src", "X-Amz-Metadata-Directive": "REPLACE", "X-Amz-Meta-Name": "caf\xe9"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var body []byte
			if c.method == "PUT" && c.hdr["X-Amz-Copy-Source"] == "" {
				body = []byte("x")
			}
			resp, rb := e.do(e.rawRequest(c.method, c.path, c.query, body, "", c.hdr))
			if resp.StatusCode != 400 || errorCode(rb) != "InvalidArgument" {
				t.Errorf("%d %s, want 400 InvalidArgument", resp.StatusCode, errorCode(rb))
			}
		})
	}
	if n := e.store.Len("meta"); n != 1 {
		t.Errorf("%d objects stored, want only the copy source", n)
	}
	// UTF-8 beyond ASCII is fine.
	resp, rb := e.do(e.rawRequest("PUT", "/meta/k", "", []byte("x"), "", map[string]string{"X-Amz-Meta-Name": "café"}))
	if resp.StatusCode != 200 {
		t.Fatalf("PUT with UTF-8 metadata: %d %s", resp.StatusCode, errorCode(rb))
	}
}

// GET and HEAD agree on "Range: bytes=-0" of an empty object: both serve
// it whole (200), as every range of an empty object.
func TestHeadEmptyObjectSuffixZero(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.mkBucket("empty")
	putString(t, e.client, "empty", "e", "")
	status := map[string]int{}
	for _, method := range []string{"GET", "HEAD"} {
		resp, _ := e.do(e.rawRequest(method, "/empty/e", "", nil, "", map[string]string{"Range": "bytes=-0"}))
		status[method] = resp.StatusCode
	}
	if status["GET"] != status["HEAD"] {
		t.Fatalf("Range: bytes=-0 on an empty object: GET %d, HEAD %d", status["GET"], status["HEAD"])
	}
}

// ListObjectsV2 returns each key's Owner when asked with fetch-owner=true
// ("The owner field is not present in ListObjectsV2 by default. If you
// want to return the owner field with each key in the result, then set
// the FetchOwner field to true", ListObjectsV2 API reference), and
// ListObjects (v1) always does (ListObjects API reference,
// Contents/Owner). The owner is the one ListBuckets names.
func TestListOwner(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.mkBucket("owners")
	putString(t, e.client, "owners", "k", "v")
	want := must[*s3.ListBucketsOutput](t)(e.client.ListBuckets(ctx(), &s3.ListBucketsInput{})).Owner
	if want == nil || aws.ToString(want.ID) == "" {
		t.Fatal("ListBuckets names no owner")
	}
	same := func(o *types.Owner) bool {
		return o != nil && aws.ToString(o.ID) == aws.ToString(want.ID) && aws.ToString(o.DisplayName) == aws.ToString(want.DisplayName)
	}
	v2 := must[*s3.ListObjectsV2Output](t)(e.client.ListObjectsV2(ctx(), &s3.ListObjectsV2Input{Bucket: aws.String("owners"), FetchOwner: aws.Bool(true)}))
	if len(v2.Contents) != 1 || !same(v2.Contents[0].Owner) {
		t.Errorf("ListObjectsV2 fetch-owner=true: Contents %+v, want the Owner ListBuckets names", v2.Contents)
	}
	v2 = must[*s3.ListObjectsV2Output](t)(e.client.ListObjectsV2(ctx(), &s3.ListObjectsV2Input{Bucket: aws.String("owners")}))
	if len(v2.Contents) != 1 || v2.Contents[0].Owner != nil {
		t.Errorf("ListObjectsV2 without fetch-owner: Contents %+v, want no Owner", v2.Contents)
	}
	v1 := must[*s3.ListObjectsOutput](t)(e.client.ListObjects(ctx(), &s3.ListObjectsInput{Bucket: aws.String("owners")}))
	if len(v1.Contents) != 1 || !same(v1.Contents[0].Owner) {
		t.Errorf("ListObjects (v1): Contents %+v, want the Owner ListBuckets names", v1.Contents)
	}
}

// S3's bucket naming rules also forbid the prefixes xn--, sthree- and
// amzn-s3-demo- and the suffixes -s3alias, --ol-s3, --x-s3 and .mrap, and
// any name formatted as an IPv4 address, with leading zeros too.
func TestBucketNameRules(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, name := range []string{"xn--bucket", "sthree-bucket", "amzn-s3-demo-bucket", "bucket-s3alias", "bucket--ol-s3", "bucket--x-s3", "bucket.mrap", "192.168.001.001"} {
		resp, body := e.do(e.rawRequest("PUT", "/"+name, "", nil, "", nil))
		if resp.StatusCode != 400 || errorCode(body) != "InvalidBucketName" {
			t.Errorf("CreateBucket %q: %d %s, want 400 InvalidBucketName", name, resp.StatusCode, errorCode(body))
		}
	}
}
