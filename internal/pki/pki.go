// Package pki makes the certificates of NBD over TLS: a certificate
// authority, a server certificate for the nodes' NBD addresses and a
// client certificate, all signed by that authority, written as PEM files
// under the names that qemu's tls-creds-x509 object and libnbd's
// tls-certificates directory read (ca-cert.pem, server-cert.pem,
// server-key.pem, client-cert.pem, client-key.pem). It also loads a
// server's certificate into its TLS configuration (the NBD server's, which
// then accepts only clients whose certificate the authority signed, and
// the S3 addresses').
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The file names in a certificate directory.
const (
	CACert     = "ca-cert.pem"
	CAKey      = "ca-key.pem"
	ServerCert = "server-cert.pem"
	ServerKey  = "server-key.pem"
	ClientCert = "client-cert.pem"
	ClientKey  = "client-key.pem"
)

// maxValidity bounds Options.Validity (the authority's is ten times
// longer, and must fit a time.Duration).
const maxValidity = 10 * 365 * 24 * time.Hour

// ErrInvalid marks bad options or unusable certificate files.
var ErrInvalid = errors.New("pki: invalid")

// Options say what to put in the certificates.
type Options struct {
	// Hosts are the host names and IP addresses clients use to reach the
	// nodes' NBD addresses; the server certificate is valid for all of
	// them (clients check the name they dialled). At least one.
	Hosts []string
	// Client is the client certificate's common name. Default
	// "slipstream-client".
	Client string
	// Validity is how long the new certificates are valid. Default one
	// year.
	Validity time.Duration
	// Now is the start of validity. Default time.Now.
	Now func() time.Time
}

// Write makes dir (0700) and writes the server and client certificates
// and keys in it, signed by the authority in dir: the one already there
// (ca-cert.pem and ca-key.pem), so that certificates made for more hosts
// or clients later are trusted alike, or a new one. Keys are written
// 0600 and every file is replaced atomically.
func Write(dir string, o Options) error {
	if len(o.Hosts) == 0 {
		return fmt.Errorf("%w: at least one host name or address is needed", ErrInvalid)
	}
	for _, h := range o.Hosts {
		if strings.TrimSpace(h) == "" || strings.ContainsAny(h, " /:") && net.ParseIP(h) == nil {
			return fmt.Errorf("%w: %q is not a host name or IP address", ErrInvalid, h)
		}
	}
	if o.Validity > maxValidity {
		return fmt.Errorf("%w: validity %v is over %v", ErrInvalid, o.Validity, maxValidity)
	}
	if o.Client == "" {
		o.Client = "slipstream-client"
	}
	if o.Validity <= 0 {
		o.Validity = 365 * 24 * time.Hour
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ca, caKey, err := loadCA(dir)
	if errors.Is(err, os.ErrNotExist) && absent(filepath.Join(dir, CACert)) && absent(filepath.Join(dir, CAKey)) {
		ca, caKey, err = newCA(dir, o)
	}
	if err != nil {
		return err
	}
	server := &x509.Certificate{
		Subject:     pkix.Name{CommonName: o.Hosts[0]},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range o.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			server.IPAddresses = append(server.IPAddresses, ip)
		} else {
			server.DNSNames = append(server.DNSNames, h)
		}
	}
	if err := issue(dir, ServerCert, ServerKey, server, ca, caKey, o); err != nil {
		return err
	}
	client := &x509.Certificate{
		Subject:     pkix.Name{CommonName: o.Client},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	return issue(dir, ClientCert, ClientKey, client, ca, caKey, o)
}

// newCA makes a certificate authority and writes it to dir.
func newCA(dir string, o Options) (*x509.Certificate, crypto.Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "slipstream NBD CA"},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	// The authority outlives the certificates it signs tenfold, so that
	// renewing them does not mean distributing a new authority.
	ca := o
	ca.Validity = 10 * o.Validity
	der, err := create(tmpl, tmpl, key, key, ca)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	if err := writeKey(filepath.Join(dir, CAKey), key); err != nil {
		return nil, nil, err
	}
	return cert, key, writePEM(filepath.Join(dir, CACert), "CERTIFICATE", der, 0o644)
}

func absent(path string) bool {
	_, err := os.Lstat(path)
	return errors.Is(err, os.ErrNotExist)
}

// loadCA reads the authority in dir; os.ErrNotExist if it has none.
func loadCA(dir string) (*x509.Certificate, crypto.Signer, error) {
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, CACert), filepath.Join(dir, CAKey))
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %v", ErrInvalid, CACert, err)
	}
	key, ok := pair.PrivateKey.(crypto.Signer)
	if !ok || !cert.IsCA {
		return nil, nil, fmt.Errorf("%w: %s is not a certificate authority", ErrInvalid, CACert)
	}
	return cert, key, nil
}

// issue makes a key and a certificate from tmpl signed by the authority
// and writes them to dir.
func issue(dir, certName, keyName string, tmpl, ca *x509.Certificate, caKey crypto.Signer, o Options) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := create(tmpl, ca, key, caKey, o)
	if err != nil {
		return err
	}
	if err := writeKey(filepath.Join(dir, keyName), key); err != nil {
		return err
	}
	return writePEM(filepath.Join(dir, certName), "CERTIFICATE", der, 0o644)
}

// create signs tmpl with a fresh serial number and o's validity.
func create(tmpl, parent *x509.Certificate, key *ecdsa.PrivateKey, signer crypto.Signer, o Options) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = o.Now().Add(-time.Hour) // clocks of clients that lag a little
	tmpl.NotAfter = o.Now().Add(o.Validity)
	return x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), signer)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "PRIVATE KEY", der, 0o600)
}

// writePEM writes one PEM block to path through a temporary file renamed
// over it.
func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	err = f.Chmod(mode)
	if err == nil {
		err = pem.Encode(f, &pem.Block{Type: typ, Bytes: der})
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// ServerConfig loads a server certificate and key and returns the TLS
// configuration of a server that, when clientCA is set, accepts only
// clients presenting a certificate that authority signed. TLS 1.2 is the
// oldest version it speaks (the NBD protocol's minimum).
func ServerConfig(certFile, keyFile, clientCA string) (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	if clientCA == "" {
		return cfg, nil
	}
	pool, err := loadPool(clientCA)
	if err != nil {
		return nil, err
	}
	cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	return cfg, nil
}

// ClientConfig returns the TLS configuration of a client using the
// certificates in dir (as Write left them) to reach serverName.
func ClientConfig(dir, serverName string) (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, ClientCert), filepath.Join(dir, ClientKey))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	pool, err := loadPool(filepath.Join(dir, CACert))
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12}, nil
}

func loadPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%w: %s holds no PEM certificate", ErrInvalid, path)
	}
	return pool, nil
}
