package peer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/slipstream-io/slipstream/internal/object"
)

// Target is a peer node and its intra-cluster addresses (host:port).
type Target struct {
	ID    string
	Addrs []string
}

// Doer sends a request whose URL holds only a path and query to one of the
// target's addresses. The multihomed transport picks the interface pair.
type Doer interface {
	Do(ctx context.Context, t Target, req *http.Request) (*http.Response, error)
}

// HTTPDoer is a Doer over one http.Client: it tries the target's addresses
// in order and moves on only when a connection cannot be made.
type HTTPDoer struct {
	Client *http.Client
	Scheme string // "http" when empty
	Secret string // sent as X-Slipstream-Secret
}

var _ Doer = (*HTTPDoer)(nil)

// Do implements Doer.
func (d *HTTPDoer) Do(ctx context.Context, t Target, req *http.Request) (*http.Response, error) {
	scheme := d.Scheme
	if scheme == "" {
		scheme = "http"
	}
	var lastErr error
	for i, a := range t.Addrs {
		r := req.Clone(ctx)
		r.URL.Scheme, r.URL.Host, r.Host = scheme, a, a
		if d.Secret != "" {
			r.Header.Set(SecretHeader, d.Secret)
		}
		if i > 0 && req.Body != nil && req.Body != http.NoBody {
			if req.GetBody == nil {
				break // the body is consumed; the caller retries elsewhere
			}
			b, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			r.Body = b
		}
		resp, err := d.Client.Do(r)
		if err == nil {
			return resp, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	if lastErr == nil {
		lastErr = errors.New("no address")
	}
	return nil, fmt.Errorf("%w: %w: node %s: %v", object.ErrUnavailable, ErrUnreachable, t.ID, lastErr)
}

// SecretHeader carries the cluster secret on intra-cluster requests.
const SecretHeader = "X-Slipstream-Secret"

// Client talks the peer protocol.
type Client struct{ Doer Doer }

// Node returns a Local that lives on the target node.
func (c *Client) Node(t Target) Local { return &remote{doer: c.Doer, t: t} }

type remote struct {
	doer Doer
	t    Target
}

var _ Local = (*remote)(nil)

// do sends one request; size is the body's length (-1 if unknown).
func (r *remote) do(ctx context.Context, method, path string, q url.Values, hdr http.Header, body io.Reader, size int64) (*http.Response, error) {
	u := &url.URL{Path: prefix + path, RawQuery: q.Encode()}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, err
	}
	if body != nil && size >= 0 {
		req.ContentLength = size
		if size == 0 {
			// Nothing is sent: make sure there was nothing to send.
			if err := object.EmptyBody(body); err != nil {
				return nil, err
			}
			req.Body = http.NoBody
		}
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := r.doer.Do(ctx, r.t, req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		resp.Body.Close()
		code := resp.Header.Get(hdrErr)
		msg, _ := url.QueryUnescape(resp.Header.Get(hdrErrMsg))
		if code == "" {
			return nil, fmt.Errorf("%w: %s %s on %s: HTTP %d", ErrProtocol, method, path, r.t.ID, resp.StatusCode)
		}
		if at, err := time.Parse(time.RFC3339Nano, resp.Header.Get(hdrDeleted)); err == nil && code == "NotFound" {
			return nil, &DeletedError{At: at}
		}
		return nil, codeError(code, msg)
	}
	return resp, nil
}

func (r *remote) call(ctx context.Context, method, path string, q url.Values, hdr http.Header, body io.Reader, size int64, out any) error {
	resp, err := r.do(ctx, method, path, q, hdr, body, size)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%w: decoding answer of %s: %v", ErrProtocol, r.t.ID, err)
	}
	return nil
}

func bk(bucket, key string) url.Values {
	q := url.Values{"bucket": {bucket}}
	if key != "" {
		q.Set("key", key)
	}
	return q
}

func jsonHeader(v any) (http.Header, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return http.Header{hdrPut: {string(b)}}, nil
}

func (r *remote) Put(ctx context.Context, bucket, key string, body io.Reader, opts PutOptions) (object.Info, error) {
	size := opts.Size
	body, er := exact(body, size)
	if opts.Digest != nil && size >= 0 && opts.ETag == "" {
		// The receiver checks its CRC32C against the digest that follows
		// the data and takes the MD5 from it instead of hashing again.
		opts.DigestFooter = true
		body = io.MultiReader(body, &footer{digest: opts.Digest})
		size += object.DigestLen
	}
	hdr, err := jsonHeader(opts)
	if err != nil {
		return object.Info{}, err
	}
	var info object.Info
	err = r.call(ctx, http.MethodPut, "object", bk(bucket, key), hdr, body, size, &info)
	if err != nil && er != nil && er.err != nil {
		return object.Info{}, fmt.Errorf("peer: put %s/%s on %s: %w", bucket, key, r.t.ID, er.err)
	}
	return info, err
}

// exact wraps body in an exactReader when its size is known. A body in
// memory (bytes.Reader and the like) of that size is kept as it is, so
// that a request can send it again, and so is a section of a file of that
// length (a store.Reader), which the connection sends by sendfile.
func exact(body io.Reader, size int64) (io.Reader, *exactReader) {
	if body == nil || size < 0 {
		return body, nil
	}
	if l, ok := body.(interface{ Len() int }); ok && int64(l.Len()) == size {
		return body, nil
	}
	if f, ok := body.(interface {
		File() (*os.File, int64, int64)
	}); ok {
		if _, _, n := f.File(); n == size {
			return body, nil
		}
	}
	er := &exactReader{r: body, remain: size}
	return er, er
}

// exactReader delivers exactly remain bytes of r and fails, rather than
// deliver the last of them, when r is shorter or longer: the node may
// answer as soon as it has the declared bytes, so a body that is not its
// declared size must never reach it whole.
type exactReader struct {
	r      io.Reader
	remain int64
	ended  bool  // r was seen to end after the declared bytes
	err    error // why the body is not what was declared, or r's own failure
}

func (e *exactReader) Read(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n := 0
	if e.remain > 0 {
		if int64(len(p)) > e.remain {
			p = p[:e.remain]
		}
		var err error
		n, err = e.r.Read(p)
		e.remain -= int64(n)
		if err == io.EOF && e.remain > 0 {
			err = fmt.Errorf("%w: %d bytes missing", object.ErrIncompleteBody, e.remain)
		}
		if err != nil && err != io.EOF {
			e.err = err
			return n, err
		}
		if e.remain > 0 {
			return n, nil
		}
	}
	if !e.ended {
		if err := object.EmptyBody(e.r); err != nil {
			e.err = err
			return 0, err
		}
		e.ended = true
	}
	if n > 0 {
		return n, nil
	}
	return 0, io.EOF
}

// footer reads as the encoded digest, asked for once the data before it
// has been read.
type footer struct {
	digest func() (object.Digest, error)
	b      []byte
	read   bool
}

func (f *footer) Read(p []byte) (int, error) {
	if !f.read {
		f.read = true
		d, err := f.digest()
		if err != nil {
			return 0, err
		}
		if f.b, err = d.AppendBinary(nil); err != nil {
			return 0, err
		}
	}
	if len(f.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, f.b)
	f.b = f.b[n:]
	return n, nil
}

func (r *remote) Get(ctx context.Context, bucket, key string, rng *object.Range) (object.Reader, error) {
	q := bk(bucket, key)
	if rng != nil {
		if rng.Suffix > 0 {
			q.Set("suffix", strconv.FormatInt(rng.Suffix, 10))
		} else {
			q.Set("offset", strconv.FormatInt(rng.Offset, 10))
			if rng.Length >= 0 {
				q.Set("length", strconv.FormatInt(rng.Length, 10))
			}
		}
	}
	resp, err := r.do(ctx, http.MethodGet, "object", q, downsHeader(ctx, nil), nil, -1)
	if err != nil {
		return nil, err
	}
	rd := &remoteReader{body: resp.Body}
	if err := json.Unmarshal([]byte(resp.Header.Get(hdrInfo)), &rd.info); err != nil {
		resp.Body.Close()
		return nil, fmt.Errorf("%w: bad object info from %s: %v", ErrProtocol, r.t.ID, err)
	}
	if _, err := fmt.Sscanf(resp.Header.Get(hdrRange), "%d %d", &rd.off, &rd.n); err != nil {
		resp.Body.Close()
		return nil, fmt.Errorf("%w: bad range from %s: %v", ErrProtocol, r.t.ID, err)
	}
	return rd, nil
}

type remoteReader struct {
	body   io.ReadCloser
	info   object.Info
	off, n int64
	got    int64
}

func (r *remoteReader) Read(p []byte) (int, error) {
	n, err := r.body.Read(p)
	r.got += int64(n)
	if err == io.EOF && r.got < r.n {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}
func (r *remoteReader) Close() error          { return r.body.Close() }
func (r *remoteReader) Info() object.Info     { return r.info }
func (r *remoteReader) Range() (off, n int64) { return r.off, r.n }

func (r *remote) Stat(ctx context.Context, bucket, key string) (object.Info, error) {
	var hdr http.Header
	if IsAsIs(ctx) {
		hdr = http.Header{hdrAsIs: {"1"}}
	}
	resp, err := r.do(ctx, http.MethodHead, "object", bk(bucket, key), downsHeader(ctx, hdr), nil, -1)
	if err != nil {
		return object.Info{}, err
	}
	resp.Body.Close()
	var info object.Info
	if err := json.Unmarshal([]byte(resp.Header.Get(hdrInfo)), &info); err != nil {
		return object.Info{}, fmt.Errorf("%w: bad object info from %s: %v", ErrProtocol, r.t.ID, err)
	}
	return info, nil
}

// downsHeader adds to hdr (nil: a new one) the down count ctx carries
// (WithDowns), if any.
func downsHeader(ctx context.Context, hdr http.Header) http.Header {
	n, ok := DownsOf(ctx)
	if !ok {
		return hdr
	}
	if hdr == nil {
		hdr = http.Header{}
	}
	hdr.Set(hdrDowns, strconv.FormatUint(n, 10))
	return hdr
}

func (r *remote) Delete(ctx context.Context, bucket, key string) error {
	var hdr http.Header
	if IsAsIs(ctx) {
		hdr = http.Header{hdrAsIs: {"1"}}
	}
	return r.call(ctx, http.MethodDelete, "object", bk(bucket, key), hdr, nil, -1, nil)
}

func (r *remote) List(ctx context.Context, bucket string, opts object.ListOptions) (object.ListResult, error) {
	q := bk(bucket, "")
	q.Set("prefix", opts.Prefix)
	q.Set("delimiter", opts.Delimiter)
	q.Set("start-after", opts.StartAfter)
	q.Set("max-keys", strconv.Itoa(opts.MaxKeys))
	var res object.ListResult
	err := r.call(ctx, http.MethodGet, "list", q, nil, nil, -1, &res)
	return res, err
}

func (r *remote) DeleteBucket(ctx context.Context, bucket string) error {
	return r.call(ctx, http.MethodDelete, "bucket", bk(bucket, ""), nil, nil, -1, nil)
}

func (r *remote) CreateUpload(ctx context.Context, bucket, key string, opts object.PutOptions) (string, error) {
	hdr, err := jsonHeader(opts)
	if err != nil {
		return "", err
	}
	var out struct {
		UploadID string `json:"uploadId"`
	}
	err = r.call(ctx, http.MethodPost, "upload", bk(bucket, key), hdr, nil, -1, &out)
	return out.UploadID, err
}

func (r *remote) PutPart(ctx context.Context, bucket, key, uploadID string, part int, body io.Reader, opts object.PutOptions) (object.PartInfo, error) {
	hdr, err := jsonHeader(opts)
	if err != nil {
		return object.PartInfo{}, err
	}
	q := bk(bucket, key)
	q.Set("uploadId", uploadID)
	q.Set("part", strconv.Itoa(part))
	body, er := exact(body, opts.Size)
	var pi object.PartInfo
	err = r.call(ctx, http.MethodPut, "upload", q, hdr, body, opts.Size, &pi)
	if err != nil && er != nil && er.err != nil {
		return object.PartInfo{}, fmt.Errorf("peer: put part %d of %s/%s on %s: %w", part, bucket, key, r.t.ID, er.err)
	}
	return pi, err
}

func (r *remote) ListParts(ctx context.Context, bucket, key, uploadID string) ([]object.PartInfo, error) {
	q := bk(bucket, key)
	q.Set("uploadId", uploadID)
	var parts []object.PartInfo
	err := r.call(ctx, http.MethodGet, "upload", q, nil, nil, -1, &parts)
	return parts, err
}

func (r *remote) ListUploads(ctx context.Context, bucket, prefix string) ([]object.UploadInfo, error) {
	q := bk(bucket, "")
	q.Set("prefix", prefix)
	var ups []object.UploadInfo
	err := r.call(ctx, http.MethodGet, "uploads", q, nil, nil, -1, &ups)
	return ups, err
}

func (r *remote) AbortUpload(ctx context.Context, bucket, key, uploadID string) error {
	q := bk(bucket, key)
	q.Set("uploadId", uploadID)
	return r.call(ctx, http.MethodDelete, "upload", q, nil, nil, -1, nil)
}

func (r *remote) CompleteUpload(ctx context.Context, bucket, key, uploadID string, parts []object.CompletePart) (object.Info, error) {
	q := bk(bucket, key)
	q.Set("uploadId", uploadID)
	b, err := json.Marshal(parts)
	if err != nil {
		return object.Info{}, err
	}
	var info object.Info
	err = r.call(ctx, http.MethodPost, "complete", q, nil, bytes.NewReader(b), int64(len(b)), &info)
	return info, err
}

// ErrUnreachable is wrapped (with object.ErrUnavailable) by a Doer that
// could not get an answer from the node at all: the request may be retried
// on another replica.
var ErrUnreachable = errors.New("peer: node unreachable")

func (r *remote) Replica(ctx context.Context, op ReplicaOp) error {
	b, err := json.Marshal(op)
	if err != nil {
		return err
	}
	return r.call(ctx, http.MethodPost, "replica", url.Values{}, nil, bytes.NewReader(b), int64(len(b)), nil)
}

func (r *remote) Fill(ctx context.Context, bucket, key string) (object.Info, bool, error) {
	var res FillResult
	err := r.call(ctx, http.MethodPost, "fill", bk(bucket, key), nil, nil, -1, &res)
	return res.Info, res.Fetched, err
}

func (r *remote) PendingDeletes(ctx context.Context, bucket string, keys, prefixes []string) (deleted, under []string, err error) {
	b, err := json.Marshal(PendingQuery{Bucket: bucket, Keys: keys, Prefixes: prefixes})
	if err != nil {
		return nil, nil, err
	}
	var ans PendingAnswer
	err = r.call(ctx, http.MethodPost, "pending-deletes", url.Values{}, nil, bytes.NewReader(b), int64(len(b)), &ans)
	return ans.Deleted, ans.Under, err
}
