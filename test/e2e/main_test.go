// Package e2e runs the real slipstream binary as a multi-process cluster on
// loopback and drives it with real S3 clients: the AWS SDK for Go v2, the
// AWS CLI and boto3. It kills nodes with SIGKILL and checks that
// acknowledged data survives.
package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/slipstream-io/slipstream/internal/localcluster"
	"github.com/slipstream-io/slipstream/internal/testbin"
)

var binary string

func TestMain(m *testing.M) {
	os.Unsetenv("AWS_CA_BUNDLE") // plain HTTP on loopback
	dir, err := os.MkdirTemp("", "slipstream-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if binary, err = testbin.Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// netCounter gives every cluster of this test binary its own 127.N
// loopback range, so clusters never collide with each other or with a
// cluster a developer runs with `slipstream up` (127.0.x.y).
var netCounter atomic.Int32

// startCluster starts a cluster of the real binary on its own loopback
// range and stops it when the test ends.
func startCluster(t *testing.T, spec localcluster.Spec) *localcluster.Cluster {
	t.Helper()
	spec.Binary = binary
	if spec.Net == "" {
		spec.Net = fmt.Sprintf("127.%d", 100+netCounter.Add(1))
	}
	return testbin.StartCluster(t, spec)
}

// s3Client returns an AWS SDK client for one endpoint of the cluster.
func s3Client(c *localcluster.Cluster, endpoint string) *s3.Client {
	return s3.New(s3.Options{
		BaseEndpoint: aws.String(endpoint),
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider(c.Spec.AccessKey, c.Spec.SecretKey, ""),
		UsePathStyle: true,
	})
}

// awsEnv is the environment for the AWS CLI and boto3 against node i.
func awsEnv(c *localcluster.Cluster, i int) []string {
	env := []string{}
	for _, kv := range os.Environ() {
		switch {
		case len(kv) > 4 && kv[:4] == "AWS_":
			continue
		}
		env = append(env, kv)
	}
	return append(env,
		"AWS_ENDPOINT_URL="+c.Endpoint(i),
		"AWS_ACCESS_KEY_ID="+c.Spec.AccessKey,
		"AWS_SECRET_ACCESS_KEY="+c.Spec.SecretKey,
		"AWS_DEFAULT_REGION=us-east-1",
		"AWS_EC2_METADATA_DISABLED=true",
	)
}

// admin runs `slipstream admin` against node i and returns its standard
// output (progress and notes go to stderr).
func admin(t *testing.T, c *localcluster.Cluster, i int, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"admin"}, args...)...)
	cmd.Env = adminEnv(c, i)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("slipstream admin %v: %v\n%s%s", args, err, out, stderr.Bytes())
	}
	return string(out)
}

// adminEnv is the environment of the admin and volume commands against
// node i.
func adminEnv(c *localcluster.Cluster, i int) []string {
	env := append(os.Environ(), "SLIPSTREAM_NODE="+c.IntraURL(i), "SLIPSTREAM_SECRET=local-cluster-secret")
	if c.Spec.IntraTLS {
		env = append(env, "SLIPSTREAM_INTRA_TLS=1")
	}
	return env
}

// clusterStatus is every node's entry in `slipstream admin status --json`,
// asked of node 0 (which reaches every node), by node ID; nodes that did
// not answer are left out.
func clusterStatus(t *testing.T, c *localcluster.Cluster) map[string]statusEntry {
	t.Helper()
	var st []struct{ Status statusEntry }
	out := admin(t, c, 0, "status", "--json")
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("admin status --json: %v\n%s", err, out)
	}
	entries := map[string]statusEntry{}
	for _, s := range st {
		if s.Status.Node != "" {
			entries[s.Status.Node] = s.Status
		}
	}
	return entries
}

// nodeStatus is node i's entry in `slipstream admin status --json`.
func nodeStatus(t *testing.T, c *localcluster.Cluster, i int) statusEntry {
	t.Helper()
	st, ok := clusterStatus(t, c)[c.Configs[i].ID]
	if !ok {
		t.Fatalf("node %s missing from admin status", c.Configs[i].ID)
	}
	return st
}

// statusEntry is the part of a node's admin status the tests read.
type statusEntry struct {
	Node       string
	Mountpaths []struct {
		Path    string
		Bytes   int64
		Objects int
	}
	Extra struct {
		Destage    struct{ Objects int }
		Interfaces struct {
			Paths []struct{ Remote, State string } // intra-cluster paths to other nodes
		}
	}
}

// objects is the number of objects the node's store holds.
func (s statusEntry) objects() int {
	total := 0
	for _, mp := range s.Mountpaths {
		total += mp.Objects
	}
	return total
}
