package store

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slipstream-io/slipstream/internal/object"
)

const uploadMetaFile = "upload.json"

// uploadMeta is the committed description of an upload (upload.json).
type uploadMeta struct {
	V           int               `json:"v"`
	Bucket      string            `json:"bucket"`
	Key         string            `json:"key"`
	UploadID    string            `json:"uploadId"`
	Initiated   time.Time         `json:"initiated"`
	ContentType string            `json:"contentType,omitempty"`
	UserMeta    map[string]string `json:"userMeta,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
	Pinned      bool              `json:"pinned,omitempty"` // the object will be Pinned
	Dirty       bool              `json:"dirty,omitempty"`  // the object will be Dirty
}

// UploadOptions go with CreateUpload.
type UploadOptions struct {
	object.PutOptions
	Pinned bool // the completed object is a local bucket's: never evicted
	// Dirty: the completed object is a write-back bucket's, committed
	// dirty, so that it is never evicted, and is destaged even if the node
	// dies before the tier journals it (the tier's restart reconciles dirty
	// objects with its journal).
	Dirty bool
}

// upload is a multipart upload in progress, kept on the mountpath of its
// final object.
type upload struct {
	mu    sync.Mutex
	meta  uploadMeta
	mp    *mountpath
	dir   string
	parts map[int]partMeta
	busy  bool // being completed or aborted
	gone  bool // completed or aborted
}

func partFileName(n int) string { return fmt.Sprintf("part-%05d", n) }

func validUploadID(id string) bool {
	if len(id) != 32 {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil && strings.ToLower(id) == id
}

// getUpload finds an upload of bucket/key.
func (s *Store) getUpload(bucket, key, id string) (*upload, error) {
	if err := validate(bucket, key); err != nil {
		return nil, err
	}
	if validUploadID(id) {
		s.upMu.Lock()
		u := s.uploads[id]
		s.upMu.Unlock()
		if u != nil && u.meta.Bucket == bucket && u.meta.Key == key {
			return u, nil
		}
	}
	return nil, fmt.Errorf("%w: %q for %s/%s", object.ErrUploadNotFound, id, bucket, key)
}

// CreateUpload starts a multipart upload of bucket/key on the mountpath
// that will hold the object.
func (s *Store) CreateUpload(ctx context.Context, bucket, key string, opts UploadOptions) (string, error) {
	if err := validate(bucket, key); err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	probe := object.Info{Bucket: bucket, Key: key, ContentType: opts.ContentType, UserMeta: opts.UserMeta, Headers: opts.Headers,
		ETag: strings.Repeat("0", 40), Checksum: checksumString(0), Size: 1 << 62}
	if _, err := encodeInfo(probe); err != nil {
		return "", err
	}
	var idb [16]byte
	if _, err := rand.Read(idb[:]); err != nil {
		return "", err
	}
	id := hex.EncodeToString(idb[:])
	mp := s.mountpathFor(bucket, key)
	bdir := filepath.Join(mp.mpuDir, bucket)
	dir := filepath.Join(bdir, id)
	if err := mp.dirs.mkdir(bdir, mp.mpuDir); err != nil {
		if isNoSpace(err) {
			return "", noSpace(mp, err)
		}
		return "", s.checkDrive(mp, fmt.Errorf("store: create upload: %w", err))
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		if isNoSpace(err) {
			return "", noSpace(mp, err)
		}
		return "", s.checkDrive(mp, fmt.Errorf("store: create upload: %w", err))
	}
	meta := uploadMeta{V: metaFormat, Bucket: bucket, Key: key, UploadID: id, Initiated: s.now().UTC(),
		ContentType: opts.ContentType, UserMeta: maps.Clone(opts.UserMeta), Headers: maps.Clone(opts.Headers), Pinned: opts.Pinned, Dirty: opts.Dirty}
	if err := writeFileAtomic(filepath.Join(dir, uploadMetaFile), meta); err != nil {
		os.RemoveAll(dir)
		if isNoSpace(err) {
			return "", noSpace(mp, err)
		}
		return "", fmt.Errorf("store: create upload: %w", err)
	}
	if err := syncDir(bdir); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("store: create upload: %w", err)
	}
	u := &upload{meta: meta, mp: mp, dir: dir, parts: map[int]partMeta{}}
	s.upMu.Lock()
	s.uploads[id] = u
	s.upMu.Unlock()
	return id, nil
}

// writeFileAtomic writes v as JSON to path through a temp file, fsync and
// rename, and fsyncs the directory.
func writeFileAtomic(path string, v any) error {
	b, err := marshalJSON(v)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	return syncDir(dir)
}

// PutPart stores part number part of an upload, replacing an earlier part
// with the same number. Size and Content-MD5 are checked as in Put.
func (s *Store) PutPart(ctx context.Context, bucket, key, uploadID string, part int, r io.Reader, opts object.PutOptions) (object.PartInfo, error) {
	u, err := s.getUpload(bucket, key, uploadID)
	if err != nil {
		return object.PartInfo{}, err
	}
	if part < 1 || part > object.MaxPartNumber {
		return object.PartInfo{}, fmt.Errorf("%w: part number %d is not in 1..%d", object.ErrInvalidArgument, part, object.MaxPartNumber)
	}
	if opts.ContentMD5 != nil && len(opts.ContentMD5) != md5.Size {
		return object.PartInfo{}, fmt.Errorf("%w: Content-MD5 is %d bytes, want %d", object.ErrInvalidArgument, len(opts.ContentMD5), md5.Size)
	}
	if err := ctx.Err(); err != nil {
		return object.PartInfo{}, err
	}
	w, err := s.newWork(ctx, u.mp, false)
	if err != nil {
		return object.PartInfo{}, s.checkDrive(u.mp, err)
	}
	defer w.abort()
	limit := opts.Size
	if limit < 0 {
		limit = -1
	}
	d, err := w.ingest(ctx, r, limit, true)
	if err != nil {
		return object.PartInfo{}, s.checkDrive(u.mp, err)
	}
	if opts.ContentMD5 != nil && string(opts.ContentMD5) != string(d.md5) {
		return object.PartInfo{}, fmt.Errorf("%w: got %x, Content-MD5 says %x", object.ErrBadDigest, d.md5, opts.ContentMD5)
	}
	pm := partMeta{V: metaFormat, Part: part, ETag: hex.EncodeToString(d.md5), Size: d.size, CRC32C: d.crc32c, ModTime: s.now().UTC()}
	b, err := marshalJSON(pm)
	if err != nil {
		return object.PartInfo{}, err
	}
	if err := w.seal(ctx, xattrPart, b); err != nil {
		return object.PartInfo{}, err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.gone || u.busy {
		return object.PartInfo{}, fmt.Errorf("%w: %q was completed or aborted", object.ErrUploadNotFound, uploadID)
	}
	if err := os.Rename(w.path, filepath.Join(u.dir, partFileName(part))); err != nil {
		return object.PartInfo{}, fmt.Errorf("store: commit part %d: %w", part, err)
	}
	w.done = true
	old, had := u.parts[part]
	u.parts[part] = pm
	u.mp.release(w.reserved)
	delta := pm.Size
	if had {
		delta -= old.Size
	}
	u.mp.addParts(delta)
	if err := syncDir(u.dir); err != nil {
		return object.PartInfo{}, fmt.Errorf("store: fsync %s: %w", u.dir, err)
	}
	return partInfo(pm), nil
}

func partInfo(pm partMeta) object.PartInfo {
	return object.PartInfo{PartNumber: pm.Part, ETag: pm.ETag, Size: pm.Size, ModTime: pm.ModTime}
}

// ListParts lists the parts of an upload by part number.
func (s *Store) ListParts(ctx context.Context, bucket, key, uploadID string) ([]object.PartInfo, error) {
	u, err := s.getUpload(bucket, key, uploadID)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.gone {
		return nil, fmt.Errorf("%w: %q", object.ErrUploadNotFound, uploadID)
	}
	out := make([]object.PartInfo, 0, len(u.parts))
	for _, pm := range u.parts {
		out = append(out, partInfo(pm))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PartNumber < out[j].PartNumber })
	return out, nil
}

// ListUploads lists the uploads in progress in bucket whose key starts
// with prefix, by key, then initiation time.
func (s *Store) ListUploads(ctx context.Context, bucket, prefix string) ([]object.UploadInfo, error) {
	if err := object.ValidateBucketName(bucket); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []object.UploadInfo
	s.upMu.Lock()
	for _, u := range s.uploads {
		if u.meta.Bucket == bucket && strings.HasPrefix(u.meta.Key, prefix) {
			out = append(out, object.UploadInfo{Bucket: bucket, Key: u.meta.Key, UploadID: u.meta.UploadID, Initiated: u.meta.Initiated})
		}
	}
	s.upMu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Key != b.Key {
			return a.Key < b.Key
		}
		if !a.Initiated.Equal(b.Initiated) {
			return a.Initiated.Before(b.Initiated)
		}
		return a.UploadID < b.UploadID
	})
	return out, nil
}

// claim marks u as being completed or aborted; ErrUploadNotFound if it is
// already.
func (u *upload) claim() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.gone || u.busy {
		return fmt.Errorf("%w: %q is being completed or aborted", object.ErrUploadNotFound, u.meta.UploadID)
	}
	u.busy = true
	return nil
}

func (u *upload) unclaim() {
	u.mu.Lock()
	u.busy = false
	u.mu.Unlock()
}

// drop removes u from disk and from the store.
func (s *Store) drop(u *upload) error {
	u.mu.Lock()
	u.gone = true
	var bytes int64
	for _, pm := range u.parts {
		bytes += pm.Size
	}
	u.mu.Unlock()
	s.upMu.Lock()
	delete(s.uploads, u.meta.UploadID)
	s.upMu.Unlock()
	// Remove the commit point first so a crash midway leaves no upload.
	err := os.Remove(filepath.Join(u.dir, uploadMetaFile))
	if err == nil || errors.Is(err, os.ErrNotExist) {
		err = os.RemoveAll(u.dir)
	}
	u.mp.addParts(-bytes)
	if err != nil {
		return fmt.Errorf("store: remove upload %s: %w", u.meta.UploadID, err)
	}
	return syncDir(filepath.Dir(u.dir))
}

// AbortUpload discards an upload and its parts.
func (s *Store) AbortUpload(ctx context.Context, bucket, key, uploadID string) error {
	u, err := s.getUpload(bucket, key, uploadID)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := u.claim(); err != nil {
		return err
	}
	return s.drop(u)
}

// CompleteUpload checks the part list, streams the parts into the final
// object (copy_file_range between files), commits it like a Put and removes
// the upload. On error the upload stays as it was, so the client can retry.
func (s *Store) CompleteUpload(ctx context.Context, bucket, key, uploadID string, parts []object.CompletePart) (object.Info, error) {
	return s.CompleteUploadWith(ctx, bucket, key, uploadID, parts, CompleteOptions{})
}

// CompleteOptions shape a multipart completion.
type CompleteOptions struct {
	// BeforeCommit, if set, is called once the object is assembled, with
	// a reader of its bytes, and before it is committed (made visible).
	// An error fails the completion and keeps the upload, which the
	// client may complete again. As with PutOptions.BeforeCommit, it may
	// set the copy's BackendETag, BackendVersion and ValidatedAt: a cache
	// bucket's completion writes the object through to the backend here.
	BeforeCommit func(ctx context.Context, info *object.Info, body io.Reader) error
}

// CompleteUploadWith is CompleteUpload with options.
func (s *Store) CompleteUploadWith(ctx context.Context, bucket, key, uploadID string, parts []object.CompletePart, opts CompleteOptions) (object.Info, error) {
	u, err := s.getUpload(bucket, key, uploadID)
	if err != nil {
		return object.Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return object.Info{}, err
	}
	if err := u.claim(); err != nil {
		return object.Info{}, err
	}
	committed := false
	defer func() {
		if !committed {
			u.unclaim()
		}
	}()
	u.mu.Lock()
	have := maps.Clone(u.parts)
	u.mu.Unlock()
	if len(parts) == 0 {
		return object.Info{}, fmt.Errorf("%w: no parts given", object.ErrInvalidPart)
	}
	var total int64
	use := make([]partMeta, len(parts))
	for i, p := range parts {
		if i > 0 && p.PartNumber <= parts[i-1].PartNumber {
			return object.Info{}, fmt.Errorf("%w: part %d follows part %d", object.ErrInvalidPartOrder, p.PartNumber, parts[i-1].PartNumber)
		}
		pm, ok := have[p.PartNumber]
		if !ok {
			return object.Info{}, fmt.Errorf("%w: part %d was not uploaded", object.ErrInvalidPart, p.PartNumber)
		}
		if !strings.EqualFold(strings.Trim(p.ETag, `"`), pm.ETag) {
			return object.Info{}, fmt.Errorf("%w: part %d has ETag %s, not %s", object.ErrInvalidPart, p.PartNumber, pm.ETag, p.ETag)
		}
		use[i] = pm
		total += pm.Size
	}
	for i, pm := range use[:len(use)-1] {
		if pm.Size < object.MinPartSize {
			return object.Info{}, fmt.Errorf("%w: part %d (#%d of %d) is %d bytes, the minimum is %d", object.ErrEntityTooSmall, pm.Part, i+1, len(use), pm.Size, object.MinPartSize)
		}
	}

	// The object goes on the upload's mountpath, unless its drive failed:
	// the parts are still read from there, the object is written where
	// the key's writes go now.
	mp := u.mp
	if mp.failed.Load() {
		mp = s.mountpathFor(bucket, key)
	}
	w, err := s.newWork(ctx, mp, false)
	if err != nil {
		return object.Info{}, s.checkDrive(mp, err)
	}
	defer w.abort()
	if err := w.reserve(ctx, total); err != nil {
		return object.Info{}, err
	}
	etag, err := object.MultipartETag(parts)
	if err != nil {
		return object.Info{}, err
	}
	var crc uint32
	sizes := make([]int64, len(use))
	for i, pm := range use {
		sizes[i] = pm.Size
		if err := ctx.Err(); err != nil {
			return object.Info{}, err
		}
		if err := appendPart(w, filepath.Join(u.dir, partFileName(pm.Part)), pm.Size); err != nil {
			return object.Info{}, err
		}
		if i == 0 {
			crc = pm.CRC32C
		} else {
			crc = crc32Combine(crc, pm.CRC32C, pm.Size)
		}
	}
	now := s.now().UTC()
	info := object.Info{
		Bucket: bucket, Key: key, Size: total,
		ETag:        etag,
		Checksum:    checksumString(crc),
		ContentType: u.meta.ContentType,
		UserMeta:    maps.Clone(u.meta.UserMeta),
		Headers:     maps.Clone(u.meta.Headers),
		Parts:       object.PartRuns(sizes),
		ModTime:     now, AccessTime: now,
		Pinned: u.meta.Pinned, Dirty: u.meta.Dirty,
	}
	if opts.BeforeCommit != nil {
		ra, ok := w.f.(io.ReaderAt)
		if !ok {
			return object.Info{}, fmt.Errorf("store: work file %s cannot be read back", w.path)
		}
		got := cloneInfo(info)
		if err := opts.BeforeCommit(ctx, &got, io.NewSectionReader(ra, 0, total)); err != nil {
			return object.Info{}, err
		}
		takeBackendFields(&info, got)
	}
	if err := s.commit(ctx, w, info, nil); err != nil {
		return object.Info{}, s.checkDrive(mp, err)
	}
	committed = true
	if err := s.drop(u); err != nil {
		s.log.Warn("store: completed upload not removed", "upload", uploadID, "err", err)
	}
	return cloneInfo(info), nil
}

// appendPart copies one part file to the end of w; between two files the
// kernel does the copy (copy_file_range).
func appendPart(w *work, path string, size int64) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("store: open part: %w", err)
	}
	defer f.Close()
	n, err := io.Copy(w.f, f)
	if err != nil {
		if isNoSpace(err) {
			return noSpace(w.mp, err)
		}
		return fmt.Errorf("store: copy part: %w", err)
	}
	if n != size {
		return fmt.Errorf("store: part %s has %d bytes, expected %d", path, n, size)
	}
	return nil
}

// recoverUploads rebuilds the uploads of mp and removes incomplete ones.
func (s *Store) recoverUploads(mp *mountpath) error {
	buckets, err := os.ReadDir(mp.mpuDir)
	if err != nil {
		return fmt.Errorf("store: recover uploads on %s: %w", mp.path, err)
	}
	for _, bd := range buckets {
		bdir := filepath.Join(mp.mpuDir, bd.Name())
		if !bd.IsDir() || object.ValidateBucketName(bd.Name()) != nil {
			os.RemoveAll(bdir)
			continue
		}
		ups, err := os.ReadDir(bdir)
		if err != nil {
			return fmt.Errorf("store: recover uploads on %s: %w", mp.path, err)
		}
		for _, ud := range ups {
			dir := filepath.Join(bdir, ud.Name())
			u, err := s.loadUpload(mp, bd.Name(), dir, ud)
			if err != nil {
				s.log.Warn("store: removing incomplete upload", "path", dir, "reason", err)
				os.RemoveAll(dir)
				continue
			}
			s.uploads[u.meta.UploadID] = u
		}
	}
	return nil
}

func (s *Store) loadUpload(mp *mountpath, bucket, dir string, d os.DirEntry) (*upload, error) {
	if !d.IsDir() || !validUploadID(d.Name()) {
		return nil, fmt.Errorf("not an upload directory")
	}
	b, err := os.ReadFile(filepath.Join(dir, uploadMetaFile))
	if err != nil {
		return nil, err
	}
	var meta uploadMeta
	if err := json.Unmarshal(b, &meta); err != nil {
		return nil, err
	}
	if meta.V != metaFormat || meta.Bucket != bucket || meta.UploadID != d.Name() || object.ValidateKey(meta.Key) != nil {
		return nil, fmt.Errorf("bad %s", uploadMetaFile)
	}
	u := &upload{meta: meta, mp: mp, dir: dir, parts: map[int]partMeta{}}
	files, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		if f.Name() == uploadMetaFile {
			continue
		}
		p := filepath.Join(dir, f.Name())
		pm, err := readPart(p)
		if err != nil || f.Name() != partFileName(pm.Part) {
			s.log.Warn("store: removing stray upload file", "path", p)
			os.RemoveAll(p)
			continue
		}
		u.parts[pm.Part] = pm
		mp.partBytes += pm.Size
	}
	return u, nil
}

func readPart(path string) (partMeta, error) {
	var pm partMeta
	b, err := getXattr(path, xattrPart)
	if err != nil {
		return pm, err
	}
	if err := json.Unmarshal(b, &pm); err != nil {
		return pm, err
	}
	if pm.V != metaFormat || pm.Part < 1 || pm.Part > object.MaxPartNumber {
		return pm, fmt.Errorf("bad part metadata")
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return pm, err
	}
	if st.Size != pm.Size {
		return pm, fmt.Errorf("part has %d bytes, metadata says %d", st.Size, pm.Size)
	}
	return pm, nil
}

// DeleteBucket removes the (empty) directories of bucket on every
// mountpath; object.ErrBucketNotEmpty if it holds objects or uploads.
func (s *Store) DeleteBucket(ctx context.Context, bucket string) error {
	if err := object.ValidateBucketName(bucket); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if bi := s.bucket(bucket, false); bi != nil && bi.len() > 0 {
		return fmt.Errorf("%w: %s holds %d objects", object.ErrBucketNotEmpty, bucket, bi.len())
	}
	s.upMu.Lock()
	for _, u := range s.uploads {
		if u.meta.Bucket == bucket {
			s.upMu.Unlock()
			return fmt.Errorf("%w: %s has multipart uploads in progress", object.ErrBucketNotEmpty, bucket)
		}
	}
	s.upMu.Unlock()
	s.mu.Lock()
	if bi := s.buckets[bucket]; bi != nil && bi.len() == 0 {
		delete(s.buckets, bucket)
	}
	s.mu.Unlock()
	for _, mp := range s.mps {
		for _, d := range []string{filepath.Join(mp.objDir, bucket), filepath.Join(mp.mpuDir, bucket)} {
			err := removeEmptyTree(d)
			mp.dirs.forget(d)
			if err != nil {
				return fmt.Errorf("store: delete bucket %s: %w", bucket, err)
			}
		}
	}
	return nil
}

// PurgeBucket removes the objects (modified before before) and uploads
// (started before it) of bucket, then its directories if empty: what a
// bucket deleted from the cluster at about that time left on this node (a
// PUT that committed while the bucket was being deleted). What a bucket
// of the same name created since holds stays.
func (s *Store) PurgeBucket(ctx context.Context, bucket string, before time.Time) error {
	var old []object.Info
	err := s.Walk(ctx, bucket, func(i object.Info) error {
		if i.ModTime.Before(before) {
			old = append(old, i)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, i := range old {
		if err := s.DeleteVersion(ctx, bucket, i.Key, i); err != nil && !errors.Is(err, object.ErrNotFound) && !errors.Is(err, ErrChanged) {
			return err
		}
	}
	ups, err := s.ListUploads(ctx, bucket, "")
	if err != nil {
		return err
	}
	for _, u := range ups {
		if !u.Initiated.Before(before) {
			continue
		}
		if err := s.AbortUpload(ctx, bucket, u.Key, u.UploadID); err != nil && !errors.Is(err, object.ErrUploadNotFound) {
			return err
		}
	}
	if err := s.DeleteBucket(ctx, bucket); err != nil && !errors.Is(err, object.ErrBucketNotEmpty) {
		return err
	}
	return nil
}

// removeEmptyTree removes dir if it holds only (empty) directories.
func removeEmptyTree(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.IsDir() {
			return nil // a concurrent PUT: leave it
		}
		if err := removeEmptyTree(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ENOTEMPTY) {
		return err
	}
	return nil
}
