package peer

import (
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

// Wire constants shared by server and client.
const (
	prefix      = "/peer/v1/"
	hdrPut      = "X-Slipstream-Put"
	hdrInfo     = "X-Slipstream-Info"
	hdrRange    = "X-Slipstream-Range"
	hdrErr      = "X-Slipstream-Error"
	hdrErrMsg   = "X-Slipstream-Error-Message"
	hdrDeleted  = "X-Slipstream-Deleted-At" // with NotFound: the node's tombstone
	hdrAsIs     = "X-Slipstream-As-Is"      // a Stat or Delete from a context marked by AsIs
	hdrDowns    = "X-Slipstream-Downs"      // a Get or Stat from a context marked by WithDowns
	contentJSON = "application/json"
)

// Prefix is the path prefix the handler serves; mount it there.
const Prefix = prefix

// NewHandler serves local to peers under Prefix.
func NewHandler(local Local) http.Handler {
	s := &server{local: local}
	mux := http.NewServeMux()
	mux.HandleFunc(prefix+"object", s.object)
	mux.HandleFunc(prefix+"list", s.list)
	mux.HandleFunc(prefix+"bucket", s.bucket)
	mux.HandleFunc(prefix+"upload", s.upload)
	mux.HandleFunc(prefix+"uploads", s.uploads)
	mux.HandleFunc(prefix+"complete", s.complete)
	mux.HandleFunc(prefix+"replica", s.replica)
	mux.HandleFunc(prefix+"fill", s.fill)
	mux.HandleFunc(prefix+"pending-deletes", s.pendingDeletes)
	return mux
}

type server struct{ local Local }

func (s *server) object(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	bucket, key := q.Get("bucket"), q.Get("key")
	ctx := r.Context()
	if v := r.Header.Get(hdrDowns); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeErr(w, fmt.Errorf("%w: %s %q", object.ErrInvalidArgument, hdrDowns, v))
			return
		}
		ctx = WithDowns(ctx, n)
	}
	switch r.Method {
	case http.MethodPut:
		var opts PutOptions
		if err := decodeHeader(r.Header.Get(hdrPut), &opts); err != nil {
			writeErr(w, err)
			return
		}
		body := io.Reader(r.Body)
		if opts.DigestFooter {
			if opts.Size < 0 {
				writeErr(w, fmt.Errorf("%w: a digest footer needs the body size", object.ErrInvalidArgument))
				return
			}
			body = io.LimitReader(r.Body, opts.Size)
			opts.Digest = func() (object.Digest, error) {
				var b [object.DigestLen]byte
				if _, err := io.ReadFull(r.Body, b[:]); err != nil {
					return object.Digest{}, fmt.Errorf("%w: digest footer: %w", object.ErrIncompleteBody, err)
				}
				return object.ParseDigest(b[:])
			}
		}
		info, err := s.local.Put(ctx, bucket, key, body, opts)
		reply(w, info, err)
	case http.MethodGet:
		rng, err := parseRange(q)
		if err != nil {
			writeErr(w, err)
			return
		}
		rd, err := s.local.Get(ctx, bucket, key, rng)
		if err != nil {
			writeErr(w, err)
			return
		}
		defer rd.Close()
		off, n := rd.Range()
		if err := setInfo(w.Header(), rd.Info()); err != nil {
			writeErr(w, err)
			return
		}
		w.Header().Set(hdrRange, strconv.FormatInt(off, 10)+" "+strconv.FormatInt(n, 10))
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		w.WriteHeader(http.StatusOK)
		_, _ = copyBody(w, rd, n)
	case http.MethodHead:
		if r.Header.Get(hdrAsIs) != "" {
			ctx = AsIs(ctx)
		}
		info, err := s.local.Stat(ctx, bucket, key)
		if err != nil {
			writeErr(w, err)
			return
		}
		if err := setInfo(w.Header(), info); err != nil {
			writeErr(w, err)
			return
		}
		w.WriteHeader(http.StatusOK)
	case http.MethodDelete:
		if r.Header.Get(hdrAsIs) != "" {
			ctx = AsIs(ctx)
		}
		reply(w, struct{}{}, s.local.Delete(ctx, bucket, key))
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

func (s *server) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	max, _ := strconv.Atoi(q.Get("max-keys"))
	res, err := s.local.List(r.Context(), q.Get("bucket"), object.ListOptions{
		Prefix: q.Get("prefix"), Delimiter: q.Get("delimiter"), StartAfter: q.Get("start-after"), MaxKeys: max,
	})
	reply(w, res, err)
}

func (s *server) bucket(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodDelete {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	reply(w, struct{}{}, s.local.DeleteBucket(r.Context(), r.URL.Query().Get("bucket")))
}

func (s *server) upload(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	bucket, key, id := q.Get("bucket"), q.Get("key"), q.Get("uploadId")
	ctx := r.Context()
	switch r.Method {
	case http.MethodPost:
		var opts object.PutOptions
		if err := decodeHeader(r.Header.Get(hdrPut), &opts); err != nil {
			writeErr(w, err)
			return
		}
		uid, err := s.local.CreateUpload(ctx, bucket, key, opts)
		reply(w, map[string]string{"uploadId": uid}, err)
	case http.MethodPut:
		var opts object.PutOptions
		if err := decodeHeader(r.Header.Get(hdrPut), &opts); err != nil {
			writeErr(w, err)
			return
		}
		part, err := strconv.Atoi(q.Get("part"))
		if err != nil {
			writeErr(w, object.ErrInvalidPart)
			return
		}
		pi, err := s.local.PutPart(ctx, bucket, key, id, part, r.Body, opts)
		reply(w, pi, err)
	case http.MethodGet:
		parts, err := s.local.ListParts(ctx, bucket, key, id)
		reply(w, parts, err)
	case http.MethodDelete:
		reply(w, struct{}{}, s.local.AbortUpload(ctx, bucket, key, id))
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

func (s *server) uploads(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ups, err := s.local.ListUploads(r.Context(), q.Get("bucket"), q.Get("prefix"))
	reply(w, ups, err)
}

func (s *server) complete(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var parts []object.CompletePart
	if err := json.NewDecoder(io.LimitReader(r.Body, 4<<20)).Decode(&parts); err != nil {
		writeErr(w, errors.Join(object.ErrInvalidArgument, err))
		return
	}
	info, err := s.local.CompleteUpload(r.Context(), q.Get("bucket"), q.Get("key"), q.Get("uploadId"), parts)
	reply(w, info, err)
}

func (s *server) replica(w http.ResponseWriter, r *http.Request) {
	var op ReplicaOp
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&op); err != nil {
		writeErr(w, errors.Join(object.ErrInvalidArgument, err))
		return
	}
	reply(w, struct{}{}, s.local.Replica(r.Context(), op))
}

// maxPendingQuery bounds a PendingDeletes query: a listing page's keys
// (1000 of up to 1 KiB) and common prefixes, JSON-quoted.
const maxPendingQuery = 16 << 20

func (s *server) pendingDeletes(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	var q PendingQuery
	if err := json.NewDecoder(io.LimitReader(r.Body, maxPendingQuery)).Decode(&q); err != nil {
		writeErr(w, errors.Join(object.ErrInvalidArgument, err))
		return
	}
	deleted, under, err := s.local.PendingDeletes(r.Context(), q.Bucket, q.Keys, q.Prefixes)
	reply(w, PendingAnswer{Deleted: deleted, Under: under}, err)
}

// FillResult is the answer of a fill.
type FillResult struct {
	Info    object.Info `json:"info"`
	Fetched bool        `json:"fetched"`
}

func (s *server) fill(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	info, fetched, err := s.local.Fill(r.Context(), q.Get("bucket"), q.Get("key"))
	reply(w, FillResult{Info: info, Fetched: fetched}, err)
}

// copyBody sends n bytes of rd, through sendfile when rd is file-backed.
func copyBody(w io.Writer, rd object.Reader, n int64) (int64, error) {
	if fr, ok := rd.(interface {
		File() (f *os.File, offset, length int64)
	}); ok {
		f, off, _ := fr.File()
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return 0, err
		}
		return io.CopyN(w, f, n)
	}
	return io.CopyN(w, rd, n)
}

func parseRange(q url.Values) (*object.Range, error) {
	if q.Get("offset") == "" && q.Get("suffix") == "" {
		return nil, nil
	}
	var r object.Range
	var err error
	if s := q.Get("suffix"); s != "" {
		r.Suffix, err = strconv.ParseInt(s, 10, 64)
		return &r, err
	}
	if r.Offset, err = strconv.ParseInt(q.Get("offset"), 10, 64); err != nil {
		return nil, errors.Join(object.ErrInvalidRange, err)
	}
	r.Length = -1
	if l := q.Get("length"); l != "" {
		if r.Length, err = strconv.ParseInt(l, 10, 64); err != nil {
			return nil, errors.Join(object.ErrInvalidRange, err)
		}
	}
	return &r, nil
}

func setInfo(h http.Header, info object.Info) error {
	b, err := json.Marshal(info)
	if err != nil {
		return err
	}
	h.Set(hdrInfo, string(b))
	return nil
}

func decodeHeader(v string, into any) error {
	if v == "" {
		return nil
	}
	if err := json.Unmarshal([]byte(v), into); err != nil {
		return errors.Join(object.ErrInvalidArgument, err)
	}
	return nil
}

func reply(w http.ResponseWriter, v any, err error) {
	if err != nil {
		writeErr(w, err)
		return
	}
	w.Header().Set("Content-Type", contentJSON)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, err error) {
	code := errorCode(err)
	status := http.StatusBadRequest
	switch code {
	case "NotFound", "BucketNotFound", "UploadNotFound":
		status = http.StatusNotFound
	case "Internal", "Backend":
		status = http.StatusInternalServerError
	case "NoSpace", "Unavailable", "SlowDown":
		status = http.StatusServiceUnavailable
	}
	w.Header().Set(hdrErr, code)
	w.Header().Set(hdrErrMsg, url.QueryEscape(err.Error()))
	if de := (*DeletedError)(nil); errors.As(err, &de) {
		w.Header().Set(hdrDeleted, de.At.UTC().Format(time.RFC3339Nano))
	}
	w.WriteHeader(status)
}
