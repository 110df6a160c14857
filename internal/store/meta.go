package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slipstream-io/slipstream/internal/object"
)

const (
	xattrInfo  = "user.slipstream.info" // object.Info of an object file
	xattrPart  = "user.slipstream.part" // partMeta of a multipart part file
	metaFormat = 1
)

// diskInfo is the xattr payload of an object file.
type diskInfo struct {
	V int `json:"v"`
	object.Info
}

// partMeta is the xattr payload of a part file.
type partMeta struct {
	V       int       `json:"v"`
	Part    int       `json:"part"`
	ETag    string    `json:"etag"`
	Size    int64     `json:"size"`
	CRC32C  uint32    `json:"crc32c"`
	ModTime time.Time `json:"modTime"`
}

func marshalJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

func encodeInfo(info object.Info) ([]byte, error) {
	// encoding/json would replace bytes that are not UTF-8.
	if err := object.ValidateMeta(info.ContentType, info.UserMeta); err != nil {
		return nil, err
	}
	if err := object.ValidateMeta("", info.Headers); err != nil {
		return nil, err
	}
	b, err := marshalJSON(diskInfo{V: metaFormat, Info: info})
	if err != nil {
		return nil, err
	}
	if len(b) > MaxMetaBytes {
		return nil, fmt.Errorf("%w: %d bytes encoded, the limit is %d", ErrMetaTooLarge, len(b), MaxMetaBytes)
	}
	return b, nil
}

func decodeInfo(b []byte) (object.Info, error) {
	var d diskInfo
	if err := json.Unmarshal(b, &d); err != nil {
		return object.Info{}, err
	}
	if d.V != metaFormat {
		return object.Info{}, fmt.Errorf("store: unknown metadata format %d", d.V)
	}
	return d.Info, nil
}

// getXattr reads the whole value of attribute name of the file at path.
func getXattr(path, name string) ([]byte, error) {
	buf := make([]byte, 1024)
	for {
		n, err := unix.Getxattr(path, name, buf)
		if errors.Is(err, unix.ERANGE) {
			sz, err2 := unix.Getxattr(path, name, nil)
			if err2 != nil {
				return nil, err2
			}
			buf = make([]byte, sz+64)
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}

// readInfo reads the metadata of the object file at path.
func readInfo(path string) (object.Info, error) {
	b, err := getXattr(path, xattrInfo)
	if err != nil {
		return object.Info{}, err
	}
	return decodeInfo(b)
}

// cloneInfo returns a copy of info that shares no map with it.
func cloneInfo(info object.Info) object.Info {
	if info.UserMeta != nil {
		info.UserMeta = maps.Clone(info.UserMeta)
	}
	if info.Headers != nil {
		info.Headers = maps.Clone(info.Headers)
	}
	info.Parts = slices.Clone(info.Parts)
	return info
}

// lazyMeta reports whether the metadata change from old to ni may be
// written without fsync, because losing it in a crash loses nothing: it
// only clears Dirty, or moves the backend state (its ETag and version,
// when it was last checked) or the access time. A copy whose clean mark a
// crash undid is dirty again at the next start, and the tier destages
// every dirty copy its journal does not hold after checking the backend,
// which already holds it: the copy becomes clean again without an upload.
// A lost check time costs one more check. Setting Dirty, and any other
// change, is fsynced. A clean mark per destaged object (owner and replica
// holders) and a check time per revalidated GET would otherwise cost an
// fsync each.
func lazyMeta(old, ni object.Info) bool {
	if ni.Dirty && !old.Dirty {
		return false
	}
	x := ni
	x.Dirty = old.Dirty
	x.BackendETag, x.BackendVersion, x.ValidatedAt, x.AccessTime = old.BackendETag, old.BackendVersion, old.ValidatedAt, old.AccessTime
	return reflect.DeepEqual(x, old)
}

// writeInfoInPlace replaces the metadata of a committed object file and, if
// durable, fsyncs it.
func writeInfoInPlace(path string, info object.Info, durable bool) error {
	b, err := encodeInfo(info)
	if err != nil {
		return err
	}
	if !durable {
		return unix.Setxattr(path, xattrInfo, b, 0)
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Fsetxattr(int(f.Fd()), xattrInfo, b, 0); err != nil {
		return err
	}
	return f.Sync()
}
