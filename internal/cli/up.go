package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/slipstream-io/slipstream/internal/loader"
	"github.com/slipstream-io/slipstream/internal/localcluster"
	"github.com/slipstream-io/slipstream/internal/remotesim"
)

func upCommand() Command {
	return Command{
		Summary: "start the embedded default local cluster",
		Run: func(ctx context.Context, env Env) error {
			fs := newFlagSet(env, "up", "[flags]")
			data := fs.String("data", filepath.Join(os.TempDir(), "slipstream-up"), "directory for all node data")
			nodes := fs.Int("nodes", 3, "number of nodes")
			mps := fs.Int("mountpaths", 2, "mountpaths (directories) per node")
			addrs := fs.Int("addrs", 2, "loopback addresses per node")
			port := fs.Int("port", 9000, "base port: S3 on it, intra-cluster on +100, raft on +200")
			copies := fs.Int("copies", 1, "copies of buckets created through S3")
			intraTLS := fs.Bool("intra-tls", false, "encrypt intra-cluster traffic (intra_tls); then give admin commands --intra-tls")
			remote := fs.Bool("remote", false, "also start a local stand-in for a remote S3 bucket (a real S3 server behind a slower link) and a cache and a writeback bucket over it")
			rate := fs.Int64("remote-rate", 64<<20, "with --remote: the remote link's bandwidth in bytes/s")
			latency := fs.Duration("remote-latency", 25*time.Millisecond, "with --remote: the remote's time to first byte")
			if err := parseFlags(fs, env.Args); err != nil {
				return err
			}
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			fmt.Fprintf(env.Stdout, "starting %d nodes under %s ...\n", *nodes, *data)
			c, err := localcluster.Start(ctx, localcluster.Spec{
				Binary: bin, DataDir: *data, Nodes: *nodes, Mountpaths: *mps, Addrs: *addrs, BasePort: *port, Copies: *copies, IntraTLS: *intraTLS,
			})
			if err != nil {
				return upError(err)
			}
			defer c.Stop()
			s := c.Spec
			fmt.Fprintf(env.Stdout, "Slipstream is up: %d nodes, %d mountpaths and %d addresses each; logs in %s\n", s.Nodes, s.Mountpaths, s.Addrs, s.LogDir)
			fmt.Fprintf(env.Stdout, "S3 endpoints (any node serves any request): %v\n", c.Endpoints())
			fmt.Fprintf(env.Stdout, "export AWS_ENDPOINT_URL=%s AWS_ACCESS_KEY_ID=%s AWS_SECRET_ACCESS_KEY=%s AWS_DEFAULT_REGION=us-east-1\n",
				c.Endpoint(0), s.AccessKey, s.SecretKey)
			adminCmd := "slipstream admin"
			if *intraTLS {
				adminCmd = "SLIPSTREAM_INTRA_TLS=1 slipstream admin"
			}
			fmt.Fprintf(env.Stdout, "admin: %s status (node %s); volumes: slipstream volume create NAME --size 1GiB, then nbd://%s/NAME\n",
				adminCmd, c.IntraURL(0), c.Configs[0].NBD[0])
			if *remote {
				rem, err := startRemote(ctx, env, c, *rate, *latency)
				if err != nil {
					return err
				}
				defer rem.Stop()
			}
			fmt.Fprintln(env.Stdout, "Press Ctrl-C to stop.")
			<-ctx.Done()
			fmt.Fprintln(env.Stdout, "stopping ...")
			return nil
		},
	}
}

// remoteBucket is the bucket of the remote stand-in that `up --remote`
// puts its tiered buckets over.
const remoteBucket = "remote"

// startRemote starts the remote stand-in under the cluster's data
// directory and creates, with the admin command, a cache bucket "cached"
// and a writeback bucket "staged" (two copies when there are two nodes)
// over two prefixes of its bucket.
func startRemote(ctx context.Context, env Env, c *localcluster.Cluster, rate int64, latency time.Duration) (*remotesim.Remote, error) {
	rem, err := remotesim.Start(ctx, remotesim.Config{Dir: filepath.Join(c.Spec.DataDir, "remote"), Rate: rate, Latency: latency})
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			rem.Stop()
		}
	}()
	if err := rem.CreateBucket(remoteBucket); err != nil {
		return nil, err
	}
	copies := strconv.Itoa(min(2, c.Spec.Nodes))
	for _, b := range []struct{ name, mode, copies string }{{"cached", "cache", "1"}, {"staged", "writeback", copies}} {
		if _, err := c.Admin(ctx, 0, "bucket", "create", b.name, "--mode", b.mode, "--copies", b.copies, "--backend", "s3",
			"--endpoint", rem.Endpoint, "--remote-bucket", remoteBucket, "--prefix", b.name+"/",
			"--access-key", rem.AccessKey, "--secret-key", rem.SecretKey); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(env.Stdout, "remote stand-in: %s (bucket %q, %s/s, %v to first byte; its objects are the files under %s)\n",
		rem.Endpoint, remoteBucket, loader.HumanBytes(float64(rate)), latency, filepath.Join(rem.Root, remoteBucket))
	fmt.Fprintf(env.Stdout, "buckets over it: cached (cache: reads fill the cluster, writes go through) over %s/cached/, staged (writeback, copies=%s: writes are destaged in the background) over %s/staged/\n",
		remoteBucket, copies, remoteBucket)
	fmt.Fprintf(env.Stdout, "remote credentials: AWS_ACCESS_KEY_ID=%s AWS_SECRET_ACCESS_KEY=%s; direct endpoint (no slow link): %s\n",
		rem.AccessKey, rem.SecretKey, rem.DirectEndpoint)
	ok = true
	return rem, nil
}

// upError explains why the cluster did not start; whatever started is
// stopped already.
func upError(err error) error {
	switch {
	case errors.Is(err, localcluster.ErrPortInUse):
		return fmt.Errorf("%w; is another slipstream up running? Stop it, or give this one another --port (nothing was started)", err)
	case errors.Is(err, localcluster.ErrNodeExited), errors.Is(err, localcluster.ErrNotOurs):
		return fmt.Errorf("%w; the nodes started were stopped", err)
	}
	return err
}
