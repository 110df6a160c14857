package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/node"
	"github.com/slipstream-io/slipstream/internal/peer"
	"github.com/slipstream-io/slipstream/internal/seclink"
)

// adminClient talks to a node's admin API on its intra-cluster address.
type adminClient struct {
	base   string
	secret string
	tr     http.RoundTripper
	hc     *http.Client
}

func newAdminClient(fs *flag.FlagSet) func() *adminClient {
	nodeURL := fs.String("node", envOr("SLIPSTREAM_NODE", "http://127.0.1.1:9100"), "intra-cluster URL of any node ($SLIPSTREAM_NODE)")
	secret := fs.String("secret", envOr("SLIPSTREAM_SECRET", "local-cluster-secret"), "cluster secret ($SLIPSTREAM_SECRET)")
	intraTLS := fs.Bool("intra-tls", os.Getenv("SLIPSTREAM_INTRA_TLS") != "", "the cluster runs intra_tls: connect over TLS, proving the secret ($SLIPSTREAM_INTRA_TLS)")
	return func() *adminClient {
		tr := &http.Transport{Proxy: nil, DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}
		if *intraTLS {
			link, err := seclink.New(*secret, "intra")
			if err != nil { // an empty secret: every request fails with this
				tr.DialContext = func(context.Context, string, string) (net.Conn, error) { return nil, err }
			} else {
				tr.DialContext = link.Dialer(tr.DialContext)
			}
		}
		rt := hinting{tr: tr, intraTLS: *intraTLS}
		return &adminClient{base: strings.TrimRight(*nodeURL, "/"), secret: *secret, tr: rt, hc: &http.Client{Transport: rt, Timeout: 5 * time.Minute}}
	}
}

// hinting adds to a failed request's error what an intra_tls mismatch
// looks like from this side: a node with intra_tls hangs up on a plain
// request (EOF), and one without answers a TLS handshake with plain HTTP.
type hinting struct {
	tr       http.RoundTripper
	intraTLS bool
}

func (h hinting) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := h.tr.RoundTrip(r)
	switch {
	case err == nil:
	case errors.Is(err, seclink.ErrRefused):
		err = fmt.Errorf("%w (check --secret or $SLIPSTREAM_SECRET)", err)
	case !h.intraTLS && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)):
		err = fmt.Errorf("%w (if the cluster runs intra_tls, add --intra-tls or set $SLIPSTREAM_INTRA_TLS=1)", err)
	case h.intraTLS && seclink.IsPlainPeer(err):
		err = fmt.Errorf("%w (the node does not run intra_tls: drop --intra-tls and $SLIPSTREAM_INTRA_TLS)", err)
	}
	return resp, err
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// apiError is an admin API answer with an error status.
type apiError struct {
	Status int
	Msg    string // the answer's error text, or a description of the answer
}

func (e *apiError) Error() string { return e.Msg }

// httpStatus returns the HTTP status of an admin API error, 0 if err is not
// one.
func httpStatus(err error) int {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

// answerError turns an error answer into an apiError.
func answerError(method, u string, resp *http.Response) error {
	var e struct{ Error string }
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		return &apiError{Status: resp.StatusCode, Msg: e.Error}
	}
	msg := fmt.Sprintf("%s %s: HTTP %d: %s", method, u, resp.StatusCode, strings.TrimSpace(string(b)))
	if resp.StatusCode == http.StatusForbidden {
		msg += " (check --secret or $SLIPSTREAM_SECRET)"
	}
	return &apiError{Status: resp.StatusCode, Msg: msg}
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
		return answerError(method, url, resp)
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// clusterMap fetches the cluster map, caught up with the leader's: a
// bucket or volume just made through another node is in it.
func (a *adminClient) clusterMap(ctx context.Context) (*cluster.Map, error) {
	var m cluster.Map
	if err := a.call(ctx, http.MethodGet, cluster.PathMap+"?sync", nil, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// noSuchBucket is the error of every admin command given an unknown
// bucket.
func noSuchBucket(name string) error { return fmt.Errorf("no such bucket %q", name) }

// checkBucket fails with noSuchBucket unless the map has the bucket.
func checkBucket(m *cluster.Map, name string) error {
	if _, ok := m.Bucket(name); !ok {
		return noSuchBucket(name)
	}
	return nil
}

const adminFooter = `Every command takes --node URL (any node's intra-cluster URL, default
$SLIPSTREAM_NODE or http://127.0.1.1:9100), --secret S (the cluster
secret, default $SLIPSTREAM_SECRET or the local cluster's) and, for a
cluster with intra_tls, --intra-tls (or $SLIPSTREAM_INTRA_TLS set).`

func adminCommands() []subcommand {
	return []subcommand{
		{name: "status", synopsis: "[--detail] [NODE...]", summary: "what needs attention, one row per node; --detail: mountpaths, destage, paths, jobs, volumes", run: adminStatus},
		{name: "map", summary: "the cluster map as JSON", run: adminMap},
		{name: "bucket", synopsis: "ls|create|set|rm ...", summary: "list, create, change and remove buckets", run: adminBucket},
		{name: "prefetch", synopsis: "BUCKET [--prefix P]", summary: "fetch a tiered bucket's objects from its backend", run: adminPrefetch},
		{name: "evict", synopsis: "BUCKET [--prefix P]", summary: "drop the clean local copies of a tiered bucket's objects", run: adminEvict},
		{name: "rebalance", synopsis: "[--bucket B]", summary: "move copies to the nodes that should hold them now", run: adminRebalance},
		{name: "scrub", synopsis: "[--bucket B]", summary: "check copies against their checksums, repair damaged ones", run: adminScrub},
		{name: "node", synopsis: "drain|undrain|rm ID", summary: "drain a node, take it back, or remove a dead one", run: adminNode},
	}
}

func adminCommand() Command {
	return Command{
		Summary: "cluster status, buckets, evict, prefetch, rebalance, scrub, destage backlog",
		Run: func(ctx context.Context, env Env) error {
			return group(ctx, env, "admin", adminFooter, adminCommands(), env.Args)
		},
	}
}

func adminMap(ctx context.Context, env Env, args []string) error {
	fs := newFlagSet(env, "admin map", "")
	client := newAdminClient(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("admin map takes no arguments")
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

// spaceNote says what USED and CAPACITY are.
const spaceNote = "USED and CAPACITY: the file system each mountpath is on (mountpaths on one file system show the same figures), or space.max_bytes_per_mountpath when set."

func adminStatus(ctx context.Context, env Env, args []string) error {
	fs := newFlagSet(env, "admin status", "[--detail] [--json] [NODE...]")
	client := newAdminClient(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	detail := fs.Bool("detail", false, "every node's drives, listeners, paths, jobs and volumes (as for nodes named)")
	timeout := fs.Duration("timeout", 10*time.Second, "give up on a node that has not answered after this long (the nodes are asked at once)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: slipstream admin status [--detail] [--json] [--timeout D] [NODE...]\n\n"+
			"What needs attention across the cluster, then one row per node. With\n--detail, or for the nodes named, one row per mountpath and each node's\n"+
			"destage backlog, listeners, intra-cluster paths, jobs and volumes.\n"+spaceNote+"\n"+
			"Nodes that cannot be reached are named on stderr; exits 1 when a node\nanswers with an error (such as a wrong secret) or none answers.\n\nflags:")
		fs.PrintDefaults()
	}
	ids, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	a := client()
	m, unconfirmed, err := statusMap(ctx, a)
	if err != nil {
		return err
	}
	named := map[string]bool{}
	for _, id := range ids {
		if _, ok := m.Nodes[id]; !ok {
			return usagef("admin status: no node %q in the map (nodes: %s)", id, strings.Join(m.NodeIDs(), ", "))
		}
		named[id] = true
	}
	// shown reports whether a node's details are shown: every node's with
	// --detail, else those named.
	shown := func(id string) bool { return *detail || named[id] }
	rows := nodeStatuses(ctx, a, m, *timeout)
	var all []any
	for _, r := range rows {
		if len(named) == 0 || named[r.id] {
			all = append(all, map[string]any{"node": r.ni, "status": r.st, "error": errString(r.err)})
		}
	}
	// failed says why nodes did not answer, once per reason. A node that
	// cannot be reached (down, or cut off) is part of the status: the
	// reason goes to stderr and the command succeeds, as long as some node
	// answered. One that answered with an error (a wrong secret) fails it.
	failed := func() error {
		var ids []string
		why := map[string][]string{}
		var order []string
		refused, answered := false, 0
		for _, r := range rows {
			if r.err == nil {
				answered++
				continue
			}
			var ue *url.Error
			unreachable := errors.As(r.err, &ue)
			refused = refused || !unreachable
			ids = append(ids, r.id)
			msg := stripURL(r.err.Error())
			switch {
			case errors.Is(r.err, context.DeadlineExceeded):
				msg = fmt.Sprintf("no answer within %v (--timeout)", *timeout)
			case unreachable:
				msg = ue.Err.Error()
			}
			if _, ok := why[msg]; !ok {
				order = append(order, msg)
			}
			why[msg] = append(why[msg], r.id)
		}
		if len(ids) == 0 {
			return nil
		}
		var parts []string
		for _, msg := range order {
			parts = append(parts, fmt.Sprintf("%s: %s", strings.Join(why[msg], ", "), msg))
		}
		err := fmt.Errorf("%d of %s did not answer: %s", len(ids), plural(len(rows), "node"), strings.Join(parts, "; "))
		if !refused && answered > 0 {
			fmt.Fprintf(env.Stderr, "slipstream admin status: %v\n", err)
			return nil
		}
		return err
	}
	if *asJSON {
		if err := json.NewEncoder(env.Stdout).Encode(all); err != nil {
			return err
		}
		return failed()
	}
	out := env.Stdout
	fmt.Fprintf(out, "map version %d, %s, %s, %s\n", m.Version, plural(len(m.Nodes), "node"), plural(len(m.Buckets), "bucket"), plural(len(m.Volumes), "volume"))
	if unconfirmed {
		fmt.Fprintln(out, "(the asked node's own copy of the map: no leader could confirm that it is the latest)")
	}
	if b := backlogTotal(rows); b.Objects > 0 {
		fmt.Fprintf(out, "write-back: %s not in the backend yet (%s) across the nodes, the oldest %s old\n",
			plural(b.Objects, "write"), humanBytes(b.Bytes), b.Oldest.Round(time.Millisecond))
	}
	now := time.Now()
	notes := attention(rows, m, now)
	if len(m.Volumes) > 0 {
		var vols []node.VolumeInfo
		if err := a.call(ctx, http.MethodGet, node.AdminPrefix+"volumes", nil, &vols); err != nil {
			notes = append(notes, "volumes: "+stripURL(err.Error()))
		}
		notes = append(notes, volumeAttention(vols)...)
	}
	if len(notes) > 0 {
		fmt.Fprintln(out, "needs attention:")
		for _, n := range notes {
			fmt.Fprintln(out, "  "+n)
		}
	} else {
		fmt.Fprintln(out, "nothing needs attention")
	}
	fmt.Fprintln(out)
	if *detail || len(named) > 0 {
		var detailed []statusRow
		for _, r := range rows {
			if shown(r.id) {
				detailed = append(detailed, r)
			}
		}
		if err := writeDrivesTable(out, detailed); err != nil {
			return err
		}
		for _, r := range detailed {
			if r.err == nil {
				writeSections(out, r, now)
			}
		}
		return failed()
	}
	if err := writeNodesTable(out, rows); err != nil {
		return err
	}
	fmt.Fprintln(out, "\nFULLEST: the used share of the file system of the node's fullest mountpath.\nEach mountpath, the destage backlog, listeners, paths, jobs and volumes:\nslipstream admin status --detail, or admin status NODE... for some nodes.")
	return failed()
}

// statusMap returns the cluster map caught up with the leader's or, when
// no leader answers in time (a quorum lost, which is when the status is
// needed most), the asked node's own copy, saying so.
func statusMap(ctx context.Context, a *adminClient) (m *cluster.Map, unconfirmed bool, err error) {
	sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	m, err = a.clusterMap(sctx)
	if err == nil || (httpStatus(err) != http.StatusServiceUnavailable && !errors.Is(err, context.DeadlineExceeded)) {
		return m, false, err
	}
	var own cluster.Map
	if oerr := a.call(ctx, http.MethodGet, cluster.PathMap, nil, &own); oerr != nil {
		return nil, false, err
	}
	return &own, true, nil
}

// statusParallel bounds the nodes asked for their status at once.
const statusParallel = 32

// nodeStatuses asks every node of the map for its status, many at once,
// giving each timeout to answer, and returns them in the map's order.
func nodeStatuses(ctx context.Context, a *adminClient, m *cluster.Map, timeout time.Duration) []statusRow {
	ids := m.NodeIDs()
	rows := make([]statusRow, len(ids))
	sem := make(chan struct{}, statusParallel)
	var wg sync.WaitGroup
	for i, id := range ids {
		ni, _ := m.Node(id)
		rows[i] = statusRow{id: id, ni: ni}
		if len(ni.IntraAddrs) == 0 {
			rows[i].err = errors.New("no intra-cluster address in the map")
			continue
		}
		wg.Add(1)
		go func(r *statusRow) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			r.err = a.callURL(ctx, http.MethodGet, cluster.BaseURL(r.ni.IntraAddrs[0])+node.AdminPrefix+"status", nil, &r.st)
		}(&rows[i])
	}
	wg.Wait()
	return rows
}

// stripURL drops the "GET http://...: " that starts the error of a
// request, so that the nodes' identical errors read the same.
func stripURL(msg string) string {
	for _, m := range []string{"GET ", "POST ", "DELETE "} {
		if rest, ok := strings.CutPrefix(msg, m); ok {
			if _, after, ok := strings.Cut(rest, ": "); ok {
				return after
			}
		}
	}
	return msg
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
	subs := []subcommand{
		{name: "ls", summary: "list the buckets and their properties",
			run: func(ctx context.Context, env Env, args []string) error { return bucketCmd(ctx, env, "ls", args) }},
		{name: "create", synopsis: "NAME [flags]", summary: "create a bucket (--copies, --mode, --validate, backend flags)",
			run: func(ctx context.Context, env Env, args []string) error { return bucketCmd(ctx, env, "create", args) }},
		{name: "set", synopsis: "NAME [flags]", summary: "change a bucket's properties (only those given)",
			run: func(ctx context.Context, env Env, args []string) error { return bucketCmd(ctx, env, "set", args) }},
		{name: "rm", synopsis: "NAME", summary: "remove a bucket (it must be empty)",
			run: func(ctx context.Context, env Env, args []string) error { return bucketCmd(ctx, env, "rm", args) }},
	}
	return group(ctx, env, "admin bucket", "", subs, args)
}

// bucketPropFlags adds the bucket property flags (of create and set) to fs.
func bucketPropFlags(fs *flag.FlagSet, b *cluster.BucketProps) {
	fs.IntVar(&b.Copies, "copies", 1, "copies on distinct nodes (1 to 16)")
	fs.StringVar(&b.Mode, "mode", "local", "local, cache or writeback")
	fs.StringVar(&b.Validate, "validate", "never", "warm-copy validation: never, always, ttl:<duration>, or ttl (the nodes' tier.ttl)")
	fs.StringVar(&b.Backend.Kind, "backend", "", "backend kind: s3 or fs")
	fs.StringVar(&b.Backend.Endpoint, "endpoint", "", "s3 backend endpoint URL")
	fs.StringVar(&b.Backend.Region, "region", "us-east-1", "s3 backend region")
	fs.StringVar(&b.Backend.Bucket, "remote-bucket", "", "s3 backend bucket")
	fs.StringVar(&b.Backend.Prefix, "prefix", "", "key prefix in the backend")
	fs.BoolVar(&b.Backend.PathStyle, "path-style", true, "s3 path-style addressing")
	fs.StringVar(&b.Backend.AccessKey, "access-key", os.Getenv("BACKEND_ACCESS_KEY"), "s3 backend access key ($BACKEND_ACCESS_KEY)")
	fs.StringVar(&b.Backend.SecretKey, "secret-key", os.Getenv("BACKEND_SECRET_KEY"), "s3 backend secret key ($BACKEND_SECRET_KEY)")
	fs.StringVar(&b.Backend.Path, "path", "", "fs backend directory")
}

func bucketCmd(ctx context.Context, env Env, sub string, args []string) error {
	synopsis := map[string]string{"ls": "", "create": "NAME [flags]", "set": "NAME [flags]", "rm": "NAME"}[sub]
	fs := newFlagSet(env, "admin bucket "+sub, synopsis)
	client := newAdminClient(fs)
	var b cluster.BucketProps
	var noCheck bool
	if sub == "create" || sub == "set" {
		bucketPropFlags(fs, &b)
		fs.BoolVar(&noCheck, "no-check", false, "do not list the backend first (it is known to be down for now)")
	}
	// Go's flag package stops at the first positional argument; accept the
	// bucket name first, then flags.
	name := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("admin bucket %s: unexpected argument %q", sub, fs.Arg(0))
	}
	if sub != "ls" && name == "" {
		return usagef("admin bucket %s %s", sub, synopsis)
	}
	if sub == "ls" && name != "" {
		return usagef("admin bucket ls takes no arguments")
	}
	a := client()
	if sub == "set" {
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
			return noSuchBucket(name)
		}
		if err := parseFlags(fs, args); err != nil {
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
		if b.Copies < 1 {
			return usagef("--copies %d: a bucket keeps at least 1 copy", b.Copies)
		}
		b.Name = name
		q := url.Values{}
		if sub == "set" {
			q.Set("update", "true")
		}
		if noCheck {
			q.Set("check", "false")
		}
		path := node.AdminPrefix + "buckets"
		if len(q) > 0 {
			path += "?" + q.Encode()
		}
		var stored cluster.BucketProps
		if err := a.call(ctx, http.MethodPost, path, b, &stored); err != nil {
			return err
		}
		if stored.Name == "" {
			stored = b.WithDefaults()
		}
		fmt.Fprintf(env.Stdout, "bucket %s: copies=%d mode=%s\n", name, stored.Copies, stored.Mode)
		return nil
	default: // rm
		err := a.call(ctx, http.MethodDelete, node.AdminPrefix+"buckets/"+url.PathEscape(name), nil, nil)
		if httpStatus(err) == http.StatusNotFound {
			return noSuchBucket(name)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "bucket %s removed\n", name)
		return nil
	}
}

// jobArgs parses "BUCKET [--prefix P]" and the node flags, and checks that
// the bucket exists; it returns the map's up nodes too.
func jobArgs(ctx context.Context, env Env, name string, args []string) (bucket, prefix string, client *adminClient, urls []string, err error) {
	fs := newFlagSet(env, "admin "+name, "BUCKET [--prefix P]")
	mk := newAdminClient(fs)
	fs.StringVar(&prefix, "prefix", "", "only keys with this prefix")
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		bucket, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args); err != nil {
		return "", "", nil, nil, err
	}
	if bucket == "" || fs.NArg() > 0 {
		return "", "", nil, nil, usagef("admin %s BUCKET [--prefix P]", name)
	}
	client = mk()
	m, err := client.clusterMap(ctx)
	if err != nil {
		return "", "", nil, nil, err
	}
	if err := checkBucket(m, bucket); err != nil {
		return "", "", nil, nil, err
	}
	return bucket, prefix, client, upNodes(m), nil
}

// upNodes returns the intra base URLs of the map's up nodes.
func upNodes(m *cluster.Map) []string {
	var urls []string
	for _, id := range m.UpNodeIDs() {
		if ni, _ := m.Node(id); len(ni.IntraAddrs) > 0 {
			urls = append(urls, cluster.BaseURL(ni.IntraAddrs[0]))
		}
	}
	return urls
}

// adminPrefetch starts the prefetch on every up node (each fills the keys
// it owns) and shows their summed progress.
func adminPrefetch(ctx context.Context, env Env, args []string) error {
	bucket, prefix, a, urls, err := jobArgs(ctx, env, "prefetch", args)
	if err != nil {
		return err
	}
	q := "?bucket=" + url.QueryEscape(bucket) + "&prefix=" + url.QueryEscape(prefix)
	t, ran, err := runJob(ctx, env, a, urls, "prefetch"+q, progressBar, func(p node.Progress) (int, string) { return p.Failed, p.LastErr })
	if ran {
		fmt.Fprintf(env.Stdout, "prefetch %s: %s (%d fetched, %d already warm, %d failed), %s fetched\n",
			bucket, plural(t.Filled+t.Warm+t.Failed, "object"), t.Filled, t.Warm, t.Failed, humanBytes(t.Bytes))
	}
	return err
}

// adminNode drains a node (moves its object copies away while it stays
// up), undrains it, or removes a dead node for good (from the map and the
// raft configuration); the others then re-create its object copies, and
// its volume chunks where the volume has other nodes enough (see
// cluster.VolumeSpec.Replaces). Both name the volumes with chunks on the
// node.
func adminNode(ctx context.Context, env Env, args []string) error {
	fs := newFlagSet(env, "admin node", "drain|undrain|rm ID [--force]")
	mk := newAdminClient(fs)
	force := fs.Bool("force", false, "rm: remove the node even if it holds the only copy of chunks of copies=1 volumes (they are lost)")
	if slices.ContainsFunc(args, func(s string) bool { return isHelpArg(s) && s != "help" }) || (len(args) == 1 && args[0] == "help") {
		fs.Usage()
		return flag.ErrHelp
	}
	if len(args) < 2 || !slices.Contains([]string{"drain", "undrain", "rm"}, args[0]) {
		return usagef("admin node drain|undrain|rm ID")
	}
	verb, id := args[0], args[1]
	if err := parseFlags(fs, args[2:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("admin node %s: unexpected argument %q", verb, fs.Arg(0))
	}
	a := mk()
	m, err := a.clusterMap(ctx)
	if err != nil {
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
			var moved, later, kept []string
			for _, v := range node.VolumesOn(m, id) {
				spec := m.Volumes[v.Volume]
				switch after := spec.Draining(m, id); {
				case v.Copying:
				case !slices.Contains(after.Nodes, id):
					moved = append(moved, volumeCopies(v))
				case after.Prev != nil:
					later = append(later, volumeCopies(v))
				default:
					kept = append(kept, volumeCopies(v))
				}
			}
			if len(moved) > 0 {
				fmt.Fprintf(env.Stdout, "volume chunks are copied off it, and it is written until they are (volume info shows when it is done): %s\n", strings.Join(moved, ", "))
			}
			if len(later) > 0 {
				fmt.Fprintf(env.Stdout, "volume chunks are copied off it once the volume's re-placement in progress ends: %s\n", strings.Join(later, ", "))
			}
			if len(kept) > 0 {
				fmt.Fprintf(env.Stdout, "volume chunks do not move (too few other nodes for the copies): %s keeps those of %s\n", id, strings.Join(kept, ", "))
			}
		} else {
			fmt.Fprintf(env.Stdout, "%s takes copies again\n", id)
		}
		return nil
	}
	if ni.State == cluster.StateUp {
		return fmt.Errorf("admin node rm: %s is up; stop it (and wipe its data directory) first", id)
	}
	var moved, short, lost []string
	for _, v := range node.VolumesOn(m, id) {
		switch {
		case v.Copying && v.Copies == 1:
			lost = append(lost, volumeCopies(v)+" still being copied off it")
		case v.Replaced || v.Copying:
			moved = append(moved, volumeCopies(v))
		case v.Copies == 1:
			lost = append(lost, volumeCopies(v))
		default:
			short = append(short, volumeCopies(v))
		}
	}
	if len(lost) > 0 && !*force {
		return fmt.Errorf("admin node rm: %s %w: %s; they are lost with it unless it comes back under that ID with its drives (--force removes it anyway)",
			id, errOnlyCopy, strings.Join(lost, ", "))
	}
	if err := a.call(ctx, http.MethodPost, cluster.PathLeave, map[string]string{"id": id}, nil); err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "removed %s; the other nodes re-create its object copies (see admin status, rebalance)\n", id)
	if len(moved) > 0 {
		fmt.Fprintf(env.Stdout, "volume chunks are copied to the volumes' other nodes (volume info shows when it is done): %s\n", strings.Join(moved, ", "))
	}
	if len(short) > 0 {
		fmt.Fprintf(env.Stdout, "volume chunks with too few other nodes to move to: these are a copy short until a node joins as %s (docs/operations.md): %s\n", id, strings.Join(short, ", "))
	}
	if len(lost) > 0 {
		fmt.Fprintf(env.Stdout, "lost with %s, the only copy of: %s\n", id, strings.Join(lost, ", "))
	}
	return nil
}

// volumeCopies describes a volume's chunk copies on one node.
func volumeCopies(v node.VolumeCopies) string {
	return fmt.Sprintf("%s (copies=%d, %s)", v.Volume, v.Copies, plural(int(v.Chunks), "chunk"))
}

// errOnlyCopy: a node to remove holds the only copy of volume chunks.
var errOnlyCopy = errors.New("holds the only copy of volume chunks")

// adminScrub makes every up node read its copies back, check them against
// their checksums and repair the damaged ones, and shows the summed
// progress; damaged copies left unrepaired make it fail.
func adminScrub(ctx context.Context, env Env, args []string) error {
	bucket, a, urls, err := bucketFlag(ctx, env, "scrub", args)
	if err != nil {
		return err
	}
	t, ran, err := runJob(ctx, env, a, urls, "scrub?bucket="+url.QueryEscape(bucket), scrubLine,
		func(p node.ScrubProgress) (int, string) { return p.Unrepaired, p.LastErr })
	if ran {
		fmt.Fprintf(env.Stdout, "scrub: %s\n", scrubLine(t))
	}
	return err
}

// bucketFlag parses the arguments of a job that takes an optional
// --bucket, and checks that the bucket exists; it returns the map's up
// nodes too.
func bucketFlag(ctx context.Context, env Env, name string, args []string) (string, *adminClient, []string, error) {
	fs := newFlagSet(env, "admin "+name, "[--bucket B]")
	mk := newAdminClient(fs)
	bucket := fs.String("bucket", "", "only this bucket's objects")
	if err := parseFlags(fs, args); err != nil {
		return "", nil, nil, err
	}
	if fs.NArg() > 0 {
		return "", nil, nil, usagef("admin %s [--bucket B]", name)
	}
	a := mk()
	m, err := a.clusterMap(ctx)
	if err != nil {
		return "", nil, nil, err
	}
	if *bucket != "" {
		if err := checkBucket(m, *bucket); err != nil {
			return "", nil, nil, err
		}
	}
	return *bucket, a, upNodes(m), nil
}

// adminRebalance makes every up node pass over its copies and put them on
// the nodes HRW places them on now, and shows the summed progress.
func adminRebalance(ctx context.Context, env Env, args []string) error {
	bucket, a, urls, err := bucketFlag(ctx, env, "rebalance", args)
	if err != nil {
		return err
	}
	t, ran, err := runJob(ctx, env, a, urls, "rebalance?bucket="+url.QueryEscape(bucket), rebalanceLine,
		func(p node.RebalanceProgress) (int, string) { return p.Failed, p.LastErr })
	if ran {
		fmt.Fprintf(env.Stdout, "rebalance: %s\n", rebalanceLine(t))
	}
	return err
}

// progressEvery is how often a job's progress is written as a line when
// stderr is not a terminal (on a terminal one line is redrawn four times a
// second).
var progressEvery = 10 * time.Second

// runJob starts the admin job at path on every up node, shows the
// sum of the progress of their NDJSON streams, and returns the
// total and whether any node ran it; the error names every node that
// failed or reported failures.
func runJob[P any, PP interface {
	*P
	Add(P)
}](ctx context.Context, env Env, a *adminClient, urls []string, path string, bar func(P) string, failures func(P) (int, string)) (P, bool, error) {
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
	total := func() (P, bool) {
		mu.Lock()
		defer mu.Unlock()
		var t P
		for _, p := range state {
			PP(&t).Add(p)
		}
		return t, len(state) > 0
	}
	term := isTerminal(env.Stderr)
	every := progressEvery
	if term {
		every = 250 * time.Millisecond
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	drawn, last := false, ""
	for {
		select {
		case <-done:
			t, ran := total()
			if term && drawn {
				fmt.Fprintf(env.Stderr, "\r%s\x1b[K\n", bar(t))
			}
			mu.Lock()
			for u, p := range state {
				if n, last := failures(p); n > 0 || last != "" {
					errs = append(errs, fmt.Errorf("%s: %d failed, last error: %s", u, n, last))
				}
			}
			mu.Unlock()
			sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
			return t, ran, errors.Join(errs...)
		case <-tick.C:
			t, ran := total()
			if !ran {
				continue
			}
			line := bar(t)
			switch {
			case term:
				fmt.Fprintf(env.Stderr, "\r%s\x1b[K", line)
				drawn = true
			case line != last:
				fmt.Fprintln(env.Stderr, line)
			}
			last = line
		case <-ctx.Done():
			t, ran := total()
			if term && drawn {
				fmt.Fprintln(env.Stderr)
			}
			return t, ran, ctx.Err()
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
	hc := &http.Client{Transport: a.tr} // no overall timeout: a job takes as long as it takes
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return answerError(method, u, resp)
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
	bucket, prefix, a, urls, err := jobArgs(ctx, env, "evict", args)
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
	if ok := len(urls) - len(errs); ok > 0 {
		fmt.Fprintf(env.Stdout, "evicted %s, %s, from %s\n", plural(objs, "object"), humanBytes(bytes), plural(ok, "node"))
	}
	return errors.Join(errs...)
}
