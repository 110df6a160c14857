package s3api

import (
	"bytes"
	"crypto/md5"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/slipstream-io/slipstream/internal/object"
)

func (h *handler) listBuckets(w http.ResponseWriter, rq *request) error {
	bs, err := h.objs.ListBuckets(rq.Context())
	if err != nil {
		return err
	}
	res := listAllMyBucketsResult{NS: s3NS, Owner: defaultOwner, Buckets: make([]bucketElem, 0, len(bs))}
	for _, b := range bs {
		res.Buckets = append(res.Buckets, bucketElem{Name: b.Name, CreationDate: isoTime(b.Created)})
	}
	return writeXML(w, res)
}

func (h *handler) getBucketLocation(w http.ResponseWriter, rq *request) error {
	if err := h.objs.HeadBucket(rq.Context(), rq.bucket); err != nil {
		return err
	}
	region := h.cfg.Region
	if region == "us-east-1" {
		region = "" // S3 reports the default region as an empty constraint
	}
	return writeXML(w, locationConstraint{NS: s3NS, Region: region})
}

func (h *handler) getBucketVersioning(w http.ResponseWriter, rq *request) error {
	if err := h.objs.HeadBucket(rq.Context(), rq.bucket); err != nil {
		return err
	}
	return writeXML(w, versioningConfiguration{NS: s3NS})
}

func (h *handler) createBucket(w http.ResponseWriter, rq *request) error {
	// The body, if any, is a CreateBucketConfiguration naming a region: any
	// region is accepted, the cluster has one.
	if _, err := io.Copy(io.Discard, io.LimitReader(rq.body, maxXMLBody)); err != nil {
		return err
	}
	if err := h.objs.CreateBucket(rq.Context(), rq.bucket); err != nil {
		return err
	}
	w.Header().Set("Location", "/"+rq.bucket)
	w.WriteHeader(http.StatusOK)
	return nil
}

func (h *handler) deleteBucket(w http.ResponseWriter, rq *request) error {
	if err := h.objs.DeleteBucket(rq.Context(), rq.bucket); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *handler) headBucket(w http.ResponseWriter, rq *request) error {
	if err := h.objs.HeadBucket(rq.Context(), rq.bucket); err != nil {
		return err
	}
	w.Header().Set("X-Amz-Bucket-Region", h.cfg.Region)
	w.WriteHeader(http.StatusOK)
	return nil
}

// listParams are the query parameters both listing versions share.
type listParams struct {
	prefix, delimiter string
	maxKeys           int
	urlEncode         bool
	owner             bool // list each object's Owner
}

func readListParams(q url.Values) (listParams, error) {
	p := listParams{prefix: q.Get("prefix"), delimiter: q.Get("delimiter"), maxKeys: 1000}
	if s := q.Get("max-keys"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return p, fmt.Errorf("%w: max-keys must be a non-negative integer", errInvalidArgument)
		}
		p.maxKeys = min(n, 1000)
	}
	var err error
	p.urlEncode, err = readEncodingType(q)
	return p, err
}

// readEncodingType reads the encoding-type of a listing: whether keys are
// to be sent URL-encoded (encoding-type=url).
func readEncodingType(q url.Values) (bool, error) {
	switch et := q.Get("encoding-type"); et {
	case "":
		return false, nil
	case "url":
		return true, nil
	default:
		return false, fmt.Errorf("%w: invalid encoding-type %.20q", errInvalidArgument, et)
	}
}

// startAfter turns a marker into ListOptions.StartAfter. When the marker
// is a common prefix (a rolled-up "dir/"), every key under it must be
// skipped too: appending 0xFF, which no UTF-8 key contains, sorts after
// all of them.
func (p listParams) startAfter(marker string) string {
	if p.delimiter != "" && strings.HasSuffix(marker, p.delimiter) && strings.HasPrefix(marker, p.prefix) &&
		strings.Contains(marker[len(p.prefix):], p.delimiter) {
		return marker + "\xff"
	}
	return marker
}

// list runs the listing (or, for max-keys=0, only checks the bucket).
func (h *handler) list(rq *request, p listParams, after string) (object.ListResult, error) {
	if p.maxKeys == 0 {
		return object.ListResult{}, h.objs.HeadBucket(rq.Context(), rq.bucket)
	}
	return h.objs.ListObjects(rq.Context(), rq.bucket, object.ListOptions{
		Prefix: p.prefix, Delimiter: p.delimiter, StartAfter: after, MaxKeys: p.maxKeys,
	})
}

func (p listParams) enc(s string) string {
	if p.urlEncode {
		return s3URLEncode(s)
	}
	return s
}

func (p listParams) elems(res object.ListResult) ([]objectElem, []prefixElem) {
	var own *owner
	if p.owner {
		o := defaultOwner // every object's owner, the one ListBuckets names
		own = &o
	}
	objs := make([]objectElem, 0, len(res.Objects))
	for _, o := range res.Objects {
		objs = append(objs, objectElem{Key: p.enc(o.Key), LastModified: isoTime(o.ModTime), ETag: quoteETag(o.ETag), Size: o.Size, StorageClass: "STANDARD", Owner: own})
	}
	var prefs []prefixElem
	for _, cp := range res.CommonPrefixes {
		prefs = append(prefs, prefixElem{Prefix: p.enc(cp)})
	}
	return objs, prefs
}

func (h *handler) listObjectsV2(w http.ResponseWriter, rq *request) error {
	q := rq.q
	p, err := readListParams(q)
	if err != nil {
		return err
	}
	// ListObjectsV2 lists owners only when asked to.
	p.owner = strings.EqualFold(q.Get("fetch-owner"), "true")
	after := q.Get("start-after")
	token, hasToken := q.Get("continuation-token"), q.Has("continuation-token")
	if hasToken {
		m, err := base64.RawURLEncoding.DecodeString(token)
		if err != nil || token == "" {
			return fmt.Errorf("%w: the continuation token provided is incorrect", errInvalidArgument)
		}
		after = p.startAfter(string(m))
	}
	res, err := h.list(rq, p, after)
	if err != nil {
		return err
	}
	out := listBucketResultV2{
		NS: s3NS, Name: rq.bucket, Prefix: p.enc(p.prefix), Delimiter: p.enc(p.delimiter),
		StartAfter: p.enc(q.Get("start-after")), ContinuationToken: token, MaxKeys: p.maxKeys,
		IsTruncated: res.IsTruncated && res.NextMarker != "",
	}
	if p.urlEncode {
		out.EncodingType = "url"
	}
	if out.IsTruncated {
		out.NextContinuationToken = base64.RawURLEncoding.EncodeToString([]byte(res.NextMarker))
	}
	out.Contents, out.CommonPrefixes = p.elems(res)
	out.KeyCount = len(out.Contents) + len(out.CommonPrefixes)
	return writeXML(w, out)
}

func (h *handler) listObjectsV1(w http.ResponseWriter, rq *request) error {
	q := rq.q
	p, err := readListParams(q)
	if err != nil {
		return err
	}
	p.owner = true // ListObjects (v1) always lists owners
	marker := q.Get("marker")
	after := ""
	if marker != "" {
		after = p.startAfter(marker)
	}
	res, err := h.list(rq, p, after)
	if err != nil {
		return err
	}
	out := listBucketResultV1{
		NS: s3NS, Name: rq.bucket, Prefix: p.enc(p.prefix), Marker: p.enc(marker), Delimiter: p.enc(p.delimiter),
		MaxKeys: p.maxKeys, IsTruncated: res.IsTruncated && res.NextMarker != "",
	}
	if p.urlEncode {
		out.EncodingType = "url"
	}
	if out.IsTruncated {
		out.NextMarker = p.enc(res.NextMarker)
	}
	out.Contents, out.CommonPrefixes = p.elems(res)
	return writeXML(w, out)
}

// s3URLEncode encodes a key for encoding-type=url: every byte but the
// unreserved characters and '/' is percent-encoded.
func s3URLEncode(s string) string {
	const hexdig = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' || c == '/' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexdig[c>>4])
		b.WriteByte(hexdig[c&15])
	}
	return b.String()
}

// readXMLBody reads a whole (small) XML request body, so that its
// signature or checksum is verified before it is used.
func readXMLBody(rq *request) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(rq.body, maxXMLBody+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxXMLBody {
		return nil, fmt.Errorf("%w: body larger than %d bytes", errMalformedXML, maxXMLBody)
	}
	return body, nil
}

func (h *handler) deleteObjects(w http.ResponseWriter, rq *request) error {
	body, err := readXMLBody(rq)
	if err != nil {
		return err
	}
	if s := rq.Header.Get("Content-Md5"); s != "" {
		want, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(want) != md5.Size {
			return errInvalidDigest
		}
		if sum := md5.Sum(body); !bytes.Equal(sum[:], want) {
			return object.ErrBadDigest
		}
	}
	objs, quiet, err := parseDeleteObjects(bytes.NewReader(body))
	if err != nil {
		return err
	}
	if err := h.objs.HeadBucket(rq.Context(), rq.bucket); err != nil {
		return err
	}
	res := deleteResult{NS: s3NS}
	for _, o := range objs {
		k := o.Key
		err := validKey(k)
		if err == nil {
			err = checkVersionID(o.VersionID)
		}
		if err == nil && (o.ETag != "" || o.LastModifiedTime != "" || o.Size != "") {
			// Ignoring the condition could delete an object another
			// client wrote meanwhile.
			err = fmt.Errorf("%w: conditional delete", errNotImplemented)
		}
		if err == nil {
			err = h.objs.DeleteObject(rq.Context(), rq.bucket, k)
		}
		if err != nil && !errors.Is(err, object.ErrNotFound) {
			e := toAPIError(err)
			res.Errors = append(res.Errors, deleteErrorE{Key: k, Code: e.Code, Message: e.Message})
			continue
		}
		if !quiet {
			res.Deleted = append(res.Deleted, deletedElem{Key: k})
		}
	}
	return writeXML(w, res)
}

// validKey checks an object key, with S3's error for an over-long one.
func validKey(k string) error {
	if len(k) > object.MaxKeyLen {
		return errKeyTooLong
	}
	return object.ValidateKey(k)
}
