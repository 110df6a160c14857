package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/slipstream-io/slipstream/internal/config"
	"github.com/slipstream-io/slipstream/internal/localcluster"
)

// selfSigned writes a certificate for the loopback range and returns the
// cert and key paths and a pool that trusts it.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "slipstream test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true,
	}
	for a := 100; a < 140; a++ { // the 127.N ranges the tests use
		for k := 1; k <= 2; k++ {
			for i := 1; i <= 3; i++ {
				tmpl.IPAddresses = append(tmpl.IPAddresses, net.IPv4(127, byte(a), byte(k), byte(i)))
			}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	kb, _ := x509.MarshalECPrivateKey(key)
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestTLS serves the S3 API over HTTPS with a certificate from the config,
// and refuses plain HTTP there.
func TestTLS(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t)
	c := startCluster(t, localcluster.Spec{ExtraConfig: func(i int, n *config.Node) {
		n.TLS = config.TLS{Cert: certFile, Key: keyFile}
	}})
	ep := strings.Replace(c.Endpoint(1), "http://", "https://", 1)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	cl := s3.New(s3.Options{
		BaseEndpoint: aws.String(ep), Region: "us-east-1", UsePathStyle: true, HTTPClient: hc,
		Credentials: credentials.NewStaticCredentialsProvider(c.Spec.AccessKey, c.Spec.SecretKey, ""),
	})
	ctx := context.Background()
	if _, err := cl.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("secure")}); err != nil {
		t.Fatal(err)
	}
	body := randomBytes(5, 3<<20)
	if err := putObject(ctx, cl, "secure", "obj", body); err != nil {
		t.Fatal(err)
	}
	got, err := getObject(ctx, cl, "secure", "obj")
	if err != nil || len(got) != len(body) {
		t.Fatalf("GET over TLS: %v", err)
	}
	resp, err := http.Get(c.Endpoint(1) + "/secure/obj")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Fatalf("plain HTTP to a TLS listener answered %d", resp.StatusCode)
		}
	}
}
