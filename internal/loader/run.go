package loader

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

// hardStopGrace is how long requests still in flight when the duration ends
// may take before they are cancelled.
const hardStopGrace = 30 * time.Second

type object struct {
	key  string
	size int64
}

type runner struct {
	cfg     Config
	cl      *clients
	block   []byte
	clock   Clock
	putOpts []func(*s3.Options)
	bufs    sync.Pool

	createdMu sync.Mutex
	created   []string
	putSeq    atomic.Int64
}

// Run executes one load run: optional bucket creation and fill, the main
// phase, optional cleanup, with node stats sampled throughout. On failure
// it returns the partial result together with the error.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg = cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, cl: newClients(cfg), block: newBlock(cfg.Seed), clock: cfg.Clock}
	r.bufs.New = func() any { b := make([]byte, 256<<10); return &b }
	if !cfg.SignPayload {
		r.putOpts = []func(*s3.Options){s3.WithAPIOptions(v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware)}
	}
	host, _ := os.Hostname()
	res := &Result{Version: ResultVersion, Label: cfg.Label, Params: Params{
		Endpoint: cfg.Endpoint, Bucket: cfg.Bucket, Prefix: cfg.Prefix, Workload: cfg.Workload(),
		PutPercent: cfg.PutPercent, Workers: cfg.Workers, MinSize: cfg.MinSize, MaxSize: cfg.MaxSize,
		Epochs: cfg.Epochs, MaxOps: cfg.MaxOps, RateLimit: cfg.RateLimit, LoaderID: cfg.LoaderID,
		LoaderCount: cfg.LoaderCount, Router: r.cl.router.Name(), StatsURLs: cfg.StatsURLs, Seed: cfg.Seed, Host: host,
	}}
	if cfg.Duration > 0 {
		res.Params.Duration = cfg.Duration.String()
	}
	if cfg.RequestTimeout > 0 {
		res.Params.RequestTimeout = cfg.RequestTimeout.String()
	}

	pollCtx, stopPoll := context.WithCancel(ctx)
	poller := newStatsPoller(cfg.StatsURLs, cfg.StatsInterval)
	pollDone := make(chan struct{})
	go func() { poller.run(pollCtx); close(pollDone) }()
	res.Start = r.clock.Now()

	err := r.run(ctx, res)
	if cfg.Cleanup {
		res.Cleanup = r.cleanup(context.WithoutCancel(ctx))
	}
	stopPoll()
	<-pollDone
	res.Nodes = poller.result()
	res.End = r.clock.Now()
	if err != nil {
		res.Partial, res.Error = true, err.Error()
	}
	return res, err
}

func (r *runner) run(ctx context.Context, res *Result) error {
	cfg := r.cfg
	if cfg.CreateBucket {
		if err := r.createBucket(ctx); err != nil {
			return err
		}
	}
	var dataset []object
	if n := cfg.fillCount(); n > 0 {
		fill, objs, err := r.fill(ctx, n)
		res.Fill = &fill
		if err != nil {
			return err
		}
		dataset = objs
	} else if cfg.PutPercent < 100 || cfg.Epochs > 0 {
		objs, err := r.list(ctx)
		if err != nil {
			return err
		}
		dataset = objs
		res.Params.MinSize, res.Params.MaxSize = runSizes(cfg, objs)
	}
	res.Params.Objects = len(dataset)
	if len(dataset) == 0 && (cfg.PutPercent < 100 || cfg.Epochs > 0) {
		return fmt.Errorf("%w: nothing under s3://%s/%s (fill first)", ErrNoDataset, cfg.Bucket, cfg.Prefix)
	}
	main, err := r.mainPhase(ctx, dataset)
	res.Main = main
	return err
}

func (r *runner) createBucket(ctx context.Context) error {
	cl, err := r.cl.For(r.cfg.Bucket, "")
	if err != nil {
		return err
	}
	_, err = cl.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(r.cfg.Bucket)})
	var api smithy.APIError
	if errors.As(err, &api) && (api.ErrorCode() == "BucketAlreadyOwnedByYou" || api.ErrorCode() == "BucketAlreadyExists") {
		return nil
	}
	if err != nil {
		return fmt.Errorf("loader: create bucket %s: %w", r.cfg.Bucket, err)
	}
	return nil
}

// runSizes is the object size range of a run over a listed dataset: the
// sizes of the objects it reads (whatever --size says), widened by the size
// range of its PUTs when it writes too.
func runSizes(cfg Config, objs []object) (lo, hi int64) {
	if len(objs) == 0 || cfg.PutPercent >= 100 {
		return cfg.MinSize, cfg.MaxSize
	}
	lo, hi = objs[0].size, objs[0].size
	for _, o := range objs[1:] {
		lo, hi = min(lo, o.size), max(hi, o.size)
	}
	if cfg.PutPercent > 0 {
		lo, hi = min(lo, cfg.MinSize), max(hi, cfg.MaxSize)
	}
	return lo, hi
}

// size returns the size of the object with the given number, in range.
func (r *runner) size(rng *rand.Rand) int64 {
	if r.cfg.MaxSize == r.cfg.MinSize {
		return r.cfg.MinSize
	}
	return r.cfg.MinSize + rng.Int64N(r.cfg.MaxSize-r.cfg.MinSize+1)
}

func (r *runner) objectKey(i int) string { return fmt.Sprintf("%sobj-%08d", r.cfg.Prefix, i) }

func keyHash(key string) uint64 {
	h := fnv.New64a()
	_, _ = io.WriteString(h, key)
	return h.Sum64()
}

// fill creates this loader's share of the n-object dataset.
func (r *runner) fill(ctx context.Context, n int) (Phase, []object, error) {
	cfg := r.cfg
	var todo []object
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 1))
	for i := 0; i < n; i++ {
		sz := r.size(rng)
		if i%cfg.LoaderCount == cfg.LoaderID {
			todo = append(todo, object{key: r.objectKey(i), size: sz})
		}
	}
	start := r.clock.Now()
	rec := NewRecorder(start)
	ok := make([]bool, len(todo))
	var next atomic.Int64
	var failed, done atomic.Int64
	stopProgress := r.progress("fill", rec)
	var wg sync.WaitGroup
	for w := 0; w < cfg.Workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(todo) {
					return
				}
				if r.tooManyErrors(failed.Load(), done.Load()) {
					return
				}
				s := r.put(ctx, todo[i].key, todo[i].size)
				if ctx.Err() != nil {
					return
				}
				rec.Record(s)
				done.Add(1)
				if s.Err != "" {
					failed.Add(1)
					continue
				}
				ok[i] = true
			}
		}()
	}
	wg.Wait()
	stopProgress()
	end := r.clock.Now()
	var objs []object
	for i, o := range todo {
		if ok[i] {
			objs = append(objs, o)
			r.addCreated(o.key)
		}
	}
	phase, err := buildPhase("fill", rec, end)
	if err != nil {
		return phase, objs, err
	}
	if err := ctx.Err(); err != nil {
		return phase, objs, err
	}
	if r.tooManyErrors(failed.Load(), done.Load()) {
		return phase, objs, fmt.Errorf("%w: fill: %d of %d PUTs failed (%v)", ErrTooManyErrors, failed.Load(), done.Load(), phase.Errors)
	}
	return phase, objs, nil
}

func (r *runner) tooManyErrors(failed, done int64) bool {
	return r.cfg.MaxErrorRate >= 0 && done >= 100 && float64(failed) > r.cfg.MaxErrorRate*float64(done)
}

func (r *runner) addCreated(key string) {
	r.createdMu.Lock()
	r.created = append(r.created, key)
	r.createdMu.Unlock()
}

// list returns this loader's share of the objects under the prefix.
func (r *runner) list(ctx context.Context) ([]object, error) {
	cl, err := r.cl.For(r.cfg.Bucket, "")
	if err != nil {
		return nil, err
	}
	var all []object
	p := s3.NewListObjectsV2Paginator(cl, &s3.ListObjectsV2Input{Bucket: aws.String(r.cfg.Bucket), Prefix: aws.String(r.cfg.Prefix)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("loader: list s3://%s/%s: %w", r.cfg.Bucket, r.cfg.Prefix, err)
		}
		for _, o := range page.Contents {
			all = append(all, object{key: aws.ToString(o.Key), size: aws.ToInt64(o.Size)})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].key < all[j].key })
	var mine []object
	for i, o := range all {
		if i%r.cfg.LoaderCount == r.cfg.LoaderID {
			mine = append(mine, o)
		}
	}
	return mine, nil
}

// picker hands out dataset objects: epoch e is a seeded permutation of the
// dataset, and every worker takes the next object of it.
type picker struct {
	objs   []object
	epochs int // 0 = unlimited
	seed   int64
	taken  atomic.Int64
	mu     sync.Mutex
	perms  map[int][]int32
}

func (p *picker) next() (object, bool) {
	i := p.taken.Add(1) - 1
	n := int64(len(p.objs))
	e := int(i / n)
	if p.epochs > 0 && e >= p.epochs {
		return object{}, false
	}
	return p.objs[p.perm(e)[i%n]], true
}

func (p *picker) perm(e int) []int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pm, ok := p.perms[e]; ok {
		return pm
	}
	rng := rand.New(rand.NewPCG(uint64(p.seed), uint64(e)+100))
	pm := make([]int32, len(p.objs))
	for i := range pm {
		pm[i] = int32(i)
	}
	rng.Shuffle(len(pm), func(i, j int) { pm[i], pm[j] = pm[j], pm[i] })
	p.perms[e] = pm
	delete(p.perms, e-2) // workers straddle at most one boundary
	return pm
}

func (r *runner) mainPhase(ctx context.Context, dataset []object) (Phase, error) {
	cfg := r.cfg
	start := r.clock.Now()
	rec := NewRecorder(start)
	var deadline time.Time
	hardCtx := ctx
	if cfg.Duration > 0 {
		deadline = start.Add(cfg.Duration)
		var cancel context.CancelFunc
		hardCtx, cancel = context.WithTimeout(ctx, cfg.Duration+hardStopGrace)
		defer cancel()
	}
	pk := &picker{objs: dataset, epochs: cfg.Epochs, seed: cfg.Seed, perms: map[int][]int32{}}
	pc := newPacer(cfg.RateLimit)
	var ops, failed, done, dsDone atomic.Int64
	var stop atomic.Bool
	// For Phase.Unsent: requests sent, whether the dataset's epochs ran
	// out (a count bound: nothing is owed then), and when the schedule was
	// cut short by a stop or an interruption (unix ns; 0 = not cut).
	var sent, cutAt atomic.Int64
	var exhausted atomic.Bool
	cut := func() { cutAt.CompareAndSwap(0, r.clock.Now().UnixNano()) }
	unwatch := context.AfterFunc(ctx, cut)
	defer unwatch()
	stopProgress := r.progress(cfg.Label, rec)
	var wg sync.WaitGroup
	for w := 0; w < cfg.Workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(w)+1000))
			for !stop.Load() && ctx.Err() == nil {
				if cfg.MaxOps > 0 && ops.Add(1) > cfg.MaxOps {
					return
				}
				var slot time.Time // intended start with a rate limit
				if pc != nil {
					slot = pc.reserve(r.clock.Now())
					if !sleepUntil(ctx, r.clock, slot) {
						return
					}
				}
				if !deadline.IsZero() && !r.clock.Now().Before(deadline) {
					return // a reserved slot left unsent: see unsent
				}
				isPut := cfg.PutPercent == 100 || (cfg.PutPercent > 0 && rng.IntN(100) < cfg.PutPercent)
				var s Sample
				fromDataset := !isPut || cfg.Epochs > 0
				if fromDataset {
					o, ok := pk.next()
					if !ok {
						exhausted.Store(true)
						return
					}
					sent.Add(1)
					if isPut {
						s = r.put(hardCtx, o.key, r.size(rng))
					} else {
						s = r.get(hardCtx, o)
					}
				} else {
					sent.Add(1)
					key := fmt.Sprintf("%sput-%d-%08d", cfg.Prefix, cfg.LoaderID, r.putSeq.Add(1))
					s = r.put(hardCtx, key, r.size(rng))
					if s.Err == "" {
						r.addCreated(key)
					}
				}
				if !slot.IsZero() {
					fromSlot(&s, slot)
				}
				if hardCtx.Err() != nil {
					if ctx.Err() != nil || s.Start.IsZero() {
						return // stopped, not a failure of the store
					}
					// Cut off by the hard stop after the duration: the
					// store did not answer within the grace, a timeout
					// (unless it completed just in time).
					if s.Err != "" {
						s.Err, s.Latency = "timeout", r.clock.Now().Sub(s.Start)
						failed.Add(1)
					}
					rec.Record(s)
					done.Add(1)
					return
				}
				rec.Record(s)
				d := done.Add(1)
				if fromDataset {
					dsDone.Add(1)
				}
				if s.Err != "" && r.tooManyErrors(failed.Add(1), d) {
					cut()
					stop.Store(true)
				}
			}
		}()
	}
	wg.Wait()
	stopProgress()
	phase, err := buildPhase("main", rec, r.clock.Now())
	if len(dataset) > 0 {
		phase.Epochs = int(dsDone.Load() / int64(len(dataset)))
	}
	if pc != nil && !exhausted.Load() {
		end := deadline
		if c := cutAt.Load(); c != 0 && (end.IsZero() || c < end.UnixNano()) {
			end = time.Unix(0, c)
		}
		addUnsent(&phase, unsent(pc, end, cfg.MaxOps, sent.Load()))
	}
	if err != nil {
		return phase, err
	}
	if err := ctx.Err(); err != nil {
		return phase, err
	}
	if stop.Load() {
		return phase, fmt.Errorf("%w: %d of %d requests failed (%v)", ErrTooManyErrors, failed.Load(), done.Load(), phase.Errors)
	}
	return phase, nil
}

// unsent returns how many slots of pc's schedule before end (capped at
// maxOps when set) were not among the sent requests; 0 when end is zero (a
// count-bounded run that was not cut short owes nothing).
func unsent(pc *pacer, end time.Time, maxOps, sent int64) int64 {
	if end.IsZero() {
		return 0
	}
	due := pc.due(end)
	if maxOps > 0 {
		due = min(due, maxOps)
	}
	return max(0, due-sent)
}

// addUnsent records n unsent slots in p as failed requests (see
// Phase.Unsent).
func addUnsent(p *Phase, n int64) {
	if n <= 0 {
		return
	}
	p.Unsent += n
	p.Total.Errors += n
	if p.Errors == nil {
		p.Errors = map[string]int64{}
	}
	p.Errors["unsent"] += n
}

// fromSlot makes s count from slot, the intended start the pacer assigned,
// when it was sent late: the wait for the slot is part of its latency and
// time to first byte (open loop, no coordinated omission); Service keeps
// the time from the actual send.
func fromSlot(s *Sample, slot time.Time) {
	if s.Start.IsZero() || !slot.Before(s.Start) {
		return
	}
	wait := s.Start.Sub(slot)
	s.Start = slot
	s.Latency += wait
	if s.TTFB > 0 {
		s.TTFB += wait
	}
}

func sleepUntil(ctx context.Context, c Clock, at time.Time) bool {
	d := at.Sub(c.Now())
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func buildPhase(name string, rec *Recorder, end time.Time) (Phase, error) {
	total, ops, errs := rec.Summary(end)
	hists, err := rec.Histograms()
	p := Phase{Name: name, Start: rec.Start(), End: end, Seconds: end.Sub(rec.Start()).Seconds(),
		Total: total, Ops: ops, Series: rec.Series(end), Histograms: hists}
	if len(errs) > 0 {
		p.Errors = errs
	}
	return p, err
}

// requestContext derives the context of one request from ctx, bounded by
// Config.RequestTimeout.
func (r *runner) requestContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if r.cfg.RequestTimeout > 0 {
		return context.WithTimeout(ctx, r.cfg.RequestTimeout)
	}
	return context.WithCancel(ctx)
}

// timedOut reports whether a request failed because its own timeout
// (Config.RequestTimeout) expired while ctx, its parent, is still live.
func timedOut(parent, req context.Context) bool {
	return parent.Err() == nil && errors.Is(req.Err(), context.DeadlineExceeded)
}

func (r *runner) get(ctx context.Context, o object) Sample {
	reqCtx, cancel := r.requestContext(ctx)
	defer cancel()
	s := r.doGet(reqCtx, o)
	s.Service = s.Latency
	if s.Err != "" && timedOut(ctx, reqCtx) {
		s.Err = "timeout"
	}
	return s
}

func (r *runner) doGet(ctx context.Context, o object) Sample {
	s := Sample{Op: OpGet}
	cl, err := r.cl.For(r.cfg.Bucket, o.key)
	if err != nil {
		s.Err = "route"
		return s
	}
	s.Start = r.clock.Now()
	out, err := cl.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(r.cfg.Bucket), Key: aws.String(o.key)})
	if err != nil {
		s.Latency, s.Err = r.clock.Now().Sub(s.Start), ErrorKind(err)
		return s
	}
	defer out.Body.Close()
	bp := r.bufs.Get().(*[]byte)
	defer r.bufs.Put(bp)
	buf := *bp
	var n int64
	for {
		k, rerr := out.Body.Read(buf)
		if k > 0 {
			if n == 0 {
				s.TTFB = r.clock.Now().Sub(s.Start)
			}
			n += int64(k)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			s.Latency, s.Err = r.clock.Now().Sub(s.Start), ErrorKind(rerr)
			return s
		}
	}
	s.Latency, s.Bytes = r.clock.Now().Sub(s.Start), n
	if want := aws.ToInt64(out.ContentLength); out.ContentLength != nil && n != want {
		s.Err = ErrorKind(kindError{"short-read", fmt.Errorf("%s: %d of %d bytes", o.key, n, want)})
	}
	return s
}

func (r *runner) put(ctx context.Context, key string, size int64) Sample {
	reqCtx, cancel := r.requestContext(ctx)
	defer cancel()
	s := r.doPut(reqCtx, key, size)
	s.Service = s.Latency
	if s.Err != "" && timedOut(ctx, reqCtx) {
		s.Err = "timeout"
	}
	return s
}

func (r *runner) doPut(ctx context.Context, key string, size int64) Sample {
	s := Sample{Op: OpPut}
	cl, err := r.cl.For(r.cfg.Bucket, key)
	if err != nil {
		s.Err = "route"
		return s
	}
	body := newPayload(r.block, size, keyHash(key)+uint64(r.putSeq.Load()))
	s.Start = r.clock.Now()
	_, err = cl.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(r.cfg.Bucket), Key: aws.String(key), Body: body, ContentLength: aws.Int64(size),
	}, r.putOpts...)
	s.Latency = r.clock.Now().Sub(s.Start)
	if err != nil {
		s.Err = ErrorKind(err)
		return s
	}
	s.Bytes = size
	return s
}

// cleanup deletes every object the run created.
func (r *runner) cleanup(ctx context.Context) *Cleanup {
	r.createdMu.Lock()
	keys := append([]string(nil), r.created...)
	r.createdMu.Unlock()
	var next atomic.Int64
	var deleted, failed atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < r.cfg.Workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(keys) {
					return
				}
				cl, err := r.cl.For(r.cfg.Bucket, keys[i])
				if err == nil {
					_, err = cl.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(r.cfg.Bucket), Key: aws.String(keys[i])})
				}
				if err != nil {
					failed.Add(1)
					continue
				}
				deleted.Add(1)
			}
		}()
	}
	wg.Wait()
	return &Cleanup{Deleted: int(deleted.Load()), Errors: int(failed.Load())}
}
