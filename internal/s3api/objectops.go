package s3api

import (
	"crypto/md5"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/slipstream-io/slipstream/internal/object"
)

// maxPutSize is the largest body S3 accepts in one request: a PutObject,
// an UploadPart or the range of an UploadPartCopy (5 TiB is the limit of
// a whole multipart object).
const maxPutSize = 5 << 30

// Limits on the metadata a client gives an object (on PUT,
// CreateMultipartUpload, and CopyObject with REPLACE); a request beyond
// one is refused with MetadataTooLarge before its body is read.
const (
	// maxUserMeta is S3's limit on the user metadata: the names (without
	// x-amz-meta-) and values of the x-amz-meta-* headers, in bytes.
	// System metadata (Content-Type and the StoredHeaders) does not count
	// (Amazon S3 User Guide, "Working with object metadata").
	maxUserMeta = 2 << 10
	// maxObjectMeta bounds all the metadata kept with an object that the
	// client chose (key, Content-Type, user metadata and StoredHeaders),
	// as metaSize counts it, so that the store can hold it: the store
	// keeps an object's metadata as JSON in one xattr of at most 3900
	// bytes (store.MaxMetaBytes), with fields of its own that take up to
	// about 800 bytes (size, ETag, checksum, times, the part runs of a
	// multipart upload, a backend's ETag and version). S3 bounds system
	// metadata by the 8 KB of the whole request header only, which the
	// store cannot hold.
	maxObjectMeta = 3000
)

var errMetadataTooLarge = errors.New("s3api: metadata too large")

// checkMetaSize refuses metadata beyond maxObjectMeta. It counts the key,
// Content-Type and metadata as JSON text: every string quoted and escaped,
// and two separators per map entry. It does not count less than the store
// encodes (encoding/json escapes <, > and & here, the store does not).
func checkMetaSize(key, contentType string, userMeta, headers map[string]string) error {
	n := jsonLen(key) + jsonLen(contentType)
	for _, m := range []map[string]string{userMeta, headers} {
		for k, v := range m {
			n += jsonLen(k) + jsonLen(v) + 2
		}
	}
	if n > maxObjectMeta {
		return fmt.Errorf("%w: key, Content-Type and metadata take %d bytes, the limit is %d", errMetadataTooLarge, n, maxObjectMeta)
	}
	return nil
}

// jsonLen returns the length of s as a JSON string.
func jsonLen(s string) int {
	b, _ := json.Marshal(s) // a string always encodes
	return len(b)
}

// putOptions reads the size, Content-MD5, type and user metadata of a PUT.
func (h *handler) putOptions(rq *request, needSize bool) (object.PutOptions, error) {
	opts := object.PutOptions{Size: -1, ContentType: rq.Header.Get("Content-Type")}
	if needSize {
		opts.Size = rq.auth.Size
		if opts.Size < 0 {
			return opts, errMissingLength
		}
		if opts.Size > maxPutSize {
			return opts, errEntityTooLarge
		}
		if s := rq.Header.Get("Content-Md5"); s != "" {
			b, err := base64.StdEncoding.DecodeString(s)
			if err != nil || len(b) != md5.Size {
				return opts, errInvalidDigest
			}
			opts.ContentMD5 = b
		}
	}
	meta, err := userMeta(rq.Header)
	if err != nil {
		return opts, err
	}
	opts.UserMeta = meta
	if opts.Headers, err = storedHeaders(rq.Header); err != nil {
		return opts, err
	}
	if err := object.ValidateMeta(opts.ContentType, meta); err != nil {
		return opts, err
	}
	return opts, checkMetaSize(rq.key, opts.ContentType, meta, opts.Headers)
}

// storedHeaders returns the object.StoredHeaders hdr carries, to be kept
// with the object (Content-Encoding without the aws-chunked of a
// streaming upload's framing). They are system metadata, outside S3's
// 2 KB limit on user metadata; checkMetaSize bounds them with the rest.
func storedHeaders(hdr http.Header) (map[string]string, error) {
	var out map[string]string
	for _, k := range object.StoredHeaders {
		v := hdr.Get(k)
		if k == "Content-Encoding" {
			var keep []string
			for _, tok := range strings.Split(v, ",") {
				if tok = strings.TrimSpace(tok); tok != "" && !strings.EqualFold(tok, "aws-chunked") {
					keep = append(keep, tok)
				}
			}
			v = strings.Join(keep, ", ")
		}
		if v == "" {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	return out, object.ValidateMeta("", out)
}

// userMeta returns the x-amz-meta-* headers of hdr by their lower-case
// names without the prefix, within S3's limit of maxUserMeta.
func userMeta(hdr http.Header) (map[string]string, error) {
	var meta map[string]string
	total := 0
	for k, vs := range hdr {
		name, ok := strings.CutPrefix(strings.ToLower(k), "x-amz-meta-")
		if !ok || name == "" {
			continue
		}
		if meta == nil {
			meta = map[string]string{}
		}
		v := strings.Join(vs, ",")
		meta[name] = v
		total += len(name) + len(v)
	}
	if total > maxUserMeta {
		return nil, fmt.Errorf("%w: user metadata takes %d bytes, the limit is %d", errMetadataTooLarge, total, maxUserMeta)
	}
	return meta, nil
}

func (h *handler) putObject(w http.ResponseWriter, rq *request) error {
	opts, err := h.putOptions(rq, true)
	if err != nil {
		return err
	}
	if err := rq.readEmptyBody(opts.Size); err != nil {
		return err
	}
	info, err := h.objs.PutObject(rq.Context(), rq.bucket, rq.key, rq.body, opts)
	if err != nil {
		return rq.bodyErr(err)
	}
	if rq.body.err != nil { // the store did not see the body's error: refuse anyway
		return rq.body.err
	}
	w.Header().Set("ETag", quoteETag(info.ETag))
	w.WriteHeader(http.StatusOK)
	return nil
}

// setObjectHeaders sets the metadata headers of a GET or HEAD response.
func setObjectHeaders(hdr http.Header, info object.Info) {
	ct := info.ContentType
	if ct == "" {
		ct = "binary/octet-stream"
	}
	hdr.Set("Content-Type", ct)
	hdr.Set("ETag", quoteETag(info.ETag))
	hdr.Set("Last-Modified", info.ModTime.UTC().Format(http.TimeFormat))
	hdr.Set("Accept-Ranges", "bytes")
	for k, v := range info.UserMeta {
		hdr["X-Amz-Meta-"+k] = []string{v}
	}
	for k, v := range info.Headers {
		hdr.Set(k, v)
	}
}

// responseOverrides are the response-* query parameters of a GET.
var responseOverrides = []struct{ param, header string }{
	{"response-content-type", "Content-Type"},
	{"response-content-language", "Content-Language"},
	{"response-expires", "Expires"},
	{"response-cache-control", "Cache-Control"},
	{"response-content-disposition", "Content-Disposition"},
	{"response-content-encoding", "Content-Encoding"},
}

func applyOverrides(hdr http.Header, q map[string][]string) {
	for _, o := range responseOverrides {
		if v, ok := q[o.param]; ok && len(v) > 0 {
			hdr.Set(o.header, v[0])
		}
	}
}

// notModified answers 304 with the validators.
func notModified(w http.ResponseWriter, info object.Info) {
	w.Header().Set("ETag", quoteETag(info.ETag))
	w.Header().Set("Last-Modified", info.ModTime.UTC().Format(http.TimeFormat))
	w.WriteHeader(http.StatusNotModified)
}

// readRange parses the Range header; a malformed one is ignored.
func readRange(rq *request) (*object.Range, error) {
	rng, err := parseRange(rq.Header.Get("Range"))
	if errors.Is(err, errRangeIgnored) {
		return nil, nil
	}
	return rng, err
}

// partNumber reads the partNumber of a GET or HEAD: 0 if there is none.
func partNumber(rq *request) (int, error) {
	if !rq.q.Has("partNumber") {
		return 0, nil
	}
	n, err := strconv.Atoi(rq.q.Get("partNumber"))
	if err != nil || n < 1 || n > object.MaxPartNumber {
		return 0, errInvalidPartNumber
	}
	if rq.Header.Get("Range") != "" {
		return 0, errPartAndRange
	}
	return n, nil
}

// maxPartTries bounds how often a part read starts again because the
// object was replaced between finding the part and opening it.
const maxPartTries = 3

// findPart returns the object's metadata and where its part n lies (the
// bytes its multipart upload sent as that part; an object uploaded in one
// piece is part 1), with its part count. A part the object does not have
// is errNoSuchPart, once the conditions hold.
func (h *handler) findPart(rq *request, n int, conds conditions) (info object.Info, off, length int64, count int, err error) {
	if info, err = h.objs.HeadObject(rq.Context(), rq.bucket, rq.key); err != nil {
		return info, 0, 0, 0, err
	}
	off, length, count, ok := info.Part(n)
	if !ok {
		if err := conds.check(info); err != nil {
			return info, 0, 0, count, err
		}
		return info, 0, 0, count, errNoSuchPart
	}
	return info, off, length, count, nil
}

// partHeaders sets what answers about a part add: the object's part count
// if its upload was multipart.
func partHeaders(hdr http.Header, info object.Info, count int) {
	if len(info.Parts) > 0 {
		hdr.Set("x-amz-mp-parts-count", strconv.Itoa(count))
	}
}

// writePartHead writes the status and headers of an answer about the part
// [off, off+length) of the object, one of count: 206 with its range, or
// 200 for an empty part. A body, if any, is the caller's to send.
func writePartHead(w http.ResponseWriter, rq *request, info object.Info, off, length int64, count int) {
	hdr := w.Header()
	setObjectHeaders(hdr, info)
	applyOverrides(hdr, rq.q)
	partHeaders(hdr, info, count)
	hdr.Set("Content-Length", strconv.FormatInt(length, 10))
	if length == 0 {
		w.WriteHeader(http.StatusOK)
		return
	}
	hdr.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", off, off+length-1, info.Size))
	w.WriteHeader(http.StatusPartialContent)
}

// getPart answers GET ?partNumber=n: 206 with the part's bytes.
func (h *handler) getPart(w http.ResponseWriter, rq *request, n int, conds conditions) error {
	for try := 1; ; try++ {
		info, off, length, count, err := h.findPart(rq, n, conds)
		if errors.Is(err, object.ErrNotModified) {
			notModified(w, info)
			return nil
		}
		if err != nil {
			return err
		}
		if length == 0 { // an empty object, or an empty last part
			if err := conds.check(info); err != nil {
				if errors.Is(err, object.ErrNotModified) {
					notModified(w, info)
					return nil
				}
				return err
			}
			writePartHead(w, rq, info, off, 0, count)
			return nil
		}
		rd, err := h.objs.GetObject(rq.Context(), rq.bucket, rq.key, object.GetOptions{Range: &object.Range{Offset: off, Length: length}})
		if err != nil {
			return err
		}
		if got := rd.Info(); got.ETag == info.ETag && got.Size == info.Size {
			partHeaders(w.Header(), got, count)
			return h.sendObject(w, rq, rd, true, conds)
		}
		rd.Close()
		if try == maxPartTries {
			return fmt.Errorf("%w: %s/%s changed while its part %d was read", object.ErrPrecondition, rq.bucket, rq.key, n)
		}
	}
}

func (h *handler) getObject(w http.ResponseWriter, rq *request) error {
	part, err := partNumber(rq)
	if err != nil {
		return err
	}
	conds := readConditions(rq.Header, "")
	if part > 0 {
		return h.getPart(w, rq, part, conds)
	}
	rng, err := readRange(rq)
	// If-Range: the range only if the object is still the version the
	// client has part of, else the whole object.
	ifRange := rq.Header.Get("If-Range")
	if err == nil {
		var rd object.Reader
		rd, err = h.objs.GetObject(rq.Context(), rq.bucket, rq.key, object.GetOptions{Range: rng})
		if err == nil && rng != nil && !ifRangeHolds(ifRange, rd.Info()) {
			rd.Close()
			rng = nil
			rd, err = h.objs.GetObject(rq.Context(), rq.bucket, rq.key, object.GetOptions{})
		}
		if err == nil {
			return h.sendObject(w, rq, rd, rng != nil, conds)
		}
	}
	if errors.Is(err, object.ErrInvalidRange) {
		// Conditions come first; the 416 names the object's size.
		info, herr := h.objs.HeadObject(rq.Context(), rq.bucket, rq.key)
		if herr != nil {
			return herr
		}
		if cerr := conds.check(info); cerr != nil {
			if errors.Is(cerr, object.ErrNotModified) {
				notModified(w, info)
				return nil
			}
			return cerr
		}
		if info.Size == 0 || !ifRangeHolds(ifRange, info) {
			// No range of an empty object is satisfiable; serve it whole
			// (RFC 9110 lets a server ignore Range), as ranged downloaders
			// expect. A failed If-Range ignores the range too.
			rd, gerr := h.objs.GetObject(rq.Context(), rq.bucket, rq.key, object.GetOptions{})
			if gerr != nil {
				return gerr
			}
			return h.sendObject(w, rq, rd, false, conds)
		}
		w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", info.Size))
	}
	return err
}

func (h *handler) sendObject(w http.ResponseWriter, rq *request, rd object.Reader, partial bool, conds conditions) error {
	defer rd.Close()
	info := rd.Info()
	if err := conds.check(info); err != nil {
		if errors.Is(err, object.ErrNotModified) {
			notModified(w, info)
			return nil
		}
		return err
	}
	hdr := w.Header()
	setObjectHeaders(hdr, info)
	applyOverrides(hdr, rq.q)
	off, n := rd.Range()
	hdr.Set("Content-Length", strconv.FormatInt(n, 10))
	status := http.StatusOK
	if partial && info.Size > 0 { // an empty object is served whole
		status = http.StatusPartialContent
		hdr.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", off, off+n-1, info.Size))
	}
	w.WriteHeader(status)
	if n == 0 {
		return nil
	}
	var err error
	if fr, ok := rd.(FileReader); ok {
		f, foff, flen := fr.File()
		if _, err = f.Seek(foff, io.SeekStart); err == nil {
			_, err = io.CopyN(w, f, flen) // *os.File + ReadFrom: sendfile
		}
	} else {
		bp := h.bufs.Get().(*[]byte)
		_, err = io.CopyBuffer(writerOnly{w}, io.LimitReader(readerOnly{rd}, n), *bp)
		h.bufs.Put(bp)
	}
	if err != nil {
		// The status is sent; the short body tells the client.
		h.log.Debug("s3 GET body copy failed", "bucket", rq.bucket, "key", rq.key, "err", err)
	}
	return nil
}

// writerOnly and readerOnly hide ReadFrom/WriteTo so io.CopyBuffer uses the
// pooled buffer.
type writerOnly struct{ io.Writer }
type readerOnly struct{ io.Reader }

func (h *handler) headObject(w http.ResponseWriter, rq *request) error {
	part, err := partNumber(rq)
	if err != nil {
		return err
	}
	conds := readConditions(rq.Header, "")
	var (
		info          object.Info
		pOff, pLength int64
		count         int
	)
	if part > 0 {
		info, pOff, pLength, count, err = h.findPart(rq, part, conds)
	} else {
		info, err = h.objs.HeadObject(rq.Context(), rq.bucket, rq.key)
	}
	if err == nil {
		err = conds.check(info)
	}
	if errors.Is(err, object.ErrNotModified) {
		notModified(w, info)
		return nil
	}
	if err != nil {
		return err
	}
	if part > 0 {
		writePartHead(w, rq, info, pOff, pLength, count)
		return nil
	}
	hdr := w.Header()
	rng, err := readRange(rq)
	off, n := int64(0), info.Size
	if info.Size == 0 || !ifRangeHolds(rq.Header.Get("If-Range"), info) {
		rng, err = nil, nil // as for GET: an empty object, or a failed If-Range, is whole
	}
	if err == nil && rng != nil {
		off, n, err = rng.Resolve(info.Size)
	}
	if err != nil { // the 416 names the object's size, as GET's does
		hdr.Set("Content-Range", fmt.Sprintf("bytes */%d", info.Size))
		return err
	}
	setObjectHeaders(hdr, info)
	applyOverrides(hdr, rq.q)
	hdr.Set("Content-Length", strconv.FormatInt(n, 10))
	if rng != nil {
		hdr.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", off, off+n-1, info.Size))
		w.WriteHeader(http.StatusPartialContent)
		return nil
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

func (h *handler) deleteObject(w http.ResponseWriter, rq *request) error {
	err := h.objs.DeleteObject(rq.Context(), rq.bucket, rq.key)
	if err != nil && !errors.Is(err, object.ErrNotFound) {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// copySource reads and checks x-amz-copy-source.
func copySource(rq *request) (bucket, key string, err error) {
	bucket, key, err = parseCopySource(rq.Header.Get("X-Amz-Copy-Source"))
	if err != nil {
		return "", "", err
	}
	if err := object.ValidateBucketName(bucket); err != nil {
		return "", "", err
	}
	if err := validKey(key); err != nil {
		return "", "", err
	}
	return bucket, key, nil
}

func (h *handler) copyObject(w http.ResponseWriter, rq *request) error {
	sb, sk, err := copySource(rq)
	if err != nil {
		return err
	}
	opts := object.CopyOptions{}
	switch d := strings.ToUpper(rq.Header.Get("X-Amz-Metadata-Directive")); d {
	case "", "COPY":
	case "REPLACE":
		opts.ReplaceMeta = true
		opts.ContentType = rq.Header.Get("Content-Type")
		if opts.UserMeta, err = userMeta(rq.Header); err != nil {
			return err
		}
		if opts.Headers, err = storedHeaders(rq.Header); err != nil {
			return err
		}
		if err := object.ValidateMeta(opts.ContentType, opts.UserMeta); err != nil {
			return err
		}
		if err := checkMetaSize(rq.key, opts.ContentType, opts.UserMeta, opts.Headers); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%w: unknown metadata directive %.20q", errInvalidArgument, d)
	}
	if sb == rq.bucket && sk == rq.key && !opts.ReplaceMeta {
		return fmt.Errorf("%w: this copy request is illegal because it is trying to copy an object to itself without changing the object's metadata", errInvalidRequest)
	}
	// The copy checks the conditions against the version it reads: a
	// separate HEAD first would let a write in between be copied.
	opts.CheckSource = readConditions(rq.Header, "X-Amz-Copy-Source-").check
	info, err := h.objs.CopyObject(rq.Context(), sb, sk, rq.bucket, rq.key, opts)
	if err != nil {
		return err
	}
	return writeXML(w, copyObjectResult{NS: s3NS, LastModified: isoTime(info.ModTime), ETag: quoteETag(info.ETag)})
}
