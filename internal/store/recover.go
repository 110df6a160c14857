package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/placement"
)

// found is an object discovered on disk at Open.
type found struct {
	info object.Info
	mp   int
}

// recover cleans every mountpath and rebuilds indexes, policies and space
// accounting from what is on disk.
func (s *Store) recover(ctx context.Context) error {
	results := make([][]found, len(s.mps))
	errs := make([]error, len(s.mps))
	done := make(chan int)
	for i, mp := range s.mps {
		go func() {
			results[i], errs[i] = s.scanMountpath(ctx, mp)
			done <- i
		}()
	}
	for range s.mps {
		<-done
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	// Merge. Copies recorded dead (deleted or replaced while their drive
	// was read-only) are left out. A key found on two mountpaths (the
	// mountpath list changed, or a drive failed) keeps its newest version.
	dead := s.deadRecords()
	keep := map[string]bool{} // dead records of copies still on a drive
	byKey := map[string]found{}
	for _, fs := range results {
		for _, f := range fs {
			mp := s.mps[f.mp]
			if d, ok := deadCopyOn(dead, mp, f); ok {
				s.log.Warn("store: leaving out a copy recorded dead", "bucket", f.info.Bucket, "key", f.info.Key, "mountpath", mp.path)
				if mp.failed.Load() || s.removeCopy(mp, f.info.Bucket, f.info.Key, f.info.ModTime, true) != nil {
					keep[d.name()] = true // still on its drive
				}
				continue
			}
			pk := placement.ObjectName(f.info.Bucket, f.info.Key)
			prev, dup := byKey[pk]
			if dup {
				loser := f
				if f.info.ModTime.After(prev.info.ModTime) {
					loser, byKey[pk] = prev, f
				}
				lmp := s.mps[loser.mp]
				s.log.Warn("store: removing older duplicate", "bucket", loser.info.Bucket, "key", loser.info.Key, "mountpath", lmp.path)
				if err := s.removeCopy(lmp, loser.info.Bucket, loser.info.Key, loser.info.ModTime, true); err != nil {
					s.log.Error("store: older duplicate not removed", "bucket", loser.info.Bucket, "key", loser.info.Key, "mountpath", lmp.path, "err", err)
				}
				if lmp.failed.Load() {
					keep[(deadCopy{Mountpath: lmp.root, Drive: lmp.id, Bucket: loser.info.Bucket, Key: loser.info.Key}).name()] = true
				}
				continue
			}
			byKey[pk] = f
		}
	}
	// Records of copies that are gone (or were written again since) are
	// dropped; those of drives the store does not have now are kept (the
	// drive may come back, at another path or after being unmounted).
	var drop []string
	for name, d := range dead {
		if !keep[name] && s.hasDrive(d) {
			drop = append(drop, name)
		}
	}
	s.dropDeadRecords(drop)
	all := make([]found, 0, len(byKey))
	for _, f := range byKey {
		all = append(all, f)
	}
	// Feed the policies oldest access first, so recency survives a restart.
	sort.Slice(all, func(i, j int) bool {
		ai, aj := accessOf(all[i].info), accessOf(all[j].info)
		if !ai.Equal(aj) {
			return ai.Before(aj)
		}
		return all[i].info.Key < all[j].info.Key
	})
	for _, f := range all {
		bi := s.bucket(f.info.Bucket, true)
		bi.m[f.info.Key] = newEntry(f.info, f.mp)
		mp := s.mps[f.mp]
		mp.objBytes += f.info.Size
		mp.objCount++
		if f.info.Evictable() {
			mp.pol.Add(placement.ObjectName(f.info.Bucket, f.info.Key), f.info.Size)
		}
	}
	for _, bi := range s.buckets {
		keys := make([]string, 0, len(bi.m))
		for k := range bi.m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		bi.keys = sortedKeysFrom(keys)
	}
	for _, mp := range s.mps {
		if err := s.recoverUploads(mp); err != nil {
			return err
		}
	}
	return nil
}

func accessOf(info object.Info) (t time.Time) {
	if !info.AccessTime.IsZero() {
		return info.AccessTime
	}
	return info.ModTime
}

// scanMountpath empties tmp/ and reads every object of mp.
func (s *Store) scanMountpath(ctx context.Context, mp *mountpath) ([]found, error) {
	for _, dir := range append([]string{mp.tmpDir}, mp.workDirs...) {
		if err := s.removeLeftovers(dir, mp.workDirs); err != nil {
			if !isDriveFailure(err) {
				return nil, fmt.Errorf("store: recover %s: %w", mp.path, err)
			}
			// Work files are never read as objects: on a failed drive
			// they stay, and its objects are still served.
			s.log.Warn("store: leftover work files not removed from a failed drive", "mountpath", mp.path, "err", err)
		}
	}
	var out []found
	buckets, err := os.ReadDir(mp.objDir)
	if err != nil {
		return nil, fmt.Errorf("store: recover %s: %w", mp.path, err)
	}
	for _, bd := range buckets {
		bucket := bd.Name()
		bdir := filepath.Join(mp.objDir, bucket)
		if !bd.IsDir() || object.ValidateBucketName(bucket) != nil {
			s.quarantine(mp, bdir, "not a bucket directory")
			continue
		}
		fans, err := os.ReadDir(bdir)
		if err != nil {
			return nil, fmt.Errorf("store: recover %s: %w", mp.path, err)
		}
		for _, fd := range fans {
			fdir := filepath.Join(bdir, fd.Name())
			if !fd.IsDir() || len(fd.Name()) != 2 {
				s.quarantine(mp, fdir, "not a fan-out directory")
				continue
			}
			files, err := os.ReadDir(fdir)
			if err != nil {
				return nil, fmt.Errorf("store: recover %s: %w", mp.path, err)
			}
			for _, f := range files {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				p := filepath.Join(fdir, f.Name())
				info, err := s.checkObjectFile(p, bucket, fd.Name(), f)
				if err != nil {
					s.quarantine(mp, p, err.Error())
					continue
				}
				out = append(out, found{info: info, mp: mp.idx})
			}
		}
	}
	return out, nil
}

// quarantineDir holds, per mountpath, what Open found under obj/ and could
// not take for an object: moved aside, never deleted, since it may be an
// object of another version of the store or one whose metadata a failing
// drive could not read.
const quarantineDir = "quarantine"

// quarantine moves p (under mp's obj/) to the same place under mp's
// quarantine/, and logs why.
func (s *Store) quarantine(mp *mountpath, p, why string) {
	rel, err := filepath.Rel(mp.objDir, p)
	if err == nil {
		dst := filepath.Join(mp.root, quarantineDir, rel)
		if err = os.MkdirAll(filepath.Dir(dst), 0o755); err == nil {
			err = os.Rename(p, dst)
		}
		if err == nil {
			s.log.Error("store: not an object; moved to quarantine", "path", p, "to", dst, "reason", why)
			return
		}
	}
	s.log.Error("store: not an object; left out (could not move it to quarantine)", "path", p, "reason", why, "err", err)
}

// checkObjectFile validates one object file found at Open.
func (s *Store) checkObjectFile(p, bucket, fan string, d os.DirEntry) (object.Info, error) {
	if !d.Type().IsRegular() {
		return object.Info{}, fmt.Errorf("not a regular file")
	}
	info, err := readInfo(p)
	if err != nil {
		return object.Info{}, fmt.Errorf("metadata: %w", err)
	}
	if info.Bucket != bucket || object.ValidateKey(info.Key) != nil {
		return object.Info{}, fmt.Errorf("metadata names %q/%q", info.Bucket, info.Key)
	}
	if n := objectName(info.Key); n != d.Name() || n[:2] != fan {
		return object.Info{}, fmt.Errorf("file name is not the hash of key %q", info.Key)
	}
	st, err := os.Stat(p)
	if err != nil {
		return object.Info{}, err
	}
	if st.Size() != info.Size {
		return object.Info{}, fmt.Errorf("file has %d bytes, metadata says %d", st.Size(), info.Size)
	}
	return info, nil
}

// removeLeftovers removes what a crash left in dir (work files, and
// directories other than the work directories keep).
func (s *Store) removeLeftovers(dir string, keep []string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // a work directory a read-only mountpath never had
	}
	if err != nil {
		return err
	}
	removed := false
	for _, d := range ents {
		p := filepath.Join(dir, d.Name())
		if d.IsDir() && slices.Contains(keep, p) {
			continue
		}
		s.log.Info("store: removing leftover work file", "path", p)
		if err := os.RemoveAll(p); err != nil {
			return err
		}
		removed = true
	}
	if removed {
		_ = syncDir(dir)
	}
	return nil
}
