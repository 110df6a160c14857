package nbd_test

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slipstream-io/slipstream/internal/pki"
	"github.com/slipstream-io/slipstream/internal/volume/nbd"
)

const repErrTLSReqd = 1<<31 | 5

// tlsDir writes a certificate authority, a server certificate for the
// loopback address and a client certificate into a temp dir.
func tlsDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := pki.Write(dir, pki.Options{Hosts: []string{"127.0.0.1", "localhost"}}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// serveTLS serves exports on loopback TCP and on a Unix socket with TLS
// configured from the certificates in dir (client certificates required).
func serveTLS(t *testing.T, dir string, exports nbd.Exports) (addr, sock string) {
	t.Helper()
	cfg, err := pki.ServerConfig(filepath.Join(dir, pki.ServerCert), filepath.Join(dir, pki.ServerKey), filepath.Join(dir, pki.CACert))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, nbd.Config{Exports: exports, TLS: cfg}, ln)
	sock = filepath.Join(t.TempDir(), "nbd.sock")
	uln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, nbd.Config{Exports: exports, TLS: cfg}, uln)
	return ln.Addr().String(), sock
}

// startTLS sends NBD_OPT_STARTTLS and, once acknowledged, runs the TLS
// handshake with cfg; the raw client then speaks over TLS.
func (r *rawClient) startTLS(cfg *tls.Config) error {
	r.t.Helper()
	r.write(nbd.AppendOption(nil, nbd.OptStartTLS, nil))
	if _, typ, _ := r.optReply(); typ != repAck {
		r.t.Fatalf("STARTTLS answered %#x, want ACK", typ)
	}
	tc := tls.Client(r.c, cfg)
	if err := tc.Handshake(); err != nil {
		return err
	}
	r.c = tc
	return nil
}

func TestTLSRequiredOnTCP(t *testing.T) {
	dir := tlsDir(t)
	mem := newMem(1 << 20)
	addr, _ := serveTLS(t, dir, nbd.Map{"a": mem})
	r := dialRaw(t, addr)
	for _, opt := range []uint32{nbd.OptList, nbd.OptStructuredReply, nbd.OptInfo, nbd.OptGo} {
		var data []byte
		if opt == nbd.OptInfo || opt == nbd.OptGo {
			data = nbd.AppendInfoRequest(nil, nbd.InfoRequest{Name: "a"})
		}
		r.write(nbd.AppendOption(nil, opt, data))
		if got, typ, _ := r.optReply(); got != opt || typ != repErrTLSReqd {
			t.Errorf("option %d before STARTTLS: reply %d %#x, want ERR_TLS_REQD", opt, got, typ)
		}
	}
	r.write(nbd.AppendOption(nil, nbd.OptStartTLS, []byte("x")))
	if _, typ, _ := r.optReply(); typ != repErrInvalid {
		t.Errorf("STARTTLS with data: %#x, want ERR_INVALID", typ)
	}
	cfg, err := pki.ClientConfig(dir, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.startTLS(cfg); err != nil {
		t.Fatalf("TLS handshake: %v", err)
	}
	r.write(nbd.AppendOption(nil, nbd.OptStartTLS, nil))
	if _, typ, _ := r.optReply(); typ != repErrInvalid {
		t.Errorf("second STARTTLS: %#x, want ERR_INVALID", typ)
	}
	// Over TLS the session goes on as usual: a write and a read back.
	r.goExport("a", false)
	payload := bytes.Repeat([]byte{0xa5}, 4096)
	r.write(append(nbd.AppendRequest(nil, nbd.Request{Type: nbd.CmdWrite, Cookie: 1, Offset: 8192, Length: 4096}), payload...))
	if errno, cookie := r.simpleReply(); errno != 0 || cookie != 1 {
		t.Fatalf("write over TLS: errno %d cookie %d", errno, cookie)
	}
	r.write(nbd.AppendRequest(nil, nbd.Request{Type: nbd.CmdRead, Cookie: 2, Offset: 8192, Length: 4096}))
	if errno, cookie := r.simpleReply(); errno != 0 || cookie != 2 {
		t.Fatalf("read over TLS: errno %d cookie %d", errno, cookie)
	}
	if got := r.read(4096); !bytes.Equal(got, payload) {
		t.Fatal("read over TLS returned other bytes")
	}
	mem.mu.Lock()
	landed := bytes.Equal(mem.b[8192:8192+4096], payload)
	mem.mu.Unlock()
	if !landed {
		t.Fatal("the write over TLS did not reach the device")
	}
}

// TestTLSRefusals: a client that enters transmission without TLS, or
// presents no certificate, or one another authority signed, is hung up
// on, and the server goes on serving others.
func TestTLSRefusals(t *testing.T) {
	dir := tlsDir(t)
	addr, _ := serveTLS(t, dir, nbd.Map{"a": newMem(1 << 20)})

	r := dialRaw(t, addr)
	r.write(nbd.AppendOption(nil, nbd.OptExportName, []byte("a")))
	if _, err := io.ReadFull(r.c, make([]byte, 1)); err == nil {
		t.Error("EXPORT_NAME before STARTTLS was answered, want a hang-up")
	}

	good, err := pki.ClientConfig(dir, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	noCert := good.Clone()
	noCert.Certificates = nil
	other := t.TempDir()
	if err := pki.Write(other, pki.Options{Hosts: []string{"127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	foreign, err := pki.ClientConfig(other, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	foreign.RootCAs = good.RootCAs // trusts the server, but its own certificate is foreign
	for name, cfg := range map[string]*tls.Config{"no client certificate": noCert, "foreign client certificate": foreign} {
		r := dialRaw(t, addr)
		err := r.startTLS(cfg)
		if err == nil {
			// TLS 1.3: the server's verdict on the client certificate
			// arrives with the first read.
			r.write(nbd.AppendOption(nil, nbd.OptList, nil))
			_, err = io.ReadFull(r.c, make([]byte, 20))
		}
		if err == nil {
			t.Errorf("%s: the session went on", name)
		}
	}
	// A server certificate for another name is refused by the client.
	wrongName := good.Clone()
	wrongName.ServerName = "elsewhere.example"
	if err := dialRaw(t, addr).startTLS(wrongName); err == nil {
		t.Error("a server certificate for another name was accepted")
	}
	r = dialRaw(t, addr)
	if err := r.startTLS(good); err != nil {
		t.Fatalf("after the refusals: %v", err)
	}
	r.goExport("a", true)
}

// TestTLSOptionalOnUnixSocket: a Unix socket, guarded by its file
// permissions, serves clients with or without TLS.
func TestTLSOptionalOnUnixSocket(t *testing.T) {
	needTool(t, "nbdinfo")
	dir := tlsDir(t)
	_, sock := serveTLS(t, dir, nbd.Map{"a": newMem(3 << 20)})
	for _, uri := range []string{
		"nbd+unix:///a?socket=" + sock,
		"nbds+unix:///a?socket=" + sock + "&tls-certificates=" + dir + "&tls-hostname=127.0.0.1",
	} {
		if out := run(t, "nbdinfo", "--size", uri); strings.TrimSpace(out) != "3145728" {
			t.Errorf("%s: size %q", uri, out)
		}
	}
}

// TestTLSWithRealClients: nbdinfo, qemu-img (its tls-creds-x509 object)
// and nbdcopy reach a TLS export with the certificates pki writes, and
// nbdinfo without them is refused. (fio's nbd engine cannot name a
// certificate directory: libnbd refuses tls-certificates in its URI.)
func TestTLSWithRealClients(t *testing.T) {
	needTool(t, "nbdinfo")
	needTool(t, "qemu-img")
	needTool(t, "nbdcopy")
	dir := tlsDir(t)
	d, _ := fileExport(t, 16<<20)
	addr, _ := serveTLS(t, dir, nbd.Map{"disk": d})
	host, port, _ := net.SplitHostPort(addr)
	uri := "nbds://" + addr + "/disk?tls-certificates=" + dir

	if out := run(t, "nbdinfo", "--size", uri); strings.TrimSpace(out) != "16777216" {
		t.Errorf("nbdinfo over TLS: size %q", out)
	}
	if out, err := execOut("nbdinfo", "--size", "nbd://"+addr+"/disk"); err == nil {
		t.Errorf("nbdinfo without TLS was served: %s", out)
	}
	noCerts := t.TempDir()
	ca, err := os.ReadFile(filepath.Join(dir, pki.CACert))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(noCerts, pki.CACert), ca, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := execOut("nbdinfo", "--size", "nbds://"+addr+"/disk?tls-certificates="+noCerts); err == nil {
		t.Errorf("nbdinfo without a client certificate was served: %s", out)
	}

	src := filepath.Join(t.TempDir(), "src.img")
	data := make([]byte, 16<<20)
	rand.Read(data[:6<<20])
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	obj := "tls-creds-x509,id=tls0,endpoint=client,dir=" + dir
	target := "driver=nbd,host=" + host + ",port=" + port + ",export=disk,tls-creds=tls0"
	run(t, "qemu-img", "convert", "-n", "--object", obj, "-f", "raw", src, "--target-image-opts", target)
	run(t, "qemu-img", "compare", "--object", obj, "--image-opts", "driver=raw,file.filename="+src, "driver=raw,file."+strings.ReplaceAll(target, ",", ",file."))
	got := make([]byte, len(data))
	if err := d.ReadAt(t.Context(), got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("what qemu-img wrote over TLS is not on the device")
	}

	// nbdcopy with 4 connections, each its own TLS session, and back.
	back := filepath.Join(t.TempDir(), "back.img")
	run(t, "nbdcopy", "--connections=4", uri, back)
	if got, err := os.ReadFile(back); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("nbdcopy over TLS read other bytes (%v)", err)
	}
}

// TestTLSConfigNeedsACertificate: a TLS configuration without a server
// certificate is refused when the server is made, not at the first client.
func TestTLSConfigNeedsACertificate(t *testing.T) {
	if _, err := nbd.NewServer(nbd.Config{Exports: nbd.Map{}, TLS: &tls.Config{}}); err == nil {
		t.Fatal("a TLS configuration without a certificate was accepted")
	}
}
