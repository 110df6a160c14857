package s3api

import (
	"context"
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/s3api/sigv4"
)

// Errors the handler itself raises (request syntax). Everything else comes
// from object or sigv4.
var (
	errMalformedXML         = errors.New("s3api: malformed XML body")
	errInvalidDigest        = errors.New("s3api: Content-MD5 is not a base64 MD5")
	errMissingLength        = errors.New("s3api: missing Content-Length")
	errEntityTooLarge       = errors.New("s3api: body larger than S3 allows")
	errKeyTooLong           = errors.New("s3api: object key longer than 1024 bytes")
	errInvalidArgument      = errors.New("s3api: invalid argument")
	errInvalidRequest       = errors.New("s3api: invalid request")
	errNotImplemented       = errors.New("s3api: not implemented")
	errMethodNotAllowed     = errors.New("s3api: method not allowed")
	errInvalidCopySource    = errors.New("s3api: invalid x-amz-copy-source")
	errInvalidPartNumber    = errors.New("s3api: part number must be 1 to 10000")
	errNoSuchPart           = errors.New("s3api: the object has no such part")
	errPartAndRange         = errors.New("s3api: both a Range header and a partNumber")
	errTooManyDeleteObjects = errors.New("s3api: more than 1000 keys in one DeleteObjects")
	errEmptyDeleteObjects   = errors.New("s3api: DeleteObjects names no key")
	errNoParts              = errors.New("s3api: CompleteMultipartUpload names no part")
)

// apiError is an S3 error as sent to the client.
type apiError struct {
	Code    string
	Status  int
	Message string
}

// errorTable is the one mapping from errors to S3 codes and HTTP statuses.
// The first entry that errors.Is matches wins.
var errorTable = []struct {
	err     error
	code    string
	status  int
	message string // empty: use the error text
}{
	// Authentication.
	{sigv4.ErrMissingAuth, "AccessDenied", http.StatusForbidden, "Access Denied."},
	{sigv4.ErrHeadersNotSigned, "AccessDenied", http.StatusForbidden, "There were headers present in the request which were not signed"},
	{sigv4.ErrUnsupportedAuth, "InvalidRequest", http.StatusBadRequest, "The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256."},
	{sigv4.ErrMalformedAuth, "AuthorizationHeaderMalformed", http.StatusBadRequest, ""},
	{sigv4.ErrMalformedPresign, "AuthorizationQueryParametersError", http.StatusBadRequest, ""},
	{sigv4.ErrInvalidAccessKeyID, "InvalidAccessKeyId", http.StatusForbidden, "The AWS Access Key Id you provided does not exist in our records."},
	{sigv4.ErrSignatureMismatch, "SignatureDoesNotMatch", http.StatusForbidden, "The request signature we calculated does not match the signature you provided. Check your key and signing method."},
	{sigv4.ErrRequestExpired, "AccessDenied", http.StatusForbidden, "Request has expired"},
	{sigv4.ErrNotYetValid, "AccessDenied", http.StatusForbidden, "Request is not valid yet"},
	{sigv4.ErrTimeSkewed, "RequestTimeTooSkewed", http.StatusForbidden, "The difference between the request time and the server's time is too large."},
	{sigv4.ErrMissingDate, "AccessDenied", http.StatusForbidden, "AWS authentication requires a valid Date or x-amz-date header"},
	{sigv4.ErrMissingContentSHA256, "InvalidRequest", http.StatusBadRequest, "Missing required header for this request: x-amz-content-sha256"},
	{sigv4.ErrInvalidContentSHA256, "InvalidArgument", http.StatusBadRequest, "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-* or a hex SHA-256"},
	{sigv4.ErrContentSHA256Mismatch, "XAmzContentSHA256Mismatch", http.StatusBadRequest, "The provided 'x-amz-content-sha256' header does not match what was computed."},
	{sigv4.ErrMissingDecodedLength, "MissingContentLength", http.StatusLengthRequired, "You must provide the x-amz-decoded-content-length HTTP header."},
	{sigv4.ErrIncompleteBody, "IncompleteBody", http.StatusBadRequest, ""},
	{sigv4.ErrChecksumMismatch, "BadDigest", http.StatusBadRequest, ""},
	{sigv4.ErrInvalidChecksum, "InvalidRequest", http.StatusBadRequest, ""},

	// Buckets and objects.
	{object.ErrBucketNotFound, "NoSuchBucket", http.StatusNotFound, "The specified bucket does not exist"},
	{object.ErrBucketExists, "BucketAlreadyOwnedByYou", http.StatusConflict, "Your previous request to create the named bucket succeeded and you already own it."},
	{object.ErrBucketNotEmpty, "BucketNotEmpty", http.StatusConflict, "The bucket you tried to delete is not empty"},
	{object.ErrInvalidBucketName, "InvalidBucketName", http.StatusBadRequest, ""},
	{errKeyTooLong, "KeyTooLongError", http.StatusBadRequest, "Your key is too long"},
	{object.ErrInvalidKey, "InvalidArgument", http.StatusBadRequest, ""},
	{object.ErrNotFound, "NoSuchKey", http.StatusNotFound, "The specified key does not exist."},
	{object.ErrBadDigest, "BadDigest", http.StatusBadRequest, "The Content-MD5 you specified did not match what we received."},
	{object.ErrIncompleteBody, "IncompleteBody", http.StatusBadRequest, "You did not provide the number of bytes specified by the Content-Length HTTP header."},
	{io.ErrUnexpectedEOF, "IncompleteBody", http.StatusBadRequest, "You did not provide the number of bytes specified by the Content-Length HTTP header."},
	{object.ErrTooLarge, "InvalidRequest", http.StatusBadRequest, "The body is longer than its declared size."},
	{object.ErrNoSpace, "InsufficientStorage", http.StatusInsufficientStorage, "No space left on the storage to hold the object."},
	{object.ErrPrecondition, "PreconditionFailed", http.StatusPreconditionFailed, "At least one of the pre-conditions you specified did not hold"},
	{object.ErrNotModified, "NotModified", http.StatusNotModified, "Not Modified"},
	{object.ErrInvalidRange, "InvalidRange", http.StatusRequestedRangeNotSatisfiable, "The requested range is not satisfiable"},
	{object.ErrUploadNotFound, "NoSuchUpload", http.StatusNotFound, "The specified multipart upload does not exist. The upload ID might be invalid, or the multipart upload might have been aborted or completed."},
	{object.ErrInvalidPart, "InvalidPart", http.StatusBadRequest, "One or more of the specified parts could not be found. The part might not have been uploaded, or the specified entity tag might not have matched the part's entity tag."},
	{object.ErrInvalidPartOrder, "InvalidPartOrder", http.StatusBadRequest, "The list of parts was not in ascending order. The parts list must be specified in order by part number."},
	{object.ErrEntityTooSmall, "EntityTooSmall", http.StatusBadRequest, "Your proposed upload is smaller than the minimum allowed object size."},
	{object.ErrUnavailable, "ServiceUnavailable", http.StatusServiceUnavailable, "No live replica could serve the request. Please retry."},
	{object.ErrBackendDenied, "AccessDenied", http.StatusForbidden, "The remote backend refused this cluster access to the object."},
	{object.ErrBackend, "ServiceUnavailable", http.StatusServiceUnavailable, "The remote backend failed. Please retry."},
	{object.ErrSlowDown, "SlowDown", http.StatusServiceUnavailable, "Please reduce your request rate."},
	{object.ErrInvalidArgument, "InvalidArgument", http.StatusBadRequest, ""},

	// Request syntax.
	{errMalformedXML, "MalformedXML", http.StatusBadRequest, "The XML you provided was not well-formed or did not validate against our published schema."},
	{errInvalidDigest, "InvalidDigest", http.StatusBadRequest, "The Content-MD5 you specified is not valid."},
	{errMissingLength, "MissingContentLength", http.StatusLengthRequired, "You must provide the Content-Length HTTP header."},
	{errEntityTooLarge, "EntityTooLarge", http.StatusBadRequest, "Your proposed upload exceeds the maximum allowed object size."},
	{errInvalidPartNumber, "InvalidArgument", http.StatusBadRequest, "Part number must be an integer between 1 and 10000, inclusive."},
	{errNoSuchPart, "InvalidPartNumber", http.StatusRequestedRangeNotSatisfiable, "The requested partnumber is not satisfiable"},
	{errPartAndRange, "InvalidRequest", http.StatusBadRequest, "Cannot specify both Range header and partNumber query parameter"},
	{errInvalidCopySource, "InvalidArgument", http.StatusBadRequest, ""},
	{errTooManyDeleteObjects, "MalformedXML", http.StatusBadRequest, ""},
	{errEmptyDeleteObjects, "MalformedXML", http.StatusBadRequest, ""},
	{errNoParts, "MalformedXML", http.StatusBadRequest, ""},
	{errMetadataTooLarge, "MetadataTooLarge", http.StatusBadRequest, "Your metadata headers exceed the maximum allowed metadata size."},
	{errInvalidArgument, "InvalidArgument", http.StatusBadRequest, ""},
	{errInvalidRequest, "InvalidRequest", http.StatusBadRequest, ""},
	{errNotImplemented, "NotImplemented", http.StatusNotImplemented, "A header or query you provided implies functionality that is not implemented."},
	{errMethodNotAllowed, "MethodNotAllowed", http.StatusMethodNotAllowed, "The specified method is not allowed against this resource."},
	{context.Canceled, "RequestCanceled", 499, "The request was canceled."},
	{context.DeadlineExceeded, "RequestTimeout", http.StatusBadRequest, "Your socket connection to the server was not read from or written to within the timeout period."},
}

// toAPIError maps err to its S3 error. Unknown errors are InternalError.
func toAPIError(err error) apiError {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return apiError{"MalformedXML", http.StatusBadRequest, "The XML body is too large."}
	}
	for _, e := range errorTable {
		if errors.Is(err, e.err) {
			msg := e.message
			if msg == "" {
				msg = errText(err)
			}
			return apiError{e.code, e.status, msg}
		}
	}
	return apiError{"InternalError", http.StatusInternalServerError, "We encountered an internal error. Please try again."}
}

// errText is err's text without the package prefixes of our sentinels.
func errText(err error) string {
	s := err.Error()
	for _, p := range []string{"s3api: ", "object: ", "sigv4: "} {
		s = strings.ReplaceAll(s, p, "")
	}
	return s
}

type errorXML struct {
	XMLName   xml.Name `xml:"Error"`
	Code      string   `xml:"Code"`
	Message   string   `xml:"Message"`
	Resource  string   `xml:"Resource,omitempty"`
	RequestID string   `xml:"RequestId"`
	HostID    string   `xml:"HostId"`
}

// A refused upload's remaining body is read (up to drainLimit bytes, for at
// most drainWait) before the error is sent: a client still sending would
// otherwise see the connection reset instead of the error.
const (
	drainLimit = 64 << 20
	drainWait  = 10 * time.Second
)

// drainBody reads what is left of a refused upload's body; read says
// whether the handler read some of it already.
func drainBody(w http.ResponseWriter, r *http.Request, read bool) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength > drainLimit {
		return
	}
	if strings.EqualFold(r.Header.Get("Expect"), "100-continue") && !read {
		// Reading would send 100 Continue and have the client upload a
		// body only to throw it away; unread, the server answers at once
		// and closes the connection instead. Once the handler has read
		// some of it (a gateway forwarding it to the owner), 100 Continue
		// is sent and the client is sending: the rest is drained.
		return
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(drainWait))
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, drainLimit))
}

// writeError sends err as an S3 error response; bodyRead says whether the
// handler read some of the request's body (see drainBody).
func (h *handler) writeError(w http.ResponseWriter, r *http.Request, err error, bodyRead bool) {
	e := toAPIError(err)
	if e.Status >= 500 {
		h.log.Warn("s3 request failed", "method", r.Method, "path", r.URL.Path, "code", e.Code, "err", err)
	} else {
		h.log.Debug("s3 request refused", "method", r.Method, "path", r.URL.Path, "code", e.Code, "err", err)
	}
	drainBody(w, r, bodyRead)
	hdr := w.Header()
	for _, k := range []string{"Content-Length", "Content-Range", "ETag", "Last-Modified", "Accept-Ranges"} {
		if k == "Content-Range" && e.Status == http.StatusRequestedRangeNotSatisfiable {
			continue // "bytes */size": the length of the object (RFC 9110, 15.5.17)
		}
		hdr.Del(k)
	}
	if e.Status == http.StatusNotModified || r.Method == http.MethodHead {
		w.WriteHeader(e.Status)
		return
	}
	hdr.Set("Content-Type", "application/xml")
	w.WriteHeader(e.Status)
	writeXMLBody(w, errorXML{Code: e.Code, Message: e.Message, Resource: r.URL.Path, RequestID: hdr.Get("X-Amz-Request-Id"), HostID: hdr.Get("X-Amz-Id-2")})
}
