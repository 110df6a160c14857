package volume

import (
	"bytes"
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

func FuzzStreamRequest(f *testing.F) {
	f.Add(appendStreamReq(nil, &streamReq{op: opWrite, vol: "v", chunk: 3, off: 4096, payload: make([]byte, 8)}))
	f.Add(appendStreamReq(nil, &streamReq{op: opRead, vol: "vol", chunk: 1, n: 1 << 30}))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, volLen, payLen, err := parseStreamReq(b)
		if err != nil {
			return
		}
		if volLen > maxKeyLen || payLen > MaxTransfer || r.op == opRead && r.n > MaxTransfer {
			t.Fatalf("accepted oversized request %+v vol %d payload %d", r, volLen, payLen)
		}
		if len(b) < streamReqLen+volLen {
			return
		}
		r.vol = string(b[streamReqLen : streamReqLen+volLen])
		r.payload = make([]byte, payLen)
		enc := appendStreamReq(nil, &r)
		if !bytes.Equal(enc, b[:streamReqLen+volLen]) {
			t.Fatalf("round trip: %x -> %x", b[:streamReqLen+volLen], enc)
		}
	})
}

func FuzzChunkList(f *testing.F) {
	f.Add("1,2,3")
	f.Add("")
	f.Add("-1")
	f.Fuzz(func(t *testing.T, s string) {
		cs, err := parseChunkList(s)
		if err != nil {
			return
		}
		for _, c := range cs {
			if c < 0 {
				t.Fatalf("negative chunk from %q", s)
			}
		}
		parts := make([]string, len(cs))
		for i, c := range cs {
			parts[i] = strconv.FormatInt(c, 10)
		}
		again, err := parseChunkList(strings.Join(parts, ","))
		if err != nil || len(again) != len(cs) {
			t.Fatalf("re-parse of %q: %v %v", s, again, err)
		}
	})
}

// FuzzStreamServer feeds arbitrary bytes to the stream server over a pipe;
// it must neither panic nor hang, and must not touch the replica outside
// what the requests allow (the local replica checks its bounds).
func FuzzStreamServer(f *testing.F) {
	f.Add(appendStreamReq(nil, &streamReq{op: opRead, vol: "v", chunk: 0, off: 0, n: 16}))
	w := appendStreamReq(nil, &streamReq{op: opWrite, vol: "v", chunk: 1, off: 100, payload: make([]byte, 4)})
	f.Add(append(w, 1, 2, 3, 4))
	f.Add(appendStreamReq(nil, &streamReq{op: opSync, vol: "v", payload: make([]byte, 16)}))
	f.Fuzz(func(t *testing.T, in []byte) {
		l, err := NewLocal(LocalConfig{Mountpaths: []string{t.TempDir()}, MaxChunkSize: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		h := &handler{r: l, streams: map[net.Conn]struct{}{}}
		client, server := net.Pipe()
		s := newStreamServer(h, server)
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.serve(context.Background(), bufioReader(server))
			server.Close()
		}()
		go func() { _, _ = io.Copy(io.Discard, client) }()
		_ = client.SetWriteDeadline(time.Now().Add(2 * time.Second))
		_, _ = client.Write(in)
		client.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("stream server did not end after the client left")
		}
	})
}
