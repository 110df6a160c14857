// Package sysstat samples the node-level counters that explain storage
// performance: per-disk bytes, IOs and busy time from /proc/diskstats for the
// block devices behind a node's mountpaths (like iostat's %util), per-NIC
// bytes and errors from /proc/net/dev, and free-form counters the node adds
// (cold/warm hits and the like). A Snapshot holds raw cumulative counters;
// Rates turns two snapshots into per-second figures.
package sysstat

import (
	"errors"
	"sort"
	"time"
)

// Sentinel errors.
var (
	// ErrParse reports malformed /proc text.
	ErrParse = errors.New("sysstat: parse error")
	// ErrNoDevice reports a directory that is not backed by a block device
	// (tmpfs, overlay, a network file system).
	ErrNoDevice = errors.New("sysstat: no block device")
)

// SectorSize is the unit of the sector counters in /proc/diskstats; the
// kernel always counts in 512-byte sectors whatever the device's block size.
const SectorSize = 512

// Snapshot is one sample of a node's cumulative counters.
type Snapshot struct {
	Node     string             `json:"node"`
	Time     time.Time          `json:"time"`
	Disks    []DiskStat         `json:"disks"`
	NICs     []NICStat          `json:"nics"`
	Counters map[string]float64 `json:"counters,omitempty"`
	// Unmapped lists directories that have no block device behind them,
	// with the reason, so a report can say why a mountpath has no disk line.
	Unmapped []string `json:"unmapped,omitempty"`
}

// DiskStat holds the cumulative counters of one whole disk. Several
// mountpaths on one disk (or on partitions of one disk) collapse into one
// DiskStat whose Dirs lists them all.
type DiskStat struct {
	Device string   `json:"device"`          // kernel name of the whole disk, e.g. "vda", "nvme0n1"
	MajMin string   `json:"majmin"`          // "254:0"
	Dirs   []string `json:"dirs,omitempty"`  // mountpaths on this disk
	Parts  []string `json:"parts,omitempty"` // partitions the dirs live on, if any

	ReadBytes  uint64 `json:"read_bytes"`
	WriteBytes uint64 `json:"write_bytes"`
	ReadIOs    uint64 `json:"read_ios"`
	WriteIOs   uint64 `json:"write_ios"`
	IOTimeMs   uint64 `json:"io_time_ms"` // milliseconds the device had I/O in flight
	InFlight   uint64 `json:"in_flight"`  // I/Os in progress at the time of the sample
}

// NICStat holds the cumulative counters of one network interface.
type NICStat struct {
	Name     string `json:"name"`
	RxBytes  uint64 `json:"rx_bytes"`
	TxBytes  uint64 `json:"tx_bytes"`
	RxErrors uint64 `json:"rx_errors"`
	TxErrors uint64 `json:"tx_errors"`
	RxDrops  uint64 `json:"rx_drops"`
	TxDrops  uint64 `json:"tx_drops"`
}

// Rate is the per-second view of the interval between two snapshots.
type Rate struct {
	Node     string             `json:"node"`
	Time     time.Time          `json:"time"`     // end of the interval
	Interval float64            `json:"interval"` // seconds
	Disks    []DiskRate         `json:"disks"`
	NICs     []NICRate          `json:"nics"`
	Counters map[string]float64 `json:"counters,omitempty"` // per second
}

// DiskRate is one disk's throughput and utilisation over an interval.
type DiskRate struct {
	Device    string   `json:"device"`
	Dirs      []string `json:"dirs,omitempty"`
	ReadBps   float64  `json:"read_bps"`
	WriteBps  float64  `json:"write_bps"`
	ReadIOPS  float64  `json:"read_iops"`
	WriteIOPS float64  `json:"write_iops"`
	UtilPct   float64  `json:"util_pct"` // busy time / wall time, 0..100
	InFlight  float64  `json:"in_flight"`
}

// NICRate is one interface's throughput over an interval.
type NICRate struct {
	Name      string  `json:"name"`
	RxBps     float64 `json:"rx_bps"`
	TxBps     float64 `json:"tx_bps"`
	RxErrorsS float64 `json:"rx_errors_s"`
	TxErrorsS float64 `json:"tx_errors_s"`
}

// Rates computes per-second figures between prev and cur. Devices, NICs and
// counters present in only one of them are skipped; counters that went
// backwards (a restart) count as zero. It returns a zero Rate when cur is
// not later than prev.
func Rates(prev, cur Snapshot) Rate {
	r := Rate{Node: cur.Node, Time: cur.Time}
	dt := cur.Time.Sub(prev.Time).Seconds()
	if dt <= 0 {
		return r
	}
	r.Interval = dt
	pd := make(map[string]DiskStat, len(prev.Disks))
	for _, d := range prev.Disks {
		pd[d.Device] = d
	}
	for _, c := range cur.Disks {
		p, ok := pd[c.Device]
		if !ok {
			continue
		}
		util := float64(delta(p.IOTimeMs, c.IOTimeMs)) / (dt * 1000) * 100
		if util > 100 {
			util = 100
		}
		r.Disks = append(r.Disks, DiskRate{
			Device:    c.Device,
			Dirs:      c.Dirs,
			ReadBps:   float64(delta(p.ReadBytes, c.ReadBytes)) / dt,
			WriteBps:  float64(delta(p.WriteBytes, c.WriteBytes)) / dt,
			ReadIOPS:  float64(delta(p.ReadIOs, c.ReadIOs)) / dt,
			WriteIOPS: float64(delta(p.WriteIOs, c.WriteIOs)) / dt,
			UtilPct:   util,
			InFlight:  float64(c.InFlight),
		})
	}
	pn := make(map[string]NICStat, len(prev.NICs))
	for _, n := range prev.NICs {
		pn[n.Name] = n
	}
	for _, c := range cur.NICs {
		p, ok := pn[c.Name]
		if !ok {
			continue
		}
		r.NICs = append(r.NICs, NICRate{
			Name:      c.Name,
			RxBps:     float64(delta(p.RxBytes, c.RxBytes)) / dt,
			TxBps:     float64(delta(p.TxBytes, c.TxBytes)) / dt,
			RxErrorsS: float64(delta(p.RxErrors, c.RxErrors)) / dt,
			TxErrorsS: float64(delta(p.TxErrors, c.TxErrors)) / dt,
		})
	}
	if len(cur.Counters) > 0 {
		r.Counters = make(map[string]float64, len(cur.Counters))
		keys := make([]string, 0, len(cur.Counters))
		for k := range cur.Counters {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			pv, ok := prev.Counters[k]
			if !ok {
				continue
			}
			d := cur.Counters[k] - pv
			if d < 0 {
				d = 0
			}
			r.Counters[k] = d / dt
		}
	}
	return r
}

func delta(a, b uint64) uint64 {
	if b < a {
		return 0
	}
	return b - a
}
