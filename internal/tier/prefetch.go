package tier

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/slipstream-io/slipstream/internal/backend"
	"github.com/slipstream-io/slipstream/internal/object"
)

// Fill makes bucket/key warm: it waits for a fill (starting one if needed)
// to commit the local copy. It returns the local metadata, and whether a
// fill was needed.
func (t *Tier) Fill(ctx context.Context, bucket, key string) (object.Info, bool, error) {
	for {
		info, filled, err := t.fill(ctx, bucket, key)
		if !errors.Is(err, errWriting) {
			return info, filled, err
		}
		if err := t.waitWrite(ctx, bucket, key); err != nil {
			return object.Info{}, false, err
		}
	}
}

func (t *Tier) fill(ctx context.Context, bucket, key string) (object.Info, bool, error) {
	b, err := t.bucket(bucket)
	if err != nil {
		return object.Info{}, false, err
	}
	if info, err := t.local.Stat(ctx, bucket, key); err == nil || b.Mode == ModeLocal {
		return info, false, err
	}
	f, isLocal, err := t.acquireFill(b, bucket, key, nil)
	if err != nil {
		return object.Info{}, false, err
	}
	if isLocal {
		info, err := t.local.Stat(ctx, bucket, key)
		return info, false, err
	}
	select {
	case <-f.done:
	case <-ctx.Done():
		return object.Info{}, false, ctx.Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return object.Info{}, true, f.err
	}
	if f.commitErr != nil {
		return object.Info{}, true, f.commitErr
	}
	return f.info, true, nil
}

// PrefetchOptions select what Prefetch fills.
type PrefetchOptions struct {
	Prefix   string
	Keys     []string               // explicit keys instead of listing Prefix
	Filter   func(key string) bool  // e.g. "this node owns the key"; nil = all
	Parallel int                    // objects filled at once; default 8
	Progress func(PrefetchProgress) // called after every object (serialised)
}

// PrefetchProgress counts a prefetch's work so far.
type PrefetchProgress struct {
	Listed  int   // keys selected so far
	Filled  int   // fetched from the backend
	Warm    int   // already local
	Failed  int   // could not be filled
	Bytes   int64 // bytes fetched
	Done    bool  // listing finished and every selected key handled
	LastErr error
}

// Prefetch fills the objects of bucket under opts.Prefix (or opts.Keys) in
// parallel. It returns the final progress; an error only when listing the
// backend fails or ctx ends.
func (t *Tier) Prefetch(ctx context.Context, bucket string, opts PrefetchOptions) (PrefetchProgress, error) {
	b, err := t.bucket(bucket)
	if err != nil {
		return PrefetchProgress{}, err
	}
	if b.Backend == nil {
		return PrefetchProgress{Done: true}, nil
	}
	if opts.Parallel <= 0 {
		opts.Parallel = 8
	}
	var (
		mu   sync.Mutex
		prog PrefetchProgress
		wg   sync.WaitGroup
		keys = make(chan string)
	)
	report := func(update func(*PrefetchProgress)) {
		mu.Lock()
		update(&prog)
		p := prog
		if opts.Progress != nil {
			opts.Progress(p)
		}
		mu.Unlock()
	}
	for i := 0; i < opts.Parallel; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range keys {
				info, filled, err := t.Fill(ctx, bucket, k)
				report(func(p *PrefetchProgress) {
					switch {
					case err != nil:
						p.Failed++
						p.LastErr = err
					case filled:
						p.Filled++
						p.Bytes += info.Size
					default:
						p.Warm++
					}
				})
			}
		}()
	}
	send := func(k string) bool {
		if opts.Filter != nil && !opts.Filter(k) {
			return true
		}
		mu.Lock()
		prog.Listed++
		mu.Unlock()
		select {
		case keys <- k:
			return true
		case <-ctx.Done():
			return false
		}
	}
	var listErr error
	if opts.Keys != nil {
		for _, k := range opts.Keys {
			if !send(k) {
				break
			}
		}
	} else {
		start := ""
	pages:
		for {
			page, err := b.Backend.List(ctx, backend.ListOptions{Prefix: opts.Prefix, StartAfter: start})
			if err != nil {
				listErr = err
				break
			}
			for _, o := range page.Objects {
				if strings.HasSuffix(o.Key, "/") && o.Size == 0 {
					continue // folder marker
				}
				if !send(o.Key) {
					break pages
				}
			}
			if !page.Truncated {
				break
			}
			start = page.Next
		}
	}
	close(keys)
	wg.Wait()
	if listErr == nil {
		listErr = ctx.Err()
	}
	report(func(p *PrefetchProgress) { p.Done = listErr == nil })
	return prog, listErr
}

// Evict drops the clean local copies of bucket's objects under prefix (a
// dirty or pinned object is never dropped). It returns how many objects and bytes
// were dropped.
func (t *Tier) Evict(ctx context.Context, bucket, prefix string) (objects int, bytes int64, err error) {
	var victims []object.Info
	err = t.local.Walk(ctx, bucket, func(i object.Info) error {
		if i.Evictable() && strings.HasPrefix(i.Key, prefix) {
			victims = append(victims, i)
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	for _, v := range victims {
		if err := t.local.EvictObject(ctx, bucket, v.Key); err != nil {
			if errors.Is(err, object.ErrNotFound) {
				continue
			}
			if ctx.Err() != nil {
				return objects, bytes, ctx.Err()
			}
			continue // became dirty meanwhile
		}
		objects++
		bytes += v.Size
	}
	return objects, bytes, nil
}
