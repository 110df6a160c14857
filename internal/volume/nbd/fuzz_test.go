package nbd_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/volume/nbd"
)

func FuzzParseRequest(f *testing.F) {
	f.Add(nbd.AppendRequest(nil, nbd.Request{Type: nbd.CmdWrite, Cookie: 1, Offset: 4096, Length: 512}))
	f.Add([]byte("short"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := nbd.ParseRequest(b)
		if err != nil {
			return
		}
		if enc := nbd.AppendRequest(nil, r); !bytes.Equal(enc, b[:28]) {
			t.Fatalf("round trip: %x -> %+v -> %x", b[:28], r, enc)
		}
	})
}

func FuzzParseMetaContextRequest(f *testing.F) {
	f.Add(nbd.AppendMetaContextRequest(nil, nbd.MetaContextRequest{Name: "disk", Queries: []string{"base:allocation", "qemu:dirty-bitmap:x"}}))
	f.Add(nbd.AppendMetaContextRequest(nil, nbd.MetaContextRequest{}))
	f.Add([]byte{0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := nbd.ParseMetaContextRequest(b)
		if err != nil {
			return
		}
		if enc := nbd.AppendMetaContextRequest(nil, r); !bytes.Equal(enc, b) {
			t.Fatalf("round trip: %x -> %+v -> %x", b, r, enc)
		}
	})
}

func FuzzParseInfoRequest(f *testing.F) {
	f.Add(nbd.AppendInfoRequest(nil, nbd.InfoRequest{Name: "disk", Infos: []uint16{1, 3}}))
	f.Add([]byte{0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := nbd.ParseInfoRequest(b)
		if err != nil {
			return
		}
		if enc := nbd.AppendInfoRequest(nil, r); !bytes.Equal(enc, b) {
			t.Fatalf("round trip: %x -> %+v -> %x", b, r, enc)
		}
	})
}

// FuzzServeConn feeds arbitrary client bytes to a server connection, after
// an optional valid handshake, and checks that it ends without panicking or
// touching the device outside its bounds (the memory device would panic).
func FuzzServeConn(f *testing.F) {
	hs := binary.BigEndian.AppendUint32(nil, 3)
	goOpt := nbd.AppendOption(nil, nbd.OptGo, nbd.AppendInfoRequest(nil, nbd.InfoRequest{Name: "a"}))
	f.Add(false, append(append([]byte{}, hs...), goOpt...))
	f.Add(true, nbd.AppendRequest(nil, nbd.Request{Type: nbd.CmdRead, Length: 4096}))
	f.Add(true, append(nbd.AppendRequest(nil, nbd.Request{Type: nbd.CmdWrite, Offset: 65530, Length: 8}), make([]byte, 8)...))
	f.Add(true, nbd.AppendRequest(nil, nbd.Request{Type: nbd.CmdWriteZeroes, Offset: 1, Length: 1<<32 - 1}))
	f.Add(false, append(append([]byte{}, hs...), nbd.AppendOption(nil, nbd.OptList, nil)...))
	f.Fuzz(func(t *testing.T, handshaken bool, in []byte) {
		srv, err := nbd.NewServer(nbd.Config{Exports: nbd.Map{"a": newMem(65536)}, MaxRequest: 1 << 16})
		if err != nil {
			t.Fatal(err)
		}
		client, server := net.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = srv.ServeConn(context.Background(), server)
		}()
		go func() { _, _ = io.Copy(io.Discard, client) }()
		if handshaken {
			_, _ = client.Write(hs)
			_, _ = client.Write(nbd.AppendOption(nil, nbd.OptStructuredReply, nil))
			_, _ = client.Write(goOpt)
		}
		_ = client.SetWriteDeadline(time.Now().Add(2 * time.Second))
		_, _ = client.Write(in)
		client.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("server connection did not end after the client left")
		}
	})
}
