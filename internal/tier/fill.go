package tier

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"sync"
	"time"

	"github.com/slipstream-io/slipstream/internal/backend"
	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/store"
)

// A fill copies one object from the backend into the local store. Bytes
// land in a spool file (unlinked at creation, so nothing outlives the
// process); readers follow the contiguous prefix of the spool as it grows,
// and so does the writer of the local copy. A reader of the whole object gets
// io.EOF only once the size and, for MD5 ETags, the digest have been checked,
// so a corrupt or truncated fetch ends every reader with an error.
type fill struct {
	t      *Tier
	bucket string
	key    string
	b      Bucket
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when the fill is over (committed or failed)

	mu        sync.Mutex
	note      notifier
	file      *os.File
	refs      int // the fill itself plus open readers
	haveAttrs bool
	attrs     backend.Attrs
	avail     int64   // contiguous bytes in the spool
	written   []int64 // bytes written per part
	parts     int
	verified  bool
	err       error
	info      object.Info // the committed local copy, when done without err
	commitErr error
	started   time.Time

	replaces *object.Info // a refetch: commit only over this (stale, clean) local copy
}

// acquireFill returns the fill of bucket/key, or starts one. stale is the
// clean local copy a refetch replaces (nil: the object is not local); without
// it no fill starts if the object is local by now (local reports that).
//
// A fill never commits the backend's version over a write the tier accepted:
// it does not start while a write of the key is in progress (errWriting) or
// while a write-back operation of the key is pending or being destaged (a
// delete: object.ErrNotFound; a write: the local copy is served), and
// beginWrite waits for a fill registered here to end, so no write of the key
// goes through while the fill runs. The check and the registration are one
// step under t.mu.
func (t *Tier) acquireFill(b Bucket, bucket, key string, stale *object.Info) (f *fill, local bool, err error) {
	k := okey(bucket, key)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ctx.Err() != nil {
		return nil, false, ErrClosed
	}
	if f := t.fills[k]; f != nil && f.failed() == nil {
		return f, false, nil
	}
	if t.writing[k] > 0 {
		return nil, false, errWriting
	}
	if t.d != nil {
		switch t.d.pendingKind(bucket, key) {
		case KindDelete:
			return nil, false, fmt.Errorf("%w: %s/%s", object.ErrNotFound, bucket, key)
		case KindPut:
			if _, err := t.local.Stat(t.ctx, bucket, key); err == nil {
				return nil, true, nil
			}
			return nil, false, fmt.Errorf("%w: %s/%s: the local copy of a write not yet destaged is missing", object.ErrUnavailable, bucket, key)
		}
	}
	if stale == nil {
		// The fill that just finished may have committed the object.
		if _, err := t.local.Stat(t.ctx, bucket, key); err == nil {
			return nil, true, nil
		}
	}
	f = &fill{t: t, bucket: bucket, key: key, b: b, done: make(chan struct{}), refs: 1, started: time.Now(), replaces: stale}
	f.ctx, f.cancel = context.WithCancelCause(t.ctx)
	t.fills[k] = f
	t.wg.Add(1)
	go f.run()
	return f, false, nil
}

func (f *fill) fail(err error) {
	f.mu.Lock()
	if f.err == nil && !f.verified {
		f.err = err
		f.note.broadcast()
	}
	f.mu.Unlock()
	f.cancel(err)
}

func (f *fill) failed() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// wait blocks until cond (called with f.mu held) holds or ctx ends.
func (f *fill) wait(ctx context.Context, cond func() bool) error {
	for {
		f.mu.Lock()
		if cond() {
			f.mu.Unlock()
			return nil
		}
		ch := f.note.wait()
		f.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (f *fill) release() {
	f.mu.Lock()
	f.refs--
	last := f.refs == 0
	file := f.file
	f.mu.Unlock()
	if last && file != nil {
		file.Close()
	}
}

func (f *fill) partLen(i int) int64 {
	if f.parts == 1 {
		return f.attrs.Size
	}
	ps := f.t.cfg.PartSize
	if i == f.parts-1 {
		return f.attrs.Size - int64(i)*ps
	}
	return ps
}

// progress records n more bytes of part i and advances the contiguous prefix.
func (f *fill) progress(i int, n int64) {
	f.mu.Lock()
	f.written[i] += n
	var avail int64
	for j := 0; j < f.parts; j++ {
		avail += f.written[j]
		if f.written[j] < f.partLen(j) {
			break
		}
	}
	if avail != f.avail {
		f.avail = avail
		f.note.broadcast()
	}
	f.mu.Unlock()
}

// copyPart writes r into the spool at part i's offset.
func (f *fill) copyPart(i int, r io.Reader) error {
	off := int64(i) * f.t.cfg.PartSize
	if f.parts == 1 {
		off = 0
	}
	want := f.partLen(i)
	buf := make([]byte, 256<<10)
	var got int64
	for got < want {
		if err := f.ctx.Err(); err != nil {
			return context.Cause(f.ctx)
		}
		chunk := buf
		if rem := want - got; rem < int64(len(chunk)) {
			chunk = chunk[:rem]
		}
		n, err := r.Read(chunk)
		if n > 0 {
			if _, werr := f.file.WriteAt(chunk[:n], off+got); werr != nil {
				return fmt.Errorf("tier: spool write: %w", werr)
			}
			got += int64(n)
			f.progress(i, int64(n))
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("tier: fetch %s/%s: %w: %w", f.bucket, f.key, object.ErrBackend, err)
		}
	}
	if got != want {
		return fmt.Errorf("%w: %s/%s part %d: got %d of %d bytes", ErrVerify, f.bucket, f.key, i, got, want)
	}
	return nil
}

func (f *fill) run() {
	defer f.t.wg.Done()
	err := f.fetchAndCommit()
	if err != nil {
		f.fail(err)
	}
	f.t.mu.Lock()
	if k := okey(f.bucket, f.key); f.t.fills[k] == f {
		delete(f.t.fills, k)
	}
	f.t.mu.Unlock()
	f.cancel(nil)
	close(f.done)
	f.release()
}

func (f *fill) fetchAndCommit() error {
	file, err := os.CreateTemp(f.t.cfg.SpoolDir, "fill-*")
	if err != nil {
		return fmt.Errorf("tier: spool: %w", err)
	}
	os.Remove(file.Name())
	f.mu.Lock()
	f.file = file
	f.mu.Unlock()

	rc, attrs, err := f.b.Backend.Get(f.ctx, f.key, nil)
	if err != nil {
		return err
	}
	validated := time.Now()
	cfg := f.t.cfg
	f.mu.Lock()
	f.attrs = attrs
	f.parts = 1
	if cfg.ParallelThreshold > 0 && attrs.Size >= cfg.ParallelThreshold && attrs.Size > cfg.PartSize {
		f.parts = int((attrs.Size + cfg.PartSize - 1) / cfg.PartSize)
	}
	f.written = make([]int64, f.parts)
	f.haveAttrs = true
	f.note.broadcast()
	f.mu.Unlock()

	// The object is checked, and the local copy written, from the spool as
	// it fills; readers get io.EOF once the check passed, whatever the pace
	// of the local write.
	checked := make(chan struct{})
	go func() { f.check(); close(checked) }()
	commit := make(chan error, 1)
	go func() { commit <- f.commit() }()

	fetchErr := f.fetch(rc)
	if fetchErr != nil {
		f.fail(fetchErr)
	}
	<-checked
	cerr := <-commit
	if fetchErr != nil {
		return fetchErr
	}
	if err := f.failed(); err != nil {
		return err
	}
	if cerr != nil {
		// Readers were served and verified; only the warm copy is missing.
		if errors.Is(cerr, store.ErrChanged) {
			f.t.log.Info("tier: the local copy changed during a refetch and is kept", "bucket", f.bucket, "key", f.key)
		} else {
			f.t.warnThrottled(f.bucket, "tier: fill could not keep a local copy", "bucket", f.bucket, "key", f.key, "err", cerr)
		}
		f.mu.Lock()
		f.commitErr = cerr
		f.mu.Unlock()
		return nil
	}
	if f.b.Validate.Policy == ValidateTTL {
		_, _ = f.t.local.UpdateMeta(f.ctx, f.bucket, f.key, func(i *object.Info) error { i.ValidatedAt = validated; return nil })
	}
	return nil
}

// fetch reads part 0 from rc and the other parts with parallel range
// requests, each checked against the ETag of the first response.
func (f *fill) fetch(rc io.ReadCloser) error {
	err := f.copyPart(0, rc)
	rc.Close()
	if err != nil || f.parts == 1 {
		return err
	}
	next := make(chan int)
	errc := make(chan error, f.parts)
	var wg sync.WaitGroup
	for w := 0; w < f.t.cfg.FillParallel && w < f.parts-1; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				errc <- f.fetchPart(i)
			}
		}()
	}
	var first error
	sent := 1
	for i := 1; i < f.parts; i++ {
		select {
		case next <- i:
			sent++
		case <-f.ctx.Done():
		}
		if f.ctx.Err() != nil {
			break
		}
	}
	close(next)
	wg.Wait()
	close(errc)
	for e := range errc {
		if e != nil && first == nil {
			first = e
		}
	}
	if first == nil && sent != f.parts {
		first = context.Cause(f.ctx)
	}
	return first
}

func (f *fill) fetchPart(i int) error {
	if f.ctx.Err() != nil {
		return context.Cause(f.ctx)
	}
	off := int64(i) * f.t.cfg.PartSize
	rc, a, err := f.b.Backend.Get(f.ctx, f.key, &object.Range{Offset: off, Length: f.partLen(i)})
	if err != nil {
		f.fail(err)
		return err
	}
	defer rc.Close()
	if a.ETag != f.attrs.ETag || a.Size != f.attrs.Size {
		err := fmt.Errorf("%w: %s/%s: ETag %s became %s", ErrChanged, f.bucket, f.key, f.attrs.ETag, a.ETag)
		f.fail(err)
		return err
	}
	if err := f.copyPart(i, rc); err != nil {
		f.fail(err)
		return err
	}
	return nil
}

// check reads the spool as it fills and verifies size and, for an MD5 ETag,
// the digest; it marks the fill verified or failed.
func (f *fill) check() {
	fr := &fillReader{f: f, ctx: f.ctx, end: f.attrs.Size, internal: true, checker: true}
	if f.attrs.HasBodyMD5() {
		fr.md5 = md5.New()
	}
	_, _ = io.Copy(io.Discard, fr)
}

// commit streams the spool into the local store. Its reader ends only once
// the object verified, so a bad fetch is never committed.
func (f *fill) commit() error {
	fr := &fillReader{f: f, ctx: f.ctx, end: f.attrs.Size, verify: true, internal: true}
	a := f.attrs
	info, err := f.t.local.Put(f.ctx, f.bucket, f.key, fr, store.PutOptions{
		PutOptions:     object.PutOptions{Size: a.Size, ContentType: a.ContentType, UserMeta: userMeta(a), Headers: a.Headers},
		ModTime:        a.ModTime,
		ETag:           a.ETag,
		BackendETag:    a.ETag,
		BackendVersion: a.Version,
		// Checked under the store's key lock: a copy written meanwhile
		// outside the tier's writes (a multipart completion before the
		// tier adopts it) is newer than the backend's and is kept.
		Replaces: f.replaces,
		IfAbsent: f.replaces == nil,
	})
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.info = info
	f.mu.Unlock()
	return nil
}

// covers reports whether the spool holds the range rng already.
func (f *fill) covers(rng *object.Range) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.haveAttrs || f.err != nil {
		return false
	}
	off, n, err := rng.Resolve(f.attrs.Size)
	return err == nil && off+n <= f.avail
}

// objectInfo is what readers of a fill report.
func (f *fill) objectInfo() object.Info {
	return remoteInfo(f.bucket, f.key, f.attrs)
}

// errFillOver tells a caller of fill.reader that the fill ended and closed
// its spool before the reader could join it: the caller looks again (the
// local copy is there, or a new fill starts).
var errFillOver = errors.New("tier: fill over")

// reader opens a reader of the fill for the range rng (nil = whole object),
// waiting for the backend's first response. It returns errFillOver once the
// last reference to the spool is gone (the spool is closed), so a reader
// never gets a closed file.
func (f *fill) reader(ctx context.Context, rng *object.Range) (object.Reader, error) {
	if err := f.wait(ctx, func() bool { return f.haveAttrs || f.err != nil }); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	if f.refs == 0 {
		return nil, errFillOver
	}
	r := &fillReader{f: f, ctx: ctx, end: f.attrs.Size, verify: true, info: f.objectInfo()}
	if rng != nil {
		off, n, err := rng.Resolve(f.attrs.Size)
		if err != nil {
			return nil, err
		}
		r.off, r.pos, r.end = off, off, off+n
		r.verify = false
	}
	f.refs++
	return r, nil
}

// fillReader follows the spool of a fill.
type fillReader struct {
	f        *fill
	ctx      context.Context
	info     object.Info
	off      int64 // first byte delivered
	pos, end int64 // absolute
	verify   bool  // wait for the fill's verification before io.EOF
	internal bool  // the fill's own reader: holds no reference
	checker  bool  // the reader that verifies the object for everyone
	md5      hash.Hash
	closed   bool
}

var _ object.Reader = (*fillReader)(nil)

func (r *fillReader) Info() object.Info             { return r.info }
func (r *fillReader) Range() (offset, length int64) { return r.off, r.end - r.off }

func (r *fillReader) Read(p []byte) (int, error) {
	f := r.f
	if r.closed {
		return 0, errors.New("tier: read after close")
	}
	if r.pos >= r.end {
		if r.checker {
			return 0, r.finish()
		}
		if !r.verify {
			return 0, io.EOF
		}
		if err := f.wait(r.ctx, func() bool { return f.verified || f.err != nil }); err != nil {
			return 0, err
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.verified {
			return 0, io.EOF
		}
		return 0, f.err
	}
	if err := f.wait(r.ctx, func() bool { return f.avail > r.pos || f.err != nil }); err != nil {
		return 0, err
	}
	f.mu.Lock()
	avail, ferr := f.avail, f.err
	f.mu.Unlock()
	if avail <= r.pos {
		return 0, ferr
	}
	n := min(int64(len(p)), avail-r.pos, r.end-r.pos)
	m, err := f.file.ReadAt(p[:n], r.pos)
	r.pos += int64(m)
	if r.md5 != nil {
		r.md5.Write(p[:m])
	}
	if err == io.EOF && int64(m) == n {
		err = nil
	}
	return m, err
}

// finish is the checker's end of stream: check the digest and release the
// readers waiting for verification.
func (r *fillReader) finish() error {
	f := r.f
	var err error
	if r.md5 != nil {
		if got := hex.EncodeToString(r.md5.Sum(nil)); got != f.attrs.ETag {
			err = fmt.Errorf("%w: %s/%s: MD5 %s, ETag %s", ErrVerify, f.bucket, f.key, got, f.attrs.ETag)
		}
		r.md5 = nil
	}
	f.mu.Lock()
	if err == nil && f.err == nil {
		f.verified = true
		f.note.broadcast()
	}
	ferr := f.err
	f.mu.Unlock()
	if err != nil {
		f.fail(err)
		return err
	}
	if ferr != nil {
		return ferr
	}
	return io.EOF
}

func (r *fillReader) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	if !r.internal {
		r.f.release()
	}
	return nil
}
