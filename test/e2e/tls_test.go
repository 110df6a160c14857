package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/slipstream-io/slipstream/internal/config"
	"github.com/slipstream-io/slipstream/internal/localcluster"
	"github.com/slipstream-io/slipstream/internal/pki"
)

// selfSigned writes a certificate for the loopback range and returns the
// cert and key paths and a pool that trusts it.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	var hosts []string
	for a := 100; a < 140; a++ { // the 127.N ranges the tests use
		for k := 1; k <= 2; k++ {
			for i := 1; i <= 3; i++ {
				hosts = append(hosts, fmt.Sprintf("127.%d.%d.%d", a, k, i))
			}
		}
	}
	dir := t.TempDir()
	if err := pki.Write(dir, pki.Options{Hosts: hosts}); err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join(dir, pki.CACert))
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return filepath.Join(dir, pki.ServerCert), filepath.Join(dir, pki.ServerKey), pool
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

// TestVolumeNBDTLS: nodes with nbd_tls (certificates written by
// `slipstream volume certs`) serve volumes only over TLS to clients with
// a certificate of that authority; `volume create` prints nbds:// URIs;
// the Unix socket still serves local clients without TLS.
func TestVolumeNBDTLS(t *testing.T) {
	lo := fmt.Sprintf("127.%d", 100+netCounter.Add(1))
	dir := filepath.Join(t.TempDir(), "certs")
	args := []string{"volume", "certs", dir}
	for i := 1; i <= 3; i++ {
		args = append(args, "--host", fmt.Sprintf("%s.1.%d", lo, i)) // each node's first address
	}
	if out, err := exec.Command(binary, args...).CombinedOutput(); err != nil {
		t.Fatalf("slipstream %v: %v\n%s", args, err, out)
	}
	c := startCluster(t, localcluster.Spec{Net: lo, ExtraConfig: func(i int, n *config.Node) {
		n.NBDTLS = config.NBDTLS{Cert: filepath.Join(dir, "server-cert.pem"), Key: filepath.Join(dir, "server-key.pem"), ClientCA: filepath.Join(dir, "ca-cert.pem")}
	}})
	out := volumeCmd(t, c, 0, "create", "sec", "--size", "16MiB", "--copies", "2", "--chunk", "1MiB")
	if !strings.Contains(out, "nbds://"+c.Configs[0].NBD[0]+"/sec") || strings.Contains(out, "nbd://") {
		t.Fatalf("volume create does not print the nbds:// URIs:\n%s", out)
	}
	uri := func(i int) string { return fmt.Sprintf("nbds://%s/sec?tls-certificates=%s", c.Configs[i].NBD[0], dir) }
	if info := runTool(t, "nbdinfo", "--size", uri(2)); strings.TrimSpace(info) != "16777216" {
		t.Fatalf("nbdinfo over TLS: %q", info)
	}
	if out, err := exec.Command("nbdinfo", "--size", fmt.Sprintf("nbd://%s/sec", c.Configs[0].NBD[0])).CombinedOutput(); err == nil {
		t.Fatalf("nbdinfo without TLS was served: %s", out)
	}
	img := filepath.Join(t.TempDir(), "img")
	data := randomBytes(7, 16<<20)
	if err := os.WriteFile(img, data, 0o644); err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(c.Configs[0].NBD[0], ":")
	runTool(t, "qemu-img", "convert", "-n", "--object", "tls-creds-x509,id=tls0,endpoint=client,dir="+dir, "-f", "raw", img,
		"--target-image-opts", "driver=nbd,host="+host+",port="+port+",export=sec,tls-creds=tls0")
	back := filepath.Join(t.TempDir(), "back")
	runTool(t, "nbdcopy", uri(1), back)
	if got, err := os.ReadFile(back); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back through node2 over TLS: %v", err)
	}
	sock := fmt.Sprintf("nbd+unix:///sec?socket=%s", c.Configs[1].NBDSocket)
	if info := runTool(t, "nbdinfo", "--size", sock); strings.TrimSpace(info) != "16777216" {
		t.Fatalf("nbdinfo over the Unix socket: %q", info)
	}
}
