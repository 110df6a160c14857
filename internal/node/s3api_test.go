package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/s3api"
	"github.com/slipstream-io/slipstream/internal/store"
)

// TestCopyObjectChecksTheVersionItCopies: the gateway's CopyObject calls
// CopyOptions.CheckSource with the Info of the source version it reads
// (x-amz-copy-source-if-* are checked so, atomically with the copy): a
// refusal copies nothing, and a write of the source after the check does
// not change what is copied.
func TestCopyObjectChecksTheVersionItCopies(t *testing.T) {
	ctx := context.Background()
	r := newHolderRig(t, "n1", "n2")
	_, _, g := r.putPair(ctx, "src", "version 1")
	v1, err := g.HeadObject(ctx, "bkt", "src")
	if err != nil {
		t.Fatal(err)
	}

	_, err = g.CopyObject(ctx, "bkt", "src", "bkt", "refused", object.CopyOptions{CheckSource: func(src object.Info) error {
		if src.ETag != v1.ETag {
			t.Errorf("CheckSource saw ETag %s, want %s", src.ETag, v1.ETag)
		}
		return object.ErrPrecondition
	}})
	if !errors.Is(err, object.ErrPrecondition) {
		t.Fatalf("copy whose check fails: %v, want ErrPrecondition", err)
	}
	if _, err := g.HeadObject(ctx, "bkt", "refused"); !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("a copy whose check failed was written (HEAD: %v)", err)
	}

	_, err = g.CopyObject(ctx, "bkt", "src", "bkt", "dst", object.CopyOptions{CheckSource: func(src object.Info) error {
		// Another client replaces the source once it has been checked.
		_, err := g.PutObject(ctx, "bkt", "src", strings.NewReader("version 2"), object.PutOptions{Size: 9})
		return err
	}})
	if err != nil {
		t.Fatal(err)
	}
	rd, err := g.GetObject(ctx, "bkt", "dst", object.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, rd); got != "version 1" {
		t.Errorf("the copy holds %q, want the version checked (version 1)", got)
	}
}

// TestS3MetadataFitsTheStore: the most metadata the S3 layer accepts (a
// long key, and system headers beyond S3's 2 KB limit on user metadata)
// round-trips through the real store on both copies, also with the most
// the store adds of its own (part runs, a backend's ETag and version);
// more is refused with 400 MetadataTooLarge, not the store's error (a 500
// clients would retry).
func TestS3MetadataFitsTheStore(t *testing.T) {
	ctx := context.Background()
	r := newHolderRig(t, "n1", "n2")
	r.m.Buckets["bkt"] = cluster.BucketProps{Name: "bkt", Copies: 2, Mode: cluster.ModeLocal}
	h, err := s3api.NewHandler(s3api.Config{Credentials: map[string]string{"AKTEST": "secret"}}, r.gateway("n1"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c := s3.New(s3.Options{
		Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("AKTEST", "secret", ""),
		HTTPClient: srv.Client(), BaseEndpoint: aws.String(srv.URL), UsePathStyle: true, RetryMaxAttempts: 1,
	})

	// The S3 layer counts the key, Content-Type and metadata as JSON
	// strings, with two bytes per map entry: 3000 bytes at most.
	jsonLen := func(s string) int { b, _ := json.Marshal(s); return len(b) }
	key := strings.Repeat("k", 1000)
	const ct = "text/plain"
	meta := map[string]string{"note": strings.Repeat("m", 500)}
	cd := "attachment; filename*=UTF-8''" + strings.Repeat("%E6%97%A5", 150)
	used := jsonLen(key) + jsonLen(ct) + jsonLen("note") + jsonLen(meta["note"]) + 2 + jsonLen("Content-Disposition") + jsonLen(cd) + 2
	cd += strings.Repeat("x", 3000-used)
	put := func(cd string) error {
		_, err := c.PutObject(ctx, &s3.PutObjectInput{
			Bucket: aws.String("bkt"), Key: aws.String(key), Body: bytes.NewReader([]byte("body")),
			ContentType: aws.String(ct), Metadata: meta, ContentDisposition: aws.String(cd),
		})
		return err
	}
	if err := put(cd + "x"); err == nil {
		t.Fatal("PUT with metadata one byte over the limit accepted")
	} else if re := (*awshttp.ResponseError)(nil); !errors.As(err, &re) || re.HTTPStatusCode() != http.StatusBadRequest || !strings.Contains(err.Error(), "MetadataTooLarge") {
		t.Fatalf("PUT with metadata one byte over the limit: %v, want 400 MetadataTooLarge", err)
	}
	if err := put(cd); err != nil {
		t.Fatalf("PUT with metadata at the limit: %v", err)
	}
	head, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("bkt"), Key: aws.String(key)})
	if err != nil {
		t.Fatal(err)
	}
	if aws.ToString(head.ContentDisposition) != cd || head.Metadata["note"] != meta["note"] || aws.ToString(head.ContentType) != ct {
		t.Errorf("HEAD: Content-Disposition %d bytes, note %d bytes, Content-Type %q; not what was put",
			len(aws.ToString(head.ContentDisposition)), len(head.Metadata["note"]), aws.ToString(head.ContentType))
	}
	for id, st := range r.stores {
		info, err := st.Stat(ctx, "bkt", key)
		if err != nil || info.Headers["Content-Disposition"] != cd {
			t.Errorf("%s holds %v, %v", id, info.Headers, err)
		}
	}

	// What the store adds at most: the runs of an irregular multipart
	// upload, a remote backend's ETag and version. (The store checks that
	// the metadata fits with the runs given, before it drops runs that
	// do not describe the body.)
	runs := make([]object.PartRun, object.MaxPartRuns)
	for i := range runs {
		runs[i] = object.PartRun{Size: 5<<30 - int64(i), Count: 10000}
	}
	st := r.stores["n1"]
	_, err = st.Put(ctx, strings.Repeat("b", 63), key, bytes.NewReader(nil), store.PutOptions{
		PutOptions: object.PutOptions{Size: 0, ContentType: ct, UserMeta: meta,
			Headers: map[string]string{"Content-Disposition": cd}, Parts: runs},
		BackendETag: strings.Repeat("e", 32) + "-10000", BackendVersion: strings.Repeat("v", 64), Dirty: true,
	})
	if err != nil {
		t.Errorf("the store cannot hold metadata at the S3 layer's limit with its own fields: %v", err)
	}
}
