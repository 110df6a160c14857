package sigv4

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Legacy Signature Version 2 ("AWS key:signature" headers and
// AWSAccessKeyId/Signature/Expires presigned URLs). It is verified because
// boto3's generate_presigned_url still produces V2 URLs unless configured
// otherwise; its payload is not signed.

// v2SubResources are the query parameters that are part of a V2
// canonicalized resource.
var v2SubResources = map[string]bool{
	"acl": true, "cors": true, "delete": true, "lifecycle": true, "location": true, "logging": true,
	"notification": true, "partNumber": true, "policy": true, "requestPayment": true, "restore": true,
	"tagging": true, "torrent": true, "uploadId": true, "uploads": true, "versionId": true,
	"versioning": true, "versions": true, "website": true,
	"response-cache-control": true, "response-content-disposition": true, "response-content-encoding": true,
	"response-content-language": true, "response-content-type": true, "response-expires": true,
}

// StringToSignV2 builds the V2 string to sign of r. bucket is the bucket
// named by a virtual-hosted-style Host ("" for path-style); date is the
// Date header value, or Expires for a presigned URL.
func StringToSignV2(r *http.Request, bucket, date string) string {
	var b strings.Builder
	b.WriteString(r.Method + "\n")
	b.WriteString(r.Header.Get("Content-Md5") + "\n")
	b.WriteString(r.Header.Get("Content-Type") + "\n")
	b.WriteString(date + "\n")
	var amz []string
	for k := range r.Header {
		if lk := strings.ToLower(k); strings.HasPrefix(lk, "x-amz-") {
			amz = append(amz, lk)
		}
	}
	sort.Strings(amz)
	for _, k := range amz {
		vals := r.Header.Values(k)
		out := make([]string, len(vals))
		for i, v := range vals {
			out[i] = strings.TrimSpace(v)
		}
		b.WriteString(k + ":" + strings.Join(out, ",") + "\n")
	}
	if bucket != "" {
		b.WriteString("/" + bucket)
	}
	path := r.RequestURI
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	if path == "" || strings.HasPrefix(path, "http://") || strings.HasPrefix(path, "https://") {
		path = r.URL.EscapedPath()
	}
	b.WriteString(path)
	q := r.URL.Query()
	var subs []string
	for k := range q {
		if v2SubResources[k] {
			subs = append(subs, k)
		}
	}
	sort.Strings(subs)
	for i, k := range subs {
		if i == 0 {
			b.WriteByte('?')
		} else {
			b.WriteByte('&')
		}
		b.WriteString(k)
		if v := q.Get(k); v != "" {
			b.WriteString("=" + v)
		}
	}
	return b.String()
}

// SignV2 is the base64 HMAC-SHA1 of stringToSign.
func SignV2(secret, stringToSign string) string {
	m := hmac.New(sha1.New, []byte(secret))
	m.Write([]byte(stringToSign))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

func (v *Verifier) verifyV2(r *http.Request, bucket string) (*Result, error) {
	var key, sig, date string
	q := r.URL.Query()
	presigned := false
	if h := r.Header.Get("Authorization"); h != "" {
		rest, ok := strings.CutPrefix(h, "AWS ")
		k, s, ok2 := strings.Cut(rest, ":")
		if !ok || !ok2 || k == "" || s == "" {
			return nil, fmt.Errorf("%w: not \"AWS key:signature\"", ErrMalformedAuth)
		}
		key, sig = k, s
		t, err := requestTimeV2(r)
		if err != nil {
			return nil, err
		}
		now := v.now()
		if d := now.Sub(t); d > v.maxSkew || d < -v.maxSkew {
			return nil, fmt.Errorf("%w: request time %s", ErrTimeSkewed, t.Format(TimeFormat))
		}
		if r.Header.Get("X-Amz-Date") == "" {
			date = r.Header.Get("Date")
		}
	} else {
		presigned = true
		key, sig, date = q.Get("AWSAccessKeyId"), q.Get("Signature"), q.Get("Expires")
		if key == "" || sig == "" || date == "" || len(q["Signature"]) != 1 {
			return nil, fmt.Errorf("%w: AWSAccessKeyId, Signature and Expires are required", ErrMalformedPresign)
		}
		exp, err := strconv.ParseInt(date, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: Expires %.20q", ErrMalformedPresign, date)
		}
		if v.now().Unix() > exp {
			return nil, ErrRequestExpired
		}
	}
	secret, err := v.secret(key)
	if err != nil {
		return nil, err
	}
	if !hmac.Equal([]byte(SignV2(secret, StringToSignV2(r, bucket, date))), []byte(sig)) {
		return nil, ErrSignatureMismatch
	}
	res := &Result{AccessKey: key, Presigned: presigned}
	if err := v.wrapBody(r, res, UnsignedPayload, nil); err != nil {
		return nil, err
	}
	return res, nil
}

func requestTimeV2(r *http.Request) (time.Time, error) {
	s := r.Header.Get("X-Amz-Date")
	if s == "" {
		s = r.Header.Get("Date")
	}
	if s == "" {
		return time.Time{}, ErrMissingDate
	}
	if t, err := http.ParseTime(s); err == nil {
		return t.UTC(), nil
	}
	for _, layout := range []string{time.RFC1123Z, TimeFormat} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("%w: %.40q", ErrMissingDate, s)
}
