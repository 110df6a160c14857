package node

import (
	"context"
	"io"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// PassStatus is what `admin status` shows of a node's passes of a
// background job (rebalance, scrub); P is the job's progress.
type PassStatus[P any] struct {
	Running  bool      `json:"running"`
	Passes   int       `json:"passes"`
	Last     *P        `json:"last,omitempty"` // the last finished pass
	LastDone time.Time `json:"lastDone,omitzero"`
	Total    P         `json:"total"` // every pass since start, the running one included
}

// passLog runs a job's passes one at a time and keeps their PassStatus.
type passLog[P any, PP interface {
	*P
	Add(P)
}] struct {
	pass sync.Mutex // held by the running pass
	mu   sync.Mutex
	st   PassStatus[P]
}

func (l *passLog[P, PP]) status() PassStatus[P] {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.st
}

// begin waits for a running pass to end, then marks this one running.
func (l *passLog[P, PP]) begin() {
	l.pass.Lock()
	l.mu.Lock()
	l.st.Running = true
	l.mu.Unlock()
}

// add counts o in the total of every pass.
func (l *passLog[P, PP]) add(o P) {
	l.mu.Lock()
	PP(&l.st.Total).Add(o)
	l.mu.Unlock()
}

// end records p as the last pass, finished at at, and lets the next start.
func (l *passLog[P, PP]) end(p P, at time.Time) {
	l.mu.Lock()
	l.st.Running, l.st.Passes, l.st.Last, l.st.LastDone = false, l.st.Passes+1, &p, at
	l.mu.Unlock()
	l.pass.Unlock()
}

// pacer returns a function that waits until n more bytes fit in
// bytesPerSec (shared by every caller), or nil if bytesPerSec is 0.
func pacer(bytesPerSec int64) func(ctx context.Context, n int) error {
	if bytesPerSec <= 0 {
		return nil
	}
	const burst = 1 << 20
	lim := rate.NewLimiter(rate.Limit(bytesPerSec), burst)
	return func(ctx context.Context, n int) error {
		for n > 0 {
			k := min(n, burst)
			if err := lim.WaitN(ctx, k); err != nil {
				return err
			}
			n -= k
		}
		return nil
	}
}

// pacedReader reads r no faster than pace allows.
type pacedReader struct {
	ctx  context.Context
	r    io.Reader
	pace func(ctx context.Context, n int) error
}

func (p pacedReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		if perr := p.pace(p.ctx, n); perr != nil {
			return n, perr
		}
	}
	return n, err
}
