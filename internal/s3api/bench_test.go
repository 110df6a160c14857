package s3api_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/s3api"
	"github.com/slipstream-io/slipstream/internal/s3api/s3mem"
)

// BenchmarkGET measures warm GET throughput through the handler (SigV4
// verification included, presigned URL reused) over loopback, from memory
// (pooled-buffer copy) and from files (sendfile).
func BenchmarkGET(b *testing.B) {
	for _, src := range []string{"memory", "file"} {
		for _, size := range []int{64 << 10, 1 << 20, 10 << 20} {
			b.Run(fmt.Sprintf("%s/%dKiB", src, size>>10), func(b *testing.B) {
				o := envOpts{}
				if src == "file" {
					fo := &cachedFileObjects{dir: b.TempDir()}
					o.objects = func(s *s3mem.Store) s3api.Objects { fo.Store = s; return fo }
				}
				e := newEnv(b, o)
				e.mkBucket("bench")
				data := bytes.Repeat([]byte{'b'}, size)
				if _, err := e.client.PutObject(ctx(), &s3.PutObjectInput{Bucket: aws.String("bench"), Key: aws.String("obj"), Body: bytes.NewReader(data)}); err != nil {
					b.Fatal(err)
				}
				ps, err := s3.NewPresignClient(e.client).PresignGetObject(ctx(), &s3.GetObjectInput{Bucket: aws.String("bench"), Key: aws.String("obj")}, s3.WithPresignExpires(time.Hour))
				if err != nil {
					b.Fatal(err)
				}
				client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
				b.SetBytes(int64(size))
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						resp, err := client.Get(ps.URL)
						if err != nil {
							b.Error(err)
							return
						}
						n, _ := io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode != 200 || n != int64(size) {
							b.Errorf("GET: %d, %d bytes", resp.StatusCode, n)
							return
						}
					}
				})
			})
		}
	}
}

// cachedFileObjects serves GETs from one file per object, written on the
// first GET, opened afresh for each reader.
type cachedFileObjects struct {
	*s3mem.Store
	dir string

	mu    sync.Mutex
	paths map[string]string
}

func (o *cachedFileObjects) GetObject(c ctxT, bucket, key string, opts object.GetOptions) (object.Reader, error) {
	rd, err := o.Store.GetObject(c, bucket, key, object.GetOptions{})
	if err != nil {
		return nil, err
	}
	info := rd.Info()
	off, n := int64(0), info.Size
	if opts.Range != nil {
		if off, n, err = opts.Range.Resolve(info.Size); err != nil {
			return nil, err
		}
	}
	id := bucket + "/" + key + "/" + info.ETag
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.paths == nil {
		o.paths = map[string]string{}
	}
	p, ok := o.paths[id]
	if !ok {
		f, err := os.CreateTemp(o.dir, "obj")
		if err != nil {
			return nil, err
		}
		if _, err := io.Copy(f, rd); err != nil {
			f.Close()
			return nil, err
		}
		f.Close()
		p = f.Name()
		o.paths[id] = p
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	return &fileReader{Reader: rd, f: f, off: off, size: n}, nil
}
