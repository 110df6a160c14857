package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/slipstream-io/slipstream/internal/localcluster"
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
			fmt.Fprintln(env.Stdout, "Press Ctrl-C to stop.")
			<-ctx.Done()
			fmt.Fprintln(env.Stdout, "stopping ...")
			return nil
		},
	}
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
