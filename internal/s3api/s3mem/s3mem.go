// Package s3mem is an in-memory implementation of s3api.Objects for tests
// of the S3 layer. It keeps whole objects in memory, so it is only for
// small test data; it follows the same rules as the real store: a PUT
// whose body is short, long, fails to read or does not match its
// Content-MD5 stores nothing.
package s3mem

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/s3api"
)

var _ s3api.Objects = (*Store)(nil)

// Options configure a Store.
type Options struct {
	// MinPartSize is the smallest size of a part other than the last
	// (default object.MinPartSize).
	MinPartSize int64
}

// Store holds buckets, objects and multipart uploads in memory. It is safe
// for concurrent use.
type Store struct {
	minPart int64

	mu      sync.Mutex
	buckets map[string]*bucket
	uploads map[string]*upload
}

type bucket struct {
	created time.Time
	objects map[string]*obj
}

type obj struct {
	info object.Info
	data []byte
}

type upload struct {
	info  object.UploadInfo
	opts  object.PutOptions
	parts map[int]*part
}

type part struct {
	info object.PartInfo
	data []byte
}

// New returns an empty Store.
func New(opts Options) *Store {
	if opts.MinPartSize <= 0 {
		opts.MinPartSize = object.MinPartSize
	}
	return &Store{minPart: opts.MinPartSize, buckets: map[string]*bucket{}, uploads: map[string]*upload{}}
}

// ListBuckets implements s3api.Objects.
func (s *Store) ListBuckets(ctx context.Context) ([]object.BucketInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []object.BucketInfo
	for name, b := range s.buckets {
		out = append(out, object.BucketInfo{Name: name, Created: b.created})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// CreateBucket implements s3api.Objects.
func (s *Store) CreateBucket(ctx context.Context, name string) error {
	if err := object.ValidateBucketName(name); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.buckets[name]; ok {
		return fmt.Errorf("%w: %s", object.ErrBucketExists, name)
	}
	s.buckets[name] = &bucket{created: time.Now().UTC(), objects: map[string]*obj{}}
	return nil
}

// DeleteBucket implements s3api.Objects.
func (s *Store) DeleteBucket(ctx context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.bucket(name)
	if err != nil {
		return err
	}
	if len(b.objects) > 0 {
		return fmt.Errorf("%w: %s", object.ErrBucketNotEmpty, name)
	}
	delete(s.buckets, name)
	return nil
}

// HeadBucket implements s3api.Objects.
func (s *Store) HeadBucket(ctx context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := s.bucket(name)
	return err
}

func (s *Store) bucket(name string) (*bucket, error) {
	b, ok := s.buckets[name]
	if !ok {
		return nil, fmt.Errorf("%w: %s", object.ErrBucketNotFound, name)
	}
	return b, nil
}

// ListObjects implements s3api.Objects.
func (s *Store) ListObjects(ctx context.Context, name string, opts object.ListOptions) (object.ListResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.bucket(name)
	if err != nil {
		return object.ListResult{}, err
	}
	max := opts.MaxKeys
	if max <= 0 {
		max = 1000
	}
	keys := make([]string, 0, len(b.objects))
	for k := range b.objects {
		if strings.HasPrefix(k, opts.Prefix) && k > opts.StartAfter {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var res object.ListResult
	lastPrefix := ""
	for _, k := range keys {
		entry := k
		isPrefix := false
		if opts.Delimiter != "" {
			if i := strings.Index(k[len(opts.Prefix):], opts.Delimiter); i >= 0 {
				entry = k[:len(opts.Prefix)+i+len(opts.Delimiter)]
				isPrefix = true
				if entry == lastPrefix {
					continue
				}
			}
		}
		if len(res.Objects)+len(res.CommonPrefixes) == max {
			res.IsTruncated = true
			break
		}
		if isPrefix {
			res.CommonPrefixes = append(res.CommonPrefixes, entry)
			lastPrefix = entry
		} else {
			res.Objects = append(res.Objects, b.objects[k].info)
		}
		res.NextMarker = entry
	}
	return res, nil
}

// readBody reads a whole body, checking its declared size and MD5.
func readBody(body io.Reader, opts object.PutOptions) ([]byte, string, error) {
	var data []byte
	var err error
	if opts.Size >= 0 {
		data, err = io.ReadAll(io.LimitReader(body, opts.Size+1))
	} else {
		data, err = io.ReadAll(body)
	}
	if err != nil {
		return nil, "", fmt.Errorf("s3mem: reading body: %w", err)
	}
	if opts.Size >= 0 && int64(len(data)) < opts.Size {
		return nil, "", fmt.Errorf("%w: got %d of %d bytes", object.ErrIncompleteBody, len(data), opts.Size)
	}
	if opts.Size >= 0 && int64(len(data)) > opts.Size {
		return nil, "", object.ErrTooLarge
	}
	sum := md5.Sum(data)
	if opts.ContentMD5 != nil && !bytes.Equal(sum[:], opts.ContentMD5) {
		return nil, "", object.ErrBadDigest
	}
	return data, hex.EncodeToString(sum[:]), nil
}

func cloneMeta(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func checkNames(bucketName, key string) error {
	if err := object.ValidateBucketName(bucketName); err != nil {
		return err
	}
	return object.ValidateKey(key)
}

// PutObject implements s3api.Objects.
func (s *Store) PutObject(ctx context.Context, bucketName, key string, body io.Reader, opts object.PutOptions) (object.Info, error) {
	if err := checkNames(bucketName, key); err != nil {
		return object.Info{}, err
	}
	if err := s.HeadBucket(ctx, bucketName); err != nil {
		return object.Info{}, err
	}
	data, etag, err := readBody(body, opts)
	if err != nil {
		return object.Info{}, err
	}
	info := object.Info{
		Bucket: bucketName, Key: key, Size: int64(len(data)), ETag: etag, ContentType: opts.ContentType,
		UserMeta: cloneMeta(opts.UserMeta), Headers: cloneMeta(opts.Headers), ModTime: time.Now().UTC(),
	}
	return info, s.store(bucketName, &obj{info: info, data: data})
}

func (s *Store) store(bucketName string, o *obj) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.bucket(bucketName)
	if err != nil {
		return err
	}
	b.objects[o.info.Key] = o
	return nil
}

func (s *Store) get(bucketName, key string) (*obj, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.bucket(bucketName)
	if err != nil {
		return nil, err
	}
	o, ok := b.objects[key]
	if !ok {
		return nil, fmt.Errorf("%w: %s/%s", object.ErrNotFound, bucketName, key)
	}
	return o, nil
}

// reader is an object.Reader over a byte slice.
type reader struct {
	*bytes.Reader
	info      object.Info
	off, size int64
}

func (r *reader) Info() object.Info             { return r.info }
func (r *reader) Range() (offset, length int64) { return r.off, r.size }
func (r *reader) Close() error                  { return nil }

// GetObject implements s3api.Objects.
func (s *Store) GetObject(ctx context.Context, bucketName, key string, opts object.GetOptions) (object.Reader, error) {
	o, err := s.get(bucketName, key)
	if err != nil {
		return nil, err
	}
	off, n := int64(0), o.info.Size
	if opts.Range != nil {
		if off, n, err = opts.Range.Resolve(o.info.Size); err != nil {
			return nil, err
		}
	}
	return &reader{Reader: bytes.NewReader(o.data[off : off+n]), info: o.info, off: off, size: n}, nil
}

// HeadObject implements s3api.Objects.
func (s *Store) HeadObject(ctx context.Context, bucketName, key string) (object.Info, error) {
	o, err := s.get(bucketName, key)
	if err != nil {
		return object.Info{}, err
	}
	return o.info, nil
}

// DeleteObject implements s3api.Objects.
func (s *Store) DeleteObject(ctx context.Context, bucketName, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.bucket(bucketName)
	if err != nil {
		return err
	}
	if _, ok := b.objects[key]; !ok {
		return fmt.Errorf("%w: %s/%s", object.ErrNotFound, bucketName, key)
	}
	delete(b.objects, key)
	return nil
}

// CopyObject implements s3api.Objects.
func (s *Store) CopyObject(ctx context.Context, srcBucket, srcKey, dstBucket, dstKey string, opts object.CopyOptions) (object.Info, error) {
	if err := checkNames(dstBucket, dstKey); err != nil {
		return object.Info{}, err
	}
	src, err := s.get(srcBucket, srcKey)
	if err != nil {
		return object.Info{}, err
	}
	if opts.CheckSource != nil {
		if err := opts.CheckSource(src.info); err != nil {
			return object.Info{}, err
		}
	}
	info := src.info
	info.Bucket, info.Key, info.ModTime = dstBucket, dstKey, time.Now().UTC()
	info.UserMeta, info.Headers = cloneMeta(info.UserMeta), cloneMeta(info.Headers)
	info.Parts = nil // a copy is one part
	if opts.ReplaceMeta {
		info.ContentType, info.UserMeta, info.Headers = opts.ContentType, cloneMeta(opts.UserMeta), cloneMeta(opts.Headers)
	}
	return info, s.store(dstBucket, &obj{info: info, data: src.data})
}

// CreateMultipartUpload implements s3api.Objects.
func (s *Store) CreateMultipartUpload(ctx context.Context, bucketName, key string, opts object.PutOptions) (string, error) {
	if err := checkNames(bucketName, key); err != nil {
		return "", err
	}
	var rnd [12]byte
	_, _ = rand.Read(rnd[:])
	id := hex.EncodeToString(rnd[:])
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.bucket(bucketName); err != nil {
		return "", err
	}
	opts.UserMeta, opts.Headers = cloneMeta(opts.UserMeta), cloneMeta(opts.Headers)
	s.uploads[id] = &upload{
		info:  object.UploadInfo{Bucket: bucketName, Key: key, UploadID: id, Initiated: time.Now().UTC()},
		opts:  opts,
		parts: map[int]*part{},
	}
	return id, nil
}

func (s *Store) upload(bucketName, key, id string) (*upload, error) {
	u, ok := s.uploads[id]
	if !ok || u.info.Bucket != bucketName || u.info.Key != key {
		return nil, fmt.Errorf("%w: %s", object.ErrUploadNotFound, id)
	}
	return u, nil
}

// UploadPart implements s3api.Objects.
func (s *Store) UploadPart(ctx context.Context, bucketName, key, uploadID string, n int, body io.Reader, opts object.PutOptions) (object.PartInfo, error) {
	if n < 1 || n > object.MaxPartNumber {
		return object.PartInfo{}, fmt.Errorf("%w: part number %d", object.ErrInvalidArgument, n)
	}
	s.mu.Lock()
	_, err := s.upload(bucketName, key, uploadID)
	s.mu.Unlock()
	if err != nil {
		return object.PartInfo{}, err
	}
	data, etag, err := readBody(body, opts)
	if err != nil {
		return object.PartInfo{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	u, err := s.upload(bucketName, key, uploadID)
	if err != nil {
		return object.PartInfo{}, err
	}
	p := &part{info: object.PartInfo{PartNumber: n, ETag: etag, Size: int64(len(data)), ModTime: time.Now().UTC()}, data: data}
	u.parts[n] = p
	return p.info, nil
}

// CompleteMultipartUpload implements s3api.Objects.
func (s *Store) CompleteMultipartUpload(ctx context.Context, bucketName, key, uploadID string, parts []object.CompletePart) (object.Info, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, err := s.upload(bucketName, key, uploadID)
	if err != nil {
		return object.Info{}, err
	}
	b, err := s.bucket(bucketName)
	if err != nil {
		return object.Info{}, err
	}
	if len(parts) == 0 {
		return object.Info{}, fmt.Errorf("%w: no parts", object.ErrInvalidPart)
	}
	var data []byte
	sums := md5.New()
	sizes := make([]int64, len(parts))
	for i, cp := range parts {
		if i > 0 && cp.PartNumber <= parts[i-1].PartNumber {
			return object.Info{}, object.ErrInvalidPartOrder
		}
		p, ok := u.parts[cp.PartNumber]
		if !ok || p.info.ETag != cp.ETag {
			return object.Info{}, fmt.Errorf("%w: part %d", object.ErrInvalidPart, cp.PartNumber)
		}
		if i < len(parts)-1 && p.info.Size < s.minPart {
			return object.Info{}, fmt.Errorf("%w: part %d is %d bytes", object.ErrEntityTooSmall, cp.PartNumber, p.info.Size)
		}
		raw, _ := hex.DecodeString(p.info.ETag)
		sums.Write(raw)
		sizes[i] = p.info.Size
		data = append(data, p.data...)
	}
	info := object.Info{
		Bucket: bucketName, Key: key, Size: int64(len(data)),
		ETag:        fmt.Sprintf("%x-%d", sums.Sum(nil), len(parts)),
		ContentType: u.opts.ContentType, UserMeta: u.opts.UserMeta, Headers: u.opts.Headers, ModTime: time.Now().UTC(),
		Parts: object.PartRuns(sizes),
	}
	b.objects[key] = &obj{info: info, data: data}
	delete(s.uploads, uploadID)
	return info, nil
}

// AbortMultipartUpload implements s3api.Objects.
func (s *Store) AbortMultipartUpload(ctx context.Context, bucketName, key, uploadID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.upload(bucketName, key, uploadID); err != nil {
		return err
	}
	delete(s.uploads, uploadID)
	return nil
}

// ListParts implements s3api.Objects.
func (s *Store) ListParts(ctx context.Context, bucketName, key, uploadID string) ([]object.PartInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, err := s.upload(bucketName, key, uploadID)
	if err != nil {
		return nil, err
	}
	out := make([]object.PartInfo, 0, len(u.parts))
	for _, p := range u.parts {
		out = append(out, p.info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PartNumber < out[j].PartNumber })
	return out, nil
}

// ListMultipartUploads implements s3api.Objects.
func (s *Store) ListMultipartUploads(ctx context.Context, bucketName, prefix string) ([]object.UploadInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.bucket(bucketName); err != nil {
		return nil, err
	}
	var out []object.UploadInfo
	for _, u := range s.uploads {
		if u.info.Bucket == bucketName && strings.HasPrefix(u.info.Key, prefix) {
			out = append(out, u.info)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Key < out[j].Key || out[i].Key == out[j].Key && out[i].UploadID < out[j].UploadID
	})
	return out, nil
}

// Len reports how many objects a bucket holds (for tests that check that
// nothing was stored).
func (s *Store) Len(bucketName string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.buckets[bucketName]
	if !ok {
		return 0
	}
	return len(b.objects)
}
