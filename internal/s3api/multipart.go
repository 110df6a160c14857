package s3api

import (
	"bytes"
	"cmp"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/slipstream-io/slipstream/internal/object"
)

func (h *handler) createMultipartUpload(w http.ResponseWriter, rq *request) error {
	opts, err := h.putOptions(rq, false)
	if err != nil {
		return err
	}
	id, err := h.objs.CreateMultipartUpload(rq.Context(), rq.bucket, rq.key, opts)
	if err != nil {
		return err
	}
	return writeXML(w, initiateMultipartUploadResult{NS: s3NS, Bucket: rq.bucket, Key: rq.key, UploadID: id})
}

// partArgs reads uploadId and partNumber.
func partArgs(q url.Values) (uploadID string, part int, err error) {
	uploadID = q.Get("uploadId")
	if uploadID == "" {
		return "", 0, fmt.Errorf("%w: missing uploadId", errInvalidArgument)
	}
	part, err = strconv.Atoi(q.Get("partNumber"))
	if err != nil || part < 1 || part > object.MaxPartNumber {
		return "", 0, errInvalidPartNumber
	}
	return uploadID, part, nil
}

func (h *handler) uploadPart(w http.ResponseWriter, rq *request) error {
	id, part, err := partArgs(rq.q)
	if err != nil {
		return err
	}
	opts, err := h.putOptions(rq, true)
	if err != nil {
		return err
	}
	if err := rq.readEmptyBody(opts.Size); err != nil {
		return err
	}
	pi, err := h.objs.UploadPart(rq.Context(), rq.bucket, rq.key, id, part, rq.body, opts)
	if err != nil {
		return rq.bodyErr(err)
	}
	if rq.body.err != nil {
		return rq.body.err
	}
	w.Header().Set("ETag", quoteETag(pi.ETag))
	w.WriteHeader(http.StatusOK)
	return nil
}

// parseCopySourceRange parses x-amz-copy-source-range: "bytes=first-last".
func parseCopySourceRange(s string) (*object.Range, error) {
	if s == "" {
		return nil, nil
	}
	rng, err := parseRange(s)
	if err != nil || rng.Suffix > 0 || rng.Length < 0 {
		return nil, fmt.Errorf("%w: x-amz-copy-source-range must be bytes=first-last", errInvalidArgument)
	}
	return rng, nil
}

func (h *handler) uploadPartCopy(w http.ResponseWriter, rq *request) error {
	id, part, err := partArgs(rq.q)
	if err != nil {
		return err
	}
	sb, sk, err := copySource(rq)
	if err != nil {
		return err
	}
	rng, err := parseCopySourceRange(rq.Header.Get("X-Amz-Copy-Source-Range"))
	if err != nil {
		return err
	}
	rd, err := h.objs.GetObject(rq.Context(), sb, sk, object.GetOptions{Range: rng})
	if err != nil {
		return err
	}
	defer rd.Close()
	if err := readConditions(rq.Header, "X-Amz-Copy-Source-").check(rd.Info()); err != nil {
		return err
	}
	if rng != nil {
		// S3 wants the whole range inside the source.
		if off, n := rd.Range(); off != rng.Offset || n != rng.Length {
			return fmt.Errorf("%w: range outside the source object of size %d", object.ErrInvalidRange, rd.Info().Size)
		}
	}
	_, n := rd.Range()
	if n > maxPutSize {
		return errEntityTooLarge
	}
	pi, err := h.objs.UploadPart(rq.Context(), rq.bucket, rq.key, id, part, readerOnly{rd}, object.PutOptions{Size: n})
	if err != nil {
		return err
	}
	return writeXML(w, copyPartResult{NS: s3NS, LastModified: isoTime(pi.ModTime), ETag: quoteETag(pi.ETag)})
}

func (h *handler) completeMultipartUpload(w http.ResponseWriter, rq *request) error {
	id := rq.q.Get("uploadId")
	body, err := readXMLBody(rq)
	if err != nil {
		return err
	}
	parts, err := parseCompleteMultipartUpload(bytes.NewReader(body))
	if err != nil {
		return err
	}
	info, err := h.objs.CompleteMultipartUpload(rq.Context(), rq.bucket, rq.key, id, parts)
	if err != nil {
		return err
	}
	scheme := "http"
	if rq.TLS != nil {
		scheme = "https"
	}
	loc := (&url.URL{Scheme: scheme, Host: rq.Host, Path: "/" + rq.bucket + "/" + rq.key}).String()
	return writeXML(w, completeMultipartUploadResult{NS: s3NS, Location: loc, Bucket: rq.bucket, Key: rq.key, ETag: quoteETag(info.ETag)})
}

func (h *handler) abortMultipartUpload(w http.ResponseWriter, rq *request) error {
	if err := h.objs.AbortMultipartUpload(rq.Context(), rq.bucket, rq.key, rq.q.Get("uploadId")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// intParam reads an optional non-negative integer query parameter.
func intParam(q url.Values, name string, def, max int) (int, error) {
	s := q.Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: %s must be a non-negative integer", errInvalidArgument, name)
	}
	return min(n, max), nil
}

func (h *handler) listParts(w http.ResponseWriter, rq *request) error {
	q := rq.q
	id := q.Get("uploadId")
	maxParts, err := intParam(q, "max-parts", 1000, 1000)
	if err != nil {
		return err
	}
	marker, err := intParam(q, "part-number-marker", 0, object.MaxPartNumber)
	if err != nil {
		return err
	}
	parts, err := h.objs.ListParts(rq.Context(), rq.bucket, rq.key, id)
	if err != nil {
		return err
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].PartNumber < parts[j].PartNumber })
	res := listPartsResult{
		NS: s3NS, Bucket: rq.bucket, Key: rq.key, UploadID: id, Initiator: defaultOwner, Owner: defaultOwner,
		StorageClass: "STANDARD", PartNumberMarker: marker, MaxParts: maxParts,
	}
	for _, p := range parts {
		if p.PartNumber <= marker {
			continue
		}
		if len(res.Parts) == maxParts {
			res.IsTruncated = maxParts > 0 // max-parts=0 asks for nothing, as in S3
			break
		}
		res.Parts = append(res.Parts, partElem{PartNumber: p.PartNumber, LastModified: isoTime(p.ModTime), ETag: quoteETag(p.ETag), Size: p.Size})
		res.NextPartNumberMarker = p.PartNumber
	}
	return writeXML(w, res)
}

// listMultipartUploads lists uploads by key, and the uploads of one key by
// initiation time (then upload ID), as S3 does; upload-id-marker resumes
// after that upload's place in this order.
func (h *handler) listMultipartUploads(w http.ResponseWriter, rq *request) error {
	q := rq.q
	maxUploads, err := intParam(q, "max-uploads", 1000, 1000)
	if err != nil {
		return err
	}
	p := listParams{prefix: q.Get("prefix"), delimiter: q.Get("delimiter")}
	if p.urlEncode, err = readEncodingType(q); err != nil {
		return err
	}
	prefix, delim := p.prefix, p.delimiter
	keyMarker, idMarker := q.Get("key-marker"), q.Get("upload-id-marker")
	ups, err := h.objs.ListMultipartUploads(rq.Context(), rq.bucket, prefix)
	if err != nil {
		return err
	}
	slices.SortFunc(ups, func(a, b object.UploadInfo) int {
		return cmp.Or(strings.Compare(a.Key, b.Key), a.Initiated.Compare(b.Initiated), strings.Compare(a.UploadID, b.UploadID))
	})
	ups = ups[uploadsStart(ups, keyMarker, idMarker):]
	res := listMultipartUploadsResult{
		NS: s3NS, Bucket: rq.bucket, KeyMarker: p.enc(keyMarker), UploadIDMarker: idMarker,
		Prefix: p.enc(prefix), Delimiter: p.enc(delim), MaxUploads: maxUploads,
	}
	if p.urlEncode {
		res.EncodingType = "url"
	}
	// Uploads and common prefixes both count towards max-uploads; a page
	// that ends on a prefix names it as the next key marker, and the keys
	// under it are not listed again.
	seen := map[string]bool{}
	count := 0
	for _, u := range ups {
		if !strings.HasPrefix(u.Key, prefix) {
			continue
		}
		cp := ""
		if delim != "" {
			if i := strings.Index(u.Key[len(prefix):], delim); i >= 0 {
				cp = u.Key[:len(prefix)+i+len(delim)]
			}
		}
		if cp != "" && (seen[cp] || cp == keyMarker) {
			continue
		}
		if count == maxUploads {
			res.IsTruncated = maxUploads > 0 // max-uploads=0 asks for nothing, as in S3
			break
		}
		count++
		if cp != "" {
			seen[cp] = true
			res.CommonPrefixes = append(res.CommonPrefixes, prefixElem{Prefix: p.enc(cp)})
			res.NextKeyMarker, res.NextUploadIDMarker = p.enc(cp), ""
			continue
		}
		res.Uploads = append(res.Uploads, uploadElem{
			Key: p.enc(u.Key), UploadID: u.UploadID, Initiator: defaultOwner, Owner: defaultOwner,
			StorageClass: "STANDARD", Initiated: isoTime(u.Initiated),
		})
		res.NextKeyMarker, res.NextUploadIDMarker = p.enc(u.Key), u.UploadID
	}
	if !res.IsTruncated {
		res.NextKeyMarker, res.NextUploadIDMarker = "", ""
	}
	return writeXML(w, res)
}

// uploadsStart returns where a listing of the sorted uploads resumes after
// key-marker and upload-id-marker: after every upload of the key marker
// (or of a common prefix it names), or, with an upload ID, after that
// upload. If that upload is gone (completed or aborted since the last
// page), the uploads of its key are listed from the first: some may be
// listed again, but none is skipped, which a client that aborts the
// uploads of each page as it goes relies on.
func uploadsStart(ups []object.UploadInfo, keyMarker, idMarker string) int {
	if keyMarker == "" {
		return 0
	}
	first := sort.Search(len(ups), func(i int) bool { return ups[i].Key >= keyMarker })
	if idMarker == "" {
		return sort.Search(len(ups), func(i int) bool { return ups[i].Key > keyMarker })
	}
	for i := first; i < len(ups) && ups[i].Key == keyMarker; i++ {
		if ups[i].UploadID == idMarker {
			return i + 1
		}
	}
	return first
}
