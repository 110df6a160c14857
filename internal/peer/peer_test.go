package peer

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/object"
)

// memLocal is an in-memory Local for protocol tests.
type memLocal struct {
	mu    sync.Mutex
	objs  map[string][]byte
	info  map[string]object.Info
	tombs map[string]time.Time
	asIs  []bool   // IsAsIs of each Stat's context
	downs []string // DownsOf of each Get's and Stat's context ("-": none)
}

// noteDowns records what WithDowns marked ctx with (m.mu held).
func (m *memLocal) noteDowns(ctx context.Context) {
	if n, ok := DownsOf(ctx); ok {
		m.downs = append(m.downs, strconv.FormatUint(n, 10))
	} else {
		m.downs = append(m.downs, "-")
	}
}

func newMem() *memLocal {
	return &memLocal{objs: map[string][]byte{}, info: map[string]object.Info{}, tombs: map[string]time.Time{}}
}

func (m *memLocal) Put(ctx context.Context, bucket, key string, r io.Reader, opts PutOptions) (object.Info, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return object.Info{}, err
	}
	if opts.Size >= 0 && int64(len(b)) != opts.Size {
		return object.Info{}, object.ErrIncompleteBody
	}
	sum := md5.Sum(b)
	etag := hex.EncodeToString(sum[:])
	if opts.Digest != nil { // as the store does: check CRC32C, take the MD5
		d, err := opts.Digest()
		if err != nil {
			return object.Info{}, err
		}
		if d.CRC32C != crc32.Checksum(b, object.Castagnoli) {
			return object.Info{}, object.ErrUnavailable
		}
		etag = hex.EncodeToString(d.MD5)
	}
	info := object.Info{Bucket: bucket, Key: key, Size: int64(len(b)), ETag: etag, Dirty: opts.Dirty}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objs[bucket+"/"+key], m.info[bucket+"/"+key] = b, info
	return info, nil
}

type memReader struct {
	*bytes.Reader
	info   object.Info
	off, n int64
}

func (r *memReader) Close() error          { return nil }
func (r *memReader) Info() object.Info     { return r.info }
func (r *memReader) Range() (off, n int64) { return r.off, r.n }

func (m *memLocal) Get(ctx context.Context, bucket, key string, rng *object.Range) (object.Reader, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.noteDowns(ctx)
	b, ok := m.objs[bucket+"/"+key]
	if !ok {
		return nil, object.ErrNotFound
	}
	off, n := int64(0), int64(len(b))
	if rng != nil {
		var err error
		if off, n, err = rng.Resolve(int64(len(b))); err != nil {
			return nil, err
		}
	}
	return &memReader{bytes.NewReader(b[off : off+n]), m.info[bucket+"/"+key], off, n}, nil
}

func (m *memLocal) Stat(ctx context.Context, bucket, key string) (object.Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.asIs = append(m.asIs, IsAsIs(ctx))
	m.noteDowns(ctx)
	i, ok := m.info[bucket+"/"+key]
	if !ok {
		if at, ok := m.tombs[bucket+"/"+key]; ok {
			return object.Info{}, &DeletedError{At: at}
		}
		return object.Info{}, object.ErrNotFound
	}
	return i, nil
}

func (m *memLocal) Delete(ctx context.Context, bucket, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.objs[bucket+"/"+key]; !ok {
		return object.ErrNotFound
	}
	delete(m.objs, bucket+"/"+key)
	delete(m.info, bucket+"/"+key)
	return nil
}

func (m *memLocal) List(ctx context.Context, bucket string, opts object.ListOptions) (object.ListResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var res object.ListResult
	for k, i := range m.info {
		if strings.HasPrefix(k, bucket+"/"+opts.Prefix) && i.Key > opts.StartAfter {
			res.Objects = append(res.Objects, i)
		}
	}
	sort.Slice(res.Objects, func(a, b int) bool { return res.Objects[a].Key < res.Objects[b].Key })
	return res, nil
}

func (m *memLocal) DeleteBucket(ctx context.Context, bucket string) error {
	return object.ErrBucketNotEmpty
}
func (m *memLocal) CreateUpload(ctx context.Context, bucket, key string, opts object.PutOptions) (string, error) {
	return "u1", nil
}
func (m *memLocal) PutPart(ctx context.Context, bucket, key, uploadID string, part int, r io.Reader, opts object.PutOptions) (object.PartInfo, error) {
	n, err := io.Copy(io.Discard, r)
	return object.PartInfo{PartNumber: part, Size: n}, err
}
func (m *memLocal) ListParts(ctx context.Context, bucket, key, uploadID string) ([]object.PartInfo, error) {
	return nil, object.ErrUploadNotFound
}
func (m *memLocal) ListUploads(ctx context.Context, bucket, prefix string) ([]object.UploadInfo, error) {
	return []object.UploadInfo{{Bucket: bucket, Key: "k", UploadID: "u1"}}, nil
}
func (m *memLocal) Replica(ctx context.Context, op ReplicaOp) error {
	switch op.Op {
	case ReplicaDelete, ReplicaDestaged:
		return nil
	case ReplicaTombstone:
		m.mu.Lock()
		m.tombs[op.Bucket+"/"+op.Key] = op.Time
		m.mu.Unlock()
		return nil
	}
	return object.ErrInvalidArgument
}
func (m *memLocal) Fill(ctx context.Context, bucket, key string) (object.Info, bool, error) {
	if key == "denied" {
		return object.Info{}, false, fmt.Errorf("remote said no: %w", object.ErrBackendDenied)
	}
	i, err := m.Stat(ctx, bucket, key)
	return i, false, err
}

// PendingDeletes takes tombstoned keys for deletes not destaged.
func (m *memLocal) PendingDeletes(ctx context.Context, bucket string, keys, prefixes []string) (deleted, under []string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range keys {
		if _, ok := m.tombs[bucket+"/"+k]; ok {
			deleted = append(deleted, k)
		}
	}
	for _, p := range prefixes {
		for bk := range m.tombs {
			if strings.HasPrefix(bk, bucket+"/"+p) {
				under = append(under, p)
				break
			}
		}
	}
	return deleted, under, nil
}
func (m *memLocal) AbortUpload(ctx context.Context, bucket, key, uploadID string) error { return nil }
func (m *memLocal) CompleteUpload(ctx context.Context, bucket, key, uploadID string, parts []object.CompletePart) (object.Info, error) {
	if len(parts) == 0 {
		return object.Info{}, object.ErrInvalidPart
	}
	return object.Info{Bucket: bucket, Key: key, ETag: "x-" + uploadID}, nil
}

func setup(t *testing.T) (Local, *memLocal) {
	mem := newMem()
	srv := httptest.NewServer(NewHandler(mem))
	t.Cleanup(srv.Close)
	c := &Client{Doer: &HTTPDoer{Client: srv.Client()}}
	return c.Node(Target{ID: "n1", Addrs: []string{strings.TrimPrefix(srv.URL, "http://")}}), mem
}

func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	rem, mem := setup(t)
	body := []byte("hello, peer protocol")
	info, err := rem.Put(ctx, "b", "dir/k 1", bytes.NewReader(body), PutOptions{PutOptions: object.PutOptions{Size: int64(len(body))}, Dirty: true})
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != int64(len(body)) || !info.Dirty {
		t.Fatalf("put info %+v", info)
	}
	rd, err := rem.Get(ctx, "b", "dir/k 1", &object.Range{Offset: 7, Length: 4})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rd)
	rd.Close()
	if err != nil || string(got) != "peer" {
		t.Fatalf("range read %q, %v", got, err)
	}
	if off, n := rd.Range(); off != 7 || n != 4 || rd.Info().ETag != info.ETag {
		t.Fatalf("range %d,%d info %+v", off, n, rd.Info())
	}
	st, err := rem.Stat(ctx, "b", "dir/k 1")
	if err != nil || st.ETag != info.ETag {
		t.Fatalf("stat %+v %v", st, err)
	}
	if _, err := rem.Stat(AsIs(ctx), "b", "dir/k 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := rem.Stat(WithDowns(ctx, 7), "b", "dir/k 1"); err != nil {
		t.Fatal(err)
	}
	if rd, err := rem.Get(WithDowns(ctx, 0), "b", "dir/k 1", nil); err != nil {
		t.Fatal(err)
	} else {
		rd.Close()
	}
	mem.mu.Lock()
	if !slices.Equal(mem.asIs, []bool{false, true, false}) {
		t.Errorf("as-is marks the node saw: %v, want [false true false]", mem.asIs)
	}
	if want := []string{"-", "-", "-", "7", "0"}; !slices.Equal(mem.downs, want) {
		t.Errorf("down counts the node saw: %v, want %v", mem.downs, want)
	}
	mem.mu.Unlock()
	res, err := rem.List(ctx, "b", object.ListOptions{Prefix: "dir/"})
	if err != nil || len(res.Objects) != 1 || res.Objects[0].Key != "dir/k 1" {
		t.Fatalf("list %+v %v", res, err)
	}
	if err := rem.Delete(ctx, "b", "dir/k 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := rem.Stat(ctx, "b", "dir/k 1"); !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("stat after delete: %v", err)
	}
}

// PendingDeletes carries a listing page's keys and prefixes to the node
// and its answer back.
func TestPendingDeletes(t *testing.T) {
	ctx := context.Background()
	rem, _ := setup(t)
	for _, k := range []string{"gone", "dir/x"} {
		if err := rem.Replica(ctx, ReplicaOp{Op: ReplicaTombstone, Bucket: "b", Key: k, Time: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	deleted, under, err := rem.PendingDeletes(ctx, "b", []string{"gone", "kept", "dir/x"}, []string{"dir/", "other/"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(deleted, []string{"gone", "dir/x"}) || !slices.Equal(under, []string{"dir/"}) {
		t.Errorf("deleted %q under %q; want [gone dir/x] and [dir/]", deleted, under)
	}
	if _, _, err := rem.PendingDeletes(ctx, "other", []string{"gone"}, nil); err != nil {
		t.Fatal(err)
	}
}

func TestErrorsMapToSentinels(t *testing.T) {
	ctx := context.Background()
	rem, _ := setup(t)
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"get missing", func() error { _, err := rem.Get(ctx, "b", "nope", nil); return err }(), object.ErrNotFound},
		{"bad range", func() error {
			_, _ = rem.Put(ctx, "b", "k", strings.NewReader("abc"), PutOptions{PutOptions: object.PutOptions{Size: 3}})
			_, err := rem.Get(ctx, "b", "k", &object.Range{Offset: 10, Length: 1})
			return err
		}(), object.ErrInvalidRange},
		{"bucket not empty", rem.DeleteBucket(ctx, "b"), object.ErrBucketNotEmpty},
		{"no upload", func() error { _, err := rem.ListParts(ctx, "b", "k", "x"); return err }(), object.ErrUploadNotFound},
		{"invalid part", func() error { _, err := rem.CompleteUpload(ctx, "b", "k", "u1", nil); return err }(), object.ErrInvalidPart},
		{"backend denied", func() error { _, _, err := rem.Fill(ctx, "b", "denied"); return err }(), object.ErrBackendDenied},
	}
	for _, tt := range tests {
		if !errors.Is(tt.err, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, tt.err, tt.want)
		}
		if errors.Is(tt.err, ErrUnreachable) {
			t.Errorf("%s: an answered error counted as unreachable", tt.name)
		}
	}
}

// TestTombstone: a node that remembers a delete says when, through the
// "not found" answer to a Stat; other misses stay plain not-found errors.
func TestTombstone(t *testing.T) {
	ctx := context.Background()
	rem, _ := setup(t)
	at := time.Date(2026, 11, 22, 8, 30, 0, 123456789, time.UTC)
	if err := rem.Replica(ctx, ReplicaOp{Op: ReplicaTombstone, Bucket: "b", Key: "gone/k", Time: at}); err != nil {
		t.Fatal(err)
	}
	_, err := rem.Stat(ctx, "b", "gone/k")
	var de *DeletedError
	if !errors.As(err, &de) || !de.At.Equal(at) || !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("Stat of a remembered delete: %v", err)
	}
	_, err = rem.Stat(ctx, "b", "never")
	if errors.As(err, &de) || !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("Stat of an unknown key: %v", err)
	}
}

func TestUnreachable(t *testing.T) {
	c := &Client{Doer: &HTTPDoer{Client: http.DefaultClient}}
	rem := c.Node(Target{ID: "gone", Addrs: []string{"127.0.0.1:1"}})
	_, err := rem.Stat(context.Background(), "b", "k")
	if !errors.Is(err, ErrUnreachable) || !errors.Is(err, object.ErrUnavailable) {
		t.Fatalf("dial failure: %v", err)
	}
}

func TestMultipartCalls(t *testing.T) {
	ctx := context.Background()
	rem, _ := setup(t)
	id, err := rem.CreateUpload(ctx, "b", "k", object.PutOptions{ContentType: "a/b"})
	if err != nil || id != "u1" {
		t.Fatalf("create %q %v", id, err)
	}
	pi, err := rem.PutPart(ctx, "b", "k", id, 3, strings.NewReader("12345"), object.PutOptions{Size: 5})
	if err != nil || pi.PartNumber != 3 || pi.Size != 5 {
		t.Fatalf("part %+v %v", pi, err)
	}
	ups, err := rem.ListUploads(ctx, "b", "")
	if err != nil || len(ups) != 1 || ups[0].UploadID != "u1" {
		t.Fatalf("uploads %+v %v", ups, err)
	}
	info, err := rem.CompleteUpload(ctx, "b", "k", id, []object.CompletePart{{PartNumber: 1, ETag: "e"}})
	if err != nil || info.ETag != "x-u1" {
		t.Fatalf("complete %+v %v", info, err)
	}
	if err := rem.AbortUpload(ctx, "b", "k", id); err != nil {
		t.Fatal(err)
	}
	if err := rem.Replica(ctx, ReplicaOp{Op: ReplicaDestaged, Owner: "n2", Seq: 7, Bucket: "b", Key: "k"}); err != nil {
		t.Fatal(err)
	}
	if err := rem.Replica(ctx, ReplicaOp{Op: "bogus"}); !errors.Is(err, object.ErrInvalidArgument) {
		t.Fatalf("bad replica op: %v", err)
	}
}

// TestDigestFooter sends the sender's digest after the body: the receiver
// gets exactly the data, takes the MD5 from the digest and refuses a body
// whose CRC32C differs from the sender's.
func TestDigestFooter(t *testing.T) {
	c, mem := setup(t)
	ctx := context.Background()
	data := bytes.Repeat([]byte("replica bytes "), 5000)
	good := object.Digest{MD5: bytes.Repeat([]byte{0xab}, 16), CRC32C: crc32.Checksum(data, object.Castagnoli)}
	for _, tc := range []struct {
		name    string
		digest  func() (object.Digest, error)
		wantErr error
	}{
		{"sender's digest", func() (object.Digest, error) { return good, nil }, nil},
		{"bytes differ from the sender's", func() (object.Digest, error) {
			d := good
			d.CRC32C++
			return d, nil
		}, object.ErrUnavailable},
		{"short MD5", func() (object.Digest, error) { return object.Digest{MD5: []byte{1}}, nil }, object.ErrUnavailable},
		{"sender failed", func() (object.Digest, error) { return object.Digest{}, object.ErrIncompleteBody }, object.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := strings.ReplaceAll(tc.name, " ", "-")
			info, err := c.Put(ctx, "b", key, bytes.NewReader(data), PutOptions{PutOptions: object.PutOptions{Size: int64(len(data)), Digest: tc.digest}})
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Put: %v, want %v", err, tc.wantErr)
				}
				if _, ok := mem.objs["b/"+key]; ok {
					t.Fatal("object stored despite the error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if info.ETag != hex.EncodeToString(good.MD5) || !bytes.Equal(mem.objs["b/"+key], data) {
				t.Fatalf("ETag %s, %d bytes stored; want the sender's MD5 and the %d data bytes", info.ETag, len(mem.objs["b/"+key]), len(data))
			}
		})
	}
}

// slowTail is a reader whose bytes arrive after a delay, as the rest of a
// body streamed from a client does.
type slowTail struct {
	delay time.Duration
	b     []byte
}

func (s *slowTail) Read(p []byte) (int, error) {
	if s.delay > 0 {
		time.Sleep(s.delay)
		s.delay = 0
	}
	if len(s.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.b)
	s.b = s.b[n:]
	return n, nil
}

// TestPutBodyNotItsSize: a replica PUT whose body is longer than its
// declared size is object.ErrTooLarge and one shorter is
// object.ErrIncompleteBody, with or without a digest footer, for size 0
// too; in no case does the node keep the first Size bytes as the object.
// (The bytes past Size come late, as a client's would: the node must not
// have answered by then.)
func TestPutBodyNotItsSize(t *testing.T) {
	c, mem := setup(t)
	ctx := context.Background()
	data := bytes.Repeat([]byte("replica bytes "), 5000)
	for _, tc := range []struct {
		name    string
		size    int
		body    func() io.Reader
		wantErr error
	}{
		{"longer", len(data), func() io.Reader {
			return io.MultiReader(bytes.NewReader(data), &slowTail{delay: 300 * time.Millisecond, b: []byte("more")})
		}, object.ErrTooLarge},
		{"longer than zero", 0, func() io.Reader { return strings.NewReader("more") }, object.ErrTooLarge},
		{"shorter", len(data), func() io.Reader { return bytes.NewReader(data[:len(data)-1]) }, object.ErrIncompleteBody},
	} {
		for _, footer := range []bool{false, true} {
			name := fmt.Sprintf("%s footer=%v", tc.name, footer)
			key := strings.ReplaceAll(name, " ", "-")
			opts := PutOptions{PutOptions: object.PutOptions{Size: int64(tc.size)}}
			if footer {
				dr := object.NewDigestReader(tc.body())
				opts.Digest = dr.Digest
				_, err := c.Put(ctx, "b", key, dr, opts)
				if !errors.Is(err, tc.wantErr) {
					t.Errorf("%s: Put: %v, want %v", name, err, tc.wantErr)
				}
			} else if _, err := c.Put(ctx, "b", key, tc.body(), opts); !errors.Is(err, tc.wantErr) {
				t.Errorf("%s: Put: %v, want %v", name, err, tc.wantErr)
			}
			mem.mu.Lock()
			if b, ok := mem.objs["b/"+key]; ok {
				t.Errorf("%s: the node kept %d bytes", name, len(b))
			}
			mem.mu.Unlock()
		}
	}
}

// TestErrorTextOnce: an error from the other node keeps its sentinel (for
// errors.Is) and says what it says once, not the sentinel's text twice.
func TestErrorTextOnce(t *testing.T) {
	rem, _ := setup(t)
	_, err := rem.Stat(context.Background(), "b", "missing")
	if !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("Stat of a missing key: %v", err)
	}
	if n := strings.Count(err.Error(), object.ErrNotFound.Error()); n != 1 {
		t.Errorf("error %q names %q %d times", err, object.ErrNotFound, n)
	}
}
