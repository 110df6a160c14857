package netx

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestListen(t *testing.T) {
	ctx := context.Background()
	busy, err := net.Listen("tcp", "127.0.0.3:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	tests := []struct {
		name  string
		addrs []string
		want  error // nil: success
		fails bool  // an error not matched by a sentinel
	}{
		{"none", nil, ErrNoAddrs, false},
		{"no host", []string{":0"}, ErrNoHost, false},
		{"no host second", []string{"127.0.0.2:0", ":0"}, ErrNoHost, false},
		{"no port", []string{"127.0.0.2"}, ErrBadAddr, false},
		{"two addresses", []string{"127.0.0.2:0", "127.0.0.3:0"}, nil, false},
		{"port taken", []string{"127.0.0.2:0", busy.Addr().String()}, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lns, err := Listen(ctx, tc.addrs)
			switch {
			case tc.want != nil:
				if !errors.Is(err, tc.want) {
					t.Fatalf("err = %v, want %v", err, tc.want)
				}
				return
			case tc.fails:
				if err == nil {
					for _, l := range lns {
						l.Close()
					}
					t.Fatal("want an error")
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			defer func() {
				for _, l := range lns {
					l.Close()
				}
			}()
			if len(lns) != len(tc.addrs) {
				t.Fatalf("%d listeners for %d addresses", len(lns), len(tc.addrs))
			}
			for i, l := range lns {
				want, _, _ := net.SplitHostPort(tc.addrs[i])
				got, _, _ := net.SplitHostPort(l.Addr().String())
				if got != want {
					t.Errorf("listener %d on %s, want host %s", i, got, want)
				}
			}
		})
	}
}

func TestSplitAddrs(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"a:1", []string{"a:1"}},
		{" a:1 , ,b:2,", []string{"a:1", "b:2"}},
	}
	for _, tc := range tests {
		got := SplitAddrs(tc.in)
		if strings.Join(got, "|") != strings.Join(tc.want, "|") || len(got) != len(tc.want) {
			t.Errorf("SplitAddrs(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func FuzzSplitAddrs(f *testing.F) {
	f.Add("10.77.1.2:9000,10.77.2.2:9000")
	f.Add(" , ,")
	f.Fuzz(func(t *testing.T, s string) {
		for _, a := range SplitAddrs(s) {
			if a == "" || strings.Contains(a, ",") || strings.TrimSpace(a) != a {
				t.Fatalf("bad element %q from %q", a, s)
			}
		}
	})
}

// TestCountingListenerServeFile checks the serving-side counters, with a
// file served by http.ServeContent (the sendfile path goes through ReadFrom).
func TestCountingListenerServeFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "blob")
	const size = 3<<20 + 17
	if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	lns, err := Listen(context.Background(), []string{"127.0.0.4:0"})
	if err != nil {
		t.Fatal(err)
	}
	cl := CountListener(lns[0])
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := os.Open(path)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		defer f.Close()
		http.ServeContent(w, r, "blob", time.Time{}, f)
	})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, srv, []net.Listener{cl}, 10*time.Second) }()
	resp, err := http.Get("http://" + cl.Addr().String() + "/blob")
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || n != size {
		t.Fatalf("read %d bytes, err %v", n, err)
	}
	// The client can hold every byte before the server's sendfile call
	// returns and counts them; a graceful stop waits for the handler.
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	st := cl.Stats()
	if st.BytesSent < size || st.BytesSent > size+4096 {
		t.Errorf("bytes sent %d, want about %d", st.BytesSent, size)
	}
	if st.BytesRecv == 0 || st.Accepted != 1 {
		t.Errorf("stats %+v", st)
	}
}

// A countConn that records progress sends a file by sendfile in chunks,
// marking progress and counting bytes chunk by chunk, and honours a limit
// around the file (as io.CopyN passes it); other readers go through Write.
func TestCountConnReadFromProgress(t *testing.T) {
	const size = 5*progressChunk + 123
	path := filepath.Join(t.TempDir(), "blob")
	if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := make(chan int64, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- -1
			return
		}
		n, _ := io.Copy(io.Discard, c)
		c.Close()
		got <- n
	}()
	raw, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	var c ifaceCounters
	var progress atomic.Int64
	cc := newCountConn(raw, &c, &progress, nil)
	var want int64
	for _, tc := range []struct {
		name string
		r    func(f *os.File) io.Reader
		n    int64
	}{
		{"file", func(f *os.File) io.Reader { return f }, size},
		{"limited file", func(f *os.File) io.Reader { return io.LimitReader(f, size-progressChunk-7) }, size - progressChunk - 7},
		{"other reader", func(f *os.File) io.Reader { return io.MultiReader(f) }, size},
	} {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		before := progress.Load()
		n, err := cc.ReadFrom(tc.r(f))
		f.Close()
		if err != nil || n != tc.n {
			t.Fatalf("%s: ReadFrom = %d, %v; want %d", tc.name, n, err, tc.n)
		}
		want += n
		if c.sent.Load() != uint64(want) {
			t.Fatalf("%s: counted %d bytes sent, want %d", tc.name, c.sent.Load(), want)
		}
		if progress.Load() == before {
			t.Errorf("%s: no progress marked", tc.name)
		}
	}
	cc.Close()
	if n := <-got; n != want {
		t.Errorf("peer received %d bytes, want %d", n, want)
	}
}
