// Package store is the local object store of a Slipstream node: objects kept
// as plain files on the node's mountpaths (one directory per drive).
//
// # Layout of a mountpath
//
//	<mp>/.slipstream.lock            flock: one process per mountpath
//	<mp>/.slipstream.id              the drive's identity, made once
//	<mp>/tmp/                        work files being written (wiped at Open)
//	<mp>/obj/<bucket>/<hh>/<name>    committed objects
//	<mp>/mpu/<bucket>/<uploadID>/    a multipart upload: upload.json, part-NNNNN
//	<mp>/dead/                       records of copies a read-only drive keeps
//	<mp>/quarantine/                 what Open found under obj/ that is not an object
//
// <name> is the hex SHA-256 of the object key and <hh> its first two
// characters, so no key can name a path outside the mountpath whatever it
// contains, and names stay short (keys may be 1024 bytes, file names 255).
// The key itself lives in the metadata. A bucket/key is placed on the
// mountpath placement.Mountpath picks for placement.ObjectName(bucket, key).
//
// # Commit protocol and metadata
//
// A PUT streams the body into a work file under tmp/ through one loop that
// feeds the file, MD5 (the ETag) and CRC32C with pooled buffers. When the body
// is complete and checked (size, Content-MD5), the object's metadata
// (object.Info as JSON) is set as the user xattr "user.slipstream.info" on
// the work file, the file is fsynced, renamed over its final name and the
// directory is fsynced. The rename is the commit point: data and metadata
// become visible together, an overwrite replaces the old version atomically
// (readers that hold the old file keep reading it), and a crash leaves either
// the old or the new version, never a torn one. Metadata rewrites after
// commit (UpdateMeta: clearing Dirty after destage, persisting access times)
// replace the xattr in place; ext4 journals an xattr replacement as one
// transaction, so that too is all-or-nothing. Such a rewrite is fsynced
// unless a restart finds out again what it records (lazyMeta): a clean
// mark lost in a crash leaves a dirty copy that the tier checks against
// the backend at its next start. The filesystem must support
// user xattrs (ext4, xfs, btrfs, tmpfs >= 6.6); Open checks it. Metadata is
// limited to MaxMetaBytes because ext4 keeps xattrs in one block.
//
// Open takes the mountpath lock, removes everything under tmp/, and rebuilds
// the in-memory indexes by reading the xattr of every object file; files
// without valid metadata, with a size that disagrees with it, or with a name
// that is not the hash of their key are removed as orphans. Multipart
// upload directories without a committed upload.json are removed too.
//
// # Index
//
// Every bucket has an in-memory index (rebuilt at Open): a map from key to
// the object's Info, mountpath and access time, and the keys in order in
// blocks of at most 512 (sortedKeys), so that inserting one of millions of
// keys in random order moves a few kilobytes, not the whole key list. List
// seeks it with binary search, so a page costs O(log n + page) whatever the
// bucket holds, and skipping a common prefix is one more seek; walking the
// hashed directories could not return keys in order at all, and reading
// every xattr per listing would cost a syscall per object.
//
// # Space
//
// Each mountpath has an eviction policy (package evict, "lru" or "s3fifo")
// fed with its clean objects; dirty objects (not yet destaged) are never
// handed to it and so are never evicted. Access times are kept in memory and
// written back to the xattrs lazily (every few minutes and at Close,
// without fsync). A background
// loop evicts a mountpath from the high to the low watermark; a PUT that
// does not fit (MaxBytes, or ENOSPC from the filesystem) first evicts what it
// needs on its own mountpath and fails with object.ErrNoSpace only if that
// is not enough. Other mountpaths are unaffected. With Config.MaxBytes set,
// watermarks and Mountpaths use that model instead of the filesystem:
// capacity = MaxBytes, used = bytes of objects, multipart parts and writes
// in progress on the mountpath.
//
// A Store is safe for concurrent use; Close it once no call is in flight.
package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"golang.org/x/sys/unix"

	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/placement"
	"github.com/slipstream-io/slipstream/internal/store/evict"
)

// Errors of the store beyond the shared ones of package object.
var (
	ErrConfig       = errors.New("store: invalid config")
	ErrClosed       = errors.New("store: closed")
	ErrDirty        = errors.New("store: object is dirty (not yet destaged) and cannot be evicted")
	ErrPinned       = errors.New("store: object is a local bucket's only copy and cannot be evicted")
	ErrChanged      = errors.New("store: object changed since it was read")
	ErrMetaTooLarge = errors.New("store: object metadata too large")
	ErrBusy         = errors.New("store: mountpath in use by another process")
	ErrNoXattr      = errors.New("store: filesystem does not support user xattrs")
)

// MaxMetaBytes bounds the encoded metadata of one object (it is stored in
// an xattr, and ext4 keeps all xattrs of a file in one 4 KiB block).
const MaxMetaBytes = 3900

// Config configures a Store.
type Config struct {
	Mountpaths    []string // one directory per drive; created if missing; at least one
	HighWatermark float64  // percent of a mountpath's filesystem in use at which eviction starts (default 90)
	LowWatermark  float64  // eviction stops below this (default 80)
	Policy        string   // eviction policy: "lru" or "s3fifo" (default "s3fifo")
	MaxBytes      int64    // optional cap on bytes stored per mountpath (0 = filesystem capacity); lets tests and demos model a small cache

	workDirs int // directories work files are spread over (default defaultWorkDirs); see workdirs.go
}

func (c Config) withDefaults() Config {
	if c.HighWatermark == 0 {
		c.HighWatermark = 90
	}
	if c.LowWatermark == 0 {
		c.LowWatermark = 80
	}
	if c.Policy == "" {
		c.Policy = "s3fifo"
	}
	if c.workDirs == 0 {
		c.workDirs = defaultWorkDirs
	}
	c.Mountpaths = append([]string(nil), c.Mountpaths...)
	return c
}

func (c Config) validate() error {
	if len(c.Mountpaths) == 0 {
		return fmt.Errorf("%w: Mountpaths: at least one mountpath is needed", ErrConfig)
	}
	seen := map[string]bool{}
	for i, m := range c.Mountpaths {
		if m == "" {
			return fmt.Errorf("%w: Mountpaths[%d] is empty", ErrConfig, i)
		}
		abs, err := filepath.Abs(m)
		if err != nil {
			return fmt.Errorf("%w: Mountpaths[%d]: %v", ErrConfig, i, err)
		}
		if seen[abs] {
			return fmt.Errorf("%w: Mountpaths[%d]: %q is listed twice", ErrConfig, i, m)
		}
		seen[abs] = true
	}
	if c.LowWatermark <= 0 || c.HighWatermark > 100 || c.LowWatermark >= c.HighWatermark {
		return fmt.Errorf("%w: watermarks: need 0 < LowWatermark (%g) < HighWatermark (%g) <= 100", ErrConfig, c.LowWatermark, c.HighWatermark)
	}
	if _, err := evict.New(c.Policy); err != nil {
		return fmt.Errorf("%w: Policy: %w", ErrConfig, err)
	}
	if c.MaxBytes < 0 {
		return fmt.Errorf("%w: MaxBytes is negative (%d)", ErrConfig, c.MaxBytes)
	}
	return nil
}

// workFile is what a PUT writes into; *os.File in production, a
// fault-injecting wrapper in tests.
type workFile interface {
	io.Writer
	Sync() error
	Close() error
	Name() string
	Fd() uintptr
}

var _ workFile = (*os.File)(nil)

const (
	numKeyLocks = 1024
	bufSize     = 256 << 10
)

// Store is the local object store over a node's mountpaths. It is safe for
// concurrent use.
type Store struct {
	cfg   Config
	log   *slog.Logger
	mps   []*mountpath
	paths []string // as configured: the HRW identities of the mountpaths
	// failed counts mountpaths whose drive failed (mountpath.failed).
	failed atomic.Int32

	keyLocks [numKeyLocks]sync.RWMutex

	mu      sync.RWMutex
	buckets map[string]*bucketIndex

	upMu    sync.Mutex
	uploads map[string]*upload

	bufs sync.Pool

	// createWork opens a new work file in dir; replaced by fault-injecting
	// tests.
	createWork func(dir string, direct bool) (workFile, error)
	now        func() time.Time

	kick      chan struct{}
	stop      chan struct{}
	bgDone    chan struct{}
	closeOnce sync.Once
	closed    chan struct{}
}

// Open opens (creating if needed) the mountpaths of cfg, recovers them and
// rebuilds the indexes.
func Open(ctx context.Context, cfg Config, log *slog.Logger) (*Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{
		cfg:     cfg,
		log:     log,
		paths:   cfg.Mountpaths,
		buckets: make(map[string]*bucketIndex),
		uploads: make(map[string]*upload),
		now:     time.Now,
		kick:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		bgDone:  make(chan struct{}),
		closed:  make(chan struct{}),
	}
	s.bufs.New = func() any { b := make([]byte, bufSize); return &b }
	s.createWork = createWorkFile
	for i, p := range cfg.Mountpaths {
		mp, err := openMountpath(i, p, cfg.Policy, cfg.workDirs)
		if err != nil {
			s.closeMountpaths()
			return nil, err
		}
		s.mps = append(s.mps, mp)
		if mp.failed.Load() {
			s.failed.Add(1)
			log.Error("store: mountpath is read-only (a failed drive?); it takes no new writes", "mountpath", p)
		}
	}
	if err := s.recover(ctx); err != nil {
		s.closeMountpaths()
		return nil, err
	}
	go s.background()
	return s, nil
}

// Close stops background work, writes access times back lazily and
// releases the mountpaths.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.closed)
		close(s.stop)
		<-s.bgDone
		s.flushAccessTimes()
		s.closeMountpaths()
	})
	return nil
}

func (s *Store) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

func (s *Store) closeMountpaths() {
	for _, mp := range s.mps {
		mp.close()
	}
}

// mountpath is one drive of the store.
type mountpath struct {
	idx                    int
	failed                 atomic.Bool // its drive failed: no new writes
	path                   string      // as configured
	root                   string
	id                     string // its drive's identity ("" on an old read-only drive)
	tmpDir, objDir, mpuDir string
	workDirs               []string      // under tmpDir, where work files are created in turn
	nextWork               atomic.Uint32 // the next work directory
	lock                   *os.File
	dirs                   *durableDirs // the directories known durable

	polMu sync.Mutex
	pol   evict.Policy

	evictMu sync.Mutex

	spaceMu   sync.Mutex
	objBytes  int64
	objCount  int64
	partBytes int64
	reserved  int64
}

func openMountpath(idx int, path, policy string, workDirs int) (*mountpath, error) {
	root := filepath.Clean(path)
	mp := &mountpath{
		idx: idx, path: path, root: root,
		tmpDir: filepath.Join(root, "tmp"),
		objDir: filepath.Join(root, "obj"),
		mpuDir: filepath.Join(root, "mpu"),
		dirs:   newDurableDirs(),
	}
	mp.workDirs = workDirNames(mp.tmpDir, workDirs)
	pol, err := evict.New(policy)
	if err != nil {
		return nil, err
	}
	mp.pol = pol
	for _, d := range []string{root, mp.tmpDir, mp.objDir, mp.mpuDir} {
		// Made durably: committed objects are fsynced only up to obj/.
		if _, err := os.Stat(d); err == nil {
			continue
		}
		if err := mp.dirs.mkdir(d, "/"); err != nil {
			return nil, fmt.Errorf("store: mountpath %s: %w", path, err)
		}
	}
	lf, err := os.OpenFile(filepath.Join(root, ".slipstream.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if errors.Is(err, unix.EROFS) {
		// A drive that failed earlier and was remounted read-only: its
		// objects are still served, nothing new goes there.
		lf, err = os.Open(filepath.Join(root, ".slipstream.lock"))
		mp.failed.Store(true)
	}
	if err != nil {
		return nil, fmt.Errorf("store: mountpath %s: %w", path, err)
	}
	if err := unix.Flock(int(lf.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lf.Close()
		return nil, fmt.Errorf("%w: %s: %v", ErrBusy, path, err)
	}
	mp.lock = lf
	if mp.id, err = driveIdentity(root, mp.failed.Load()); err != nil {
		mp.close()
		return nil, fmt.Errorf("store: mountpath %s: %w", path, err)
	}
	if mp.failed.Load() {
		return mp, nil
	}
	// A crash while the identity file was first written leaves its temp
	// file (writeFileAtomic) at the root; nothing else names it.
	if left, err := filepath.Glob(filepath.Join(root, ".tmp-*")); err == nil {
		for _, f := range left {
			os.Remove(f)
		}
	}
	if err := probeXattr(mp.tmpDir); err != nil {
		mp.close()
		return nil, fmt.Errorf("%w: %s: %v", ErrNoXattr, path, err)
	}
	if err := makeWorkDirs(mp.tmpDir, mp.workDirs); err != nil {
		mp.close()
		return nil, fmt.Errorf("store: mountpath %s: %w", path, err)
	}
	return mp, nil
}

// idFile names the identity of the drive a mountpath is on. Records about
// a drive's files (dead copies) name it by identity, not by path: while a
// drive is unmounted its path is an empty directory of another file system,
// which must not be taken for the drive.
const idFile = ".slipstream.id"

type driveID struct {
	ID string `json:"id"`
}

// driveIdentity reads the identity of the drive at root, making one if it
// has none and is writable.
func driveIdentity(root string, readOnly bool) (string, error) {
	p := filepath.Join(root, idFile)
	b, err := os.ReadFile(p)
	if err == nil {
		var d driveID
		if err := json.Unmarshal(b, &d); err != nil || d.ID == "" {
			return "", fmt.Errorf("%w: bad drive identity %s", ErrCorrupt, p)
		}
		return d.ID, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	if readOnly {
		return "", nil
	}
	id := rand.Text()
	return id, writeFileAtomic(p, driveID{ID: id})
}

func probeXattr(dir string) error {
	f, err := os.CreateTemp(dir, "probe-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	return unix.Fsetxattr(int(f.Fd()), xattrInfo, []byte("{}"), 0)
}

func (mp *mountpath) close() {
	if mp.lock != nil {
		_ = unix.Flock(int(mp.lock.Fd()), unix.LOCK_UN)
		mp.lock.Close()
		mp.lock = nil
	}
}

// objectName is the on-disk file name of key: its hex SHA-256.
func objectName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// objectPath returns the directory and file of bucket/key on mp. bucket must
// be valid (object.ValidateBucketName).
func (mp *mountpath) objectPath(bucket, key string) (dir, file string) {
	n := objectName(key)
	dir = filepath.Join(mp.objDir, bucket, n[:2])
	return dir, filepath.Join(dir, n)
}

// mountpathFor is the mountpath new writes of bucket/key go to: the HRW
// one, or, when drives have failed, the highest-scoring one that has not
// (the index finds an object on any mountpath).
func (s *Store) mountpathFor(bucket, key string) *mountpath {
	name := placement.ObjectName(bucket, key)
	if s.failed.Load() == 0 {
		return s.mps[placement.Mountpath(s.paths, name)]
	}
	best, bestScore := s.mps[placement.Mountpath(s.paths, name)], uint64(0) // all failed: its error says so
	for i, mp := range s.mps {
		if sc := placement.Score(s.paths[i], name); !mp.failed.Load() && sc >= bestScore {
			best, bestScore = mp, sc
		}
	}
	return best
}

// isDriveFailure reports whether err is a drive failing: an I/O error, or
// the filesystem remounted read-only after one (ext4's errors=remount-ro).
func isDriveFailure(err error) bool {
	return errors.Is(err, unix.EIO) || errors.Is(err, unix.EROFS)
}

// sourceError is a failure to read the body being stored: the source's
// device or connection failed, not the drive written to.
type sourceError struct{ err error }

func (e *sourceError) Error() string { return "store: read body: " + e.err.Error() }
func (e *sourceError) Unwrap() error { return e.err }

// checkDrive takes mp out of the write placement if err is its drive
// failing, and returns err. Later writes go to the next mountpath; what
// is on mp stays readable as far as the drive allows (reads that fail are
// served from the other nodes' copies). An EIO from the body's source
// (an NFS backend, a peer's disk) says nothing about mp.
func (s *Store) checkDrive(mp *mountpath, err error) error {
	var src *sourceError
	if err != nil && isDriveFailure(err) && !errors.As(err, &src) && !mp.failed.Swap(true) {
		s.failed.Add(1)
		s.log.Error("store: mountpath failed; new writes go to the others", "mountpath", mp.path, "err", err)
	}
	return err
}

func (s *Store) keyLock(bucket, key string) *sync.RWMutex {
	return &s.keyLocks[xxhash.Sum64String(placement.ObjectName(bucket, key))%numKeyLocks]
}

func validate(bucket, key string) error {
	if err := object.ValidateBucketName(bucket); err != nil {
		return err
	}
	return object.ValidateKey(key)
}

// durableDirs makes directories and remembers which ones it knows to be
// durable: their entry fsynced in their parent, and so on up to the stop
// directory the caller gives. A directory some other goroutine just made
// may not be durable yet (its creator has not fsynced the parent), so one
// that already exists is not trusted until it has been synced here once.
type durableDirs struct {
	known sync.Map // dir -> struct{}
	sync  func(dir string) error
}

func newDurableDirs() *durableDirs { return &durableDirs{sync: syncDir} }

// mkdir makes dir (and its parents up to stop, which must exist durably)
// if missing, and returns once dir's entry and its parents' are durable.
func (d *durableDirs) mkdir(dir, stop string) error {
	if dir == stop {
		return nil
	}
	if _, ok := d.known.Load(dir); ok {
		return nil
	}
	parent := filepath.Dir(dir)
	err := os.Mkdir(dir, 0o755)
	switch {
	case errors.Is(err, os.ErrNotExist) && parent != dir:
		if err := d.mkdir(parent, stop); err != nil {
			return err
		}
		return d.mkdir(dir, stop)
	case errors.Is(err, os.ErrExist) && parent != dir:
		// Made by someone else, perhaps a moment ago: make sure of the
		// parents too, then sync dir's own entry.
		if err := d.mkdir(parent, stop); err != nil {
			return err
		}
	case err != nil:
		return err
	}
	if err := d.sync(parent); err != nil {
		return err
	}
	d.known.Store(dir, struct{}{})
	return nil
}

// forget drops what is known of dir and the directories under it, which
// are being removed.
func (d *durableDirs) forget(dir string) {
	d.known.Range(func(k, _ any) bool {
		if p := k.(string); p == dir || strings.HasPrefix(p, dir+string(filepath.Separator)) {
			d.known.Delete(k)
		}
		return true
	})
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// isNoSpace reports whether err is the filesystem running out of space.
func isNoSpace(err error) bool {
	return errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT)
}

func noSpace(mp *mountpath, err error) error {
	if err == nil {
		return fmt.Errorf("%w: mountpath %s is full", object.ErrNoSpace, mp.path)
	}
	return fmt.Errorf("%w: mountpath %s: %v", object.ErrNoSpace, mp.path, err)
}
