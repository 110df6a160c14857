package remotesim

import (
	"bytes"
	"context"
	"io"
	"math/rand"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

func client(r *Remote, endpoint string) *s3.Client {
	return s3.New(s3.Options{
		BaseEndpoint: aws.String(endpoint), Region: "us-east-1", UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(r.AccessKey, r.SecretKey, ""),
	})
}

// TestSlowLink checks that objects written directly read back through the
// slow link intact, and that the link never goes faster than its rate (a
// lower bound on time, which machine load cannot break).
func TestSlowLink(t *testing.T) {
	os.Unsetenv("AWS_CA_BUNDLE")
	const rateBps = 40 << 20
	r, err := Start(context.Background(), Config{Dir: t.TempDir(), Rate: rateBps, Latency: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	if err := r.CreateBucket("remote"); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 24<<20)
	rand.New(rand.NewSource(1)).Read(body)
	ctx := context.Background()
	if _, err := client(r, r.DirectEndpoint).PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String("remote"), Key: aws.String("a/b"), Body: bytes.NewReader(body),
	}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, err := client(r, r.Endpoint).GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("remote"), Key: aws.String("a/b")})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(out.Body)
	out.Body.Close()
	elapsed := time.Since(start)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read through the slow link: %v, equal=%v", err, bytes.Equal(got, body))
	}
	min := time.Duration(float64(len(body)) / rateBps * 0.8 * float64(time.Second))
	if elapsed < min {
		t.Fatalf("24 MiB crossed a 40 MiB/s link in %v, faster than the %v the rate allows", elapsed, min)
	}
	if r.Requests() != 1 || r.ObjectGets() != 1 {
		t.Fatalf("proxy counted %d requests and %d object GETs, want 1 and 1", r.Requests(), r.ObjectGets())
	}
	r.SetDown(true)
	if _, err := client(r, r.Endpoint).HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("remote"), Key: aws.String("a/b")}); err == nil {
		t.Fatal("HEAD through a link that is down succeeded")
	}
	r.SetDown(false)
	t.Logf("24 MiB in %v through a %d MiB/s link", elapsed, rateBps>>20)
}
