package store

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// deadDir holds, on every writable mountpath, the records of dead copies.
const deadDir = "dead"

// deadCopy is an object file the store could not remove because its drive
// is read-only (it failed): an older version of a key rewritten on another
// mountpath, or a deleted or evicted object. Its record, kept on every
// writable mountpath, stops the next Open from serving the copy again: a
// deleted object does not come back, and an evicted newer version does not
// give way to an older one.
type deadCopy struct {
	Mountpath string    `json:"mountpath"`       // root of the mountpath that holds the file
	Drive     string    `json:"drive,omitempty"` // identity of its drive; older records have none
	Bucket    string    `json:"bucket"`
	Key       string    `json:"key"`
	ModTime   time.Time `json:"mtime"` // the copy's: an older or equal one is dead too
}

// name is the record's file name: one record per copy, a newer one
// replaces it.
func (d deadCopy) name() string {
	where := d.Mountpath
	if d.Drive != "" {
		where = "drive:" + d.Drive
	}
	sum := sha256.Sum256([]byte(where + "\x00" + d.Bucket + "\x00" + d.Key))
	return hex.EncodeToString(sum[:])
}

// deadCopyOn returns the record of bucket/key's copy on mp, if any: by
// the drive's identity, or by its path for records older than identities.
func deadCopyOn(dead map[string]deadCopy, mp *mountpath, f found) (deadCopy, bool) {
	byDrive := deadCopy{Mountpath: mp.root, Drive: mp.id, Bucket: f.info.Bucket, Key: f.info.Key}
	byPath := deadCopy{Mountpath: mp.root, Bucket: f.info.Bucket, Key: f.info.Key}
	for _, c := range []deadCopy{byDrive, byPath} {
		if d, ok := dead[c.name()]; ok && d.kills(mp, f) {
			return d, true
		}
	}
	return deadCopy{}, false
}

// on reports whether the record is about a file of mp's drive.
func (d deadCopy) on(mp *mountpath) bool {
	if d.Drive != "" {
		return d.Drive == mp.id
	}
	return d.Mountpath == mp.root
}

// kills reports whether the record makes f, found on mp, dead.
func (d deadCopy) kills(mp *mountpath, f found) bool {
	return d.on(mp) && d.Bucket == f.info.Bucket && d.Key == f.info.Key && !f.info.ModTime.After(d.ModTime)
}

// removeCopy removes the file of bucket/key's copy (modified at mtime)
// from mp; with durable, the removal is fsynced. If mp's drive is read-only
// it records the copy as dead on every writable mountpath instead; an
// error means neither was done.
func (s *Store) removeCopy(mp *mountpath, bucket, key string, mtime time.Time, durable bool) error {
	dir, file := mp.objectPath(bucket, key)
	err := os.Remove(file)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err == nil && !durable:
		return nil
	case err == nil:
		if err = syncDir(dir); err == nil || !isDriveFailure(err) {
			return err
		}
		// The removal may not last: record it as well.
	case !isDriveFailure(err):
		return err
	}
	s.checkDrive(mp, err)
	return s.recordDead(deadCopy{Mountpath: mp.root, Drive: mp.id, Bucket: bucket, Key: key, ModTime: mtime.UTC()})
}

// recordDead writes d durably on every writable mountpath; it fails if
// none took it.
func (s *Store) recordDead(d deadCopy) error {
	var errs []error
	saved := 0
	for _, mp := range s.mps {
		if mp.failed.Load() {
			continue
		}
		dir := filepath.Join(mp.root, deadDir)
		err := mp.dirs.mkdir(dir, mp.root)
		if err == nil {
			err = writeFileAtomic(filepath.Join(dir, d.name()), d)
		}
		if err != nil {
			errs = append(errs, s.checkDrive(mp, err))
			continue
		}
		saved++
	}
	if saved == 0 {
		errs = append(errs, ErrNoWritableDrive)
		return fmt.Errorf("store: record the dead copy of %s/%s on %s: %w", d.Bucket, d.Key, d.Mountpath, errors.Join(errs...))
	}
	if len(errs) > 0 {
		s.log.Warn("store: dead copy not recorded on every drive", "bucket", d.Bucket, "key", d.Key, "err", errors.Join(errs...))
	}
	return nil
}

// ErrNoWritableDrive: every mountpath is read-only.
var ErrNoWritableDrive = errors.New("store: no writable mountpath")

// deadRecords reads the dead-copy records of every mountpath, the newest
// per copy. Unreadable records are skipped: a lost record costs at most an
// old copy served again, as before records existed.
func (s *Store) deadRecords() map[string]deadCopy {
	out := map[string]deadCopy{}
	for _, mp := range s.mps {
		dir := filepath.Join(mp.root, deadDir)
		ents, err := os.ReadDir(dir)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				s.log.Warn("store: dead-copy records unreadable", "mountpath", mp.path, "err", err)
			}
			continue
		}
		for _, e := range ents {
			var d deadCopy
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err == nil {
				err = json.Unmarshal(b, &d)
			}
			if strings.HasPrefix(e.Name(), ".tmp-") {
				if !mp.failed.Load() {
					os.Remove(filepath.Join(dir, e.Name())) // a crash while writing one
				}
				continue
			}
			if err != nil || d.name() != e.Name() {
				s.log.Warn("store: skipping a bad dead-copy record", "path", filepath.Join(dir, e.Name()), "err", err)
				continue
			}
			if prev, ok := out[d.name()]; !ok || d.ModTime.After(prev.ModTime) {
				out[d.name()] = d
			}
		}
	}
	return out
}

// dropDeadRecords removes the named records from every writable mountpath
// (their copies are gone).
func (s *Store) dropDeadRecords(names []string) {
	for _, mp := range s.mps {
		if mp.failed.Load() {
			continue
		}
		dir := filepath.Join(mp.root, deadDir)
		removed := false
		for _, n := range names {
			if err := os.Remove(filepath.Join(dir, n)); err == nil {
				removed = true
			}
		}
		if removed {
			_ = syncDir(dir)
		}
	}
}

// hasDrive reports whether the drive d is about is one of the store's
// mountpaths now.
func (s *Store) hasDrive(d deadCopy) bool {
	for _, mp := range s.mps {
		if d.on(mp) {
			return true
		}
	}
	return false
}
