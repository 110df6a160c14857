package volume

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Writer epochs fence off a writer that lost its volume to another node.
// The cluster grants one node at a time the right to write a volume (a
// claim, see Claims); each claim by a new node has a higher epoch. Every
// mutation a replica receives carries the writer's epoch, and a replica
// refuses (ErrFenced) a mutation whose epoch is lower than the highest it
// has seen for the volume. A new writer announces its epoch to every
// mirror before it uses it (Replica.Fence), so once it writes, reads or
// resynchronises through a mirror, the old writer's late writes and
// resync copies cannot land there over its data. Epoch 0 is a volume no
// node ever claimed (no Claims configured).

// fences is a replica's record of the highest writer epoch seen per
// volume. Mutations hold their volume's fence shared while they check
// the epoch and write, and raising the epoch holds it exclusively, so
// that no mutation of an older writer is still landing once a newer
// writer's first one is admitted.
type fences struct {
	load func(vol string) (uint64, error) // the persisted epoch (0 if none)
	save func(vol string, epoch uint64) error

	m sync.Map // volume key -> *fence; read on every mutation, without a shared lock
}

type fence struct {
	mu     sync.RWMutex
	loaded bool
	epoch  uint64
}

func newFences(load func(string) (uint64, error), save func(string, uint64) error) *fences {
	return &fences{load: load, save: save}
}

// get returns vol's fence with its epoch loaded, read-locked.
func (fs *fences) get(vol string) (*fence, error) {
	v, ok := fs.m.Load(vol)
	if !ok {
		v, _ = fs.m.LoadOrStore(vol, &fence{})
	}
	f := v.(*fence)
	f.mu.RLock()
	if f.loaded {
		return f, nil
	}
	f.mu.RUnlock()
	f.mu.Lock()
	if !f.loaded {
		e, err := fs.load(vol)
		if err != nil {
			f.mu.Unlock()
			return nil, fmt.Errorf("volume: reading the writer epoch of %s: %w", vol, err)
		}
		f.epoch, f.loaded = e, true
	}
	f.mu.Unlock()
	f.mu.RLock()
	return f, nil
}

// enter admits a mutation of vol by a writer of epoch, raising the
// volume's epoch first if it is higher; the caller calls done once the
// mutation is applied. It fails with ErrFenced if a newer writer was seen.
func (fs *fences) enter(vol string, epoch uint64) (done func(), err error) {
	for {
		f, err := fs.get(vol)
		if err != nil {
			return nil, err
		}
		switch {
		case epoch == f.epoch:
			return f.mu.RUnlock, nil
		case epoch < f.epoch:
			cur := f.epoch
			f.mu.RUnlock()
			return nil, fmt.Errorf("%w: volume %s, epoch %d < %d", ErrFenced, vol, epoch, cur)
		}
		f.mu.RUnlock()
		if err := fs.raise(vol, epoch); err != nil {
			return nil, err
		}
	}
}

// raise makes epoch vol's highest seen, durably, once the mutations in
// flight are done. A lower epoch than one seen fails with ErrFenced.
func (fs *fences) raise(vol string, epoch uint64) error {
	f, err := fs.get(vol)
	if err != nil {
		return err
	}
	f.mu.RUnlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case epoch < f.epoch:
		return fmt.Errorf("%w: volume %s, epoch %d < %d", ErrFenced, vol, epoch, f.epoch)
	case epoch == f.epoch:
		return nil
	}
	if err := fs.save(vol, epoch); err != nil {
		return fmt.Errorf("volume: saving the writer epoch of %s: %w", vol, err)
	}
	f.epoch = epoch
	return nil
}

// forget drops vol's fence (the volume was deleted).
func (fs *fences) forget(vol string) {
	fs.m.Delete(vol)
}

// epochFile is the name of the file, in each mountpath's directory of a
// volume, that holds the highest writer epoch the replica has seen.
const epochFile = "writer.epoch"

// loadEpoch reads vol's epoch: the highest one the mountpaths hold (a
// drive replaced since has none). It fails if an epoch file is there but
// cannot be read: the highest epoch may be the one lost.
func (l *Local) loadEpoch(vol string) (uint64, error) {
	var e uint64
	for _, mp := range l.cfg.Mountpaths {
		b, err := os.ReadFile(filepath.Join(l.dir(mp, vol), epochFile))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("%w: %w", ErrReplicaError, err)
		}
		n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: %s: %w", ErrReplicaError, epochFile, err)
		}
		e = max(e, n)
	}
	return e, nil
}

// saveEpoch writes vol's epoch durably to every mountpath, so that a
// restart, or the loss of a drive, does not forget it. It fails unless
// every mountpath took it: one left with an older epoch could be the only
// one readable after a restart.
func (l *Local) saveEpoch(vol string, epoch uint64) error {
	for _, mp := range l.cfg.Mountpaths {
		if err := writeEpoch(l.dir(mp, vol), epoch); err != nil {
			return err
		}
	}
	return nil
}

// writeEpoch replaces dir's epoch file durably.
func writeEpoch(dir string, epoch uint64) error {
	return writeFileSync(filepath.Join(dir, epochFile), strconv.FormatUint(epoch, 10))
}
