package volume

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
)

// A node's chunks of a volume can vanish under it: a drive replaced, a
// mountpath wiped, while the node's data directory survives (or the
// whole node wiped and started again under its ID). A chunk file that is
// not there reads as zeros, so such a mirror would be read as current.
// To notice, a Local with a state directory keeps an identity per
// volume: the first time it stores anything of the volume it writes an
// identity marker (a random incarnation) into the volume's directory on
// every mountpath, then records the incarnation in its state directory.
// A volume whose record is there but whose marker is missing or differs
// on some mountpath has lost chunks: it is lost, durably (a lost file in
// the state directory), until the node's Volume has seen it
// resynchronised in full (Repaired). A lost volume's chunks are never
// read: ReadAt and Extents fail, so another mirror serves them, while
// writes and resync copies are taken.

const (
	identFile = "chunks.id"   // the incarnation: in the state directory and on every mountpath
	lostFile  = "chunks.lost" // in the state directory: the chunks are lost until repaired
)

// ErrLost is returned for reads of a volume whose chunks this replica
// lost (see ident.go).
var ErrLost = fmt.Errorf("%w: this node lost its chunks of the volume; it is being resynchronised", ErrReplicaError)

// identity is what a Local knows of its chunks of one volume.
type identity struct {
	mu    sync.Mutex
	ready atomic.Bool // the record and the markers agree (or the loss is recorded)
	lost  atomic.Bool
}

// SetState makes l keep volume identities (see above) in dir (the node's
// volume state directory: a volume's files go in dir/<key>). prior, if
// set, is asked about a volume of which neither dir nor the mountpaths
// hold anything: it reports whether the volume may hold data written
// before this node's state began (the node was wiped), which this node
// then treats as lost. Call it before l serves any request.
func (l *Local) SetState(dir string, prior func(vol string) bool) {
	l.stateDir, l.prior = dir, prior
}

// OnLost sets a function called (in its own goroutine) when l finds a
// volume's chunks lost.
func (l *Local) OnLost(f func(vol string)) { l.onLost = f }

func (l *Local) identOf(vol string) *identity {
	v, ok := l.ids.Load(vol)
	if !ok {
		v, _ = l.ids.LoadOrStore(vol, &identity{})
	}
	return v.(*identity)
}

// Lost reports whether l lost its chunks of vol and they are not
// resynchronised yet (see ident.go). It checks the volume's identity the
// first time.
func (l *Local) Lost(vol string) (bool, error) {
	if err := ValidKey(vol); err != nil {
		return false, err
	}
	return l.ident(vol, false)
}

// ident checks vol's identity (once) and reports whether its chunks are
// lost; with create, it records an identity for a volume that has none.
func (l *Local) ident(vol string, create bool) (bool, error) {
	if l.stateDir == "" {
		return false, nil
	}
	id := l.identOf(vol)
	if id.ready.Load() {
		return id.lost.Load(), nil
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.ready.Load() {
		return id.lost.Load(), nil
	}
	sd := filepath.Join(l.stateDir, vol)
	if _, err := os.Stat(filepath.Join(sd, lostFile)); err == nil {
		id.lost.Store(true)
		id.ready.Store(true)
		return true, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("%w: %w", ErrReplicaError, err)
	}
	rec, err := readIdent(filepath.Join(sd, identFile))
	if err != nil {
		return false, err
	}
	marks := make([]string, len(l.cfg.Mountpaths))
	found := map[string]bool{}
	anyFiles := false
	for i, mp := range l.cfg.Mountpaths {
		if marks[i], err = readIdent(filepath.Join(l.dir(mp, vol), identFile)); err != nil {
			return false, err
		}
		if marks[i] != "" {
			found[marks[i]] = true
		}
		if ents, err := os.ReadDir(l.dir(mp, vol)); err == nil && len(ents) > 0 {
			anyFiles = true
		}
	}
	allSame := func(s string) bool {
		for _, m := range marks {
			if m != s {
				return false
			}
		}
		return true
	}
	var lost bool
	switch {
	case rec != "" && allSame(rec):
		// In place.
	case rec != "":
		lost = true // a mountpath lost its chunks (its drive was replaced or wiped)
	case len(found) == 1 && allSame(marks[0]):
		rec = marks[0] // the state directory was lost, the chunks are there
		if err := writeIdent(sd, rec); err != nil {
			return false, err
		}
	case len(found) > 0:
		lost = true // the state directory was lost and a mountpath's chunks too
	case anyFiles:
		// Chunks stored before identities were kept: adopted as they are.
		if !create {
			break
		}
		rec = newIncarnation()
		if err := l.initIdent(vol, sd, rec); err != nil {
			return false, err
		}
	case l.prior != nil && l.prior(vol):
		lost = true // nothing here of a volume written before this node's state began
	default:
		if !create {
			return false, nil // nothing stored yet; checked again later
		}
		rec = newIncarnation()
		if err := l.initIdent(vol, sd, rec); err != nil {
			return false, err
		}
	}
	if lost {
		if err := writeIdent(sd, lostFile); err != nil {
			return false, err
		}
		if rec == "" {
			rec = newIncarnation()
		}
		if err := l.initIdent(vol, sd, rec); err != nil {
			return false, err
		}
		id.lost.Store(true)
		if l.onLost != nil {
			go l.onLost(vol)
		}
	}
	id.ready.Store(rec != "" || lost)
	return lost, nil
}

// initIdent writes the marker rec on every mountpath, then records it in
// sd: a crash in between leaves markers that the next check adopts.
func (l *Local) initIdent(vol, sd, rec string) error {
	for _, mp := range l.cfg.Mountpaths {
		if err := writeFileSync(filepath.Join(l.dir(mp, vol), identFile), rec); err != nil {
			return fmt.Errorf("%w: %w", ErrReplicaError, err)
		}
	}
	return writeIdent(sd, rec)
}

// writeIdent records rec in sd (as identFile), or, given lostFile, marks
// the volume lost.
func writeIdent(sd, rec string) error {
	name, body := identFile, rec
	if rec == lostFile {
		name, body = lostFile, "lost\n"
	}
	if err := writeFileSync(filepath.Join(sd, name), body); err != nil {
		return fmt.Errorf("%w: %w", ErrReplicaError, err)
	}
	return nil
}

// Repaired ends the loss of vol's chunks: every chunk of the mirror has
// been resynchronised since (see ident.go).
func (l *Local) Repaired(vol string) error {
	if l.stateDir == "" || ValidKey(vol) != nil {
		return nil
	}
	id := l.identOf(vol)
	id.mu.Lock()
	defer id.mu.Unlock()
	sd := filepath.Join(l.stateDir, vol)
	if err := os.Remove(filepath.Join(sd, lostFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := syncDir(sd); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	id.lost.Store(false)
	return nil
}

// forgetIdent drops vol's identity (the volume was deleted).
func (l *Local) forgetIdent(vol string) error {
	l.ids.Delete(vol)
	if l.stateDir == "" {
		return nil
	}
	sd := filepath.Join(l.stateDir, vol)
	for _, n := range []string{lostFile, identFile} {
		if err := os.Remove(filepath.Join(sd, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

func readIdent(p string) (string, error) {
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrReplicaError, err)
	}
	return strings.TrimSpace(string(b)), nil
}

func newIncarnation() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// writeFileSync replaces p with body durably, creating its directory.
func writeFileSync(p, body string) error {
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp := p + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(body + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err == nil {
		err = syncDir(filepath.Dir(dir))
	}
	return err
}
