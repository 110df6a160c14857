package s3api_test

import (
	"bytes"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// clientEnv is the environment of a real S3 client process talking to e.
func (e *env) clientEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "AWS_") {
			continue // the machine's AWS_CA_BUNDLE, profiles, endpoints: not ours
		}
		out = append(out, kv)
	}
	return append(out, "AWS_ACCESS_KEY_ID="+testKey, "AWS_SECRET_ACCESS_KEY="+testSecret,
		"AWS_DEFAULT_REGION="+testRegion, "AWS_ENDPOINT_URL="+e.srv.URL, "AWS_CONFIG_FILE=/dev/null",
		"AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_MAX_ATTEMPTS=1")
}

func needTool(t *testing.T, name string) string {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: skipping the %s client test", name)
	}
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not installed (scripts/setup.sh installs it): %v", name, err)
	}
	return p
}

// TestAWSCLI drives the handler with the AWS CLI: mb, a multipart cp, ls,
// cp back, rm. Recent CLIs upload with aws-chunked bodies and trailing
// checksums by default.
func TestAWSCLI(t *testing.T) {
	aws := needTool(t, "aws")
	// Over TLS, where the CLI uploads parts as aws-chunked bodies with
	// trailing checksums (plain HTTP is covered by the boto3 test).
	e := newEnv(t, envOpts{tls: true})
	env := append(e.clientEnv(), "AWS_CA_BUNDLE="+e.caFile())
	dir := t.TempDir()
	data := make([]byte, 20<<20+12345)
	rand.Read(data)
	src, back := filepath.Join(dir, "src.bin"), filepath.Join(dir, "back.bin")
	if err := os.WriteFile(src, data, 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(aws, append([]string{"--endpoint-url", e.srv.URL}, args...)...)
		cmd.Env = env
		start := time.Now()
		out, err := cmd.CombinedOutput()
		t.Logf("aws %s: %v", strings.Join(args, " "), time.Since(start))
		if err != nil {
			t.Fatalf("aws %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("s3", "mb", "s3://clibucket")
	run("s3", "cp", src, "s3://clibucket/dir/src.bin")
	if out := run("s3", "ls", "s3://clibucket/dir/"); !strings.Contains(out, "src.bin") || !strings.Contains(out, "20983865") {
		t.Fatalf("ls: %s", out)
	}
	run("s3", "cp", "s3://clibucket/dir/src.bin", back)
	got, err := os.ReadFile(back)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("object read back differs (%d bytes, %v)", len(got), err)
	}
	info, err := e.store.HeadObject(ctx(), "clibucket", "dir/src.bin")
	if err != nil || !strings.Contains(info.ETag, "-") {
		t.Fatalf("the CLI did not upload in parts: %+v %v", info, err)
	}
	modes := distinct(e.seenPayloads())
	if !strings.Contains(strings.Join(modes, " "), "STREAMING-") {
		t.Errorf("the CLI sent no aws-chunked body over TLS (modes %v)", modes)
	}
	run("s3", "rm", "--recursive", "s3://clibucket/")
	if n := e.store.Len("clibucket"); n != 0 {
		t.Fatalf("%d objects left after rm --recursive", n)
	}
	t.Logf("payload modes the CLI used: %v", modes)
}

// TestBoto3 drives the handler with boto3, over plain HTTP and over TLS
// (where boto3 sends aws-chunked bodies with trailing checksums): put, get
// with range, list, a presigned URL and a bad key.
func TestBoto3(t *testing.T) {
	py := needTool(t, "python3")
	for _, tls := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", tls), func(t *testing.T) { testBoto3(t, py, tls) })
	}
}

func testBoto3(t *testing.T, py string, tls bool) {
	e := newEnv(t, envOpts{tls: tls})
	script := `
import boto3, botocore, urllib.request, sys, ssl, os
s3 = boto3.client("s3", config=botocore.config.Config(s3={"addressing_style": "path"}))
s3.create_bucket(Bucket="pybucket")
body = b"boto3 body " * 10000
s3.put_object(Bucket="pybucket", Key="a/b c.txt", Body=body, Metadata={"k": "v"})
got = s3.get_object(Bucket="pybucket", Key="a/b c.txt", Range="bytes=6-9")
assert got["Body"].read() == b"body", "range"
assert got["ContentRange"] == "bytes 6-9/%d" % len(body), got["ContentRange"]
head = s3.head_object(Bucket="pybucket", Key="a/b c.txt")
assert head["Metadata"] == {"k": "v"}, head["Metadata"]
keys = [o["Key"] for o in s3.list_objects_v2(Bucket="pybucket", Prefix="a/")["Contents"]]
assert keys == ["a/b c.txt"], keys
url = s3.generate_presigned_url("get_object", Params={"Bucket": "pybucket", "Key": "a/b c.txt"}, ExpiresIn=60)
tls = ssl.create_default_context(cafile=os.environ.get("AWS_CA_BUNDLE"))
assert urllib.request.urlopen(url, context=tls).read() == body, "presigned"
try:
    s3.put_object(Bucket="pybucket", Key="x/../y", Body=b"no")
    sys.exit("bad key accepted")
except botocore.exceptions.ClientError as e:
    assert e.response["Error"]["Code"] == "InvalidArgument", e.response
s3.delete_objects(Bucket="pybucket", Delete={"Objects": [{"Key": "a/b c.txt"}]})
assert s3.list_objects_v2(Bucket="pybucket")["KeyCount"] == 0
print("ok")
`
	cmd := exec.Command(py, "-c", script)
	cmd.Env = e.clientEnv()
	if tls {
		cmd.Env = append(cmd.Env, "AWS_CA_BUNDLE="+e.caFile())
	}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok") {
		t.Fatalf("boto3: %v\n%s", err, out)
	}
	modes := distinct(e.seenPayloads())
	t.Logf("payload modes boto3 used: %v", modes)
	if tls && !strings.Contains(strings.Join(modes, " "), "STREAMING-") {
		t.Errorf("over TLS boto3 sent no aws-chunked body (modes %v)", modes)
	}
}

func distinct(ss []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range ss {
		if len(s) == 64 {
			s = "<sha256>"
		}
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// caFile writes the TLS test server's certificate for clients to trust.
func (e *env) caFile() string {
	ca := filepath.Join(e.t.TempDir(), "ca.pem")
	block := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: e.srv.Certificate().Raw})
	if err := os.WriteFile(ca, block, 0o600); err != nil {
		e.t.Fatal(err)
	}
	return ca
}
