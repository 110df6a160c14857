// Package combine lets concurrent callers share one costly operation, such
// as a writev of replies or an io_submit of writes: every caller queues its
// item, and the caller that finds nobody flushing flushes everything queued,
// batch after batch, until the queue is empty. Items that arrive together
// thus share one system call, and a lone caller pays no handoff.
package combine

import "sync"

// Queue is a combining queue of T. Set Flush before the first Add; a
// Queue must not be copied after first use.
type Queue[T any] struct {
	// Flush handles a batch of queued items. One Flush runs at a time, so
	// state only it touches needs no lock; a batch belongs to it only
	// until it returns (its items are zeroed afterwards, dropping the
	// references they hold).
	Flush func(batch []T)
	// Gather, if set, runs once when a caller becomes the flusher, before
	// it takes the first batch, so that callers about to add can join it.
	Gather func()

	mu    sync.Mutex
	queue []T
	spare []T
	busy  bool
}

// Add queues v. If no other caller is flushing, Add calls Flush with the
// queued items, batch after batch, in the order they were added, until
// none is left, and returns after that.
func (q *Queue[T]) Add(v T) {
	q.mu.Lock()
	q.queue = append(q.queue, v)
	if q.busy {
		q.mu.Unlock()
		return
	}
	q.busy = true
	if q.Gather != nil {
		q.mu.Unlock()
		q.Gather()
		q.mu.Lock()
	}
	for len(q.queue) > 0 {
		batch := q.queue
		q.queue = q.spare[:0]
		q.mu.Unlock()
		q.Flush(batch)
		clear(batch)
		q.mu.Lock()
		q.spare = batch[:0]
	}
	q.busy = false
	q.mu.Unlock()
}
