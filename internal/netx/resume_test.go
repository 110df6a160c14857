package netx

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseContentRange(t *testing.T) {
	tests := []struct {
		in   string
		want ContentRange
		ok   bool
	}{
		{"bytes 0-99/100", ContentRange{0, 99, 100}, true},
		{"bytes 10-19/*", ContentRange{10, 19, -1}, true},
		{"bytes 5-5/6", ContentRange{5, 5, 6}, true},
		{"bytes 5-4/6", ContentRange{}, false},
		{"bytes 0-99/99", ContentRange{}, false},
		{"bytes -1-3/9", ContentRange{}, false},
		{"bytes 0-+3/9", ContentRange{}, false},
		{"bytes */100", ContentRange{}, false},
		{"items 0-1/2", ContentRange{}, false},
		{"bytes 0-1", ContentRange{}, false},
		{"bytes 99999999999999999999-1/2", ContentRange{}, false},
		{"", ContentRange{}, false},
	}
	for _, tc := range tests {
		got, err := ParseContentRange(tc.in)
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("ParseContentRange(%q) = %+v, %v; want %+v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrBadContentRange) {
			t.Errorf("error %v is not ErrBadContentRange", err)
		}
	}
}

func FuzzParseContentRange(f *testing.F) {
	for _, s := range []string{"bytes 0-99/100", "bytes 1-2/*", "bytes 3-1/9", "bytes"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cr, err := ParseContentRange(s)
		if err != nil {
			return
		}
		if cr.First < 0 || cr.Last < cr.First || (cr.Size != -1 && cr.Size <= cr.Last) {
			t.Fatalf("%q parsed to invalid %+v", s, cr)
		}
		size := "*"
		if cr.Size >= 0 {
			size = strconv.FormatInt(cr.Size, 10)
		}
		again, err := ParseContentRange("bytes " + strconv.FormatInt(cr.First, 10) + "-" + strconv.FormatInt(cr.Last, 10) + "/" + size)
		if err != nil || again != cr {
			t.Fatalf("round trip of %q: %+v, %v", s, again, err)
		}
	})
}

// blobServer serves one object with an ETag; when cut is set, a request
// without Range gets half the body and then a dropped connection.
type blobServer struct {
	data []byte
	etag atomic.Value
	cut  atomic.Bool
	full atomic.Int64 // requests without Range
	rng  atomic.Int64 // requests with Range
}

func (b *blobServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("ETag", b.etag.Load().(string))
	if r.Header.Get("Range") == "" {
		b.full.Add(1)
		if b.cut.Load() {
			w.Header().Set("Content-Length", strconv.Itoa(len(b.data)))
			w.Write(b.data[:len(b.data)/2])
			w.(http.Flusher).Flush()
			c, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				c.Close()
			}
			return
		}
	} else {
		b.rng.Add(1)
	}
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(b.data))
}

func TestResumeGET(t *testing.T) {
	data := make([]byte, 3<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	tests := []struct {
		name      string
		rangeHdr  string
		want      []byte
		newETag   bool // the object changes before the resume
		wantError bool
	}{
		{"whole object", "", data, false, false},
		{"range", "bytes=1000-2999999", data[1000:3000000], false, false},
		{"object changed", "", nil, true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bs := &blobServer{data: data}
			bs.etag.Store(`"v1"`)
			var peer Peer
			var servers []*http.Server
			for _, a := range []string{"127.0.0.2:0", "127.0.0.3:0"} {
				lns, err := Listen(context.Background(), []string{a})
				if err != nil {
					t.Fatal(err)
				}
				srv := &http.Server{Handler: bs}
				go srv.Serve(lns[0])
				defer srv.Close()
				servers = append(servers, srv)
				peer.Addrs = append(peer.Addrs, lns[0].Addr().String())
			}
			tr := newTestTransport(t, Config{LocalAddrs: []string{"127.0.0.5"}})
			req, _ := http.NewRequest(http.MethodGet, "/blob", nil)
			if tc.rangeHdr != "" {
				req.Header.Set("Range", tc.rangeHdr)
			}
			bs.cut.Store(tc.rangeHdr == "")
			if tc.rangeHdr != "" { // cut the ranged answer instead: serve it half
				bs.cut.Store(false)
			}
			resp, err := tr.Do(context.Background(), peer, req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if tc.newETag {
				bs.etag.Store(`"v2"`)
			}
			if tc.rangeHdr != "" {
				// Read a little, then kill every connection: the rest
				// must come from a new connection.
				head := make([]byte, 4096)
				if _, err := io.ReadFull(resp.Body, head); err != nil {
					t.Fatal(err)
				}
				for _, s := range servers {
					s.Close()
				}
				// Serve again on the second address only.
				lns, err := Listen(context.Background(), []string{peer.Addrs[1]})
				if err != nil {
					t.Fatal(err)
				}
				srv := &http.Server{Handler: bs}
				go srv.Serve(lns[0])
				defer srv.Close()
				rest, err := io.ReadAll(resp.Body)
				if err != nil {
					t.Fatalf("read after connection loss: %v", err)
				}
				if got := append(head, rest...); !bytes.Equal(got, tc.want) {
					t.Fatalf("got %d bytes, want %d (equal prefix: %v)", len(got), len(tc.want), bytes.HasPrefix(tc.want, head))
				}
				return
			}
			got, err := io.ReadAll(resp.Body)
			if tc.wantError {
				if err == nil {
					t.Fatal("resumed across a version change")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tc.want) {
				t.Fatalf("got %d bytes, want %d", len(got), len(tc.want))
			}
			if bs.full.Load() != 1 || bs.rng.Load() != 1 {
				t.Errorf("server saw %d full and %d ranged requests, want 1 and 1", bs.full.Load(), bs.rng.Load())
			}
			if st := tr.Stats()[0]; st.Retries != 1 || st.InFlight != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}
