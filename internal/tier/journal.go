package tier

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// The write-back journal is an append-only file of records, each framed as
//
//	u32 payload length | u32 CRC-32C of the payload | payload
//
// (little endian). A payload is a kind byte followed by uvarint/varint
// numbers and uvarint-length-prefixed strings (see Record.encode). Records
// of owned writes are fsynced before a PUT is acknowledged; completion
// records are not (losing one only repeats an idempotent upload). At open
// the file is replayed and the live records are rewritten to a new file
// (compaction), which also happens when the file grows past a size bound.
//
// Replay does not stop at the first bad record. A record that fails (bad
// length, checksum mismatch, undecodable payload) is where a damaged region
// starts; replay resumes at the next frame it can trust (see resync), so a
// record damaged in the middle of the file (bit rot, a bad sector) does not
// take the good records behind it along. Only when no trustworthy frame
// follows is the rest a tail (normally the torn tail of an append a crash
// interrupted). Every damaged region, the tail included, is moved out of the
// journal into one file next to it, journal.cut-<unix nanoseconds>, for
// inspection: for each region in file order, a line
//
//	journal.log offset=<byte offset> length=<n>
//
// then the region's n bytes exactly as they were, then a newline.
//
// Owned deletes are also kept in a second journal of the same format (the
// deletes journal, see destager.dj), so that one lost to damage here is
// still replayed.

// Kind is the type of a journal record.
type Kind uint8

// Journal record kinds.
const (
	KindPut           Kind = 1  // an owned write to destage
	KindDelete        Kind = 2  // an owned delete to destage
	KindDone          Kind = 3  // the owned operation Seq of Bucket/Key reached the backend
	KindReplicaPut    Kind = 4  // this node holds a replica of Owner's write Seq
	KindReplicaDelete Kind = 5  // Owner deleted Bucket/Key (Seq); the replica is gone
	KindReplicaDone   Kind = 6  // Owner destaged Seq: the replica record is finished
	KindSeqMark       Kind = 7  // the next owned sequence number is at least Seq
	KindNotice        Kind = 8  // holder Owner missed the notice that Seq of Bucket/Key was destaged
	KindNoticeDelete  Kind = 9  // holder Owner missed the notice that Seq deleted Bucket/Key
	KindNoticeDone    Kind = 10 // the notices of Seq and before reached holder Owner (or expired)
	KindSuperseded    Kind = 11 // owned operation Seq of Bucket/Key must also tell Holders (holders of writes it superseded)
)

// Limits the decoder enforces.
const (
	maxRecord  = 1 << 20
	maxString  = 64 << 10
	maxHolders = 64
)

// ErrCorrupt marks a record that cannot be decoded.
var ErrCorrupt = errors.New("tier: corrupt journal record")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Record is one journal entry.
type Record struct {
	Kind    Kind
	Seq     uint64
	Time    time.Time // when the operation was accepted
	Bucket  string
	Key     string
	Size    int64
	ETag    string
	Owner   string   // replica records: the owner node; notice records: the holder
	Holders []string // owned writes: nodes holding replicas
}

func putString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// Encode appends the framed record to b.
func (r Record) Encode(b []byte) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0, 0, 0, 0, 0)
	b = append(b, byte(r.Kind))
	b = binary.AppendUvarint(b, r.Seq)
	var t int64
	if !r.Time.IsZero() {
		t = r.Time.UnixNano()
	}
	b = binary.AppendVarint(b, t)
	b = putString(b, r.Bucket)
	b = putString(b, r.Key)
	b = binary.AppendVarint(b, r.Size)
	b = putString(b, r.ETag)
	b = putString(b, r.Owner)
	b = binary.AppendUvarint(b, uint64(len(r.Holders)))
	for _, h := range r.Holders {
		b = putString(b, h)
	}
	payload := b[start+8:]
	binary.LittleEndian.PutUint32(b[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(b[start+4:], crc32.Checksum(payload, castagnoli))
	return b
}

type decoder struct {
	b    []byte
	err  error
	skip bool // check the structure only: no string is copied, no error formatted
}

// corrupt fails the decoding: with ErrCorrupt alone when skipping (resync
// checks every offset of a damaged region: that must be cheap).
func (d *decoder) corrupt(what string) {
	if d.skip {
		d.err = ErrCorrupt
		return
	}
	d.err = fmt.Errorf("%w: %s", ErrCorrupt, what)
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.corrupt("bad uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.corrupt("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) str() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > maxString || n > uint64(len(d.b)) {
		d.err = ErrCorrupt // cheap while resync scans
		if !d.skip {
			d.err = fmt.Errorf("%w: string of %d bytes", ErrCorrupt, n)
		}
		return ""
	}
	var s string
	if !d.skip {
		s = string(d.b[:n])
	}
	d.b = d.b[n:]
	return s
}

// DecodeRecord decodes the framed record at the start of b and returns it
// with the number of bytes it used. io.ErrUnexpectedEOF means b ends inside
// the record (a torn tail); ErrCorrupt means the bytes are not a record.
func DecodeRecord(b []byte) (Record, int, error) {
	payload, err := framePayload(b)
	if err != nil {
		return Record{}, 0, err
	}
	if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(b[4:]) {
		return Record{}, 0, fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	r, err := decodePayload(payload, false)
	if err != nil {
		return Record{}, 0, err
	}
	return r, 8 + len(payload), nil
}

// framePayload returns the payload of the frame at the start of b, its
// length checked but not its checksum.
func framePayload(b []byte) ([]byte, error) {
	if len(b) < 8 {
		return nil, io.ErrUnexpectedEOF
	}
	n := binary.LittleEndian.Uint32(b)
	if n == 0 || n > maxRecord {
		return nil, fmt.Errorf("%w: length %d", ErrCorrupt, n)
	}
	if uint64(len(b)-8) < uint64(n) {
		return nil, io.ErrUnexpectedEOF
	}
	return b[8 : 8+n], nil
}

// decodePayload decodes a record's payload (not empty); with skip it only
// checks that the payload is one, allocating nothing but errors.
func decodePayload(payload []byte, skip bool) (Record, error) {
	var r Record
	r.Kind = Kind(payload[0])
	if r.Kind < KindPut || r.Kind > KindSuperseded {
		if skip {
			return Record{}, ErrCorrupt
		}
		return Record{}, fmt.Errorf("%w: kind %d", ErrCorrupt, r.Kind)
	}
	d := decoder{b: payload[1:], skip: skip}
	r.Seq = d.uvarint()
	if t := d.varint(); t != 0 && !skip {
		r.Time = time.Unix(0, t)
	}
	r.Bucket = d.str()
	r.Key = d.str()
	r.Size = d.varint()
	r.ETag = d.str()
	r.Owner = d.str()
	nh := d.uvarint()
	if d.err == nil && nh > maxHolders {
		d.err = ErrCorrupt // cheap while resync scans
		if !skip {
			d.err = fmt.Errorf("%w: %d holders", ErrCorrupt, nh)
		}
	}
	for i := uint64(0); i < nh && d.err == nil; i++ {
		if h := d.str(); !skip {
			r.Holders = append(r.Holders, h)
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = ErrCorrupt // cheap while resync scans
		if !skip {
			d.err = fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(d.b))
		}
	}
	if d.err != nil {
		return Record{}, d.err
	}
	return r, nil
}

// journalFile is what the journal needs of its file (an *os.File).
type journalFile interface {
	Write(p []byte) (int, error)
	Seek(offset int64, whence int) (int64, error)
	Truncate(size int64) error
	Sync() error
	Close() error
}

// journal is the open journal file.
type journal struct {
	dir     string
	mu      sync.Mutex
	f       journalFile
	broken  error // a failed write could not be undone: appends are refused
	behind  bool  // state applied without its record written: rewrite soon
	size    int64
	live    int64 // size right after the last compaction
	buf     []byte
	written uint64 // appends written to f so far

	smu    sync.Mutex // held across an fsync; taken before mu
	synced uint64     // appends known to be durable

	// cut names the file that keeps the damaged regions openJournal cut
	// out of the journal (the tail of a torn append, damaged records in
	// the middle), cutBytes is their total size and cutRegions how many
	// there were; "", 0, 0 if nothing was cut. cutMiddle: some region was
	// not the tail, so records were skipped, not only a torn append.
	cut        string
	cutBytes   int
	cutRegions int
	cutMiddle  bool
}

const journalName = "journal.log"

// minFrame is the size of the smallest framed record: a header and nine
// one-byte fields.
const minFrame = 8 + 9

// span is a region of the journal file.
type span struct{ off, n int }

// openJournal reads every good record of dir/journal.log and returns them in
// file order. Damaged regions (see resync) are kept in a journal.cut-<time>
// file and removed from the journal: a tail alone is truncated off, regions
// in the middle make it rewritten from the good records.
func openJournal(dir string) (*journal, []Record, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("tier: journal dir: %w", err)
	}
	path := filepath.Join(dir, journalName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("tier: open journal: %w", err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("tier: read journal: %w", err)
	}
	var recs []Record
	var bad []span
	off := 0
	for off < len(data) {
		r, n, err := DecodeRecord(data[off:])
		if err != nil {
			next := resync(data, off)
			bad = append(bad, span{off, next - off})
			off = next
			continue
		}
		recs = append(recs, r)
		off += n
	}
	j := &journal{dir: dir, f: f, size: int64(len(data)), cutRegions: len(bad)}
	if len(bad) > 0 {
		// What is cut out is kept first: a damaged record may be an
		// acknowledged write.
		if j.cut, err = keepCut(dir, data, bad); err != nil {
			f.Close()
			return nil, nil, err
		}
		for _, b := range bad {
			j.cutBytes += b.n
		}
		j.cutMiddle = len(bad) > 1 || bad[0].off+bad[0].n < len(data)
		if !j.cutMiddle {
			// Only a tail, normally a torn append: cut it off.
			if err := f.Truncate(int64(bad[0].off)); err != nil {
				f.Close()
				return nil, nil, fmt.Errorf("tier: truncate journal tail: %w", err)
			}
			j.size = int64(bad[0].off)
		} else {
			// Damage in the middle: appends must not go after it (the
			// next replay would cut it out again), so the file is
			// rewritten with the good records only.
			if err := j.rewrite(func() []Record { return recs }); err != nil {
				j.f.Close()
				return nil, nil, err
			}
		}
	}
	if _, err := j.f.Seek(j.size, io.SeekStart); err != nil {
		j.f.Close()
		return nil, nil, err
	}
	return j, recs, nil
}

// keepCut writes the damaged regions of data to a new journal.cut-<time>
// file in dir (in the format the package comment gives) and returns its
// name, once it is durable.
func keepCut(dir string, data []byte, bad []span) (string, error) {
	name := filepath.Join(dir, fmt.Sprintf("journal.cut-%d", time.Now().UnixNano()))
	var buf []byte
	for _, b := range bad {
		buf = fmt.Appendf(buf, "%s offset=%d length=%d\n", journalName, b.off, b.n)
		buf = append(buf, data[b.off:b.off+b.n]...)
		buf = append(buf, '\n')
	}
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err == nil {
		_, err = f.Write(buf)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return "", fmt.Errorf("tier: keep the journal's damaged bytes: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return name, nil
}

// resync returns where replay resumes after the record at data[off:] failed
// to decode: the first offset after off where a frame can be trusted, or
// len(data) if there is none (the rest is a tail).
//
// A frame is trusted if it is whole and valid (length within limits,
// checksum, payload that decodes) and what follows it is consistent: the end
// of the file, another valid frame, the start of one the end of the file
// cuts short (a torn append), or a damaged record whose length field leads
// to a valid frame or to the end of the file (see recordEnd). A random
// match of a single frame's checksum is then not enough, and a good record
// between two damaged ones is still found.
//
// Found by scanning byte by byte, a frame could also be one that the
// payload of the damaged record carries inside a string a client chose (a
// key) rather than a record of its own. So when the damaged record's own
// length field leads to a valid frame or exactly to the end of the file,
// the damage is taken to be confined to that record, and resync resumes
// where it ends: a trusted frame found inside it is preferred only if the
// frames from there lead exactly to that end (then the length field was
// damaged, and those frames are the records behind it).
func resync(data []byte, off int) int {
	end := recordEnd(data, off)
	for p := off + 1; p < len(data); p++ {
		if p == end {
			return end
		}
		if trustedFrame(data, p) == 0 {
			continue
		}
		if end < 0 {
			return p
		}
		q := p
		for q < end {
			n, err := frameSize(data[q:])
			if err != nil {
				break
			}
			q += n
		}
		if q == end {
			return p
		}
		return end
	}
	return len(data)
}

// recordEnd returns where the record at data[off:] ends by its length field
// if that is within limits and leads to a valid frame or exactly to the end
// of the file; -1 otherwise.
func recordEnd(data []byte, off int) int {
	if len(data)-off < 8 {
		return -1
	}
	n := binary.LittleEndian.Uint32(data[off:])
	if n == 0 || n > maxRecord || uint64(len(data)-off-8) < uint64(n) {
		return -1
	}
	e := off + 8 + int(n)
	if e == len(data) {
		return e
	}
	if _, err := frameSize(data[e:]); err != nil {
		return -1
	}
	return e
}

// trustedFrame returns the size of the frame at data[p:] if resync may
// resume there, else 0.
func trustedFrame(data []byte, p int) int {
	n, err := frameSize(data[p:])
	if err != nil {
		return 0
	}
	q := p + n
	if q == len(data) {
		return n
	}
	if _, err := frameSize(data[q:]); err == nil || errors.Is(err, io.ErrUnexpectedEOF) || recordEnd(data, q) >= 0 {
		return n
	}
	return 0
}

// frameSize returns the size of the valid frame at the start of b, as
// DecodeRecord would, but rejects most garbage (as resync scans it) before
// computing a checksum or allocating a record.
func frameSize(b []byte) (int, error) {
	if len(b) < 8 {
		return 0, io.ErrUnexpectedEOF
	}
	n := binary.LittleEndian.Uint32(b)
	if n == 0 || n > maxRecord {
		return 0, ErrCorrupt
	}
	if uint64(len(b)-8) < uint64(n) {
		return 0, io.ErrUnexpectedEOF
	}
	if _, err := decodePayload(b[8:8+n], true); err != nil {
		return 0, err
	}
	_, size, err := DecodeRecord(b)
	return size, err
}

// errJournalClosed fails appends after close.
var errJournalClosed = errors.New("tier: journal closed")

// append writes records and, with sync, returns once they are durable.
// apply (if not nil) runs after a successful write while the journal is
// still locked, so that the in-memory state a compaction snapshots always
// matches the file; it runs before the fsync, so what it starts (a destage)
// may act on a write whose caller then gets an fsync error, like any write
// that fails late. Concurrent appends share fsyncs (group commit): one
// fsync covers every record written before it started.
func (j *journal) append(sync bool, apply func(), recs ...Record) error {
	return j.add(sync, false, apply, recs)
}

// appendAnyway is append for state that holds whether or not its record
// can be written, such as a write-back PUT's dirty copy, already committed:
// if the write fails (or the journal refuses it), apply still runs and the
// journal is marked behind, so that the next rewrite, which the destager
// makes soon, puts the record in the file. The error is still returned.
func (j *journal) appendAnyway(sync bool, apply func(), recs ...Record) error {
	return j.add(sync, true, apply, recs)
}

func (j *journal) add(sync, anyway bool, apply func(), recs []Record) error {
	j.mu.Lock()
	fail := func(err error) error {
		if anyway {
			j.behind = true
			if apply != nil {
				apply()
			}
		}
		j.mu.Unlock()
		return err
	}
	if j.f == nil {
		return fail(errJournalClosed)
	}
	if j.broken != nil {
		return fail(j.broken)
	}
	j.buf = j.buf[:0]
	for _, r := range recs {
		j.buf = r.Encode(j.buf)
	}
	n, err := j.f.Write(j.buf)
	if err != nil {
		// A short write (ENOSPC, EIO) leaves a torn record; replay stops
		// at it and would drop every later record, acknowledged ones
		// included. Cut it off, or refuse further appends.
		err = fmt.Errorf("tier: journal write: %w", err)
		if uerr := j.undo(n); uerr != nil {
			j.broken = fmt.Errorf("tier: journal unusable after a failed write (%w): %w", err, uerr)
		}
		return fail(err)
	}
	j.size += int64(n)
	j.written++
	seq := j.written
	if apply != nil {
		apply()
	}
	j.mu.Unlock()
	if !sync {
		return nil
	}
	return j.syncTo(seq)
}

// undo removes the n bytes a failed write left after j.size and puts the
// file offset back there (j.mu held).
func (j *journal) undo(n int) error {
	if n > 0 {
		if err := j.f.Truncate(j.size); err != nil {
			return err
		}
	}
	_, err := j.f.Seek(j.size, io.SeekStart)
	return err
}

// syncTo returns once append number seq is durable, fsyncing unless an
// fsync that started after it was written already has.
func (j *journal) syncTo(seq uint64) error {
	j.smu.Lock()
	defer j.smu.Unlock()
	if j.synced >= seq {
		return nil
	}
	j.mu.Lock()
	f, upTo, broken := j.f, j.written, j.broken
	j.mu.Unlock()
	if f == nil {
		return errJournalClosed
	}
	if broken != nil {
		// A later fsync would not say whether these records survived the
		// failed one; only the rewrite from memory makes them durable.
		return broken
	}
	if err := f.Sync(); err != nil {
		// The kernel may have dropped the pages that failed to write and
		// cleared the error: the next fsync could succeed over a hole.
		// The journal refuses appends until it is rewritten.
		err = fmt.Errorf("tier: journal fsync: %w", err)
		j.mu.Lock()
		if j.broken == nil {
			j.broken = fmt.Errorf("tier: journal unusable after a failed fsync: %w", err)
		}
		j.mu.Unlock()
		return err
	}
	j.synced = upTo
	return nil
}

// rewrite replaces the journal with the records snapshot returns
// (compaction): a new file is written and fsynced, renamed over the old one,
// and the directory fsynced. No append runs in between.
func (j *journal) rewrite(snapshot func() []Record) error {
	j.smu.Lock()
	defer j.smu.Unlock()
	j.mu.Lock()
	defer j.mu.Unlock()
	recs := snapshot()
	tmp := filepath.Join(j.dir, journalName+".tmp")
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("tier: compact journal: %w", err)
	}
	var buf []byte
	for _, r := range recs {
		buf = r.Encode(buf)
	}
	_, err = f.Write(buf)
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("tier: compact journal: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(j.dir, journalName)); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("tier: compact journal: %w", err)
	}
	if d, err := os.Open(j.dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	if j.f != nil {
		j.f.Close()
	}
	j.f = f
	j.broken, j.behind = nil, false // the new file is whole and holds the state
	j.size = int64(len(buf))
	j.live = j.size
	j.synced = j.written // the new file holds them all, fsynced
	return nil
}

// needsCompaction reports whether the file has grown past limit and to at
// least twice its live size, so that a large live backlog is not rewritten
// over and over, or whether a failed write left it unusable (a rewrite
// makes it whole again).
func (j *journal) needsCompaction(limit int64) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.broken != nil || j.behind || j.size >= limit && j.size >= 2*j.live
}

// needsRewrite reports whether a failed write left the journal refusing
// appends, or without records of state already applied, until it is
// rewritten.
func (j *journal) needsRewrite() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.broken != nil || j.behind
}

func (j *journal) bytes() int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.size
}

func (j *journal) close() error {
	j.smu.Lock()
	defer j.smu.Unlock()
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	err := j.f.Sync()
	if cerr := j.f.Close(); err == nil {
		err = cerr
	}
	j.f = nil
	return err
}
