package tier

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/slipstream-io/slipstream/internal/backend"
	"github.com/slipstream-io/slipstream/internal/object"
)

// Peers tells a listing about the write-back deletes other nodes hold: the
// backend still lists those keys until the deletes are destaged. The node
// implements it by asking every other up node's PendingDeletes.
type Peers interface {
	// PendingDeletes returns, of keys, those some other node deleted and
	// has not destaged yet, and, of prefixes, those with such a key under
	// them (see Tier.PendingDeletes).
	PendingDeletes(ctx context.Context, bucket string, keys, prefixes []string) (deleted, under []string, err error)
}

// PendingDeletes answers another node's listing: of keys of bucket, those
// whose pending write-back operation here is a delete (owned, or held as a
// replica), and of prefixes, those with such a key under them. prefixes is
// sorted and none of them starts with another (the common prefixes of one
// delimited listing).
func (t *Tier) PendingDeletes(bucket string, keys, prefixes []string) (deleted, under []string) {
	if t.d == nil {
		return nil, nil
	}
	return t.d.deletes(bucket, keys, prefixes)
}

// List returns a page of bucket's listing. For local buckets it is the
// local store's; for cache and writeback buckets it is the backend's page,
// merged with this node's write-back operations not yet destaged (puts are
// shown, deletes hidden) and without the keys other nodes deleted and have
// not destaged (Config.Peers). A common prefix of the backend's page is
// left out when every key under it has a delete pending. The node merges
// nodes' pages if several nodes own pending writes.
func (t *Tier) List(ctx context.Context, bucket string, opts object.ListOptions) (object.ListResult, error) {
	b, err := t.bucket(bucket)
	if err != nil {
		return object.ListResult{}, err
	}
	if b.Mode == ModeLocal {
		return t.local.List(ctx, bucket, opts)
	}
	limit := opts.MaxKeys
	if limit <= 0 {
		limit = 1000
	}
	page, err := b.Backend.List(ctx, backend.ListOptions{Prefix: opts.Prefix, Delimiter: opts.Delimiter, StartAfter: opts.StartAfter, Limit: limit})
	if err != nil {
		return object.ListResult{}, err
	}
	objs := make(map[string]object.Info, len(page.Objects))
	keys := make([]string, 0, len(page.Objects))
	prefixes := make(map[string]bool, len(page.CommonPrefixes))
	for _, a := range page.Objects {
		objs[a.Key] = object.Info{Bucket: bucket, Key: a.Key, Size: a.Size, ETag: a.ETag, ModTime: a.ModTime, BackendETag: a.ETag}
		keys = append(keys, a.Key)
	}
	for _, p := range page.CommonPrefixes {
		prefixes[p] = true
	}
	deleted, emptied, err := t.deletedAmong(ctx, bucket, keys, page.CommonPrefixes)
	if err != nil {
		return object.ListResult{}, err
	}
	for _, k := range deleted {
		delete(objs, k)
	}
	// Overlay the pending operations inside the page's key range.
	var pend []*op
	if t.d != nil {
		t.d.mu.Lock()
		for _, ks := range t.d.keys {
			o := ks.pending
			if o == nil {
				o = ks.running
			}
			if o != nil && o.bucket == bucket && strings.HasPrefix(o.key, opts.Prefix) && o.key > opts.StartAfter &&
				(!page.Truncated || o.key <= page.Next) {
				pend = append(pend, o)
			}
		}
		t.d.mu.Unlock()
	}
	written := map[string]bool{} // common prefixes a pending write rolls into
	for _, o := range pend {
		// A key with the delimiter after the prefix rolls up into a common
		// prefix, even one that ends there (a folder marker "dir/").
		entry, rolled := o.key, false
		if opts.Delimiter != "" {
			if i := strings.Index(o.key[len(opts.Prefix):], opts.Delimiter); i >= 0 {
				entry, rolled = o.key[:len(opts.Prefix)+i+len(opts.Delimiter)], true
			}
		}
		if rolled {
			if o.kind == KindPut && entry > opts.StartAfter {
				prefixes[entry], written[entry] = true, true
			}
			continue
		}
		if o.kind == KindDelete {
			delete(objs, o.key)
			continue
		}
		if info, err := t.local.Stat(ctx, bucket, o.key); err == nil {
			objs[o.key] = info
		}
	}
	for _, p := range emptied {
		if written[p] {
			continue
		}
		empty, err := t.deletedUnder(ctx, b, bucket, p)
		if err != nil {
			return object.ListResult{}, err
		}
		if empty {
			delete(prefixes, p)
		}
	}
	type ent struct {
		key  string
		info *object.Info
	}
	var ents []ent
	for k, v := range objs {
		v := v
		ents = append(ents, ent{k, &v})
	}
	for p := range prefixes {
		ents = append(ents, ent{key: p})
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].key < ents[j].key })
	// A truncated page covers the backend up to page.Next, also when it
	// shows fewer entries (deleted ones are left out).
	res := object.ListResult{IsTruncated: page.Truncated}
	if page.Truncated {
		res.NextMarker = page.Next
	}
	if len(ents) > limit {
		ents = ents[:limit]
		res.IsTruncated, res.NextMarker = true, ents[limit-1].key
	}
	for _, e := range ents {
		if e.info != nil {
			res.Objects = append(res.Objects, *e.info)
		} else {
			res.CommonPrefixes = append(res.CommonPrefixes, e.key)
		}
	}
	return res, nil
}

// deletedAmong returns, of keys of bucket, those with a delete pending
// here or on another node, and, of prefixes, those with such a key under
// them.
func (t *Tier) deletedAmong(ctx context.Context, bucket string, keys, prefixes []string) (deleted, under []string, err error) {
	if len(keys) == 0 && len(prefixes) == 0 {
		return nil, nil, nil
	}
	deleted, under = t.PendingDeletes(bucket, keys, prefixes)
	if t.cfg.Peers == nil {
		return deleted, under, nil
	}
	pd, pu, err := t.cfg.Peers.PendingDeletes(ctx, bucket, keys, prefixes)
	if err != nil {
		return nil, nil, fmt.Errorf("tier: pending deletes of other nodes: %w", err)
	}
	return append(deleted, pd...), append(under, pu...), nil
}

// deletedUnder reports whether every key the backend holds under prefix
// has a delete pending (here or on another node), so that the prefix is
// empty to clients. It pages through the backend's keys under prefix until
// it meets one that is not deleted; the deleted keys it passes are at most
// the deletes pending.
func (t *Tier) deletedUnder(ctx context.Context, b Bucket, bucket, prefix string) (bool, error) {
	start := ""
	for {
		page, err := b.Backend.List(ctx, backend.ListOptions{Prefix: prefix, StartAfter: start})
		if err != nil {
			return false, err
		}
		keys := make([]string, len(page.Objects))
		for i, a := range page.Objects {
			keys[i] = a.Key
		}
		deleted, _, err := t.deletedAmong(ctx, bucket, keys, nil)
		if err != nil {
			return false, err
		}
		gone := make(map[string]bool, len(deleted))
		for _, k := range deleted {
			gone[k] = true
		}
		for _, k := range keys {
			if !gone[k] {
				return false, nil
			}
		}
		if !page.Truncated {
			return true, nil
		}
		if page.Next <= start {
			return false, fmt.Errorf("%w: listing of %s did not advance past %q", object.ErrBackend, prefix, start)
		}
		start = page.Next
	}
}
