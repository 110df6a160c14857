package nbd_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/pki"
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
		var msgs [][]byte
		if handshaken {
			msgs = append(msgs, hs, nbd.AppendOption(nil, nbd.OptStructuredReply, nil), goOpt)
		}
		serveBytes(t, srv, append(msgs, in)...)
	})
}

// serveBytes runs a server connection over a pipe, writes msgs to it as a
// client that reads and drops every reply, hangs up, and fails t if the
// connection does not end.
func serveBytes(t *testing.T, srv *nbd.Server, msgs ...[]byte) {
	client, server := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.ServeConn(context.Background(), server)
	}()
	go func() { _, _ = io.Copy(io.Discard, client) }()
	_ = client.SetWriteDeadline(time.Now().Add(2 * time.Second))
	for _, m := range msgs {
		_, _ = client.Write(m)
	}
	client.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("server connection did not end after the client left")
	}
}

// FuzzServeConnTLS feeds arbitrary options to a server that requires TLS
// (a pipe is not a Unix socket): whatever comes before or after STARTTLS,
// the connection ends without panicking, and no export is entered
// without TLS.
func FuzzServeConnTLS(f *testing.F) {
	dir := f.TempDir()
	if err := pki.Write(dir, pki.Options{Hosts: []string{"127.0.0.1"}}); err != nil {
		f.Fatal(err)
	}
	cfg, err := pki.ServerConfig(filepath.Join(dir, pki.ServerCert), filepath.Join(dir, pki.ServerKey), filepath.Join(dir, pki.CACert))
	if err != nil {
		f.Fatal(err)
	}
	goOpt := nbd.AppendOption(nil, nbd.OptGo, nbd.AppendInfoRequest(nil, nbd.InfoRequest{Name: "a"}))
	f.Add(goOpt)
	f.Add(nbd.AppendOption(nil, nbd.OptExportName, []byte("a")))
	f.Add(append(nbd.AppendOption(nil, nbd.OptStartTLS, nil), goOpt...))
	f.Add(append(nbd.AppendOption(nil, nbd.OptStartTLS, nil), 0x16, 3, 1, 0, 5, 1, 2, 3))
	f.Add(nbd.AppendOption(nil, nbd.OptStartTLS, []byte{1}))
	f.Fuzz(func(t *testing.T, in []byte) {
		dev := newMem(65536)
		srv, err := nbd.NewServer(nbd.Config{Exports: nbd.Map{"a": dev}, TLS: cfg, HandshakeTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		// A write request after the options must never reach the device.
		write := append(nbd.AppendRequest(nil, nbd.Request{Type: nbd.CmdWrite, Length: 8}), 1, 2, 3, 4, 5, 6, 7, 8)
		serveBytes(t, srv, binary.BigEndian.AppendUint32(nil, 3), in, write)
		dev.mu.Lock()
		defer dev.mu.Unlock()
		if !bytes.Equal(dev.b[:8], make([]byte, 8)) {
			t.Fatal("a write reached the device without TLS")
		}
	})
}
