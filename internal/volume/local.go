package volume

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/slipstream-io/slipstream/internal/placement"
	"github.com/slipstream-io/slipstream/internal/volume/filedev"
	"github.com/slipstream-io/slipstream/internal/volume/nbd"
)

// LocalConfig configures a Local replica.
type LocalConfig struct {
	// Mountpaths are the node's drives; a chunk lives on the one HRW picks.
	Mountpaths []string
	// MaxOpenFiles bounds the chunk files kept open. Default 4096.
	MaxOpenFiles int
	// MaxChunkSize bounds offsets (a guard against bad requests). Default 1 GiB.
	MaxChunkSize int64
	// Buffered makes aligned writes go through the page cache too. By
	// default writes whose buffer, offset and length are 4 KiB aligned use
	// O_DIRECT, submitted in batches through Linux AIO: a random overwrite
	// of a page under writeback then does not stall on it, dirty data does
	// not pile up in memory, and concurrent writes reach the device
	// together. Reads are served from the page cache when cached, else by
	// O_DIRECT reads through the same AIO path (see filedev.ReadAt).
	Buffered bool
}

// Local stores chunks as sparse files <mountpath>/volumes/<vol>/<chunk>:
// a write is a pwrite in place, a read past what was written reads zeros,
// a punch deallocates.
type Local struct {
	cfg  LocalConfig
	ring *filedev.Ring // AIO for O_DIRECT writes; nil: pwrite

	fences *fences // the writer epoch of each volume

	// Volume identities (ident.go); set before serving.
	stateDir string
	prior    func(vol string) bool
	onLost   func(vol string)
	ids      sync.Map // volume key -> *identity

	mu    sync.Mutex
	files map[fileKey]*openFile
}

var _ Replica = (*Local)(nil)

type fileKey struct {
	vol   string
	chunk int64
}

type openFile struct {
	f    *os.File
	refs int
	// dropped: taken out of the table (Delete, Close) while in use; the
	// last release closes it. Both under Local.mu.
	dropped bool

	directOnce sync.Once
	direct     *os.File // O_DIRECT descriptor, nil if unavailable
}

// directFile returns an O_DIRECT descriptor of the chunk file, or nil.
func (of *openFile) directFile() *os.File {
	of.directOnce.Do(func() {
		f, err := os.OpenFile(of.f.Name(), os.O_RDWR|unix.O_DIRECT, 0)
		if err == nil {
			of.direct = f
		}
	})
	return of.direct
}

func (of *openFile) close() {
	of.f.Close()
	if of.direct != nil {
		of.direct.Close()
	}
}

// NewLocal returns a local replica over cfg.Mountpaths.
func NewLocal(cfg LocalConfig) (*Local, error) {
	if len(cfg.Mountpaths) == 0 {
		return nil, errors.New("volume: LocalConfig.Mountpaths is empty")
	}
	if cfg.MaxOpenFiles <= 0 {
		cfg.MaxOpenFiles = 4096
	}
	if cfg.MaxChunkSize <= 0 {
		cfg.MaxChunkSize = 1 << 30
	}
	l := &Local{cfg: cfg, files: map[fileKey]*openFile{}}
	l.fences = newFences(l.loadEpoch, l.saveEpoch)
	if !cfg.Buffered {
		if r, err := filedev.NewRing(512); err == nil {
			l.ring = r
		}
	}
	return l, nil
}

func (l *Local) dir(mp, vol string) string { return filepath.Join(localDir(mp), vol) }

// localDir is the directory of a mountpath that holds volume chunks, a
// subdirectory per volume.
func localDir(mountpath string) string { return filepath.Join(mountpath, "volumes") }

func (l *Local) path(vol string, chunk int64) string {
	mp := l.cfg.Mountpaths[placement.Mountpath(l.cfg.Mountpaths, ChunkName(vol, chunk))]
	return filepath.Join(l.dir(mp, vol), fmt.Sprintf("%016x", chunk))
}

// open returns the chunk file, opening (and with create, creating) it;
// (nil, nil) when it does not exist and create is false.
func (l *Local) open(vol string, chunk int64, create bool) (*openFile, error) {
	if err := ValidKey(vol); err != nil {
		return nil, err
	}
	if chunk < 0 {
		return nil, fmt.Errorf("%w: chunk %d", ErrOutOfRange, chunk)
	}
	k := fileKey{vol, chunk}
	l.mu.Lock()
	if of, ok := l.files[k]; ok {
		of.refs++
		l.mu.Unlock()
		return of, nil
	}
	l.mu.Unlock()

	p := l.path(vol, chunk)
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		if !create {
			return nil, nil
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		f, err = os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
		if err == nil {
			// Make the new name durable, so that a later fdatasync of the
			// file is enough for FUA and flush.
			err = syncDir(filepath.Dir(p))
		}
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		return nil, err
	}

	// Block I/O is random: readahead would read whole windows on every
	// page-cache miss.
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_RANDOM)

	l.mu.Lock()
	defer l.mu.Unlock()
	if of, ok := l.files[k]; ok { // raced with another opener
		f.Close()
		of.refs++
		return of, nil
	}
	if len(l.files) >= l.cfg.MaxOpenFiles {
		for k2, of := range l.files {
			if of.refs == 0 {
				of.close()
				delete(l.files, k2)
				if len(l.files) < l.cfg.MaxOpenFiles {
					break
				}
			}
		}
	}
	of := &openFile{f: f, refs: 1}
	l.files[k] = of
	return of, nil
}

func (l *Local) release(of *openFile) {
	l.mu.Lock()
	of.refs--
	if of.dropped && of.refs == 0 {
		of.close()
	}
	l.mu.Unlock()
}

// drop takes of out of the table (l.mu held) and closes it, or leaves it
// to the last release while a call still uses its descriptors: closed
// under it, their numbers could go to another file that then takes the
// call's write or sync.
func (l *Local) drop(k fileKey, of *openFile) {
	delete(l.files, k)
	if of.refs > 0 {
		of.dropped = true
		return
	}
	of.close()
}

func (l *Local) check(off, n int64) error {
	if off < 0 || n < 0 || off > l.cfg.MaxChunkSize || n > l.cfg.MaxChunkSize-off { // no off+n: it can overflow
		return fmt.Errorf("%w: [%d, +%d)", ErrOutOfRange, off, n)
	}
	return nil
}

// ReadAt implements Replica.
func (l *Local) ReadAt(_ context.Context, vol string, chunk int64, p []byte, off int64) error {
	if err := l.check(off, int64(len(p))); err != nil {
		return err
	}
	if err := l.readable(vol); err != nil {
		return err
	}
	of, err := l.open(vol, chunk, false)
	if err != nil {
		return err
	}
	if of == nil {
		clear(p)
		return nil
	}
	defer l.release(of)
	var direct *os.File
	if !l.cfg.Buffered && l.ring != nil {
		direct = of.directFile()
	}
	return filedev.ReadAt(of.f, direct, l.ring, p, off)
}

// Extents describes [off, off+n) of a chunk as holes and data (a chunk
// never written is one hole).
func (l *Local) Extents(_ context.Context, vol string, chunk, off, n int64) ([]nbd.Extent, error) {
	if err := l.check(off, n); err != nil {
		return nil, err
	}
	if err := l.readable(vol); err != nil {
		return nil, err
	}
	of, err := l.open(vol, chunk, false)
	if err != nil {
		return nil, err
	}
	if of == nil {
		return []nbd.Extent{{Length: n, Hole: true, Zero: true}}, nil
	}
	defer l.release(of)
	return filedev.Extents(of.f, off, n)
}

// mutation checks a mutation of [off, off+n) of a chunk of vol by the
// writer of epoch and admits it (see fences.enter); the caller calls done
// once it is applied.
func (l *Local) mutation(vol string, epoch uint64, off, n int64) (done func(), err error) {
	if err := l.check(off, n); err != nil {
		return nil, err
	}
	if err := ValidKey(vol); err != nil {
		return nil, err
	}
	if _, err := l.ident(vol, true); err != nil {
		return nil, err
	}
	return l.fences.enter(vol, epoch)
}

// readable fails (ErrLost) while this replica's chunks of vol are lost.
func (l *Local) readable(vol string) error {
	if l.stateDir == "" {
		return nil
	}
	if err := ValidKey(vol); err != nil {
		return err
	}
	lost, err := l.ident(vol, false)
	if err == nil && lost {
		err = fmt.Errorf("%w: %s", ErrLost, vol)
	}
	return err
}

// WriteAt implements Replica.
func (l *Local) WriteAt(_ context.Context, vol string, epoch uint64, chunk int64, p []byte, off int64, sync bool) error {
	done, err := l.mutation(vol, epoch, off, int64(len(p)))
	if err != nil {
		return err
	}
	defer done()
	of, err := l.open(vol, chunk, true)
	if err != nil {
		return err
	}
	defer l.release(of)
	f := of.f
	if !l.cfg.Buffered && filedev.Aligned(p, off) {
		if d := of.directFile(); d != nil {
			f = d
		}
	}
	if f != of.f && l.ring != nil {
		if err := l.ring.WriteAt(int(f.Fd()), p, off); err != nil {
			return err
		}
	} else if _, err := f.WriteAt(p, off); err != nil {
		return err
	}
	if sync {
		return unix.Fdatasync(int(of.f.Fd()))
	}
	return nil
}

// Zero implements Replica.
func (l *Local) Zero(_ context.Context, vol string, epoch uint64, chunk int64, off, n int64, punch bool) error {
	done, err := l.mutation(vol, epoch, off, n)
	if err != nil {
		return err
	}
	defer done()
	of, err := l.open(vol, chunk, !punch)
	if err != nil || of == nil {
		return err
	}
	defer l.release(of)
	if punch {
		return filedev.PunchHole(of.f, off, n)
	}
	return filedev.ZeroRange(of.f, off, n)
}

// Fence implements Replica.
func (l *Local) Fence(_ context.Context, vol string, epoch uint64) error {
	if err := ValidKey(vol); err != nil {
		return err
	}
	if _, err := l.ident(vol, true); err != nil {
		return err
	}
	return l.fences.raise(vol, epoch)
}

// Sync implements Replica.
func (l *Local) Sync(_ context.Context, vol string, chunks []int64) error {
	for _, c := range chunks {
		of, err := l.open(vol, c, false)
		if err != nil {
			return err
		}
		if of == nil {
			continue
		}
		err = unix.Fdatasync(int(of.f.Fd()))
		l.release(of)
		if err != nil {
			return err
		}
	}
	return nil
}

// Delete implements Replica.
func (l *Local) Delete(_ context.Context, vol string) error {
	if err := ValidKey(vol); err != nil {
		return err
	}
	l.mu.Lock()
	for k, of := range l.files {
		if k.vol == vol {
			l.drop(k, of)
		}
	}
	l.mu.Unlock()
	l.fences.forget(vol)
	if err := l.forgetIdent(vol); err != nil {
		return err
	}
	for _, mp := range l.cfg.Mountpaths {
		if err := os.RemoveAll(l.dir(mp, vol)); err != nil {
			return err
		}
	}
	return nil
}

// Chunks lists, sorted, the chunks of vol stored here.
func (l *Local) Chunks(vol string) ([]int64, error) {
	if err := ValidKey(vol); err != nil {
		return nil, err
	}
	var out []int64
	for _, mp := range l.cfg.Mountpaths {
		ents, err := os.ReadDir(l.dir(mp, vol))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			if c, err := strconv.ParseUint(e.Name(), 16, 63); err == nil && len(e.Name()) == 16 && e.Type().IsRegular() {
				out = append(out, int64(c))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// DropChunk deletes chunk c of vol here: the node no longer holds it for
// the volume (a re-placement moved it off, and ended).
func (l *Local) DropChunk(vol string, c int64) error {
	if err := ValidKey(vol); err != nil {
		return err
	}
	k := fileKey{vol, c}
	l.mu.Lock()
	if of, ok := l.files[k]; ok {
		l.drop(k, of)
	}
	l.mu.Unlock()
	err := os.Remove(l.path(vol, c))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// Keys lists the storage keys of the volumes with chunks here, sorted.
func (l *Local) Keys() ([]string, error) { return LocalKeys(l.cfg.Mountpaths) }

// LocalKeys lists the storage keys of the volumes with chunks on
// mountpaths, sorted, without a Local (a node asks before it makes one).
func LocalKeys(mountpaths []string) ([]string, error) {
	var keys []string
	for _, mp := range mountpaths {
		ents, err := os.ReadDir(localDir(mp))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			if e.IsDir() && ValidKey(e.Name()) == nil && !slices.Contains(keys, e.Name()) {
				keys = append(keys, e.Name())
			}
		}
	}
	slices.Sort(keys)
	return keys, nil
}

// Ping implements Replica.
func (l *Local) Ping(context.Context) error { return nil }

// Close closes every open chunk file.
func (l *Local) Close() error {
	if l.ring != nil {
		l.ring.Close()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, of := range l.files {
		l.drop(k, of)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
