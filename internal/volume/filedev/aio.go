package filedev

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/slipstream-io/slipstream/internal/combine"
)

// Ring submits O_DIRECT writes through Linux native AIO (io_submit): the
// writes that concurrent callers issue together go to the kernel in one
// io_submit, so the device sees them as one batch instead of one
// synchronous pwrite (and, in a VM, one notification) each. A goroutine
// reaps completions with io_getevents.
type Ring struct {
	ctx   uintptr
	depth int

	free    chan int           // free slot numbers; bounds requests in flight
	slots   []aioSlot          // per slot: the caller's buffer and completion
	pending combine.Queue[int] // slots waiting for io_submit; flushed by submitBatch
	ptrs    []uintptr          // submitBatch's scratch
	done    chan struct{}
	wg      sync.WaitGroup
	close   sync.Once
}

// aioSlot is one request in flight. Its caller fills cb and buf; only the
// kernel reads cb after that, and the reaper writes res, so the Go side
// needs no lock (and the race detector sees none to miss).
type aioSlot struct {
	cb   aioIocb
	buf  []byte // keeps the caller's buffer alive while the kernel uses it
	res  atomic.Int64
	wake chan struct{}
}

// aioIocb is struct iocb of linux/aio_abi.h (little-endian layout).
type aioIocb struct {
	data      uint64
	key       uint32
	rwFlags   uint32
	opcode    uint16
	reqprio   int16
	fildes    uint32
	buf       uint64
	nbytes    uint64
	offset    int64
	reserved2 uint64
	flags     uint32
	resfd     uint32
}

// aioEvent is struct io_event.
type aioEvent struct {
	data uint64
	obj  uint64
	res  int64
	res2 int64
}

const (
	iocbCmdPread  = 0
	iocbCmdPwrite = 1
)

// ErrRingClosed is returned for I/O on a closed Ring.
var ErrRingClosed = errors.New("filedev: AIO ring closed")

// NewRing sets up an AIO context for up to depth requests in flight.
func NewRing(depth int) (*Ring, error) {
	if depth <= 0 {
		depth = 256
	}
	r := &Ring{depth: depth, free: make(chan int, depth), slots: make([]aioSlot, depth), done: make(chan struct{})}
	r.pending.Flush = r.submitBatch
	// Let the other callers that are about to submit join a batch:
	// io_submit plugs the block queue across a batch, so the device is
	// notified once per batch rather than once per write.
	r.pending.Gather = runtime.Gosched
	if _, _, e := unix.Syscall(unix.SYS_IO_SETUP, uintptr(depth), uintptr(unsafe.Pointer(&r.ctx)), 0); e != 0 {
		return nil, fmt.Errorf("filedev: io_setup: %w", e)
	}
	for i := range r.slots {
		r.slots[i].wake = make(chan struct{}, 1)
		r.free <- i
	}
	r.wg.Add(1)
	go r.reap()
	return r, nil
}

// Close stops the reaper and destroys the context (waiting for requests
// in flight).
func (r *Ring) Close() error {
	r.close.Do(func() {
		// Take every slot: nothing is in flight after that.
		for i := 0; i < r.depth; i++ {
			<-r.free
		}
		close(r.done)
		_, _, _ = unix.Syscall(unix.SYS_IO_DESTROY, r.ctx, 0, 0)
		r.wg.Wait()
	})
	return nil
}

// WriteAt writes p at off of fd (an O_DIRECT descriptor; p, off and len(p)
// aligned as O_DIRECT needs) and waits for the write to complete. A short
// write (a drive filling up) goes on with the rest, like pwrite, so that
// the error that stopped it (ENOSPC) is what the caller gets.
func (r *Ring) WriteAt(fd int, p []byte, off int64) error {
	for len(p) > 0 {
		res, err := r.run(fd, iocbCmdPwrite, p, off)
		if err != nil {
			return err
		}
		if res <= 0 || res%4096 != 0 && int(res) < len(p) {
			return fmt.Errorf("filedev: short AIO write: %d of %d bytes: %w", res, len(p), io.ErrShortWrite)
		}
		p, off = p[res:], off+res
	}
	return nil
}

// ReadAt reads into p at off of fd, as WriteAt; it returns the bytes read,
// fewer than len(p) only at the end of the file.
func (r *Ring) ReadAt(fd int, p []byte, off int64) (int, error) {
	res, err := r.run(fd, iocbCmdPread, p, off)
	return int(max(res, 0)), err
}

func (r *Ring) run(fd int, op uint16, p []byte, off int64) (int64, error) {
	var i int
	select {
	case i = <-r.free:
	case <-r.done:
		return 0, ErrRingClosed
	}
	s := &r.slots[i]
	s.cb = aioIocb{data: uint64(i), opcode: op, fildes: uint32(fd), nbytes: uint64(len(p)), offset: off}
	if len(p) > 0 {
		s.cb.buf = uint64(uintptr(unsafe.Pointer(&p[0])))
	}
	s.buf = p
	r.pending.Add(i)
	<-s.wake
	res := s.res.Load()
	s.buf = nil
	r.free <- i
	if res < 0 {
		return res, syscall.Errno(-res)
	}
	return res, nil
}

// ReadAt fills p from off of a file: from the page cache when all of it
// is cached (a non-blocking preadv2), otherwise, when p and off are
// aligned, with an O_DIRECT read through ring, so that cold random reads
// go to the device in batches instead of blocking a thread each; else with
// a plain pread. Bytes past the end of the file read as zeros.
func ReadAt(f, direct *os.File, ring *Ring, p []byte, off int64) error {
	if direct != nil && ring != nil && Aligned(p, off) {
		n, err := unix.Preadv2(int(f.Fd()), [][]byte{p}, off, unix.RWF_NOWAIT)
		if err == nil && n == len(p) {
			return nil
		}
		if err == nil || err == unix.EAGAIN {
			n, err = ring.ReadAt(int(direct.Fd()), p, off)
			if err == nil {
				clear(p[n:])
				return nil
			}
		}
		// Anything else (RWF_NOWAIT unsupported, ...): plain read below.
	}
	n, err := f.ReadAt(p, off)
	if err == io.EOF {
		clear(p[n:])
		err = nil
	}
	return err
}

func (r *Ring) submitBatch(batch []int) {
	r.ptrs = r.ptrs[:0]
	for _, i := range batch {
		r.ptrs = append(r.ptrs, uintptr(unsafe.Pointer(&r.slots[i].cb)))
	}
	for k := 0; k < len(r.ptrs); {
		n, _, e := unix.Syscall(unix.SYS_IO_SUBMIT, r.ctx, uintptr(len(r.ptrs)-k), uintptr(unsafe.Pointer(&r.ptrs[k])))
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			// The first request of the rest was refused: fail it alone
			// and go on with the others.
			s := &r.slots[batch[k]]
			s.res.Store(-int64(e))
			s.wake <- struct{}{}
			k++
			continue
		}
		k += int(n)
	}
}

// reap delivers completions until the context is destroyed.
func (r *Ring) reap() {
	defer r.wg.Done()
	events := make([]aioEvent, r.depth)
	for {
		n, _, e := unix.Syscall6(unix.SYS_IO_GETEVENTS, r.ctx, 1, uintptr(len(events)), uintptr(unsafe.Pointer(&events[0])), 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			select {
			case <-r.done:
				return
			default:
			}
			continue
		}
		for _, ev := range events[:n] {
			if ev.data >= uint64(len(r.slots)) {
				continue
			}
			s := &r.slots[ev.data]
			s.res.Store(ev.res)
			s.wake <- struct{}{}
		}
	}
}
