package volume

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Reading one's forwarded writes: a node that forwarded a client's write
// to the claim's holder reads the mirrors itself, but learns which
// mirrors the holder marked stale only from the cluster map, which
// reaches the nodes one after another. A mirror that failed the holder's
// write and still answers this node (a partial partition, or this node's
// own mirror) would be read as current for the moment this node's map is
// behind, and the client would read back older data than it just wrote.
//
// So the holder answers every forwarded op with the version of the map
// that holds every stale mark it has recorded or noted (marksVer), and
// the forwarding node's reads wait until it has noted a map at least that
// new (NoteVersion), for at most OpTimeout; a node whose map cannot catch
// up fails the read rather than risk an old copy. In a healthy cluster
// the marks' version is long noted everywhere and a read checks one
// atomic.

// NoteVersion tells the volume that the claim and the marks it was last
// told of (NoteClaim, NoteStale) are those of the cluster map of version
// ver. A node that notes marks new to it makes that version the one its
// answers to forwarded ops carry.
func (v *Volume) NoteVersion(ver uint64) {
	if v.marksNew.Swap(false) {
		raise(&v.marksVer, ver)
	}
	v.noted.raise(ver)
}

// noteMarked records that a mark this node set is in StaleMarks: the map
// this node has applied now holds it. It returns that map's version (0:
// unknown, without Config.MapVersion).
func (v *Volume) noteMarked() uint64 {
	if v.cfg.MapVersion == nil {
		return 0
	}
	ver := v.cfg.MapVersion()
	raise(&v.marksVer, ver)
	return ver
}

// awaitMarks waits until this node has noted the marks the holders of
// the claim had made when they applied this node's forwarded ops.
func (v *Volume) awaitMarks(ctx context.Context) error {
	need := v.needVer.Load()
	if need == 0 || v.noted.ver.Load() >= need {
		return nil
	}
	if !v.noted.wait(ctx, need, v.cfg.OpTimeout) {
		if err := ctx.Err(); err != nil {
			return err
		}
		return fmt.Errorf("%w: %s: the node that wrote this node's forwarded writes marked mirrors stale in map version %d, and this node's map is still at %d",
			ErrNoMirror, v.spec.Name, need, v.noted.ver.Load())
	}
	return nil
}

// versionWait is a version that only grows, with waiters woken as it does.
type versionWait struct {
	ver atomic.Uint64
	mu  sync.Mutex
	ch  chan struct{} // closed when ver grows; nil while no one waits
}

func (w *versionWait) raise(ver uint64) {
	if !raise(&w.ver, ver) {
		return
	}
	w.mu.Lock()
	if w.ch != nil {
		close(w.ch)
		w.ch = nil
	}
	w.mu.Unlock()
}

// wait reports whether ver was reached within d.
func (w *versionWait) wait(ctx context.Context, ver uint64, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		w.mu.Lock()
		if w.ver.Load() >= ver {
			w.mu.Unlock()
			return true
		}
		if w.ch == nil {
			w.ch = make(chan struct{})
		}
		ch := w.ch
		w.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		case <-t.C:
			return w.ver.Load() >= ver
		}
	}
}

// raise makes a at least v; it reports whether a grew.
func raise(a *atomic.Uint64, v uint64) bool {
	for {
		cur := a.Load()
		if v <= cur {
			return false
		}
		if a.CompareAndSwap(cur, v) {
			return true
		}
	}
}
