// Package fs is a backend over a directory, such as an NFS mount: every key
// is a plain file under the directory (key "a/b/c" is the file DIR/a/b/c), so
// other tools can read and write the same data. Content type, user metadata
// and the MD5 ETag of objects written through the backend live in sidecar
// files under DIR/.slipstream; a file written by another tool gets an ETag
// derived from its size and modification time.
package fs

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/slipstream-io/slipstream/internal/backend"
	"github.com/slipstream-io/slipstream/internal/keylock"
	"github.com/slipstream-io/slipstream/internal/object"
)

// reserved is the top-level directory that holds sidecars and temp files.
const reserved = ".slipstream"

// Backend is a directory used as a backend. Every file access goes through
// an os.Root, so no key, listing prefix or symlink reaches outside the
// directory.
type Backend struct {
	dir     string   // absolute path of the directory
	root    *os.Root // the directory
	prefix  string
	escapes error       // os.Root's error for a name that leads out of the directory
	keys    keylock.Set // serialises the commits of Puts and Deletes of one key
	g       *guard      // bounds the wait for a file system that stopped answering

	beforeCommit func(key string) // tests: runs in a Put's commit call, before its fsync
}

var _ backend.Backend = (*Backend)(nil)

// New opens (and creates if missing) the directory spec.Path.
func New(spec backend.Spec) (*Backend, error) {
	if spec.Kind == "" {
		spec.Kind = "fs"
	}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(spec.Path)
	if err != nil {
		return nil, fmt.Errorf("fs backend: %w", err)
	}
	for _, d := range []string{dir, filepath.Join(dir, reserved, "tmp"), filepath.Join(dir, reserved, "etags")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("fs backend: %w", err)
		}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("fs backend: %w", err)
	}
	// os.Root does not export the error it returns for a name that leaves
	// the root (through ".." or a symlink); take it from a name that does.
	_, probe := root.Lstat("..")
	return &Backend{dir: dir, root: root, prefix: spec.Prefix, escapes: errors.Unwrap(probe), g: newGuard()}, nil
}

func (b *Backend) String() string { return "fs://" + filepath.Join(b.dir, b.prefix) }

type sidecar struct {
	Key         string            `json:"key,omitempty"` // the path it describes, relative to the directory
	ETag        string            `json:"etag"`
	Size        int64             `json:"size"`
	MTime       int64             `json:"mtime"` // unix ns of the data file when written
	ContentType string            `json:"contentType,omitempty"`
	UserMeta    map[string]string `json:"userMeta,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
}

// name maps a key to its path relative to root, rejecting keys the
// filesystem layout cannot hold.
func (b *Backend) name(key string) (string, error) {
	full := b.prefix + key
	if err := object.ValidateKey(full); err != nil {
		return "", err
	}
	if strings.HasSuffix(full, "/") {
		return "", fmt.Errorf("%w: the fs backend cannot store folder markers (%q)", object.ErrInvalidKey, key)
	}
	if full == reserved || strings.HasPrefix(full, reserved+"/") {
		return "", fmt.Errorf("%w: %q is reserved by the fs backend", object.ErrInvalidKey, reserved)
	}
	return filepath.FromSlash(full), nil
}

// metaName is the path of rel's sidecar, relative to root: named by the
// SHA-256 of rel, so that no two keys share one and none is too long for
// the filesystem (a key's path may have components up to its name limit),
// spread over 256 directories.
func metaName(rel string) string {
	sum := sha256.Sum256([]byte(filepath.ToSlash(rel)))
	h := hex.EncodeToString(sum[:])
	return filepath.Join(reserved, "etags", h[:2], h+".json")
}

// legacyMetaName is where sidecars were kept before: a tree mirroring the
// keys, in which the sidecar of a (meta/a.json) and the directory of
// a.json/b's sidecar were one path, and a component near the name limit
// had no room for the suffix. Sidecars there are still read, and removed
// when their key is written or deleted.
func legacyMetaName(rel string) string {
	return filepath.Join(reserved, "meta", rel+".json")
}

func (b *Backend) attrs(key, rel string, fi os.FileInfo) backend.Attrs {
	a := backend.Attrs{Key: key, Size: fi.Size(), ModTime: fi.ModTime()}
	for _, name := range []string{metaName(rel), legacyMetaName(rel)} {
		data, err := b.root.ReadFile(name)
		if err != nil {
			continue
		}
		var sc sidecar
		if json.Unmarshal(data, &sc) == nil && sc.Size == fi.Size() && sc.MTime == fi.ModTime().UnixNano() &&
			(sc.Key == "" || sc.Key == filepath.ToSlash(rel)) {
			a.ETag, a.ContentType, a.UserMeta, a.Headers = sc.ETag, sc.ContentType, sc.UserMeta, sc.Headers
			return a
		}
	}
	a.ETag = fmt.Sprintf("%x-%x", fi.ModTime().UnixNano(), fi.Size())
	return a
}

// removeMeta removes rel's sidecars, in both layouts.
func (b *Backend) removeMeta(rel string) error {
	for _, name := range []string{metaName(rel), legacyMetaName(rel)} {
		if err := b.root.Remove(name); err != nil && !b.missing(err) && !errors.Is(err, syscall.ENAMETOOLONG) {
			return failed(err)
		}
	}
	return nil
}

// missing reports whether err says that a path is not in the directory: it
// does not exist, a component is not a directory, or it leads outside the
// directory (through a symlink).
func (b *Backend) missing(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) ||
		(b.escapes != nil && errors.Is(err, b.escapes))
}

// failed wraps an I/O error of the directory as a backend failure:
// object.ErrBackendDenied when permission is denied, else object.ErrBackend.
func failed(err error) error {
	if errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("fs backend: %w: %w", object.ErrBackendDenied, err)
	}
	return fmt.Errorf("fs backend: %w: %w", object.ErrBackend, err)
}

func (b *Backend) notFound(err error, key string) error {
	switch {
	case b.missing(err):
		return fmt.Errorf("%w: %s", backend.ErrNotFound, key)
	case passed(err):
		return err
	}
	return failed(err)
}

// passed reports whether err needs no wrapping: it is a backend failure
// already, or its caller's context ended.
func passed(err error) bool {
	return errors.Is(err, object.ErrBackend) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// Stat implements backend.Backend.
func (b *Backend) Stat(ctx context.Context, key string) (backend.Attrs, error) {
	rel, err := b.name(key)
	if err != nil {
		return backend.Attrs{}, err
	}
	fi, err := call(ctx, b.g, "stat "+key, func() (os.FileInfo, error) { return b.root.Stat(rel) }, nil)
	if err != nil {
		return backend.Attrs{}, b.notFound(err, key)
	}
	if !fi.Mode().IsRegular() {
		return backend.Attrs{}, fmt.Errorf("%w: %s", backend.ErrNotFound, key)
	}
	return b.attrs(key, rel, fi), nil
}

type rangeFile struct {
	io.Reader
	f *os.File
	g *guard
}

// Close closes the file through the guard (closing a file on NFS flushes
// and can block), whatever became of the reader's context.
func (r *rangeFile) Close() error {
	return r.g.do(context.Background(), "close", r.f.Close)
}

// guardedFile reads a file through the guard.
type guardedFile struct {
	ctx context.Context
	g   *guard
	op  string
	f   *os.File
}

func (gf guardedFile) ReadAt(p []byte, off int64) (int, error) {
	return gf.g.readAt(gf.ctx, gf.op, gf.f, p, off)
}

// Get implements backend.Backend.
func (b *Backend) Get(ctx context.Context, key string, rng *object.Range) (io.ReadCloser, backend.Attrs, error) {
	rel, err := b.name(key)
	if err != nil {
		return nil, backend.Attrs{}, err
	}
	type opened struct {
		f  *os.File
		fi os.FileInfo
	}
	o, err := call(ctx, b.g, "open "+key, func() (opened, error) {
		f, err := b.root.Open(rel)
		if err != nil {
			return opened{}, err
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return opened{}, failed(err)
		}
		return opened{f, fi}, nil
	}, func(o opened) { o.f.Close() })
	if err != nil {
		return nil, backend.Attrs{}, b.notFound(err, key)
	}
	f, fi := o.f, o.fi
	if !fi.Mode().IsRegular() {
		_ = b.g.do(context.Background(), "close "+key, f.Close)
		return nil, backend.Attrs{}, fmt.Errorf("%w: %s", backend.ErrNotFound, key)
	}
	a := b.attrs(key, rel, fi)
	off, n := int64(0), fi.Size()
	if rng != nil {
		if off, n, err = rng.Resolve(fi.Size()); err != nil {
			_ = b.g.do(context.Background(), "close "+key, f.Close)
			return nil, backend.Attrs{}, fmt.Errorf("%w: %s", backend.ErrInvalidRange, key)
		}
	}
	return &rangeFile{Reader: io.NewSectionReader(guardedFile{ctx, b.g, "read " + key, f}, off, n), f: f, g: b.g}, a, nil
}

// Put implements backend.Backend: temp file, fsync, rename, fsync directory.
func (b *Backend) Put(ctx context.Context, key string, r io.Reader, size int64, pa backend.PutAttrs) (backend.Attrs, error) {
	rel, err := b.name(key)
	if err != nil {
		return backend.Attrs{}, err
	}
	type temp struct {
		f   *os.File
		rel string
	}
	tf, err := call(ctx, b.g, "create "+key, func() (temp, error) {
		if err := b.mkdirParent(key, rel); err != nil {
			return temp{}, err
		}
		tmp, tmpRel, err := b.createTemp("put-")
		return temp{tmp, tmpRel}, err
	}, func(t temp) { t.f.Close(); b.root.Remove(t.rel) })
	if err != nil {
		return backend.Attrs{}, err
	}
	tmp, tmpRel := tf.f, tf.rel
	ok := false
	defer func() {
		if !ok {
			_ = b.g.do(context.Background(), "remove "+key, func() error {
				tmp.Close()
				return b.root.Remove(tmpRel)
			})
		}
	}()
	h := md5.New()
	buf := make([]byte, maxIO)
	n, err := io.CopyBuffer(io.MultiWriter(guardedWriter{ctx, b.g, "write " + key, tmp}, h), ctxReader{ctx, r}, buf)
	if err != nil {
		if passed(err) {
			return backend.Attrs{}, err
		}
		return backend.Attrs{}, fmt.Errorf("fs backend: put %s: %w", key, err)
	}
	if size >= 0 && n != size {
		if n < size {
			return backend.Attrs{}, fmt.Errorf("fs backend: put %s: %w", key, object.ErrIncompleteBody)
		}
		return backend.Attrs{}, fmt.Errorf("fs backend: put %s: %w", key, object.ErrTooLarge)
	}
	etag := hex.EncodeToString(h.Sum(nil))
	// gaveUp is set once this Put has returned without waiting for its
	// commit (a stalled file system, or its context ended): the commit must
	// then not land, since the caller may have written the key again since
	// (a destager that moved on to the next write of the key).
	var gaveUp atomic.Bool
	fi, err := call(ctx, b.g, "commit "+key, func() (os.FileInfo, error) {
		if b.beforeCommit != nil {
			b.beforeCommit(key)
		}
		if err := tmp.Sync(); err != nil {
			return nil, failed(err)
		}
		fi, err := tmp.Stat()
		if err != nil {
			return nil, failed(err)
		}
		if err := tmp.Close(); err != nil {
			return nil, failed(err)
		}
		sc := sidecar{Key: filepath.ToSlash(rel), ETag: etag, Size: n, MTime: fi.ModTime().UnixNano(), ContentType: pa.ContentType, UserMeta: pa.UserMeta, Headers: pa.Headers}
		if err := b.commit(key, rel, tmpRel, sc, &gaveUp); err != nil {
			return nil, err
		}
		return fi, nil
	}, nil)
	if err != nil {
		// An abandoned commit owns the temp file; it removes it once it
		// finds gaveUp set.
		if ok = abandoned(ctx, err); ok {
			gaveUp.Store(true)
		}
		return backend.Attrs{}, err
	}
	ok = true
	return backend.Attrs{Key: key, Size: n, ETag: etag, ModTime: fi.ModTime(), ContentType: pa.ContentType, UserMeta: pa.UserMeta, Headers: pa.Headers}, nil
}

// mkdirParent creates the directories above rel. A key whose parent leads
// out of the directory (through a symlink) is object.ErrInvalidKey.
func (b *Backend) mkdirParent(key, rel string) error {
	err := b.root.MkdirAll(filepath.Dir(rel), 0o755)
	if b.escapes != nil && errors.Is(err, b.escapes) {
		return fmt.Errorf("%w: %q leads out of the fs backend's directory", object.ErrInvalidKey, key)
	}
	if err != nil {
		return failed(err)
	}
	return nil
}

// createTemp creates a file of a unique name in the reserved temp directory
// and returns it with its path relative to root.
func (b *Backend) createTemp(prefix string) (*os.File, string, error) {
	name := filepath.Join(reserved, "tmp", prefix+rand.Text())
	f, err := b.root.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, "", failed(err)
	}
	return f, name, nil
}

// commit moves the written temp file tmpRel to rel and records its sidecar.
// It holds the key's lock, so of concurrent Puts of a key the last rename
// also writes the last sidecar. The old sidecar is removed before the rename
// and the new one written after it: a sidecar only ever describes the data
// in place, and a crash in between leaves a derived ETag, never another
// write's. A commit whose Put has given up (gaveUp set before it takes the
// lock) removes its temp file instead: a later Put of the key, which its
// caller may have made since, holds the lock after it, never before.
func (b *Backend) commit(key, rel, tmpRel string, sc sidecar, gaveUp *atomic.Bool) error {
	meta := metaName(rel)
	if err := b.root.MkdirAll(filepath.Dir(meta), 0o755); err != nil {
		return failed(err)
	}
	unlock := b.keys.Lock(rel)
	defer unlock()
	if gaveUp.Load() {
		b.root.Remove(tmpRel)
		return fmt.Errorf("fs backend: put %s: %w: given up by its caller", key, object.ErrBackend)
	}
	if err := b.removeMeta(rel); err != nil {
		return err
	}
	err := b.root.Rename(tmpRel, rel)
	if errors.Is(err, fs.ErrNotExist) {
		// A Delete of a sibling key removed the parent directory since
		// mkdirParent: make it again.
		if err := b.mkdirParent(key, rel); err != nil {
			return err
		}
		err = b.root.Rename(tmpRel, rel)
	}
	if err != nil {
		return failed(err)
	}
	b.syncDir(filepath.Dir(rel))
	return b.writeSidecar(meta, sc)
}

// writeSidecar writes the sidecar at name (relative to root, in an existing
// directory) through a temp file of its own.
func (b *Backend) writeSidecar(name string, sc sidecar) error {
	data, err := json.Marshal(sc)
	if err != nil {
		return failed(err)
	}
	tmp, tmpRel, err := b.createTemp("meta-")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = b.root.Rename(tmpRel, name)
	}
	if err != nil {
		b.root.Remove(tmpRel)
		return failed(err)
	}
	return nil
}

// syncDir fsyncs the directory dir (relative to root).
func (b *Backend) syncDir(dir string) {
	if d, err := b.root.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// Delete implements backend.Backend; empty parent directories are removed.
func (b *Backend) Delete(ctx context.Context, key string) error {
	rel, err := b.name(key)
	if err != nil {
		return err
	}
	var gaveUp atomic.Bool // as in Put: a Delete given up must not land after a later Put
	err = b.g.do(ctx, "delete "+key, func() error {
		unlock := b.keys.Lock(rel)
		defer unlock()
		if gaveUp.Load() {
			return fmt.Errorf("fs backend: delete %s: %w: given up by its caller", key, object.ErrBackend)
		}
		if err := b.root.Remove(rel); err != nil && !b.missing(err) {
			return failed(err)
		}
		_ = b.removeMeta(rel)
		for d := filepath.Dir(rel); d != "."; d = filepath.Dir(d) {
			if fi, err := b.root.Lstat(d); err != nil || !fi.IsDir() || b.root.Remove(d) != nil {
				break
			}
		}
		return nil
	})
	if err != nil && abandoned(ctx, err) {
		gaveUp.Store(true)
	}
	return err
}

// listBase returns the directory (relative to root, slash-separated) that a
// listing of the full prefix full walks: the deepest one the prefix names.
// It reports false when the prefix cannot match a key: it has a "." or ".."
// segment, or names the reserved directory.
func listBase(full string) (string, bool) {
	i := strings.LastIndex(full, "/")
	if i < 0 {
		return ".", true
	}
	for _, seg := range strings.Split(full[:i], "/") {
		if seg == "." || seg == ".." {
			return "", false
		}
	}
	base := path.Clean(full[:i])
	if !fs.ValidPath(base) || base == reserved || strings.HasPrefix(base, reserved+"/") {
		return "", false
	}
	return base, true
}

// List implements backend.Backend. It walks the deepest directory the prefix
// names, so a page costs a walk of that subtree. Symlinks are not followed
// during the walk.
func (b *Backend) List(ctx context.Context, opts backend.ListOptions) (backend.ListPage, error) {
	return call(ctx, b.g, "list "+opts.Prefix, func() (backend.ListPage, error) { return b.list(ctx, opts) }, nil)
}

func (b *Backend) list(ctx context.Context, opts backend.ListOptions) (backend.ListPage, error) {
	limit := opts.Limit
	if limit <= 0 {
		limit = 1000
	}
	full := b.prefix + opts.Prefix
	base, ok := listBase(full)
	if !ok {
		return backend.ListPage{}, nil
	}
	var keys []string
	err := fs.WalkDir(b.root.FS(), base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if b.missing(err) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() {
			if p == reserved {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !strings.HasPrefix(p, full) {
			return nil
		}
		keys = append(keys, strings.TrimPrefix(p, b.prefix))
		return nil
	})
	if err != nil {
		return backend.ListPage{}, failed(fmt.Errorf("list: %w", err))
	}
	sort.Strings(keys)
	var page backend.ListPage
	lastPrefix := ""
	for _, k := range keys {
		entry := k
		isPrefix := false
		if opts.Delimiter != "" {
			if i := strings.Index(k[len(opts.Prefix):], opts.Delimiter); i >= 0 {
				entry = k[:len(opts.Prefix)+i+len(opts.Delimiter)]
				isPrefix = true
			}
		}
		if entry <= opts.StartAfter || (isPrefix && entry == lastPrefix) {
			continue
		}
		if len(page.Objects)+len(page.CommonPrefixes) == limit {
			page.Truncated = true
			break
		}
		page.Next = entry
		if isPrefix {
			lastPrefix = entry
			page.CommonPrefixes = append(page.CommonPrefixes, entry)
			continue
		}
		rel := filepath.FromSlash(b.prefix + k)
		fi, err := b.root.Stat(rel)
		if err != nil {
			continue // removed meanwhile
		}
		page.Objects = append(page.Objects, b.attrs(k, rel, fi))
	}
	if !page.Truncated {
		page.Next = ""
	}
	return page, nil
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
