// Package s3 is a backend over an S3 bucket through the AWS SDK for Go v2.
// It works with AWS and with S3-compatible servers (MinIO, Ceph RGW,
// versitygw) given an endpoint and path-style addressing. Objects up to the
// part size are uploaded with one PutObject; larger ones (or ones of unknown
// size) with a multipart upload whose parts are read one at a time from the
// stream and sent a few in parallel, so memory stays at parallel × part size.
package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/slipstream-io/slipstream/internal/backend"
	"github.com/slipstream-io/slipstream/internal/fanout"
	"github.com/slipstream-io/slipstream/internal/object"
)

const (
	defaultPartSize = 8 << 20
	defaultParallel = 4
	defaultConns    = 64
)

// Backend is an S3 bucket (and optional key prefix) used as a backend.
type Backend struct {
	client   *s3.Client
	bucket   string
	prefix   string
	partSize int64
	parallel int
	name     string
	bufs     sync.Pool
	readIdle time.Duration // a GET body that sends nothing this long fails
}

// defaultReadIdle bounds how long a GET's body may send nothing while it is
// read: a remote that stalls mid-body fails the read (and the fill, whose
// waiters are woken with the error) instead of holding it for ever.
const defaultReadIdle = 60 * time.Second

var _ backend.Backend = (*Backend)(nil)

// New builds a client from spec. With AccessKey/SecretKey set it uses them
// (and does not read the AWS config files); otherwise it uses the default
// AWS credential chain.
func New(ctx context.Context, spec backend.Spec) (*Backend, error) {
	if spec.Kind == "" {
		spec.Kind = "s3"
	}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	region := spec.Region
	if region == "" {
		region = "us-east-1"
	}
	conns := spec.MaxConnsPerHost
	if conns <= 0 {
		conns = defaultConns
	}
	hc := awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		tr.MaxIdleConns = conns * 2
		tr.MaxIdleConnsPerHost = conns
	})
	tune := func(o *s3.Options) {
		o.UsePathStyle = spec.PathStyle
		if spec.Endpoint != "" {
			o.BaseEndpoint = aws.String(spec.Endpoint)
		}
		// Only checksums the operation requires: S3-compatible servers vary
		// in their support of the newer default checksums.
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	}
	var client *s3.Client
	if spec.AccessKey != "" {
		client = s3.New(s3.Options{
			Region:      region,
			Credentials: credentials.NewStaticCredentialsProvider(spec.AccessKey, spec.SecretKey, ""),
			HTTPClient:  hc,
		}, tune)
	} else {
		cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(region), config.WithHTTPClient(hc))
		if err != nil {
			return nil, fmt.Errorf("s3 backend: load AWS config: %w", err)
		}
		client = s3.NewFromConfig(cfg, tune)
	}
	b := &Backend{
		client:   client,
		bucket:   spec.Bucket,
		prefix:   spec.Prefix,
		partSize: spec.PartSize,
		parallel: spec.UploadParallel,
		name:     "s3://" + spec.Bucket + "/" + spec.Prefix,
		readIdle: defaultReadIdle,
	}
	if b.partSize <= 0 {
		b.partSize = defaultPartSize
	}
	if b.parallel <= 0 {
		b.parallel = defaultParallel
	}
	b.bufs.New = func() any { buf := make([]byte, b.partSize); return &buf }
	return b, nil
}

func (b *Backend) String() string { return b.name }

// Client exposes the SDK client (tests use it to prepare buckets).
func (b *Backend) Client() *s3.Client { return b.client }

func (b *Backend) mapErr(op, key string, err error) error {
	if err == nil {
		return nil
	}
	for _, sentinel := range []error{object.ErrTooLarge, object.ErrIncompleteBody} {
		if errors.Is(err, sentinel) {
			return fmt.Errorf("s3 backend: put %s: %w", key, sentinel)
		}
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "NoSuchKey", "NotFound":
			return fmt.Errorf("%w: %s", backend.ErrNotFound, key)
		case "NoSuchBucket", "NoSuchUpload":
			// A 404 for the bucket or for an upload (aborted under a
			// PUT) says nothing of the object: the remote failed.
			return fmt.Errorf("s3 backend: %s %s/%s: %w: %w", op, b.bucket, b.prefix+key, object.ErrBackend, err)
		case "InvalidRange":
			return fmt.Errorf("%w: %s", backend.ErrInvalidRange, key)
		case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "AllAccessDisabled":
			return fmt.Errorf("s3 backend: %s %s/%s: %w: %w", op, b.bucket, b.prefix+key, object.ErrBackendDenied, err)
		}
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		switch re.HTTPStatusCode() {
		case http.StatusNotFound:
			return fmt.Errorf("%w: %s", backend.ErrNotFound, key)
		case http.StatusRequestedRangeNotSatisfiable:
			return fmt.Errorf("%w: %s", backend.ErrInvalidRange, key)
		case http.StatusForbidden: // a HEAD's 403 has no error code
			return fmt.Errorf("s3 backend: %s %s/%s: %w: %w", op, b.bucket, b.prefix+key, object.ErrBackendDenied, err)
		}
	}
	return fmt.Errorf("s3 backend: %s %s/%s: %w: %w", op, b.bucket, b.prefix+key, object.ErrBackend, err)
}

func unquote(etag *string) string { return strings.Trim(aws.ToString(etag), `"`) }

// Stat implements backend.Backend.
func (b *Backend) Stat(ctx context.Context, key string) (backend.Attrs, error) {
	out, err := b.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &b.bucket, Key: aws.String(b.prefix + key)})
	if err != nil {
		return backend.Attrs{}, b.mapErr("head", key, err)
	}
	return backend.Attrs{
		Key: key, Size: aws.ToInt64(out.ContentLength), ETag: unquote(out.ETag), Version: aws.ToString(out.VersionId),
		ModTime: aws.ToTime(out.LastModified), ContentType: text(out.ContentType), UserMeta: lower(out.Metadata),
		Headers:    storedHeaders(out.CacheControl, out.ContentDisposition, out.ContentEncoding, out.ContentLanguage, out.ExpiresString),
		ETagNotMD5: etagNotMD5(out.ServerSideEncryption, out.SSECustomerAlgorithm),
	}, nil
}

// storedHeaders returns the object.StoredHeaders of a HEAD or GET answer.
func storedHeaders(cacheControl, disposition, encoding, language, expires *string) map[string]string {
	out := map[string]string{}
	for k, v := range map[string]string{
		"Cache-Control": aws.ToString(cacheControl), "Content-Disposition": aws.ToString(disposition),
		"Content-Encoding": aws.ToString(encoding), "Content-Language": aws.ToString(language), "Expires": aws.ToString(expires),
	} {
		if v != "" {
			out[k] = text(&v)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// putInput is the PutObject input of key with body and the attributes pa:
// metadata, Content-Type and the object.StoredHeaders (an Expires that is
// not an HTTP date is not sent).
func (b *Backend) putInput(key string, body io.Reader, size int64, pa backend.PutAttrs) *s3.PutObjectInput {
	opt := func(v string) *string {
		if v == "" {
			return nil
		}
		return aws.String(v)
	}
	in := &s3.PutObjectInput{
		Bucket: &b.bucket, Key: aws.String(b.prefix + key), Body: body,
		ContentLength: aws.Int64(size), Metadata: pa.UserMeta, ContentType: opt(pa.ContentType),
		CacheControl: opt(pa.Headers["Cache-Control"]), ContentDisposition: opt(pa.Headers["Content-Disposition"]),
		ContentEncoding: opt(pa.Headers["Content-Encoding"]), ContentLanguage: opt(pa.Headers["Content-Language"]),
	}
	if t, err := http.ParseTime(pa.Headers["Expires"]); err == nil {
		in.Expires = &t
	}
	return in
}

// etagNotMD5 reports whether an object stored with this server-side
// encryption has an ETag that is not the MD5 of its body: on S3 that is the
// case for SSE-KMS (and DSSE-KMS) and SSE-C, not for SSE-S3 (AES256).
func etagNotMD5(sse types.ServerSideEncryption, sseC *string) bool {
	return aws.ToString(sseC) != "" || sse != "" && sse != types.ServerSideEncryptionAes256
}

// text returns a header value as UTF-8 text: what a remote holds that is
// not UTF-8 could not be kept as text, so it is served with U+FFFD in
// place of the bad bytes.
func text(s *string) string { return strings.ToValidUTF8(aws.ToString(s), "\uFFFD") }

func lower(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[strings.ToLower(text(&k))] = text(&v)
	}
	return out
}

func rangeHeader(r *object.Range) string {
	switch {
	case r.Suffix > 0:
		return fmt.Sprintf("bytes=-%d", r.Suffix)
	case r.Length < 0:
		return fmt.Sprintf("bytes=%d-", r.Offset)
	case r.Length == 0:
		return "" // caller handles empty ranges
	default:
		return fmt.Sprintf("bytes=%d-%d", r.Offset, r.Offset+r.Length-1)
	}
}

// Get implements backend.Backend.
func (b *Backend) Get(ctx context.Context, key string, rng *object.Range) (io.ReadCloser, backend.Attrs, error) {
	in := &s3.GetObjectInput{Bucket: &b.bucket, Key: aws.String(b.prefix + key)}
	if rng != nil {
		if rng.Length == 0 && rng.Suffix == 0 {
			return nil, backend.Attrs{}, fmt.Errorf("%w: empty range of %s", backend.ErrInvalidRange, key)
		}
		in.Range = aws.String(rangeHeader(rng))
	}
	out, err := b.client.GetObject(ctx, in)
	if err != nil {
		return nil, backend.Attrs{}, b.mapErr("get", key, err)
	}
	out.Body = newIdleBody(out.Body, b.readIdle, b.name+key)
	a := backend.Attrs{
		Key: key, Size: aws.ToInt64(out.ContentLength), ETag: unquote(out.ETag), Version: aws.ToString(out.VersionId),
		ModTime: aws.ToTime(out.LastModified), ContentType: text(out.ContentType), UserMeta: lower(out.Metadata),
		Headers:    storedHeaders(out.CacheControl, out.ContentDisposition, out.ContentEncoding, out.ContentLanguage, out.ExpiresString),
		ETagNotMD5: etagNotMD5(out.ServerSideEncryption, out.SSECustomerAlgorithm),
	}
	if cr := aws.ToString(out.ContentRange); cr != "" {
		if i := strings.LastIndexByte(cr, '/'); i >= 0 {
			if total, err := strconv.ParseInt(cr[i+1:], 10, 64); err == nil {
				a.Size = total
			}
		}
	} else if rng != nil {
		// A server that ignored the range sent the whole object; cut it.
		off, n, err := rng.Resolve(a.Size)
		if err != nil {
			out.Body.Close()
			return nil, backend.Attrs{}, fmt.Errorf("%w: %s", backend.ErrInvalidRange, key)
		}
		if _, err := io.CopyN(io.Discard, out.Body, off); err != nil {
			out.Body.Close()
			return nil, backend.Attrs{}, b.mapErr("get", key, err)
		}
		return struct {
			io.Reader
			io.Closer
		}{io.LimitReader(out.Body, n), out.Body}, a, nil
	}
	return out.Body, a, nil
}

// Put implements backend.Backend. An object of known size up to the part
// size is streamed in one PutObject (unsigned payload, so the body need not
// be read twice); larger or unknown-size objects go up as a multipart upload.
func (b *Backend) Put(ctx context.Context, key string, r io.Reader, size int64, pa backend.PutAttrs) (backend.Attrs, error) {
	if size == 0 {
		if err := object.EmptyBody(r); err != nil {
			return backend.Attrs{}, fmt.Errorf("s3 backend: put %s: %w", key, err)
		}
	}
	if size >= 0 && size <= b.partSize {
		er := &exactReader{r: r, remain: size}
		a, err := b.putStream(ctx, key, er, size, pa)
		if err != nil && er.err != nil {
			return backend.Attrs{}, fmt.Errorf("s3 backend: put %s: %w", key, er.err)
		}
		return a, err
	}
	bufp := b.bufs.Get().(*[]byte)
	first := *bufp
	n, err := fanout.Fill(r, first)
	switch {
	case err == io.EOF:
		defer b.bufs.Put(bufp)
		if size >= 0 && int64(n) < size {
			return backend.Attrs{}, fmt.Errorf("s3 backend: put %s: %w", key, object.ErrIncompleteBody)
		}
		if size >= 0 && int64(n) > size {
			return backend.Attrs{}, fmt.Errorf("s3 backend: put %s: %w", key, object.ErrTooLarge)
		}
		return b.putSingle(ctx, key, first[:n], pa)
	case err != nil:
		b.bufs.Put(bufp)
		return backend.Attrs{}, fmt.Errorf("s3 backend: put %s: read body: %w", key, err)
	}
	if size == int64(n) {
		// Exactly one part long: make sure nothing follows.
		var one [1]byte
		if m, _ := io.ReadFull(r, one[:]); m > 0 {
			b.bufs.Put(bufp)
			return backend.Attrs{}, fmt.Errorf("s3 backend: put %s: %w", key, object.ErrTooLarge)
		}
		defer b.bufs.Put(bufp)
		return b.putSingle(ctx, key, first, pa)
	}
	return b.putMultipart(ctx, key, bufp, r, size, pa)
}

func (b *Backend) putStream(ctx context.Context, key string, r io.Reader, size int64, pa backend.PutAttrs) (backend.Attrs, error) {
	in := b.putInput(key, r, size, pa)
	if size == 0 {
		in.Body = bytes.NewReader(nil)
	}
	out, err := b.client.PutObject(ctx, in, s3.WithAPIOptions(v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware),
		func(o *s3.Options) { o.RetryMaxAttempts = 1 }) // a stream cannot be sent twice
	if err != nil {
		return backend.Attrs{}, b.mapErr("put", key, err)
	}
	return backend.Attrs{Key: key, Size: size, ETag: unquote(out.ETag), Version: aws.ToString(out.VersionId),
		ModTime: time.Now(), ContentType: pa.ContentType, UserMeta: pa.UserMeta, Headers: pa.Headers}, nil
}

// exactReader delivers exactly remain bytes of r and fails (rather than
// deliver the last bytes) when r is shorter or longer, so that a wrong-size
// body aborts the upload instead of storing something.
type exactReader struct {
	r      io.Reader
	remain int64
	err    error // the body's own failure, if any
}

func (e *exactReader) Read(p []byte) (int, error) {
	if e.remain == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > e.remain {
		p = p[:e.remain]
	}
	n, err := e.r.Read(p)
	e.remain -= int64(n)
	if e.remain == 0 {
		var one [1]byte
		if m, _ := io.ReadFull(e.r, one[:]); m > 0 {
			e.err = object.ErrTooLarge
			return 0, e.err
		}
		return n, nil
	}
	if err == io.EOF {
		err = object.ErrIncompleteBody
	}
	if err != nil {
		e.err = err
	}
	return n, err
}

func (b *Backend) putSingle(ctx context.Context, key string, body []byte, pa backend.PutAttrs) (backend.Attrs, error) {
	out, err := b.client.PutObject(ctx, b.putInput(key, bytes.NewReader(body), int64(len(body)), pa))
	if err != nil {
		return backend.Attrs{}, b.mapErr("put", key, err)
	}
	return backend.Attrs{Key: key, Size: int64(len(body)), ETag: unquote(out.ETag), Version: aws.ToString(out.VersionId),
		ModTime: time.Now(), ContentType: pa.ContentType, UserMeta: pa.UserMeta, Headers: pa.Headers}, nil
}

// putMultipart uploads first (a full part) and the rest of r as parts, up to
// b.parallel at a time.
func (b *Backend) putMultipart(ctx context.Context, key string, firstp *[]byte, r io.Reader, size int64, pa backend.PutAttrs) (backend.Attrs, error) {
	fullKey := b.prefix + key
	in := b.putInput(key, nil, size, pa)
	cin := &s3.CreateMultipartUploadInput{Bucket: &b.bucket, Key: &fullKey, Metadata: in.Metadata, ContentType: in.ContentType,
		CacheControl: in.CacheControl, ContentDisposition: in.ContentDisposition, ContentEncoding: in.ContentEncoding,
		ContentLanguage: in.ContentLanguage, Expires: in.Expires}
	cr, err := b.client.CreateMultipartUpload(ctx, cin)
	if err != nil {
		b.bufs.Put(firstp)
		return backend.Attrs{}, b.mapErr("create upload", key, err)
	}
	uploadID := cr.UploadId
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	var (
		mu    sync.Mutex
		parts []types.CompletedPart
		wg    sync.WaitGroup
		sem   = make(chan struct{}, b.parallel)
		total int64
	)
	upload := func(num int32, bufp *[]byte, n int) {
		defer wg.Done()
		defer func() { <-sem }()
		defer b.bufs.Put(bufp)
		out, err := b.client.UploadPart(ctx, &s3.UploadPartInput{
			Bucket: &b.bucket, Key: &fullKey, UploadId: uploadID, PartNumber: aws.Int32(num),
			Body: bytes.NewReader((*bufp)[:n]), ContentLength: aws.Int64(int64(n)),
		})
		if err != nil {
			cancel(b.mapErr("upload part", key, err))
			return
		}
		mu.Lock()
		parts = append(parts, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(num)})
		mu.Unlock()
	}
	bufp, n := firstp, len(*firstp)
	var readErr error
	for num := int32(1); ; num++ {
		if num > object.MaxPartNumber {
			readErr = fmt.Errorf("s3 backend: put %s: more than %d parts of %d bytes", key, object.MaxPartNumber, b.partSize)
			b.bufs.Put(bufp)
			break
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			b.bufs.Put(bufp)
		}
		if ctx.Err() != nil {
			break
		}
		total += int64(n)
		wg.Add(1)
		go upload(num, bufp, n)
		if n < int(b.partSize) {
			break // that was the last, short part
		}
		bufp = b.bufs.Get().(*[]byte)
		var err error
		n, err = fanout.Fill(r, *bufp)
		if err == io.EOF && n == 0 {
			b.bufs.Put(bufp)
			break
		}
		if err != nil && err != io.EOF {
			b.bufs.Put(bufp)
			readErr = fmt.Errorf("s3 backend: put %s: read body: %w", key, err)
			break
		}
	}
	wg.Wait()
	if readErr == nil && ctx.Err() != nil {
		readErr = context.Cause(ctx)
	}
	if readErr == nil && size >= 0 && total != size {
		if total < size {
			readErr = fmt.Errorf("s3 backend: put %s: %w", key, object.ErrIncompleteBody)
		} else {
			readErr = fmt.Errorf("s3 backend: put %s: %w", key, object.ErrTooLarge)
		}
	}
	if readErr != nil {
		actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		_, _ = b.client.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{Bucket: &b.bucket, Key: &fullKey, UploadId: uploadID})
		acancel()
		return backend.Attrs{}, readErr
	}
	sortParts(parts)
	out, err := b.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket: &b.bucket, Key: &fullKey, UploadId: uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
	})
	if err != nil {
		actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		_, _ = b.client.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{Bucket: &b.bucket, Key: &fullKey, UploadId: uploadID})
		acancel()
		return backend.Attrs{}, b.mapErr("complete upload", key, err)
	}
	return backend.Attrs{Key: key, Size: total, ETag: unquote(out.ETag), Version: aws.ToString(out.VersionId),
		ModTime: time.Now(), ContentType: pa.ContentType, UserMeta: pa.UserMeta, Headers: pa.Headers}, nil
}

func sortParts(p []types.CompletedPart) {
	for i := 1; i < len(p); i++ {
		for j := i; j > 0 && *p[j].PartNumber < *p[j-1].PartNumber; j-- {
			p[j], p[j-1] = p[j-1], p[j]
		}
	}
}

// Delete implements backend.Backend.
func (b *Backend) Delete(ctx context.Context, key string) error {
	_, err := b.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &b.bucket, Key: aws.String(b.prefix + key)})
	if err := b.mapErr("delete", key, err); err != nil && !errors.Is(err, backend.ErrNotFound) {
		return err
	}
	return nil
}

// List implements backend.Backend.
func (b *Backend) List(ctx context.Context, opts backend.ListOptions) (backend.ListPage, error) {
	limit := opts.Limit
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	in := &s3.ListObjectsV2Input{Bucket: &b.bucket, Prefix: aws.String(b.prefix + opts.Prefix), MaxKeys: aws.Int32(int32(limit))}
	if opts.Delimiter != "" {
		in.Delimiter = aws.String(opts.Delimiter)
	}
	if opts.StartAfter != "" {
		sa := b.prefix + opts.StartAfter
		if opts.Delimiter != "" && strings.HasSuffix(sa, opts.Delimiter) &&
			len(opts.StartAfter) > len(opts.Prefix) && strings.HasPrefix(opts.StartAfter, opts.Prefix) {
			// Continue after a common prefix of this listing: skip every
			// key under it. (StartAfter equal to the prefix is the folder
			// marker, whose keys follow it.)
			sa += "\U0010FFFF"
		}
		in.StartAfter = aws.String(sa)
	}
	out, err := b.client.ListObjectsV2(ctx, in)
	if err != nil {
		return backend.ListPage{}, b.mapErr("list", opts.Prefix, err)
	}
	var page backend.ListPage
	for _, o := range out.Contents {
		k := strings.TrimPrefix(aws.ToString(o.Key), b.prefix)
		page.Objects = append(page.Objects, backend.Attrs{Key: k, Size: aws.ToInt64(o.Size), ETag: unquote(o.ETag), ModTime: aws.ToTime(o.LastModified)})
		if k > page.Next {
			page.Next = k
		}
	}
	for _, p := range out.CommonPrefixes {
		k := strings.TrimPrefix(aws.ToString(p.Prefix), b.prefix)
		page.CommonPrefixes = append(page.CommonPrefixes, k)
		if k > page.Next {
			page.Next = k
		}
	}
	page.Truncated = aws.ToBool(out.IsTruncated)
	if !page.Truncated {
		page.Next = ""
	}
	return page, nil
}

// idleBody is a GET's body whose Read fails once it has waited d without
// a byte arriving. Only time spent inside Read counts: a consumer that is
// slow to ask for more is not cut off.
type idleBody struct {
	rc      io.ReadCloser
	d       time.Duration
	name    string
	timer   *time.Timer
	stalled atomic.Bool
}

func newIdleBody(rc io.ReadCloser, d time.Duration, name string) *idleBody {
	b := &idleBody{rc: rc, d: d, name: name}
	b.timer = time.AfterFunc(d, func() {
		b.stalled.Store(true)
		rc.Close() // unblocks the Read
	})
	b.timer.Stop()
	return b
}

func (b *idleBody) Read(p []byte) (int, error) {
	b.timer.Reset(b.d)
	n, err := b.rc.Read(p)
	b.timer.Stop()
	if err != nil && err != io.EOF && b.stalled.Load() {
		return n, fmt.Errorf("s3 backend: get %s: %w: the remote sent nothing for %s", b.name, object.ErrBackend, b.d)
	}
	return n, err
}

func (b *idleBody) Close() error {
	b.timer.Stop()
	return b.rc.Close()
}
