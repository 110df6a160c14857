package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/node"
	"github.com/slipstream-io/slipstream/internal/peer"
)

// adminClient talks to a node's admin API on its intra-cluster address.
type adminClient struct {
	base   string
	secret string
	hc     *http.Client
}

func newAdminClient(fs *flag.FlagSet) func() *adminClient {
	nodeURL := fs.String("node", envOr("SLIPSTREAM_NODE", "http://127.0.1.1:9100"), "intra-cluster URL of any node ($SLIPSTREAM_NODE)")
	secret := fs.String("secret", envOr("SLIPSTREAM_SECRET", "local-cluster-secret"), "cluster secret ($SLIPSTREAM_SECRET)")
	return func() *adminClient {
		return &adminClient{base: strings.TrimRight(*nodeURL, "/"), secret: *secret, hc: &http.Client{Timeout: 5 * time.Minute}}
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func (a *adminClient) call(ctx context.Context, method, path string, in, out any) error {
	return a.callURL(ctx, method, a.base+path, in, out)
}

func (a *adminClient) callURL(ctx context.Context, method, url string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return err
	}
	req.Header.Set(peer.SecretHeader, a.secret)
	resp, err := a.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		var e struct{ Error string }
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return fmt.Errorf("%s", e.Error)
		}
		return fmt.Errorf("%s %s: HTTP %d: %s", method, url, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

func adminCommand() Command {
	return Command{
		Summary: "cluster status, buckets, evict, prefetch, rebalance, scrub, destage backlog",
		Run: func(ctx context.Context, env Env) error {
			if len(env.Args) == 0 {
				return usagef("admin status | map | bucket ls|create|set|rm ... | prefetch BUCKET [--prefix P] | evict BUCKET [--prefix P] | rebalance [--bucket B] | scrub [--bucket B] | node drain|undrain|rm ID")
			}
			sub, args := env.Args[0], env.Args[1:]
			switch sub {
			case "status":
				return adminStatus(ctx, env, args)
			case "map":
				return adminMap(ctx, env, args)
			case "bucket":
				return adminBucket(ctx, env, args)
			case "prefetch":
				return adminPrefetch(ctx, env, args)
			case "evict":
				return adminEvict(ctx, env, args)
			case "rebalance":
				return adminRebalance(ctx, env, args)
			case "node":
				return adminNode(ctx, env, args)
			case "scrub":
				return adminScrub(ctx, env, args)
			default:
				return usagef("unknown admin command %q", sub)
			}
		},
	}
}

func adminMap(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("admin map", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	client := newAdminClient(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	var m json.RawMessage
	if err := client().call(ctx, http.MethodGet, "/cluster/map", nil, &m); err != nil {
		return err
	}
	var out bytes.Buffer
	_ = json.Indent(&out, m, "", "  ")
	_, err := fmt.Fprintln(env.Stdout, out.String())
	return err
}

func adminStatus(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("admin status", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	client := newAdminClient(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	a := client()
	var m cluster.Map
	if err := a.call(ctx, http.MethodGet, "/cluster/map", nil, &m); err != nil {
		return err
	}
	var all []any
	var table io.Writer = env.Stdout
	if *asJSON {
		table = io.Discard
	}
	tw := tabwriter.NewWriter(table, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "map version %d, %d nodes, %d buckets, %d volumes\n\n", m.Version, len(m.Nodes), len(m.Buckets), len(m.Volumes))
	fmt.Fprintln(tw, "NODE\tSTATE\tVOTER\tPUBLIC\tMOUNTPATH\tUSED\tCAPACITY\tOBJECTS")
	for _, id := range m.NodeIDs() {
		ni, _ := m.Node(id)
		var st node.Status
		var err error
		if len(ni.IntraAddrs) > 0 {
			err = a.callURL(ctx, http.MethodGet, cluster.BaseURL(ni.IntraAddrs[0])+node.AdminPrefix+"status", nil, &st)
		}
		all = append(all, map[string]any{"node": ni, "status": st, "error": errString(err)})
		if err != nil || len(st.Mountpaths) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\t\t\t\n", id, ni.State, ni.Voter, strings.Join(ni.PublicAddrs, ","), errString(err))
			continue
		}
		for i, mp := range st.Mountpaths {
			name := id
			if i > 0 {
				name = ""
			}
			path := mp.Path
			if mp.Failed {
				path += " (FAILED: no new writes)"
			}
			state := string(ni.State)
			if ni.Draining {
				state += ",draining"
			}
			fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\t%s\t%s\t%d\n", name, state, ni.Voter, strings.Join(ni.PublicAddrs, ","),
				path, humanBytes(mp.Used), humanBytes(mp.Capacity), mp.Objects)
		}
		for k, v := range st.Extra {
			b, _ := json.Marshal(v)
			fmt.Fprintf(tw, "\t%s:\t%s\n", k, b)
		}
	}
	if *asJSON {
		return json.NewEncoder(env.Stdout).Encode(all)
	}
	return tw.Flush()
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func adminBucket(ctx context.Context, env Env, args []string) error {
	if len(args) == 0 {
		return usagef("admin bucket ls | create NAME [flags] | set NAME [flags] | rm NAME")
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("admin bucket "+sub, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	client := newAdminClient(fs)
	var b cluster.BucketProps
	fs.IntVar(&b.Copies, "copies", 1, "copies on distinct nodes")
	fs.StringVar(&b.Mode, "mode", "local", "local, cache or writeback")
	fs.StringVar(&b.Validate, "validate", "never", "warm-copy validation: never, always or ttl:<duration>")
	fs.StringVar(&b.Backend.Kind, "backend", "", "backend kind: s3 or fs")
	fs.StringVar(&b.Backend.Endpoint, "endpoint", "", "s3 backend endpoint URL")
	fs.StringVar(&b.Backend.Region, "region", "us-east-1", "s3 backend region")
	fs.StringVar(&b.Backend.Bucket, "remote-bucket", "", "s3 backend bucket")
	fs.StringVar(&b.Backend.Prefix, "prefix", "", "key prefix in the backend")
	fs.BoolVar(&b.Backend.PathStyle, "path-style", true, "s3 path-style addressing")
	fs.StringVar(&b.Backend.AccessKey, "access-key", os.Getenv("BACKEND_ACCESS_KEY"), "s3 backend access key ($BACKEND_ACCESS_KEY)")
	fs.StringVar(&b.Backend.SecretKey, "secret-key", os.Getenv("BACKEND_SECRET_KEY"), "s3 backend secret key ($BACKEND_SECRET_KEY)")
	fs.StringVar(&b.Backend.Path, "path", "", "fs backend directory")
	// Go's flag package stops at the first positional argument; accept the
	// bucket name first, then flags.
	name := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	a := client()
	if sub == "set" && name != "" {
		// Start from the bucket's current properties; only the flags given
		// change them.
		var bs []cluster.BucketProps
		if err := a.call(ctx, http.MethodGet, node.AdminPrefix+"buckets", nil, &bs); err != nil {
			return err
		}
		found := false
		for _, cur := range bs {
			if cur.Name == name {
				b, found = cur, true
			}
		}
		if !found {
			return fmt.Errorf("no bucket %q", name)
		}
		if err := fs.Parse(args); err != nil {
			return err
		}
	}
	switch sub {
	case "ls":
		var bs []cluster.BucketProps
		if err := a.call(ctx, http.MethodGet, node.AdminPrefix+"buckets", nil, &bs); err != nil {
			return err
		}
		tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "BUCKET\tCOPIES\tMODE\tBACKEND\tVALIDATE\tCREATED")
		for _, b := range bs {
			be := "-"
			switch b.Backend.Kind {
			case cluster.BackendS3:
				be = fmt.Sprintf("s3 %s/%s", b.Backend.Endpoint, b.Backend.Bucket)
			case cluster.BackendFS:
				be = "fs " + b.Backend.Path
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", b.Name, b.Copies, b.Mode, be, b.Validate, b.Created.Format(time.RFC3339))
		}
		return tw.Flush()
	case "create", "set":
		if name == "" {
			return usagef("admin bucket %s NAME [flags]", sub)
		}
		b.Name = name
		path := node.AdminPrefix + "buckets"
		if sub == "set" {
			path += "?update=true"
		}
		if err := a.call(ctx, http.MethodPost, path, b, nil); err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "bucket %s: copies=%d mode=%s\n", name, b.Copies, b.Mode)
		return nil
	case "rm":
		if name == "" {
			return usagef("admin bucket rm NAME")
		}
		return a.call(ctx, http.MethodDelete, node.AdminPrefix+"buckets/"+name, nil, nil)
	default:
		return usagef("unknown bucket command %q", sub)
	}
}

// jobArgs parses "BUCKET [--prefix P]" and the node flags.
func jobArgs(env Env, name string, args []string) (bucket, prefix string, client *adminClient, err error) {
	fs := flag.NewFlagSet("admin "+name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	mk := newAdminClient(fs)
	fs.StringVar(&prefix, "prefix", "", "only keys with this prefix")
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		bucket, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return "", "", nil, err
	}
	if bucket == "" {
		return "", "", nil, usagef("admin %s BUCKET [--prefix P]", name)
	}
	return bucket, prefix, mk(), nil
}

// upNodes returns the intra base URLs of the up nodes.
func (a *adminClient) upNodes(ctx context.Context) ([]string, error) {
	var m cluster.Map
	if err := a.call(ctx, http.MethodGet, "/cluster/map", nil, &m); err != nil {
		return nil, err
	}
	var urls []string
	for _, id := range m.UpNodeIDs() {
		if ni, _ := m.Node(id); len(ni.IntraAddrs) > 0 {
			urls = append(urls, cluster.BaseURL(ni.IntraAddrs[0]))
		}
	}
	return urls, nil
}

// adminPrefetch starts the prefetch on every up node (each fills the keys
// it owns) and shows their summed progress.
func adminPrefetch(ctx context.Context, env Env, args []string) error {
	bucket, prefix, a, err := jobArgs(env, "prefetch", args)
	if err != nil {
		return err
	}
	q := "?bucket=" + url.QueryEscape(bucket) + "&prefix=" + url.QueryEscape(prefix)
	t, err := runJob(ctx, env, a, "prefetch"+q, progressBar, func(p node.Progress) (int, string) { return p.Failed, p.LastErr })
	fmt.Fprintf(env.Stdout, "prefetch %s: %d objects (%d fetched, %d already warm, %d failed), %s fetched\n",
		bucket, t.Filled+t.Warm+t.Failed, t.Filled, t.Warm, t.Failed, humanBytes(t.Bytes))
	return err
}

// adminNode drains a node (moves its copies away while it stays up),
// undrains it, or removes a dead node for good (from the map and the raft
// configuration); the others then re-create its copies.
func adminNode(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("admin node", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	mk := newAdminClient(fs)
	if len(args) < 2 || !slices.Contains([]string{"drain", "undrain", "rm"}, args[0]) {
		return usagef("admin node drain|undrain|rm ID")
	}
	verb, id := args[0], args[1]
	if err := fs.Parse(args[2:]); err != nil {
		return err
	}
	a := mk()
	var m cluster.Map
	if err := a.call(ctx, http.MethodGet, "/cluster/map", nil, &m); err != nil {
		return err
	}
	ni, ok := m.Node(id)
	if !ok {
		return fmt.Errorf("admin node %s: no node %q in the cluster", verb, id)
	}
	switch verb {
	case "drain", "undrain":
		q := ""
		if verb == "undrain" {
			q = "?off=1"
		}
		if err := a.call(ctx, http.MethodPost, node.AdminPrefix+"nodes/"+url.PathEscape(id)+"/drain"+q, nil, nil); err != nil {
			return err
		}
		if verb == "drain" {
			fmt.Fprintf(env.Stdout, "%s is draining: new copies go elsewhere and its copies move away (admin status shows its objects); then stop it and run admin node rm %s\n", id, id)
		} else {
			fmt.Fprintf(env.Stdout, "%s takes copies again\n", id)
		}
		return nil
	}
	if ni.State == cluster.StateUp {
		return fmt.Errorf("admin node rm: %s is up; stop it (and wipe its data directory) first", id)
	}
	if err := a.call(ctx, http.MethodPost, cluster.PathLeave, map[string]string{"id": id}, nil); err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "removed %s; the other nodes re-create its copies (see admin status, rebalance)\n", id)
	return nil
}

// adminScrub makes every up node read its copies back, check them against
// their checksums and repair the damaged ones, and shows the summed
// progress; damaged copies left unrepaired make it fail.
func adminScrub(ctx context.Context, env Env, args []string) error {
	bucket, a, err := bucketFlag(env, "scrub", args)
	if err != nil {
		return err
	}
	bar := func(p node.ScrubProgress) string {
		return fmt.Sprintf("%d copies checked (%s), %d corrupt, %d repaired, %d not repaired",
			p.Checked, humanBytes(p.Bytes), p.Corrupt, p.Repaired, p.Unrepaired)
	}
	t, err := runJob(ctx, env, a, "scrub?bucket="+url.QueryEscape(bucket), bar,
		func(p node.ScrubProgress) (int, string) { return p.Unrepaired, p.LastErr })
	fmt.Fprintf(env.Stdout, "scrub: %s\n", bar(t))
	return err
}

// bucketFlag parses the arguments of a job that takes an optional
// --bucket.
func bucketFlag(env Env, name string, args []string) (string, *adminClient, error) {
	fs := flag.NewFlagSet("admin "+name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	mk := newAdminClient(fs)
	bucket := fs.String("bucket", "", "only this bucket's objects")
	if err := fs.Parse(args); err != nil {
		return "", nil, err
	}
	if fs.NArg() > 0 {
		return "", nil, usagef("admin %s [--bucket B]", name)
	}
	return *bucket, mk(), nil
}

// adminRebalance makes every up node pass over its copies and put them on
// the nodes HRW places them on now, and shows the summed progress.
func adminRebalance(ctx context.Context, env Env, args []string) error {
	bucket, a, err := bucketFlag(env, "rebalance", args)
	if err != nil {
		return err
	}
	bar := func(p node.RebalanceProgress) string {
		return fmt.Sprintf("%d copies scanned, %d sent (%s), %d dropped, %d left for later, %d failed",
			p.Scanned, p.Sent, humanBytes(p.Bytes), p.Dropped, p.Skipped, p.Failed)
	}
	t, err := runJob(ctx, env, a, "rebalance?bucket="+url.QueryEscape(bucket), bar,
		func(p node.RebalanceProgress) (int, string) { return p.Failed, p.LastErr })
	fmt.Fprintf(env.Stdout, "rebalance: %s\n", bar(t))
	return err
}

// runJob starts the admin job at path on every up node, shows the
// sum of the progress of their NDJSON streams, and returns the
// total; the error names every node that failed or reported failures.
func runJob[P any, PP interface {
	*P
	Add(P)
}](ctx context.Context, env Env, a *adminClient, path string, bar func(P) string, failures func(P) (int, string)) (P, error) {
	var zero P
	urls, err := a.upNodes(ctx)
	if err != nil {
		return zero, err
	}
	var (
		mu    sync.Mutex
		state = map[string]P{}
		wg    sync.WaitGroup
		errs  []error
	)
	for _, u := range urls {
		wg.Go(func() {
			err := streamNDJSON(ctx, a, http.MethodPost, u+node.AdminPrefix+path, func(p P) {
				mu.Lock()
				state[u] = p
				mu.Unlock()
			})
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", u, err))
				mu.Unlock()
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	total := func() P {
		mu.Lock()
		defer mu.Unlock()
		var t P
		for _, p := range state {
			PP(&t).Add(p)
		}
		return t
	}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-done:
			t := total()
			fmt.Fprintf(env.Stderr, "\r%s\n", bar(t))
			mu.Lock()
			for u, p := range state {
				if n, last := failures(p); n > 0 || last != "" {
					errs = append(errs, fmt.Errorf("%s: %d objects failed, last error: %s", u, n, last))
				}
			}
			mu.Unlock()
			return t, errors.Join(errs...)
		case <-tick.C:
			fmt.Fprintf(env.Stderr, "\r%s", bar(total()))
		case <-ctx.Done():
			return total(), ctx.Err()
		}
	}
}

func progressBar(p node.Progress) string {
	handled := p.Filled + p.Warm + p.Failed
	frac := 0.0
	if p.Listed > 0 {
		frac = float64(handled) / float64(p.Listed)
	}
	const width = 30
	n := int(frac * width)
	return fmt.Sprintf("[%s%s] %d/%d objects, %s", strings.Repeat("#", n), strings.Repeat(".", width-n), handled, p.Listed, humanBytes(p.Bytes))
}

// streamNDJSON reads an NDJSON answer line by line.
func streamNDJSON[P any](ctx context.Context, a *adminClient, method, u string, each func(P)) error {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set(peer.SecretHeader, a.secret)
	hc := &http.Client{} // no overall timeout: a job takes as long as it takes
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var p P
		if err := dec.Decode(&p); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		each(p)
	}
}

// adminEvict drops the clean local copies of a bucket (or prefix) on every
// up node.
func adminEvict(ctx context.Context, env Env, args []string) error {
	bucket, prefix, a, err := jobArgs(env, "evict", args)
	if err != nil {
		return err
	}
	urls, err := a.upNodes(ctx)
	if err != nil {
		return err
	}
	q := "?bucket=" + url.QueryEscape(bucket) + "&prefix=" + url.QueryEscape(prefix)
	var objs int
	var bytes int64
	var errs []error
	for _, u := range urls {
		var r node.EvictResult
		if err := a.callURL(ctx, http.MethodPost, u+node.AdminPrefix+"evict"+q, nil, &r); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", u, err))
			continue
		}
		objs += r.Objects
		bytes += r.Bytes
	}
	fmt.Fprintf(env.Stdout, "evicted %d objects, %s, from %d nodes\n", objs, humanBytes(bytes), len(urls)-len(errs))
	return errors.Join(errs...)
}
