package tier

import (
	"maps"
	"time"

	"github.com/slipstream-io/slipstream/internal/backend"
	"github.com/slipstream-io/slipstream/internal/object"
)

// stampKey is the backend user-metadata entry in which a destage records
// when the cluster accepted the write it uploads (the owner's clock, RFC 3339
// with nanoseconds). Before uploading, a destager compares the stamp already
// in the backend with its own: a node that was down while its keys were
// rewritten through other nodes comes back with an older backlog, and must
// not put an older version over a newer one. The entry is removed from what
// clients see.
const stampKey = "slipstream-written"

// withStamp returns meta plus the stamp of a write accepted at t.
func withStamp(meta map[string]string, t time.Time) map[string]string {
	out := make(map[string]string, len(meta)+1)
	maps.Copy(out, meta)
	out[stampKey] = t.UTC().Format(time.RFC3339Nano)
	return out
}

// stampOf returns the write time recorded in a, if it has one.
func stampOf(a backend.Attrs) (time.Time, bool) {
	s, ok := a.UserMeta[stampKey]
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	return t, err == nil
}

// userMeta is a's user metadata without the stamp.
func userMeta(a backend.Attrs) map[string]string {
	if _, ok := a.UserMeta[stampKey]; !ok {
		return a.UserMeta
	}
	out := maps.Clone(a.UserMeta)
	delete(out, stampKey)
	if len(out) == 0 {
		return nil
	}
	return out
}

// remoteInfo describes the backend object a as bucket/key.
func remoteInfo(bucket, key string, a backend.Attrs) object.Info {
	return object.Info{Bucket: bucket, Key: key, Size: a.Size, ETag: a.ETag, ContentType: a.ContentType,
		UserMeta: userMeta(a), Headers: a.Headers, ModTime: a.ModTime, BackendETag: a.ETag, BackendVersion: a.Version}
}
