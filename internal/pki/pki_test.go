package pki_test

import (
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/pki"
)

// handshake runs a TLS handshake between server and client configs over
// a pipe and returns the client's error (or the server's).
func handshake(t *testing.T, server, client *tls.Config) error {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	_ = a.SetDeadline(time.Now().Add(10 * time.Second))
	_ = b.SetDeadline(time.Now().Add(10 * time.Second))
	serr := make(chan error, 1)
	go func() {
		s := tls.Server(a, server)
		err := s.Handshake()
		if err == nil {
			// TLS 1.3 verifies the client certificate after the client's
			// handshake returns: answer one byte to settle it.
			_, err = s.Write([]byte{1})
		}
		if err != nil {
			a.Close()
		}
		serr <- err
	}()
	c := tls.Client(b, client)
	err := c.Handshake()
	if err == nil {
		_, err = c.Read(make([]byte, 1))
	}
	if err != nil {
		b.Close()
	}
	if e := <-serr; err == nil {
		err = e
	}
	return err
}

func serverConfig(t *testing.T, dir string) *tls.Config {
	t.Helper()
	cfg, err := pki.ServerConfig(filepath.Join(dir, pki.ServerCert), filepath.Join(dir, pki.ServerKey), filepath.Join(dir, pki.CACert))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestWriteAndHandshake(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	if err := pki.Write(dir, pki.Options{Hosts: []string{"127.0.0.1", "node1.example"}}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{pki.CAKey, pki.ServerKey, pki.ClientKey} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", name, fi.Mode().Perm())
		}
	}
	server := serverConfig(t, dir)
	for _, host := range []string{"127.0.0.1", "node1.example"} {
		client, err := pki.ClientConfig(dir, host)
		if err != nil {
			t.Fatal(err)
		}
		if err := handshake(t, server, client); err != nil {
			t.Errorf("handshake to %s: %v", host, err)
		}
	}
	client, _ := pki.ClientConfig(dir, "node2.example")
	if err := handshake(t, server, client); err == nil {
		t.Error("a server certificate was accepted for a host it does not name")
	}
}

// TestWriteKeepsTheAuthority: writing again (for more hosts) signs with
// the authority already in the directory, so old clients still trust the
// new server certificate, and a client of another authority is refused.
func TestWriteKeepsTheAuthority(t *testing.T) {
	dir := t.TempDir()
	if err := pki.Write(dir, pki.Options{Hosts: []string{"127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	ca1, _ := os.ReadFile(filepath.Join(dir, pki.CACert))
	oldClient, err := pki.ClientConfig(dir, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if err := pki.Write(dir, pki.Options{Hosts: []string{"127.0.0.1", "::1"}}); err != nil {
		t.Fatal(err)
	}
	ca2, _ := os.ReadFile(filepath.Join(dir, pki.CACert))
	if !bytes.Equal(ca1, ca2) {
		t.Fatal("the certificate authority changed on a second Write")
	}
	if err := handshake(t, serverConfig(t, dir), oldClient); err != nil {
		t.Errorf("a client of the first Write refused by the second's server: %v", err)
	}

	other := t.TempDir()
	if err := pki.Write(other, pki.Options{Hosts: []string{"127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	foreign, _ := pki.ClientConfig(other, "127.0.0.1")
	foreign.RootCAs = oldClient.RootCAs
	if err := handshake(t, serverConfig(t, dir), foreign); err == nil {
		t.Error("a client certificate of another authority was accepted")
	}
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	for name, o := range map[string]pki.Options{
		"no hosts":      {},
		"an empty host": {Hosts: []string{"h", ""}},
		"a URL":         {Hosts: []string{"http://h:10809"}},
		"100 years":     {Hosts: []string{"h"}, Validity: 100 * 365 * 24 * time.Hour},
	} {
		if err := pki.Write(dir, o); !errors.Is(err, pki.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if err := pki.Write(dir, pki.Options{Hosts: []string{"::1", "fe80::1"}}); err != nil {
		t.Errorf("IPv6 addresses: %v", err)
	}
	if err := pki.Write(dir, pki.Options{Hosts: []string{"h"}}); err != nil {
		t.Fatal(err)
	}
	// An authority without its key is not replaced by a new one.
	key, _ := os.ReadFile(filepath.Join(dir, pki.CAKey))
	os.Remove(filepath.Join(dir, pki.CAKey))
	if err := pki.Write(dir, pki.Options{Hosts: []string{"h"}}); err == nil {
		t.Error("Write went on with the authority's key missing")
	}
	if err := os.WriteFile(filepath.Join(dir, pki.CAKey), key, 0o600); err != nil {
		t.Fatal(err)
	}
	// A server certificate in place of the authority's is not used to sign.
	for _, pair := range [][2]string{{pki.ServerCert, pki.CACert}, {pki.ServerKey, pki.CAKey}} {
		b, _ := os.ReadFile(filepath.Join(dir, pair[0]))
		if err := os.WriteFile(filepath.Join(dir, pair[1]), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := pki.Write(dir, pki.Options{Hosts: []string{"h"}}); !errors.Is(err, pki.ErrInvalid) {
		t.Errorf("a leaf certificate as the authority: %v, want ErrInvalid", err)
	}
	if err := os.WriteFile(filepath.Join(dir, pki.CACert), []byte("not pem"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := pki.ServerConfig(filepath.Join(dir, pki.ServerCert), filepath.Join(dir, pki.ServerKey), filepath.Join(dir, pki.CACert)); !errors.Is(err, pki.ErrInvalid) {
		t.Errorf("a client CA file without PEM: %v, want ErrInvalid", err)
	}
	if _, err := pki.ServerConfig(filepath.Join(dir, "missing.pem"), filepath.Join(dir, pki.ServerKey), ""); !errors.Is(err, pki.ErrInvalid) {
		t.Errorf("a missing certificate: %v, want ErrInvalid", err)
	}
}
