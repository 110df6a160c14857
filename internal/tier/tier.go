// Package tier is the fast-tier logic of one node: it puts the node's local
// store in front of a remote backend per bucket. It serves cold GETs by
// filling the local copy from the backend while streaming it to the caller
// (one backend fetch per object however many callers wait, large objects
// fetched with parallel range requests), serves warm GETs locally, validates
// warm copies by the bucket's policy, writes through to the backend for
// cache buckets, and for writeback buckets acknowledges a PUT once the local
// copy (and the replicas the node's Replicator makes) are durable and a
// journal record is fsynced, then destages to the backend in the background
// in per-key order.
//
// The tier does not know the cluster: the node decides which node owns an
// object, calls the owner's Tier, and plugs peer replication in through the
// Replicator interface. Replica holders record their copies with PutReplica
// and can take over destaging with TakeOver when an owner dies.
package tier

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/slipstream-io/slipstream/internal/backend"
	"github.com/slipstream-io/slipstream/internal/keylock"
	"github.com/slipstream-io/slipstream/internal/logthrottle"
	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/store"
)

// Local is the local object store the tier fills and serves from.
// *store.Store implements it.
type Local interface {
	Put(ctx context.Context, bucket, key string, r io.Reader, opts store.PutOptions) (object.Info, error)
	Get(ctx context.Context, bucket, key string, rng *object.Range) (*store.Reader, error)
	Stat(ctx context.Context, bucket, key string) (object.Info, error)
	UpdateMeta(ctx context.Context, bucket, key string, fn func(*object.Info) error) (object.Info, error)
	Delete(ctx context.Context, bucket, key string) error
	EvictObject(ctx context.Context, bucket, key string) error
	Walk(ctx context.Context, bucket string, fn func(object.Info) error) error
	List(ctx context.Context, bucket string, opts object.ListOptions) (object.ListResult, error)
}

var _ Local = (*store.Store)(nil)

// Sentinel errors.
var (
	ErrNoBucket  = errors.New("tier: bucket not registered with the tier")
	ErrChanged   = errors.New("tier: remote object changed during the fill")
	ErrVerify    = errors.New("tier: fetched object does not match its size or ETag")
	ErrClosed    = errors.New("tier: closed")
	ErrNoJournal = errors.New("tier: writeback bucket needs Config.JournalDir")
)

// Mode is a bucket's write mode.
type Mode string

// Bucket modes.
const (
	ModeLocal     Mode = "local"     // no backend
	ModeCache     Mode = "cache"     // read-through cache; PUT writes through
	ModeWriteback Mode = "writeback" // PUT acknowledged locally, destaged later
)

// Policy says when a warm copy is checked against the backend.
type Policy string

// Validation policies.
const (
	ValidateNever  Policy = "never"
	ValidateTTL    Policy = "ttl"
	ValidateAlways Policy = "always"
)

// Validate is a bucket's validation policy.
type Validate struct {
	Policy Policy
	TTL    time.Duration // for ValidateTTL
}

// ParseValidate parses "never", "always", "ttl:<duration>" or "ttl" ("" =
// never). "ttl" takes the duration dflt (the node's configured default).
func ParseValidate(s string, dflt time.Duration) (Validate, error) {
	switch {
	case s == "" || s == "never":
		return Validate{Policy: ValidateNever}, nil
	case s == "always":
		return Validate{Policy: ValidateAlways}, nil
	case s == "ttl" && dflt > 0:
		return Validate{Policy: ValidateTTL, TTL: dflt}, nil
	case strings.HasPrefix(s, "ttl:"):
		d, err := time.ParseDuration(strings.TrimPrefix(s, "ttl:"))
		if err != nil || d <= 0 {
			return Validate{}, fmt.Errorf("%w: validate %q: want ttl:<positive duration>", object.ErrInvalidArgument, s)
		}
		return Validate{Policy: ValidateTTL, TTL: d}, nil
	}
	return Validate{}, fmt.Errorf("%w: validate %q: want never, always, ttl or ttl:<duration>", object.ErrInvalidArgument, s)
}

func (v Validate) String() string {
	if v.Policy == ValidateTTL {
		return "ttl:" + v.TTL.String()
	}
	if v.Policy == "" {
		return string(ValidateNever)
	}
	return string(v.Policy)
}

// Bucket is how the tier treats one bucket.
type Bucket struct {
	Mode     Mode
	Backend  backend.Backend // nil for ModeLocal
	Validate Validate
	Copies   int // writeback: total durable copies before a PUT is acknowledged (owner + Copies-1 peers); 0 = 1
}

// ReplicaPut is a request to store peer copies of an object being written
// back. Body streams the object while the owner writes its own copy.
type ReplicaPut struct {
	Owner   string // this node's ID
	Seq     uint64 // the owner's journal sequence number of the write
	Bucket  string
	Key     string
	Opts    object.PutOptions
	ModTime time.Time // the owner's modification time of the object
	Copies  int       // peer copies wanted (bucket Copies - 1)
	Body    io.Reader
}

// Replicator makes peer copies for writeback buckets. The node implements it
// by sending the stream to Copies peers, which call PutReplica,
// DeleteReplica and ReplicaDestaged on their own Tier.
type Replicator interface {
	// Replicate stores req.Body on req.Copies peers and returns their IDs
	// once every copy is durable. It must consume Body to the end or fail;
	// when it fails it still returns the peers that may hold a copy.
	Replicate(ctx context.Context, req ReplicaPut) (holders []string, err error)
	// ReplicateDelete tells the peers that hold (or may hold) replicas of
	// bucket/key that the owner deleted it as operation seq.
	ReplicateDelete(ctx context.Context, owner string, seq uint64, bucket, key string, copies int) (holders []string, err error)
	// Destaged tells holders that operation seq of bucket/key reached the
	// backend, so their replicas may become clean.
	Destaged(ctx context.Context, owner string, seq uint64, bucket, key string, holders []string) error
	// Abandoned tells holders that operation seq of bucket/key failed on
	// the owner (its own copy could not be written): it will never be
	// destaged, and their replicas of it go.
	Abandoned(ctx context.Context, owner string, seq uint64, bucket, key string, holders []string) error
	// Deleted tells holders that the owner deleted bucket/key as operation
	// seq, so that they drop their copies (sent to holders of earlier
	// writes that missed the delete).
	Deleted(ctx context.Context, owner string, seq uint64, bucket, key string, holders []string) error
}

// Config configures a Tier.
type Config struct {
	NodeID     string // recorded as the owner of replicas this node sends
	JournalDir string // write-back journal; required when a writeback bucket is used
	SpoolDir   string // where fills spool objects (files are unlinked at once); default os.TempDir()

	ParallelThreshold int64 // objects at least this big are fetched with parallel ranges; default 32 MiB, <0 never
	PartSize          int64 // range size of a parallel fill; default 8 MiB
	FillParallel      int   // range requests in flight per fill; default 4

	DestageParallel int           // uploads in flight; default 4
	MaxDirtyBytes   int64         // cap on dirty (not destaged) bytes; 0 = no cap
	DirtyWait       time.Duration // how long a PUT waits for room under the cap before object.ErrSlowDown; default 10s
	RetryBackoff    time.Duration // first retry delay of a failed destage (doubles up to a minute); default 1s
	CompactBytes    int64         // compact the journal past this size; default 16 MiB

	Replicator Replicator // nil: no peer copies
	Peers      Peers      // nil: no other node holds write-back deletes
	Log        *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.SpoolDir == "" {
		c.SpoolDir = os.TempDir()
	}
	if c.ParallelThreshold == 0 {
		c.ParallelThreshold = 32 << 20
	}
	if c.PartSize <= 0 {
		c.PartSize = 8 << 20
	}
	if c.FillParallel <= 0 {
		c.FillParallel = 4
	}
	if c.DestageParallel <= 0 {
		c.DestageParallel = 4
	}
	if c.DirtyWait <= 0 {
		c.DirtyWait = 10 * time.Second
	}
	if c.RetryBackoff <= 0 {
		c.RetryBackoff = time.Second
	}
	if c.CompactBytes <= 0 {
		c.CompactBytes = 16 << 20
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return c
}

// Tier is the fast-tier logic of one node.
type Tier struct {
	cfg   Config
	local Local
	log   *slog.Logger

	ctx    context.Context // lives until Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// Lock order: t.mu, then the destager's d.mu, then bmu; the journal's
	// j.smu and j.mu come before d.mu (append's apply and compaction's
	// snapshot take d.mu with the journal locked), and d.mu is never held
	// while taking t.mu or a journal lock.
	mu      sync.Mutex
	fills   map[string]*fill
	writing map[string]int // writes in progress per object: no fill may start

	bmu     sync.RWMutex // guards buckets only; taken under t.mu and d.mu
	buckets map[string]Bucket

	keyLocks keylock.Set
	d        *destager // nil without a journal
	counters counters
	// warns throttles the warnings that a backend or a disk that fails
	// repeats for every object (see warnEvery).
	warns *logthrottle.Throttle
}

// warnEvery is how often a warning repeated under one key is logged.
const warnEvery = 30 * time.Second

// warnThrottled logs a warning once per warnEvery under key (a bucket, a
// holder), with the number of such warnings held back since; the others
// go to the debug level. A remote that is down fails every object's
// destage at each retry, which would otherwise be a line per object.
func (t *Tier) warnThrottled(key, msg string, args ...any) {
	if ok, held := t.warns.Allow(msg + "\x00" + key); ok {
		if held > 0 {
			args = append(args, "similar_not_logged", held)
		}
		t.log.Warn(msg, args...)
		return
	}
	t.log.Debug(msg, args...)
}

// New builds a Tier over local. With cfg.JournalDir it opens and replays the
// write-back journal, reconciles it with the dirty objects of the store, and
// starts the destager; operations of buckets not yet added wait for AddBucket.
func New(ctx context.Context, cfg Config, local Local) (*Tier, error) {
	cfg = cfg.withDefaults()
	if err := os.MkdirAll(cfg.SpoolDir, 0o755); err != nil {
		return nil, fmt.Errorf("tier: spool dir: %w", err)
	}
	t := &Tier{
		cfg:     cfg,
		local:   local,
		log:     cfg.Log,
		buckets: make(map[string]Bucket),
		fills:   make(map[string]*fill),
		writing: make(map[string]int),
		warns:   logthrottle.New(warnEvery, nil),
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	if cfg.JournalDir != "" {
		d, err := openDestager(ctx, t)
		if err != nil {
			t.cancel()
			return nil, err
		}
		t.d = d
		d.start()
	}
	return t, nil
}

// Close stops the destager (pending work stays in the journal) and waits for
// background fills to end.
func (t *Tier) Close() error {
	t.cancel()
	t.wg.Wait()
	if t.d != nil {
		return t.d.close()
	}
	return nil
}

// AddBucket registers (or replaces) a bucket's mode and backend.
func (t *Tier) AddBucket(name string, b Bucket) error {
	if b.Mode == "" {
		b.Mode = ModeLocal
	}
	switch b.Mode {
	case ModeLocal:
	case ModeCache, ModeWriteback:
		if b.Backend == nil {
			return fmt.Errorf("%w: %s bucket %s needs a backend", object.ErrInvalidArgument, b.Mode, name)
		}
	default:
		return fmt.Errorf("%w: bucket mode %q", object.ErrInvalidArgument, b.Mode)
	}
	if b.Mode == ModeWriteback && t.d == nil {
		return ErrNoJournal
	}
	if b.Copies <= 0 {
		b.Copies = 1
	}
	if b.Validate.Policy == "" {
		b.Validate.Policy = ValidateNever
	}
	t.bmu.Lock()
	t.buckets[name] = b
	t.bmu.Unlock()
	if t.d != nil {
		t.d.kick()
	}
	return nil
}

// RemoveBucket forgets a bucket. Pending destages of it wait until it is
// added again.
func (t *Tier) RemoveBucket(name string) {
	t.bmu.Lock()
	delete(t.buckets, name)
	t.bmu.Unlock()
	if t.d != nil {
		t.d.verifyBucket(name)
	}
}

func (t *Tier) bucket(name string) (Bucket, error) {
	t.bmu.RLock()
	defer t.bmu.RUnlock()
	b, ok := t.buckets[name]
	if !ok {
		return Bucket{}, fmt.Errorf("%w: %s", ErrNoBucket, name)
	}
	return b, nil
}

func okey(bucket, key string) string { return bucket + "\x00" + key }

// errWriting tells a reader that a write of the object is in progress.
var errWriting = errors.New("tier: write in progress")

// beginWrite serialises writes of bucket/key, keeps new fills of it from
// starting (an older remote version must not land after the write) and
// waits for a fill in progress to end. The returned func ends the write.
func (t *Tier) beginWrite(ctx context.Context, bucket, key string) (func(), error) {
	k := okey(bucket, key)
	t.mu.Lock()
	t.writing[k]++
	t.mu.Unlock()
	unlock := t.keyLocks.Lock(k)
	end := func() {
		unlock()
		t.mu.Lock()
		if t.writing[k]--; t.writing[k] == 0 {
			delete(t.writing, k)
		}
		t.mu.Unlock()
	}
	if err := t.waitFill(ctx, bucket, key); err != nil {
		end()
		return nil, err
	}
	return end, nil
}

// waitWrite waits for the writes of bucket/key in progress to end, or for
// ctx to end.
func (t *Tier) waitWrite(ctx context.Context, bucket, key string) error {
	unlock, err := t.keyLocks.LockContext(ctx, okey(bucket, key))
	if err != nil {
		return err
	}
	unlock()
	return nil
}

// notifier is a broadcast: wait returns a channel closed at the next
// broadcast. Callers hold their own mutex around both.
type notifier struct{ ch chan struct{} }

func (n *notifier) wait() <-chan struct{} {
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	return n.ch
}

func (n *notifier) broadcast() {
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
}
