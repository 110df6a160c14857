package netx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// ErrBadContentRange is returned by ParseContentRange.
var ErrBadContentRange = errors.New("netx: bad Content-Range")

// ContentRange is a parsed "Content-Range: bytes first-last/size" header;
// Size is -1 when the header says "*".
type ContentRange struct {
	First, Last, Size int64
}

// ParseContentRange parses a byte Content-Range of a 206 response.
func ParseContentRange(s string) (ContentRange, error) {
	bad := func() (ContentRange, error) { return ContentRange{}, fmt.Errorf("%w: %q", ErrBadContentRange, s) }
	rest, ok := strings.CutPrefix(s, "bytes ")
	if !ok {
		return bad()
	}
	span, size, ok := strings.Cut(rest, "/")
	if !ok {
		return bad()
	}
	a, b, ok := strings.Cut(span, "-")
	if !ok {
		return bad()
	}
	num := func(x string) (int64, bool) {
		if x == "" || len(x) > 18 || strings.TrimLeft(x, "0123456789") != "" {
			return 0, false
		}
		n, err := strconv.ParseInt(x, 10, 64)
		return n, err == nil
	}
	var cr ContentRange
	if cr.First, ok = num(a); !ok {
		return bad()
	}
	if cr.Last, ok = num(b); !ok || cr.Last < cr.First {
		return bad()
	}
	if size == "*" {
		cr.Size = -1
	} else if cr.Size, ok = num(size); !ok || cr.Size <= cr.Last {
		return bad()
	}
	return cr, nil
}

// resumer is the body of a GET response that, when the connection under
// it fails part-way, asks another pair for the rest (Range + If-Range on
// the response's validator) and carries on, so the caller sees one
// unbroken body.
type resumer struct {
	t      *Transport
	ctx    context.Context
	req    *http.Request
	ps     []*pair
	scheme string
	host   string

	cur       io.ReadCloser
	curPair   *pair
	validator string
	next      int64 // absolute offset of the next byte to deliver
	last      int64 // absolute offset of the last byte
	left      int   // resumes left
}

// resumable wraps resp's body in a resumer when that is safe: a GET with no
// body, a 200 or 206 response of known length, not re-encoded, with an
// ETag or Last-Modified to pin the object's version.
func (t *Transport) resumable(ctx context.Context, req *http.Request, resp *http.Response, p *pair, ps []*pair, scheme, host string) {
	if req.Method != http.MethodGet || (req.Body != nil && req.Body != http.NoBody) || t.cfg.MaxAttempts < 2 {
		return
	}
	if resp.Header.Get("Content-Encoding") != "" || resp.Uncompressed || resp.ContentLength <= 0 {
		return
	}
	validator := resp.Header.Get("ETag")
	if validator == "" || strings.HasPrefix(validator, "W/") {
		validator = resp.Header.Get("Last-Modified")
	}
	if validator == "" {
		return
	}
	r := &resumer{t: t, ctx: ctx, req: req, ps: ps, scheme: scheme, host: host,
		cur: resp.Body, curPair: p, validator: validator, left: t.cfg.MaxAttempts - 1}
	switch resp.StatusCode {
	case http.StatusOK:
		r.next, r.last = 0, resp.ContentLength-1
	case http.StatusPartialContent:
		cr, err := ParseContentRange(resp.Header.Get("Content-Range"))
		if err != nil || cr.Last-cr.First+1 != resp.ContentLength {
			return
		}
		r.next, r.last = cr.First, cr.Last
	default:
		return
	}
	resp.Body = r
}

func (r *resumer) Read(buf []byte) (int, error) {
	for {
		n, err := r.cur.Read(buf)
		r.next += int64(n)
		if err == nil || err == io.EOF || r.ctx.Err() != nil || r.next > r.last || r.left <= 0 {
			return n, err
		}
		if rerr := r.resume(); rerr != nil {
			return n, fmt.Errorf("%w (resume: %v)", err, rerr)
		}
		if n > 0 {
			return n, nil
		}
	}
}

func (r *resumer) resume() error {
	r.cur.Close()
	for r.left > 0 {
		r.left--
		p := r.t.pick(r.ps, map[*pair]bool{r.curPair: true})
		if p == nil {
			return ErrNoAddrs
		}
		p.loc.retries.Add(1)
		req := r.req.Clone(r.ctx)
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", r.next, r.last))
		req.Header.Set("If-Range", r.validator)
		resp, err := r.t.attempt(r.ctx, p, req, 0, r.scheme, r.host)
		if err != nil {
			if r.ctx.Err() != nil {
				return err
			}
			r.curPair = p
			continue
		}
		cr, cerr := ParseContentRange(resp.Header.Get("Content-Range"))
		if resp.StatusCode != http.StatusPartialContent || cerr != nil || cr.First != r.next || cr.Last != r.last {
			resp.Body.Close()
			return fmt.Errorf("netx: resume got status %d, Content-Range %q", resp.StatusCode, resp.Header.Get("Content-Range"))
		}
		r.t.log.Debug("netx: resumed body", "remote", p.rem.addr, "local", p.loc.name(), "offset", r.next)
		r.cur, r.curPair = resp.Body, p
		return nil
	}
	return errors.New("netx: no attempts left")
}

func (r *resumer) Close() error { return r.cur.Close() }
