package tier

import (
	"context"
	"sort"
	"strings"

	"github.com/slipstream-io/slipstream/internal/backend"
	"github.com/slipstream-io/slipstream/internal/object"
)

// List returns a page of bucket's listing. For local buckets it is the
// local store's; for cache and writeback buckets it is the backend's page,
// merged with this node's write-back operations not yet destaged (puts are
// shown, deletes hidden). The node merges nodes' pages if several nodes own
// pending writes.
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
	prefixes := make(map[string]bool, len(page.CommonPrefixes))
	for _, a := range page.Objects {
		objs[a.Key] = object.Info{Bucket: bucket, Key: a.Key, Size: a.Size, ETag: a.ETag, ModTime: a.ModTime, BackendETag: a.ETag}
	}
	for _, p := range page.CommonPrefixes {
		prefixes[p] = true
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
				prefixes[entry] = true
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
	res := object.ListResult{IsTruncated: page.Truncated}
	if len(ents) > limit {
		ents = ents[:limit]
		res.IsTruncated = true
	}
	for _, e := range ents {
		if e.info != nil {
			res.Objects = append(res.Objects, *e.info)
		} else {
			res.CommonPrefixes = append(res.CommonPrefixes, e.key)
		}
		res.NextMarker = e.key
	}
	if !res.IsTruncated {
		res.NextMarker = ""
	} else if len(ents) == 0 {
		res.NextMarker = page.Next // every entry of the page was deleted locally
	}
	return res, nil
}
