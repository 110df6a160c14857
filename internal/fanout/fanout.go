// Package fanout copies one stream to several consumers that run at the
// same time: the local copy and the replicas of a PUT, or the local copy
// and the backend of a write-through. Each consumer has its own queue of
// chunks (Depth × ChunkSize bytes), so one busy with its disk or its
// network does not stall the others until its queue is full, and the
// copy runs at the pace of the slowest consumer rather than at the sum of
// their pauses.
package fanout

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
)

// Sizes of the chunks and of each consumer's queue.
const (
	ChunkSize = 256 << 10
	Depth     = 8
)

// ErrConsumerDone is what the other consumers read when one of them
// returned before the end of the stream: the copy stopped.
var ErrConsumerDone = errors.New("fanout: a consumer stopped reading")

// Copy copies r to every consumer, each running in its own goroutine with
// its own reader, and returns their errors in order once all have
// returned. A consumer that returns before the end stops the copy (the
// others read ErrConsumerDone); an error reading r, or the end of ctx, is
// what the consumers read next. Chunks are pooled: one goes back to the
// pool when every consumer has read it.
func Copy(ctx context.Context, r io.Reader, consumers ...func(io.Reader) error) []error {
	return CopySpare(ctx, r, nil, consumers...)
}

// Spare returns a consumer to take the place of consumer i, which failed
// with err before it read a byte of the stream, or nil if there is none.
type Spare func(i int, err error) func(io.Reader) error

// CopySpare is Copy, except that a consumer that fails before it has
// read a byte is replaced by the one spare gives (if any), which reads
// the stream from its start: the consumer's queue still holds every chunk
// read so far, since the copy waits for a consumer whose queue is full.
// spare runs in the failed consumer's goroutine and may block; the copy
// waits meanwhile, once that consumer's queue is full.
func CopySpare(ctx context.Context, r io.Reader, spare Spare, consumers ...func(io.Reader) error) []error {
	streams := make([]*stream, len(consumers))
	results := make([]chan error, len(consumers))
	for i, consume := range consumers {
		s := &stream{ch: make(chan *chunk, Depth), done: make(chan struct{})}
		streams[i], results[i] = s, make(chan error, 1)
		go func() {
			err := consume(s)
			for err != nil && spare != nil && !s.taken.Load() {
				next := spare(i, err)
				if next == nil {
					break
				}
				err = next(s)
			}
			close(s.done)
			results[i] <- err
		}()
	}
	end := copyChunks(ctx, r, streams)
	for _, s := range streams {
		s.finish(end)
	}
	errs := make([]error, len(consumers))
	for i, c := range results {
		errs[i] = <-c
	}
	return errs
}

// copyChunks reads r in chunks and queues each to every stream; it returns
// why the copy ended (io.EOF when complete).
func copyChunks(ctx context.Context, r io.Reader, streams []*stream) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		c := pool.Get().(*chunk)
		n, rerr := Fill(r, c.buf[:cap(c.buf)])
		if n > 0 {
			c.buf = c.buf[:n]
			c.refs.Store(int32(len(streams)))
			for _, s := range streams {
				select {
				case s.ch <- c:
				case <-s.done:
					return ErrConsumerDone // c is left to the garbage collector
				}
			}
		} else {
			pool.Put(c)
		}
		if rerr != nil {
			return rerr
		}
	}
}

// Fill reads r into buf until buf is full or r fails; io.EOF (only) is
// the end of r. Unlike io.ReadFull it keeps an io.ErrUnexpectedEOF of r
// itself (a body cut short) apart from a stream that ends mid-buffer.
func Fill(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// chunk is a piece of the stream, read by every consumer.
type chunk struct {
	buf  []byte
	refs atomic.Int32 // consumers that have not finished reading it
}

var pool = sync.Pool{New: func() any { return &chunk{buf: make([]byte, ChunkSize)} }}

// release marks c read by one consumer; the last one returns it to the pool.
func (c *chunk) release() {
	if c.refs.Add(-1) == 0 {
		pool.Put(c)
	}
}

// stream is one consumer's reader.
type stream struct {
	ch   chan *chunk
	done chan struct{} // closed when the consumer has returned
	// taken is set once a chunk has been read: the stream cannot be
	// given to a spare consumer any more.
	taken atomic.Bool
	mu    sync.Mutex
	err   error // why the stream ended (io.EOF when complete)
	cur   *chunk
	off   int
}

func (s *stream) finish(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
	close(s.ch)
}

func (s *stream) Read(p []byte) (int, error) {
	for s.cur == nil || s.off == len(s.cur.buf) {
		if s.cur != nil {
			s.cur.release()
			s.cur = nil
		}
		c, ok := <-s.ch
		if !ok {
			s.mu.Lock()
			defer s.mu.Unlock()
			return 0, s.err
		}
		s.cur, s.off = c, 0
		s.taken.Store(true)
	}
	n := copy(p, s.cur.buf[s.off:])
	s.off += n
	return n, nil
}
