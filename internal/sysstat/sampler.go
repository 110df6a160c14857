package sysstat

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"
)

// Sampler reads a node's counters. The zero value samples every NIC and no
// disk; set Dirs to the node's mountpaths.
type Sampler struct {
	Node string   // node name recorded in snapshots
	Dirs []string // mountpaths whose disks are sampled
	NICs []string // interfaces to report; empty means all
	// Counters, if set, is called on every sample for the node's own
	// counters (cold/warm hits and the like).
	Counters func() map[string]float64
	// ProcRoot and SysRoot default to /proc and /sys; tests point them at
	// fixtures.
	ProcRoot, SysRoot string
	// Now defaults to time.Now.
	Now func() time.Time
}

func (s *Sampler) roots() (proc, sys string) {
	proc, sys = s.ProcRoot, s.SysRoot
	if proc == "" {
		proc = "/proc"
	}
	if sys == "" {
		sys = "/sys"
	}
	return proc, sys
}

// Sample reads the counters once. Directories without a block device are
// listed in Snapshot.Unmapped rather than failing the sample; a missing
// directory or unreadable /proc file is an error.
func (s *Sampler) Sample(ctx context.Context) (Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return Snapshot{}, err
	}
	procRoot, sysRoot := s.roots()
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	snap := Snapshot{Node: s.Node, Time: now()}

	if len(s.Dirs) > 0 {
		disks, unmapped, err := s.disks(procRoot, sysRoot)
		if err != nil {
			return Snapshot{}, err
		}
		snap.Disks, snap.Unmapped = disks, unmapped
	}

	f, err := os.Open(filepath.Join(procRoot, "net", "dev"))
	if err != nil {
		return Snapshot{}, fmt.Errorf("sysstat: %w", err)
	}
	nics, err := ParseNetDev(f)
	f.Close()
	if err != nil {
		return Snapshot{}, err
	}
	for _, n := range nics {
		if len(s.NICs) == 0 || slices.Contains(s.NICs, n.Name) {
			snap.NICs = append(snap.NICs, n)
		}
	}
	if s.Counters != nil {
		snap.Counters = s.Counters()
	}
	return snap, nil
}

func (s *Sampler) disks(procRoot, sysRoot string) ([]DiskStat, []string, error) {
	var mounts []Mount
	if f, err := os.Open(filepath.Join(procRoot, "self", "mountinfo")); err == nil {
		mounts, err = ParseMountinfo(f)
		f.Close()
		if err != nil {
			return nil, nil, err
		}
	}
	byDisk := map[string]*DiskStat{}
	var order []string
	var unmapped []string
	for _, dir := range s.Dirs {
		maj, min, err := devNumber(dir)
		if err != nil {
			return nil, nil, err
		}
		dev, err := resolveDevice(sysRoot, mounts, maj, min)
		if errors.Is(err, ErrNoDevice) {
			unmapped = append(unmapped, fmt.Sprintf("%s: %v", dir, err))
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		d, ok := byDisk[dev.Disk]
		if !ok {
			d = &DiskStat{Device: dev.Disk}
			byDisk[dev.Disk] = d
			order = append(order, dev.Disk)
		}
		d.Dirs = append(d.Dirs, dir)
		if dev.Part != "" && !slices.Contains(d.Parts, dev.Part) {
			d.Parts = append(d.Parts, dev.Part)
		}
	}
	if len(byDisk) == 0 {
		return nil, unmapped, nil
	}
	f, err := os.Open(filepath.Join(procRoot, "diskstats"))
	if err != nil {
		return nil, nil, fmt.Errorf("sysstat: %w", err)
	}
	counters, err := ParseDiskstats(f)
	f.Close()
	if err != nil {
		return nil, nil, err
	}
	found := map[string]bool{}
	for _, c := range counters {
		d, ok := byDisk[c.Name]
		if !ok {
			continue
		}
		found[c.Name] = true
		d.MajMin = fmt.Sprintf("%d:%d", c.Major, c.Minor)
		d.ReadIOs, d.WriteIOs = c.ReadIOs, c.WriteIOs
		d.ReadBytes, d.WriteBytes = c.ReadSectors*SectorSize, c.WriteSectors*SectorSize
		d.IOTimeMs, d.InFlight = c.IOTimeMs, c.InFlight
	}
	sort.Strings(order)
	out := make([]DiskStat, 0, len(order))
	for _, name := range order {
		if !found[name] {
			for _, dir := range byDisk[name].Dirs {
				unmapped = append(unmapped, fmt.Sprintf("%s: %v: %s is not in diskstats", dir, ErrNoDevice, name))
			}
			continue
		}
		out = append(out, *byDisk[name])
	}
	return out, unmapped, nil
}
