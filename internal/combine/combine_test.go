package combine

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestAddFlushesEveryItemOnce adds from many goroutines at once: every item
// is flushed exactly once, each goroutine's items in the order it added
// them, never two flushes at a time, and concurrent items share batches.
func TestAddFlushesEveryItemOnce(t *testing.T) {
	const workers, each = 16, 2000
	var q Queue[[2]int]
	gathers := 0
	q.Gather = func() { gathers++ } // runs in the flusher: no race
	var flushing atomic.Int32
	var mu sync.Mutex
	next := make([]int, workers) // the next item expected from each worker
	batches, items := 0, 0
	flush := func(batch [][2]int) {
		if flushing.Add(1) != 1 {
			t.Error("two flushes at once")
		}
		defer flushing.Add(-1)
		mu.Lock()
		defer mu.Unlock()
		batches++
		for _, it := range batch {
			if it[1] != next[it[0]] {
				t.Errorf("worker %d: item %d flushed, want %d", it[0], it[1], next[it[0]])
			}
			next[it[0]] = it[1] + 1
			items++
		}
	}
	q.Flush = flush
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				q.Add([2]int{w, i})
			}
		}(w)
	}
	wg.Wait()
	if items != workers*each {
		t.Fatalf("%d items flushed, want %d", items, workers*each)
	}
	if gathers == 0 || gathers > batches {
		t.Fatalf("Gather ran %d times for %d batches", gathers, batches)
	}
	t.Logf("%d items in %d batches", items, batches)
}

// TestBatchZeroedAfterFlush: a flushed batch holds no references.
func TestBatchZeroedAfterFlush(t *testing.T) {
	var kept [][]*int
	q := Queue[*int]{Flush: func(batch []*int) { kept = append(kept, batch) }}
	v := 1
	q.Add(&v)
	if len(kept) != 1 || len(kept[0]) != 1 || kept[0][0] != nil {
		t.Fatalf("batch after flush: %v", kept)
	}
}
