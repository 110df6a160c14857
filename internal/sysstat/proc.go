package sysstat

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// DiskCounters is one line of /proc/diskstats.
type DiskCounters struct {
	Major, Minor uint32
	Name         string
	ReadIOs      uint64
	ReadSectors  uint64
	WriteIOs     uint64
	WriteSectors uint64
	InFlight     uint64
	IOTimeMs     uint64
}

// ParseDiskstats parses /proc/diskstats text. Lines need at least the 14
// fields of old kernels; the discard and flush fields of newer ones are
// ignored.
func ParseDiskstats(r io.Reader) ([]DiskCounters, error) {
	var out []DiskCounters
	err := eachLine(r, "diskstats", func(line int, text string) error {
		f := strings.Fields(text)
		if len(f) == 0 {
			return nil
		}
		if len(f) < 14 {
			return fmt.Errorf("%w: diskstats line %d: %d fields, want at least 14", ErrParse, line, len(f))
		}
		var d DiskCounters
		maj, err1 := strconv.ParseUint(f[0], 10, 32)
		min, err2 := strconv.ParseUint(f[1], 10, 32)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("%w: diskstats line %d: bad device number %q:%q", ErrParse, line, f[0], f[1])
		}
		d.Major, d.Minor, d.Name = uint32(maj), uint32(min), f[2]
		var nums [11]uint64
		if err := parseUints(nums[:], f[3:], "diskstats", line, 4); err != nil {
			return err
		}
		d.ReadIOs, d.ReadSectors = nums[0], nums[2]
		d.WriteIOs, d.WriteSectors = nums[4], nums[6]
		d.InFlight, d.IOTimeMs = nums[8], nums[9]
		out = append(out, d)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ParseNetDev parses /proc/net/dev text (two header lines, then one line per
// interface: "name: 8 receive fields 8 transmit fields").
func ParseNetDev(r io.Reader) ([]NICStat, error) {
	var out []NICStat
	err := eachLine(r, "net/dev", func(line int, text string) error {
		name, rest, ok := strings.Cut(text, ":")
		if !ok {
			if line <= 2 || strings.TrimSpace(text) == "" {
				return nil // headers
			}
			return fmt.Errorf("%w: net/dev line %d: no colon", ErrParse, line)
		}
		if strings.Contains(name, "|") {
			return nil
		}
		name = strings.TrimSpace(name)
		f := strings.Fields(rest)
		if name == "" || strings.ContainsAny(name, " \t") || len(f) < 16 {
			return fmt.Errorf("%w: net/dev line %d: %d fields, want 16", ErrParse, line, len(f))
		}
		var nums [16]uint64
		if err := parseUints(nums[:], f, "net/dev", line, 1); err != nil {
			return err
		}
		out = append(out, NICStat{
			Name:    name,
			RxBytes: nums[0], RxErrors: nums[2], RxDrops: nums[3],
			TxBytes: nums[8], TxErrors: nums[10], TxDrops: nums[11],
		})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// eachLine calls fn with every line of r and its number (from 1); what
// names the file in errors.
func eachLine(r io.Reader, what string, fn func(line int, text string) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	line := 0
	for sc.Scan() {
		line++
		if err := fn(line, sc.Text()); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrParse, what, err)
	}
	return nil
}

// parseUints parses the first len(dst) fields of f, decimal, into dst;
// errors name the line and the field's number, counted from first.
func parseUints(dst []uint64, f []string, what string, line, first int) error {
	for i := range dst {
		v, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return fmt.Errorf("%w: %s line %d field %d: %q", ErrParse, what, line, first+i, f[i])
		}
		dst[i] = v
	}
	return nil
}

// Mount is one line of /proc/self/mountinfo, reduced to what device
// resolution needs.
type Mount struct {
	Major, Minor uint32
	MountPoint   string
	FSType       string
	Source       string
}

// ParseMountinfo parses /proc/self/mountinfo text (see proc(5)): fields
// "id parent maj:min root mountpoint options [optional...] - fstype source
// superoptions". Octal escapes (\040 for a space) in paths are decoded.
func ParseMountinfo(r io.Reader) ([]Mount, error) {
	var out []Mount
	err := eachLine(r, "mountinfo", func(line int, text string) error {
		f := strings.Fields(text)
		if len(f) == 0 {
			return nil
		}
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+1 >= len(f) {
			return fmt.Errorf("%w: mountinfo line %d: malformed", ErrParse, line)
		}
		majs, mins, ok := strings.Cut(f[2], ":")
		maj, err1 := strconv.ParseUint(majs, 10, 32)
		min, err2 := strconv.ParseUint(mins, 10, 32)
		if !ok || err1 != nil || err2 != nil {
			return fmt.Errorf("%w: mountinfo line %d: bad device %q", ErrParse, line, f[2])
		}
		m := Mount{Major: uint32(maj), Minor: uint32(min), MountPoint: unescape(f[4]), FSType: f[sep+1]}
		if sep+2 < len(f) {
			m.Source = unescape(f[sep+2])
		}
		out = append(out, m)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// unescape decodes the \ooo octal escapes the kernel uses in mountinfo.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ParseProcStatCPU returns the user+system CPU time in clock ticks from the
// text of /proc/PID/stat (fields 14 and 15; the command name in parentheses
// may hold spaces).
func ParseProcStatCPU(b []byte) (uint64, error) {
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("sysstat: /proc/PID/stat without a command name")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("sysstat: /proc/PID/stat has %d fields after the name, want 13", len(f))
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	k, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("sysstat: bad CPU times %q %q in /proc/PID/stat", f[11], f[12])
	}
	return u + k, nil
}

// ProcessCPU is the user+system CPU time process pid has used.
func ProcessCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	ticks, err := ParseProcStatCPU(b)
	return time.Duration(ticks) * 10 * time.Millisecond, err // USER_HZ is 100 on Linux
}
