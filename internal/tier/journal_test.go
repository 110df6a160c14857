package tier

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

func sampleRecords() []Record {
	now := time.Unix(1700000000, 123456789)
	return []Record{
		{Kind: KindSeqMark, Seq: 41},
		{Kind: KindPut, Seq: 42, Time: now, Bucket: "data", Key: "a/b c", Size: 1 << 40, ETag: "d41d8cd98f00b204e9800998ecf8427e", Holders: []string{"n2", "n3"}},
		{Kind: KindDelete, Seq: 43, Time: now, Bucket: "data", Key: "ключ"},
		{Kind: KindDone, Seq: 42, Bucket: "data", Key: "a/b c"},
		{Kind: KindReplicaPut, Seq: 7, Time: now, Bucket: "b", Key: "k", Size: 0, ETag: "x-2", Owner: "n9"},
		{Kind: KindReplicaDelete, Seq: 8, Bucket: "b", Key: "k", Owner: "n9"},
		{Kind: KindReplicaDone, Seq: 8, Bucket: "b", Key: "k", Owner: "n9"},
	}
}

func TestRecordRoundTrip(t *testing.T) {
	var buf []byte
	recs := sampleRecords()
	for _, r := range recs {
		buf = r.Encode(buf)
	}
	for i, want := range recs {
		got, n, err := DecodeRecord(buf)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if !got.Time.Equal(want.Time) {
			t.Errorf("record %d time %v, want %v", i, got.Time, want.Time)
		}
		got.Time, want.Time = time.Time{}, time.Time{}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("record %d\n got %+v\nwant %+v", i, got, want)
		}
		buf = buf[n:]
	}
	if len(buf) != 0 {
		t.Errorf("%d bytes left", len(buf))
	}
}

func TestDecodeRejects(t *testing.T) {
	good := sampleRecords()[1].Encode(nil)
	flip := append([]byte(nil), good...)
	flip[len(flip)-1] ^= 1
	badKind := Record{Kind: 99}.Encode(nil)
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, io.ErrUnexpectedEOF},
		{"short header", good[:5], io.ErrUnexpectedEOF},
		{"torn", good[:len(good)-3], io.ErrUnexpectedEOF},
		{"bit flip", flip, ErrCorrupt},
		{"zero length", make([]byte, 16), ErrCorrupt},
		{"huge length", []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}, ErrCorrupt},
		{"unknown kind", badKind, ErrCorrupt},
	}
	for _, c := range cases {
		if _, _, err := DecodeRecord(c.b); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

func TestJournalTornTail(t *testing.T) {
	dir := t.TempDir()
	j, recs, err := openJournal(dir)
	if err != nil || len(recs) != 0 {
		t.Fatal(recs, err)
	}
	all := sampleRecords()
	if err := j.append(true, nil, all[1], all[2]); err != nil {
		t.Fatal(err)
	}
	size := j.bytes()
	j.close()
	// A crash in the middle of an append leaves half a record.
	f, _ := os.OpenFile(filepath.Join(dir, journalName), os.O_WRONLY|os.O_APPEND, 0)
	half := all[4].Encode(nil)
	f.Write(half[:len(half)/2])
	f.Close()
	j, recs, err = openJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	if len(recs) != 2 || recs[1].Key != "ключ" {
		t.Fatalf("replayed %+v", recs)
	}
	if fi, _ := os.Stat(filepath.Join(dir, journalName)); fi.Size() != size {
		t.Errorf("torn tail not cut: size %d, want %d", fi.Size(), size)
	}
	// What was cut is kept for inspection.
	want := []cutRegion{{off: int(size), b: half[:len(half)/2]}}
	if kept := readCut(t, j.cut); !reflect.DeepEqual(kept, want) || j.cutBytes != len(half)/2 || j.cutRegions != 1 || j.cutMiddle {
		t.Errorf("cut tail kept in %q: %+v (%d bytes in %d regions, middle %v), want %+v", j.cut, kept, j.cutBytes, j.cutRegions, j.cutMiddle, want)
	}
	// Appends continue after the good records.
	if err := j.append(true, nil, all[3]); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(filepath.Join(dir, journalName))
	if !bytes.HasSuffix(data, all[3].Encode(nil)) || int64(len(data)) != size+int64(len(all[3].Encode(nil))) {
		t.Error("append after recovery misplaced")
	}
}

func FuzzDecodeRecord(f *testing.F) {
	for _, r := range sampleRecords() {
		f.Add(r.Encode(nil))
	}
	f.Add([]byte{})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, n, err := DecodeRecord(b)
		// The resync scan's cheap check agrees.
		if m, err2 := frameSize(b); (err == nil) != (err2 == nil) || m != n {
			t.Fatalf("frameSize %d (%v), DecodeRecord %d (%v)", m, err2, n, err)
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("unexpected error type %v", err)
			}
			return
		}
		if n < 9 || n > len(b) {
			t.Fatalf("consumed %d of %d", n, len(b))
		}
		// A decoded record encodes back to the same bytes.
		if again := r.Encode(nil); !bytes.Equal(again, b[:n]) {
			t.Fatalf("re-encoding differs:\n%x\n%x", again, b[:n])
		}
	})
}

// TestJournalGroupCommit appends from many goroutines at once, with a
// compaction racing them: every append that returned is in the file, and
// each goroutine's records are in its own order.
func TestJournalGroupCommit(t *testing.T) {
	dir := t.TempDir()
	j, _, err := openJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 8, 50
	var mu sync.Mutex
	var applied []Record // what a compaction keeps: everything applied so far
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		go func(w int) {
			for i := 0; i < each; i++ {
				r := Record{Kind: KindSeqMark, Seq: uint64(w*each + i)}
				if err := j.append(true, func() { mu.Lock(); applied = append(applied, r); mu.Unlock() }, r); err != nil {
					errs <- err
					return
				}
				if i == each/2 && w == 0 {
					err := j.rewrite(func() []Record { mu.Lock(); defer mu.Unlock(); return append([]Record(nil), applied...) })
					if err != nil {
						errs <- err
						return
					}
				}
			}
			errs <- nil
		}(w)
	}
	for w := 0; w < writers; w++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := j.close(); err != nil {
		t.Fatal(err)
	}
	if err := j.append(true, nil, Record{Kind: KindSeqMark}); !errors.Is(err, errJournalClosed) {
		t.Fatalf("append after close: %v", err)
	}
	_, recs, err := openJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	last := map[uint64]int{}
	for _, r := range recs {
		w := r.Seq / each
		if i := int(r.Seq % each); i < last[w] {
			t.Fatalf("writer %d: record %d after %d", w, i, last[w])
		} else {
			last[w] = i + 1
		}
	}
	if len(recs) != writers*each {
		t.Fatalf("%d records in the journal, want %d", len(recs), writers*each)
	}
}

// shortFile makes the next write stop after half its bytes with ENOSPC,
// (failTruncate) its truncates fail, and (failSync) its next fsync fail.
type shortFile struct {
	*os.File
	short        bool
	failTruncate bool
	failSync     bool
	// match, if set, limits short to a write that holds it (a record of
	// one key), so that a record another goroutine appends meanwhile
	// does not take the fault.
	match []byte
}

func (f *shortFile) Sync() error {
	if f.failSync {
		f.failSync = false
		return syscall.EIO
	}
	return f.File.Sync()
}

func (f *shortFile) Write(p []byte) (int, error) {
	if f.short && (f.match == nil || bytes.Contains(p, f.match)) {
		f.short = false
		n, _ := f.File.Write(p[:len(p)/2])
		return n, syscall.ENOSPC
	}
	return f.File.Write(p)
}

func (f *shortFile) Truncate(size int64) error {
	if f.failTruncate {
		return syscall.EIO
	}
	return f.File.Truncate(size)
}

// A write that fails halfway (a full file system) must not leave a torn
// record in front of the records appended after it: replay stops at the
// first bad record and would drop them, acknowledged ones included.
func TestJournalFailedWriteLeavesNoTornRecord(t *testing.T) {
	dir := t.TempDir()
	j, _, err := openJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	all := sampleRecords()
	if err := j.append(true, nil, all[1]); err != nil {
		t.Fatal(err)
	}
	sf := &shortFile{File: j.f.(*os.File), short: true}
	j.f = sf
	applied := false
	if err := j.append(true, func() { applied = true }, all[2]); !errors.Is(err, syscall.ENOSPC) || applied {
		t.Fatalf("failed append: err %v, applied %v", err, applied)
	}
	if err := j.append(true, nil, all[3]); err != nil {
		t.Fatalf("append after a failed write: %v", err)
	}
	j.close()
	_, recs, err := openJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || !reflect.DeepEqual(recs[0], all[1]) || !reflect.DeepEqual(recs[1], all[3]) {
		t.Fatalf("replayed %+v, want the records before and after the failed write", recs)
	}
}

// A journal whose last write cannot be trusted refuses every later append
// until a compaction rewrites the file from memory:
//   - torn bytes that cannot be cut off: replay would drop what follows;
//   - a failed fsync, which is not retried: the kernel may have dropped the
//     pages it could not write and cleared the error, so a second fsync
//     could succeed over a hole.
func TestJournalRefusesAppendsUntilRewritten(t *testing.T) {
	all := sampleRecords()
	for _, tc := range []struct {
		name    string
		fault   func(f *os.File) journalFile
		failure error // the failed append's error; nil: any
		keep    []Record
		want    []Record // replayed after the rewrite and one more append
	}{
		{"torn write not cut off", func(f *os.File) journalFile { return &shortFile{File: f, short: true, failTruncate: true} },
			nil, []Record{all[1]}, []Record{all[1], all[3]}},
		{"failed fsync", func(f *os.File) journalFile { return &shortFile{File: f, failSync: true} },
			syscall.EIO, all[1:3], all[1:4]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			j, _, err := openJournal(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer j.close()
			if err := j.append(true, nil, all[1]); err != nil {
				t.Fatal(err)
			}
			j.f = tc.fault(j.f.(*os.File))
			if err := j.append(true, nil, all[2]); err == nil || tc.failure != nil && !errors.Is(err, tc.failure) {
				t.Fatalf("failed append: %v, want %v", err, tc.failure)
			}
			if err := j.append(true, nil, all[3]); err == nil {
				t.Fatal("append after the failure was acknowledged")
			}
			if !j.needsCompaction(1 << 30) {
				t.Error("the journal does not ask for the compaction that repairs it")
			}
			if err := j.rewrite(func() []Record { return tc.keep }); err != nil {
				t.Fatal(err)
			}
			if err := j.append(true, nil, all[3]); err != nil {
				t.Fatalf("append after compaction: %v", err)
			}
			j.close()
			_, recs, err := openJournal(dir)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(recs, tc.want) {
				t.Fatalf("replayed %+v, want %+v", recs, tc.want)
			}
		})
	}
}

// cutRegion is one region of a journal.cut file: where it was in the
// journal, and its bytes.
type cutRegion struct {
	off int
	b   []byte
}

// parseCut parses the contents of a journal.cut file (the format is in the
// package comment).
func parseCut(data []byte) ([]cutRegion, error) {
	var regions []cutRegion
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			return nil, fmt.Errorf("header %q without a newline", data)
		}
		var r cutRegion
		var n int
		if _, err := fmt.Sscanf(string(data[:i]), journalName+" offset=%d length=%d", &r.off, &n); err != nil {
			return nil, fmt.Errorf("header %q: %v", data[:i], err)
		}
		data = data[i+1:]
		if n < 0 || len(data) < n+1 || data[n] != '\n' {
			return nil, fmt.Errorf("region at %d: %d bytes and a newline do not follow", r.off, n)
		}
		r.b = data[:n]
		regions = append(regions, r)
		data = data[n+1:]
	}
	return regions, nil
}

// readCut reads the journal.cut file name ("": none).
func readCut(t *testing.T, name string) []cutRegion {
	t.Helper()
	if name == "" {
		return nil
	}
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	regions, err := parseCut(data)
	if err != nil {
		t.Errorf("cut file %s: %v", name, err)
	}
	return regions
}

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func encodeAll(recs []Record) []byte {
	var b []byte
	for _, r := range recs {
		b = r.Encode(b)
	}
	return b
}

// TestJournalSkipsDamagedRecords: a record damaged in the middle of the
// journal (in its length, checksum or payload) does not end the replay: the
// good records behind it are replayed, and every damaged region is kept,
// byte for byte, in the cut file. A tail with no good record behind it is
// cut off as before.
func TestJournalSkipsDamagedRecords(t *testing.T) {
	all := sampleRecords()
	F := make([][]byte, len(all)) // the framed records
	for i, r := range all {
		F[i] = r.Encode(nil)
	}
	// mod returns a copy of record i's frame changed by fn.
	mod := func(i int, fn func(b []byte)) []byte {
		b := append([]byte(nil), F[i]...)
		fn(b)
		return b
	}
	flip := func(i, at int) []byte { return mod(i, func(b []byte) { b[at] ^= 0x40 }) }
	length := func(i int, n uint32) []byte {
		return mod(i, func(b []byte) { binary.LittleEndian.PutUint32(b, n) })
	}
	keep := func(idx ...int) []Record {
		var recs []Record
		for _, i := range idx {
			recs = append(recs, all[i])
		}
		return recs
	}
	// off returns the offset at which parts[i] starts.
	off := func(i int, parts ...[]byte) int { return len(cat(parts[:i]...)) }
	garbage := make([]byte, 100)
	rand.NewChaCha8([32]byte{1}).Read(garbage)
	// A record whose key holds two valid frames (any client picks its
	// keys): they must not be taken for records when its payload is
	// damaged elsewhere.
	fake := string(cat(Record{Kind: KindDone, Seq: 42, Bucket: "data", Key: "a/b c"}.Encode(nil),
		Record{Kind: KindSeqMark, Seq: 1 << 60}.Encode(nil)))
	hiding := Record{Kind: KindPut, Seq: 44, Time: time.Unix(1700000000, 0), Bucket: "data", Key: fake, Size: 1, ETag: "e"}
	hidingF := hiding.Encode(nil)
	hidingBad := append([]byte(nil), hidingF...)
	hidingBad[len(hidingBad)-4] ^= 0x40 // in the etag, after the key

	type tc struct {
		name  string
		parts [][]byte // the journal file, in parts
		keep  []Record // replayed
		bad   []int    // the parts cut out; consecutive parts make one region
	}
	cases := []tc{
		{"payload bit flip", [][]byte{F[0], F[1], flip(2, 12), F[3], F[4], F[5], F[6]}, keep(0, 1, 3, 4, 5, 6), []int{2}},
		{"checksum damaged", [][]byte{F[0], F[1], flip(2, 5), F[3], F[4], F[5], F[6]}, keep(0, 1, 3, 4, 5, 6), []int{2}},
		{"huge length", [][]byte{F[0], F[1], length(2, 0xffffffff), F[3], F[4], F[5], F[6]}, keep(0, 1, 3, 4, 5, 6), []int{2}},
		{"length past the end of the file", [][]byte{F[0], F[1], length(2, uint32(len(encodeAll(all)))), F[3], F[4], F[5], F[6]}, keep(0, 1, 3, 4, 5, 6), []int{2}},
		{"length too short", [][]byte{F[0], F[1], length(2, uint32(len(F[2])-9)), F[3], F[4], F[5], F[6]}, keep(0, 1, 3, 4, 5, 6), []int{2}},
		{"zero length", [][]byte{F[0], F[1], length(2, 0), F[3], F[4], F[5], F[6]}, keep(0, 1, 3, 4, 5, 6), []int{2}},
		{"undecodable payload with a valid checksum", [][]byte{F[0], F[1], F[2], Record{Kind: 99}.Encode(nil), F[3], F[4], F[5], F[6]}, keep(0, 1, 2, 3, 4, 5, 6), []int{3}},
		{"garbage between records", [][]byte{F[0], F[1], F[2], F[3], garbage, F[4], F[5], F[6]}, keep(0, 1, 2, 3, 4, 5, 6), []int{4}},
		{"zeroed across two records", [][]byte{F[0], mod(1, func(b []byte) { clear(b[len(b)/2:]) }), mod(2, func(b []byte) { clear(b[:len(b)/2]) }), F[3], F[4], F[5], F[6]},
			keep(0, 3, 4, 5, 6), []int{1, 2}},
		{"first record damaged", [][]byte{flip(0, 9), F[1], F[2], F[3], F[4], F[5], F[6]}, keep(1, 2, 3, 4, 5, 6), []int{0}},
		{"several damaged regions", [][]byte{F[0], flip(1, 10), F[2], length(3, 1<<31), F[4], flip(5, 4), F[6]}, keep(0, 2, 4, 6), []int{1, 3, 5}},
		{"damage and a torn tail", [][]byte{F[0], F[1], flip(2, 12), F[3], F[4], F[5], F[6][:len(F[6])/2]}, keep(0, 1, 3, 4, 5), []int{2, 6}},
		{"one good record between damage and a torn tail", [][]byte{F[0], F[1], flip(2, 12), F[3], F[4][:len(F[4])-1]}, keep(0, 1, 3), []int{2, 4}},
		{"torn tail only", [][]byte{F[0], F[1], F[2], F[3][:len(F[3])-1]}, keep(0, 1, 2), []int{3}},
		{"frames hidden in a damaged record", [][]byte{F[0], F[1], hidingBad, F[3], F[4]}, keep(0, 1, 3, 4), []int{2}},
		{"frames hidden in a damaged last record", [][]byte{F[0], F[1], hidingBad}, keep(0, 1), []int{2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			data := cat(c.parts...)
			if err := os.WriteFile(filepath.Join(dir, journalName), data, 0o644); err != nil {
				t.Fatal(err)
			}
			var want []cutRegion
			for i, p := range c.bad {
				if i > 0 && c.bad[i-1] == p-1 {
					want[len(want)-1].b = cat(want[len(want)-1].b, c.parts[p])
					continue
				}
				want = append(want, cutRegion{off: off(p, c.parts...), b: c.parts[p]})
			}
			cutBytes := 0
			for _, r := range want {
				cutBytes += len(r.b)
			}
			middle := len(want) > 1 || len(want) == 1 && want[0].off+len(want[0].b) < len(data)

			j, recs, err := openJournal(dir)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(recs, c.keep) {
				t.Errorf("replayed\n%+v\nwant\n%+v", recs, c.keep)
			}
			if got := readCut(t, j.cut); !reflect.DeepEqual(got, want) {
				t.Errorf("cut file holds\n%+v\nwant\n%+v", got, want)
			}
			if j.cutBytes != cutBytes || j.cutRegions != len(want) || j.cutMiddle != middle {
				t.Errorf("cut %d bytes in %d regions (middle %v), want %d in %d (%v)", j.cutBytes, j.cutRegions, j.cutMiddle, cutBytes, len(want), middle)
			}
			// The journal now holds the good records only, and appends
			// go after them.
			if got, _ := os.ReadFile(filepath.Join(dir, journalName)); !bytes.Equal(got, encodeAll(c.keep)) || j.bytes() != int64(len(got)) {
				t.Errorf("journal after open: %d bytes (size %d), want the %d of the good records", len(got), j.bytes(), len(encodeAll(c.keep)))
			}
			more := Record{Kind: KindDone, Seq: 99, Bucket: "b", Key: "after"}
			if err := j.append(true, nil, more); err != nil {
				t.Fatal(err)
			}
			j.close()
			j, recs, err = openJournal(dir)
			if err != nil {
				t.Fatal(err)
			}
			j.close()
			if want := append(slices.Clip(c.keep), more); !reflect.DeepEqual(recs, want) || j.cut != "" {
				t.Errorf("after an append and a restart: replayed %+v, cut %q; want %+v and no cut", recs, j.cut, want)
			}
		})
	}
}

// FuzzJournalReplay opens journals made of good records, then arbitrary
// bytes, then more good records. Opening never fails or panics, the good
// records and the cut regions account for every byte, the cut file holds
// those bytes, the file left holds the replayed records, and replaying them
// into a destager does not panic. When no valid frame starts inside the
// arbitrary bytes (so none can swallow what follows), every good record,
// those after them included, is replayed.
func FuzzJournalReplay(f *testing.F) {
	all := sampleRecords()
	good := encodeAll(all)
	f.Add(uint8(2), []byte{}, uint8(3))
	f.Add(uint8(1), []byte{0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4, 5}, uint8(7))
	f.Add(uint8(0), good[:len(good)/3], uint8(7))
	f.Add(uint8(3), good[5:len(good)/2], uint8(0))
	f.Add(uint8(7), []byte{1, 0, 0, 0, 0, 0, 0, 0, 1}, uint8(2))
	f.Add(uint8(4), []byte{20, 0, 0, 0, 1, 2, 3, 4}, uint8(5))
	f.Add(uint8(4), append(Record{Kind: 99}.Encode(nil), 0x55), uint8(5))
	f.Add(uint8(2), Record{Kind: KindPut, Key: string(all[1].Encode(nil))}.Encode(nil)[:30], uint8(6))
	f.Fuzz(func(t *testing.T, before uint8, junk []byte, after uint8) {
		head := all[:int(before)%(len(all)+1)]
		tail := all[len(all)-int(after)%(len(all)+1):]
		data := cat(encodeAll(head), junk, encodeAll(tail))
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, journalName), data, 0o644); err != nil {
			t.Fatal(err)
		}
		j, recs, err := openJournal(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer j.close()
		kept, err := os.ReadFile(filepath.Join(dir, journalName))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(kept, encodeAll(recs)) {
			t.Fatalf("the journal holds %d bytes, not the %d replayed records", len(kept), len(recs))
		}
		var regions []cutRegion
		if j.cut != "" {
			b, err := os.ReadFile(j.cut)
			if err != nil {
				t.Fatal(err)
			}
			if regions, err = parseCut(b); err != nil {
				t.Fatal(err)
			}
		}
		// Replaying them into a destager does not panic, whatever they
		// are (a Done whose Put was lost, and so on).
		d := &destager{keys: make(map[string]*keyState), replicas: make(map[string]map[string]*op), undelivered: make(map[string]notice), nextSeq: 1}
		d.replay(recs, recs)
		// Every byte is in a replayed record or a cut region, in order.
		got := recs
		pos, n, ri := 0, 0, 0
		for pos < len(data) {
			if ri < len(regions) && regions[ri].off == pos {
				if !bytes.HasPrefix(data[pos:], regions[ri].b) || len(regions[ri].b) == 0 {
					t.Fatalf("cut region %d at %d does not hold the journal's bytes", ri, pos)
				}
				n += len(regions[ri].b)
				pos += len(regions[ri].b)
				ri++
				continue
			}
			r, size, err := DecodeRecord(data[pos:])
			if err != nil || len(recs) == 0 || !reflect.DeepEqual(r, recs[0]) {
				t.Fatalf("at %d: %+v (%v), not the next replayed record or a cut region", pos, r, err)
			}
			recs = recs[1:]
			pos += size
		}
		if ri != len(regions) || len(recs) != 0 || n != j.cutBytes || ri != j.cutRegions {
			t.Fatalf("%d of %d regions, %d records left, %d bytes cut of %d", ri, len(regions), len(recs), n, j.cutBytes)
		}
		for p := len(encodeAll(head)); p < len(encodeAll(head))+len(junk); p++ {
			if _, err := frameSize(data[p:]); err == nil {
				return // a frame starts in the junk: it may swallow good records
			}
		}
		if want := append(slices.Clip(head), tail...); !slices.EqualFunc(got, want, func(a, b Record) bool { return reflect.DeepEqual(a, b) }) {
			t.Fatalf("replayed\n%+v\nwant\n%+v", recs, want)
		}
	})
}
