package tier

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
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
	// What was cut is kept, in case it was not a torn tail but records
	// behind a damaged one.
	if kept, err := os.ReadFile(j.cut); err != nil || !bytes.Equal(kept, half[:len(half)/2]) || j.cutBytes != len(kept) {
		t.Errorf("cut tail kept in %q: %d bytes (%v), want the %d torn bytes", j.cut, len(kept), err, len(half)/2)
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
}

func (f *shortFile) Sync() error {
	if f.failSync {
		f.failSync = false
		return syscall.EIO
	}
	return f.File.Sync()
}

func (f *shortFile) Write(p []byte) (int, error) {
	if f.short {
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
