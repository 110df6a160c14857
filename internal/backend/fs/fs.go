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
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/slipstream-io/slipstream/internal/backend"
	"github.com/slipstream-io/slipstream/internal/object"
)

// reserved is the top-level directory that holds sidecars and temp files.
const reserved = ".slipstream"

// Backend is a directory used as a backend.
type Backend struct {
	root   string
	prefix string
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
	root, err := filepath.Abs(spec.Path)
	if err != nil {
		return nil, fmt.Errorf("fs backend: %w", err)
	}
	for _, d := range []string{root, filepath.Join(root, reserved, "tmp"), filepath.Join(root, reserved, "meta")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("fs backend: %w", err)
		}
	}
	return &Backend{root: root, prefix: spec.Prefix}, nil
}

func (b *Backend) String() string { return "fs://" + filepath.Join(b.root, b.prefix) }

type sidecar struct {
	ETag        string            `json:"etag"`
	Size        int64             `json:"size"`
	MTime       int64             `json:"mtime"` // unix ns of the data file when written
	ContentType string            `json:"contentType,omitempty"`
	UserMeta    map[string]string `json:"userMeta,omitempty"`
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

func (b *Backend) metaPath(rel string) string {
	return filepath.Join(b.root, reserved, "meta", rel+".json")
}

func (b *Backend) attrs(key, rel string, fi os.FileInfo) backend.Attrs {
	a := backend.Attrs{Key: key, Size: fi.Size(), ModTime: fi.ModTime()}
	if data, err := os.ReadFile(b.metaPath(rel)); err == nil {
		var sc sidecar
		if json.Unmarshal(data, &sc) == nil && sc.Size == fi.Size() && sc.MTime == fi.ModTime().UnixNano() {
			a.ETag, a.ContentType, a.UserMeta = sc.ETag, sc.ContentType, sc.UserMeta
			return a
		}
	}
	a.ETag = fmt.Sprintf("%x-%x", fi.ModTime().UnixNano(), fi.Size())
	return a
}

func notFound(err error, key string) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return fmt.Errorf("%w: %s", backend.ErrNotFound, key)
	}
	return fmt.Errorf("fs backend: %w", err)
}

// Stat implements backend.Backend.
func (b *Backend) Stat(ctx context.Context, key string) (backend.Attrs, error) {
	rel, err := b.name(key)
	if err != nil {
		return backend.Attrs{}, err
	}
	fi, err := os.Stat(filepath.Join(b.root, rel))
	if err != nil {
		return backend.Attrs{}, notFound(err, key)
	}
	if !fi.Mode().IsRegular() {
		return backend.Attrs{}, fmt.Errorf("%w: %s", backend.ErrNotFound, key)
	}
	return b.attrs(key, rel, fi), nil
}

type rangeFile struct {
	io.Reader
	f *os.File
}

func (r *rangeFile) Close() error { return r.f.Close() }

// Get implements backend.Backend.
func (b *Backend) Get(ctx context.Context, key string, rng *object.Range) (io.ReadCloser, backend.Attrs, error) {
	rel, err := b.name(key)
	if err != nil {
		return nil, backend.Attrs{}, err
	}
	f, err := os.Open(filepath.Join(b.root, rel))
	if err != nil {
		return nil, backend.Attrs{}, notFound(err, key)
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = fmt.Errorf("%w: %s", backend.ErrNotFound, key)
		}
		return nil, backend.Attrs{}, err
	}
	a := b.attrs(key, rel, fi)
	off, n := int64(0), fi.Size()
	if rng != nil {
		if off, n, err = rng.Resolve(fi.Size()); err != nil {
			f.Close()
			return nil, backend.Attrs{}, fmt.Errorf("%w: %s", backend.ErrInvalidRange, key)
		}
	}
	return &rangeFile{Reader: io.NewSectionReader(f, off, n), f: f}, a, nil
}

// Put implements backend.Backend: temp file, fsync, rename, fsync directory.
func (b *Backend) Put(ctx context.Context, key string, r io.Reader, size int64, pa backend.PutAttrs) (backend.Attrs, error) {
	rel, err := b.name(key)
	if err != nil {
		return backend.Attrs{}, err
	}
	dst := filepath.Join(b.root, rel)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return backend.Attrs{}, fmt.Errorf("fs backend: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Join(b.root, reserved, "tmp"), "put-*")
	if err != nil {
		return backend.Attrs{}, fmt.Errorf("fs backend: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	h := md5.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), ctxReader{ctx, r})
	if err != nil {
		return backend.Attrs{}, fmt.Errorf("fs backend: put %s: %w", key, err)
	}
	if size >= 0 && n != size {
		if n < size {
			return backend.Attrs{}, fmt.Errorf("fs backend: put %s: %w", key, object.ErrIncompleteBody)
		}
		return backend.Attrs{}, fmt.Errorf("fs backend: put %s: %w", key, object.ErrTooLarge)
	}
	if err := tmp.Sync(); err != nil {
		return backend.Attrs{}, fmt.Errorf("fs backend: %w", err)
	}
	fi, err := tmp.Stat()
	if err != nil {
		return backend.Attrs{}, fmt.Errorf("fs backend: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return backend.Attrs{}, fmt.Errorf("fs backend: %w", err)
	}
	sc := sidecar{ETag: hex.EncodeToString(h.Sum(nil)), Size: n, MTime: fi.ModTime().UnixNano(), ContentType: pa.ContentType, UserMeta: pa.UserMeta}
	if err := writeSidecar(b.metaPath(rel), sc); err != nil {
		return backend.Attrs{}, err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return backend.Attrs{}, fmt.Errorf("fs backend: %w", err)
	}
	ok = true
	syncDir(filepath.Dir(dst))
	return backend.Attrs{Key: key, Size: n, ETag: sc.ETag, ModTime: fi.ModTime(), ContentType: pa.ContentType, UserMeta: pa.UserMeta}, nil
}

func writeSidecar(path string, sc sidecar) error {
	data, err := json.Marshal(sc)
	if err != nil {
		return fmt.Errorf("fs backend: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("fs backend: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("fs backend: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("fs backend: %w", err)
	}
	return nil
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
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
	p := filepath.Join(b.root, rel)
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
		return fmt.Errorf("fs backend: %w", err)
	}
	_ = os.Remove(b.metaPath(rel))
	for d := filepath.Dir(p); d != b.root && strings.HasPrefix(d, b.root); d = filepath.Dir(d) {
		if os.Remove(d) != nil {
			break
		}
	}
	return nil
}

// List implements backend.Backend. It walks the deepest directory the prefix
// names, so a page costs a walk of that subtree.
func (b *Backend) List(ctx context.Context, opts backend.ListOptions) (backend.ListPage, error) {
	limit := opts.Limit
	if limit <= 0 {
		limit = 1000
	}
	full := b.prefix + opts.Prefix
	base := b.root
	if i := strings.LastIndex(full, "/"); i >= 0 {
		base = filepath.Join(b.root, filepath.FromSlash(full[:i]))
	}
	var keys []string
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, _ := filepath.Rel(b.root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == reserved {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !strings.HasPrefix(rel, full) {
			return nil
		}
		keys = append(keys, strings.TrimPrefix(rel, b.prefix))
		return nil
	})
	if err != nil {
		return backend.ListPage{}, fmt.Errorf("fs backend: list: %w", err)
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
		fi, err := os.Stat(filepath.Join(b.root, rel))
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
