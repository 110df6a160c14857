package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/loader"
	"github.com/slipstream-io/slipstream/internal/node"
	"github.com/slipstream-io/slipstream/internal/pki"
)

func volumeCommand() Command {
	return Command{
		Summary: "create, list, resize and delete block volumes",
		Run: func(ctx context.Context, env Env) error {
			subs := []subcommand{
				{name: "create", synopsis: "NAME --size S [--copies N] [--chunk C]", summary: "create a volume (served over NBD by every node)", run: volumeCreate},
				{name: "list", aliases: []string{"ls"}, summary: "list the volumes", run: volumeList},
				{name: "info", synopsis: "NAME", summary: "a volume's size, copies, placement and NBD URIs", run: volumeInfo},
				{name: "resize", synopsis: "NAME --size S", summary: "grow a volume", run: volumeResize},
				{name: "delete", aliases: []string{"rm"}, synopsis: "NAME", summary: "delete a volume and its data", run: volumeDelete},
				{name: "rebalance", synopsis: "NAME|--all", summary: "spread a volume's chunks over the nodes that joined since it was created", run: volumeRebalance},
				{name: "accept-loss", synopsis: "NAME [--chunks LIST]", summary: "use lost chunks again, as zeros", run: volumeAcceptLoss},
				{name: "certs", synopsis: "DIR --host H [--host H]...", summary: "write the certificates of NBD over TLS (nbd_tls)", run: volumeCerts},
			}
			return group(ctx, env, "volume", adminFooter, subs, env.Args)
		},
	}
}

// volumeArgs parses "NAME [flags]" of volume command sub (flags may also
// come before NAME): the flags added by addFlags, --json if asJSON, and
// the node flags.
func volumeArgs(env Env, sub, synopsis string, args []string, addFlags func(fs *flag.FlagSet)) (name string, a *adminClient, asJSON bool, err error) {
	fs := newFlagSet(env, "volume "+sub, synopsis)
	mk := newAdminClient(fs)
	var js *bool
	if sub != "delete" {
		js = fs.Bool("json", false, "print JSON")
	}
	if addFlags != nil {
		addFlags(fs)
	}
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args); err != nil {
		return "", nil, false, err
	}
	needName := strings.HasPrefix(synopsis, "NAME")
	if needName && name == "" && fs.NArg() > 0 {
		// The name after flags (volume info --json NAME), and maybe
		// more flags after it.
		name = fs.Arg(0)
		if err := parseFlags(fs, fs.Args()[1:]); err != nil {
			return "", nil, false, err
		}
	}
	if fs.NArg() > 0 {
		return "", nil, false, usagef("volume %s: unexpected argument %q", sub, fs.Arg(0))
	}
	switch {
	case needName && name == "":
		return "", nil, false, usagef("volume %s %s", sub, synopsis)
	case !needName && name != "":
		return "", nil, false, usagef("volume %s takes no arguments", sub)
	}
	return name, mk(), js != nil && *js, nil
}

// parseVolumeSize checks --size: required, and more than zero.
func parseVolumeSize(s string) (int64, error) {
	if s == "" {
		return 0, usagef("--size is required (e.g. --size 10GiB)")
	}
	sz, err := loader.ParseSize(s)
	if err != nil {
		return 0, usagef("--size %q: give a size such as 10GiB or 512MiB", s)
	}
	if sz <= 0 {
		return 0, usagef("--size %s: a volume needs a size above 0 (e.g. 10GiB)", s)
	}
	return sz, nil
}

func volumeCreate(ctx context.Context, env Env, args []string) error {
	var size, chunk string
	var copies int
	name, a, asJSON, err := volumeArgs(env, "create", "NAME --size S [--copies N] [--chunk C]", args, func(fs *flag.FlagSet) {
		fs.StringVar(&size, "size", "", "volume size, e.g. 100GiB (required)")
		fs.IntVar(&copies, "copies", 1, "mirrors on distinct nodes")
		fs.StringVar(&chunk, "chunk", "4MiB", "chunk size (a power of two, at least 4KiB)")
	})
	if err != nil {
		return err
	}
	sz, err := parseVolumeSize(size)
	if err != nil {
		return err
	}
	if copies < 1 {
		return usagef("--copies %d: a volume keeps at least 1 copy", copies)
	}
	cs, err := loader.ParseSize(chunk)
	if err != nil {
		return usagef("--chunk %q: give a size such as 4MiB", chunk)
	}
	spec := cluster.VolumeSpec{Name: name, Size: sz, Copies: copies, ChunkSize: cs}
	var info node.VolumeInfo
	if err := a.call(ctx, http.MethodPost, node.AdminPrefix+"volumes", spec, &info); err != nil {
		return explainVolumeCreate(ctx, a, spec, err)
	}
	return printVolume(env, info, nil, asJSON)
}

// explainVolumeCreate replaces a refused create's error by what the map
// says is wrong, if it can: too few nodes for the copies, or a volume of
// that name.
func explainVolumeCreate(ctx context.Context, a *adminClient, spec cluster.VolumeSpec, err error) error {
	m, merr := a.clusterMap(ctx)
	if merr != nil {
		return err
	}
	if _, ok := m.Volume(spec.Name); ok {
		return fmt.Errorf("volume %q already exists", spec.Name)
	}
	up := m.UpNodeIDs()
	notDraining := 0
	for _, id := range up {
		if ni, _ := m.Node(id); !ni.Draining {
			notDraining++
		}
	}
	switch {
	case len(up) < spec.Copies:
		return fmt.Errorf("--copies %d needs %s up, and the cluster has %d up", spec.Copies, plural(spec.Copies, "node"), len(up))
	case notDraining < spec.Copies:
		return fmt.Errorf("--copies %d needs %s that are not draining, and the cluster has %d", spec.Copies, plural(spec.Copies, "node"), notDraining)
	}
	return err
}

// explainMissingVolume turns the error of a command on a volume the map
// does not have into "no such volume".
func explainMissingVolume(ctx context.Context, a *adminClient, name string, err error) error {
	if m, merr := a.clusterMap(ctx); merr == nil {
		if _, ok := m.Volume(name); !ok {
			return fmt.Errorf("no such volume %q", name)
		}
	}
	return err
}

func volumeInfo(ctx context.Context, env Env, args []string) error {
	name, a, asJSON, err := volumeArgs(env, "info", "NAME", args, nil)
	if err != nil {
		return err
	}
	var info node.VolumeInfo
	if err := a.call(ctx, http.MethodGet, node.AdminPrefix+"volumes/"+url.PathEscape(name), nil, &info); err != nil {
		return explainMissingVolume(ctx, a, name, err)
	}
	var stale map[string]int
	if !asJSON {
		stale = writerStale(ctx, a, info)
	}
	return printVolume(env, info, stale, asJSON)
}

// writerStale asks the volume's writer which chunks each mirror missed
// (nil if it has no writer or does not answer: the map names the stale
// mirrors, only the writer counts their chunks).
func writerStale(ctx context.Context, a *adminClient, v node.VolumeInfo) map[string]int {
	if v.Writer == "" || len(v.Stale) == 0 {
		return nil
	}
	m, err := a.clusterMap(ctx)
	if err != nil {
		return nil
	}
	ni, ok := m.Node(v.Writer)
	if !ok || len(ni.IntraAddrs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second) // the counts are a detail: do not wait long for them
	defer cancel()
	var st node.Status
	if err := a.callURL(ctx, http.MethodGet, cluster.BaseURL(ni.IntraAddrs[0])+node.AdminPrefix+"status", nil, &st); err != nil {
		return nil
	}
	return st.Extra.Volumes[v.Name].Stale
}

// volumeHealth says, in a line or two, whether every chunk has its copies
// on nodes that are up and current: the chunks a copy short and the nodes
// that are down or gone, the chunks no node that is up holds, and the
// mirrors that missed writes (with the chunks the writer counts, when
// known). A volume's lost chunks are said above it.
func volumeHealth(v node.VolumeInfo, stale map[string]int) string {
	var b strings.Builder
	notUp := append(slices.Clone(v.Down), v.Removed...)
	if v.Unavailable > 0 {
		fmt.Fprintf(&b, "UNAVAILABLE: %s have no copy on a node that is up (%s not up): their reads and writes fail until one is back\n",
			plural(int(v.Unavailable), "chunk"), strings.Join(notUp, ", "))
	}
	if short := v.Degraded - v.Unavailable; short > 0 {
		fmt.Fprintf(&b, "DEGRADED: %s %s a copy short while %s %s not up\n",
			plural(int(short), "chunk"), isAre(int(short)), strings.Join(notUp, ", "), isAre(len(notUp)))
	}
	for _, id := range v.Stale {
		what := "missed writes"
		if n, ok := stale[id]; ok {
			what = fmt.Sprintf("missed writes to %s", plural(n, "chunk"))
		}
		when := "the writer copies them to it once it is back"
		if !slices.Contains(notUp, id) {
			when = "the writer is copying them to it"
		}
		fmt.Fprintf(&b, "resynchronising: %s %s; %s\n", id, what, when)
	}
	if b.Len() == 0 && v.Copies == 1 {
		return "health: every chunk's copy is on a node that is up\n"
	}
	if b.Len() == 0 {
		return fmt.Sprintf("health: every chunk has its %d copies on nodes that are up\n", v.Copies)
	}
	return b.String()
}

// isAre is the verb for n things.
func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

// volumeState is a volume's state in one word, worst first.
func volumeState(v node.VolumeInfo) string {
	switch {
	case len(v.Lost) > 0:
		return "LOST"
	case v.Unavailable > 0:
		return "UNAVAILABLE"
	case v.Degraded > 0:
		return "degraded"
	case len(v.Stale) > 0:
		return "resyncing"
	case v.Prev != nil:
		return "re-placing"
	}
	return "ok"
}

func volumeResize(ctx context.Context, env Env, args []string) error {
	var size string
	name, a, asJSON, err := volumeArgs(env, "resize", "NAME --size S", args, func(fs *flag.FlagSet) {
		fs.StringVar(&size, "size", "", "new volume size, e.g. 200GiB (required; volumes only grow)")
	})
	if err != nil {
		return err
	}
	sz, err := parseVolumeSize(size)
	if err != nil {
		return err
	}
	var info node.VolumeInfo
	if err := a.call(ctx, http.MethodPost, node.AdminPrefix+"volumes?resize=true", cluster.VolumeSpec{Name: name, Size: sz}, &info); err != nil {
		return explainMissingVolume(ctx, a, name, err)
	}
	return printVolume(env, info, nil, asJSON)
}

func volumeList(ctx context.Context, env Env, args []string) error {
	_, a, asJSON, err := volumeArgs(env, "list", "", args, nil)
	if err != nil {
		return err
	}
	var infos []node.VolumeInfo
	if err := a.call(ctx, http.MethodGet, node.AdminPrefix+"volumes", nil, &infos); err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(env.Stdout).Encode(infos)
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VOLUME\tSIZE\tCOPIES\tCHUNK\tCHUNKS\tSTATE\tNBD")
	for _, v := range infos {
		uri := ""
		if len(v.URIs) > 0 {
			uri = v.URIs[0]
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\t%s\n", v.Name, humanBytes(v.Size), v.Copies, humanBytes(v.ChunkSize), v.Chunks, volumeState(v), uri)
	}
	return tw.Flush()
}

func volumeDelete(ctx context.Context, env Env, args []string) error {
	name, a, _, err := volumeArgs(env, "delete", "NAME", args, nil)
	if err != nil {
		return err
	}
	if err := a.call(ctx, http.MethodDelete, node.AdminPrefix+"volumes/"+url.PathEscape(name), nil, nil); err != nil {
		return explainMissingVolume(ctx, a, name, err)
	}
	fmt.Fprintf(env.Stdout, "volume %s deleted\n", name)
	return nil
}

// volumeAcceptLoss accepts the loss of a volume's lost chunks (by
// default every one volume info lists), which then read as zeros.
func volumeRebalance(ctx context.Context, env Env, args []string) error {
	all := slices.ContainsFunc(args, func(a string) bool { return a == "--all" || a == "-all" })
	synopsis := "NAME"
	if all {
		args = slices.DeleteFunc(slices.Clone(args), func(a string) bool { return a == "--all" || a == "-all" })
		synopsis = ""
	}
	name, a, asJSON, err := volumeArgs(env, "rebalance", synopsis, args, nil)
	if err != nil {
		return err
	}
	names := []string{name}
	if all {
		var infos []node.VolumeInfo
		if err := a.call(ctx, http.MethodGet, node.AdminPrefix+"volumes", nil, &infos); err != nil {
			return err
		}
		names = names[:0]
		for _, v := range infos {
			names = append(names, v.Name)
		}
	}
	var out []node.VolumeInfo
	failed := 0
	for _, name := range names {
		var info node.VolumeInfo
		if err := a.call(ctx, http.MethodPost, node.AdminPrefix+"volumes/"+url.PathEscape(name)+"/rebalance", nil, &info); err != nil {
			if !all {
				return explainMissingVolume(ctx, a, name, err)
			}
			failed++
			fmt.Fprintf(env.Stderr, "volume %s: %v\n", name, err)
			continue
		}
		out = append(out, info)
		if asJSON {
			continue
		}
		if len(info.Added) == 0 {
			fmt.Fprintf(env.Stdout, "volume %s is on every node that takes placements (%s): nothing to move\n", name, strings.Join(info.Nodes, ", "))
			continue
		}
		moved := int64(0)
		for _, id := range info.Added {
			moved += info.ChunksPerNode[id]
		}
		fmt.Fprintf(env.Stdout, "volume %s: %s copied to %s (placed on %s before); watch 'slipstream volume info %s'\n",
			name, plural(int(moved), "chunk copy", "chunk copies"), strings.Join(info.Added, ", "), strings.Join(info.Prev, ", "), name)
	}
	if asJSON {
		if all {
			return json.NewEncoder(env.Stdout).Encode(out)
		}
		return json.NewEncoder(env.Stdout).Encode(out[0])
	}
	if failed > 0 {
		return fmt.Errorf("%s not rebalanced (above)", plural(failed, "volume"))
	}
	return nil
}

func volumeAcceptLoss(ctx context.Context, env Env, args []string) error {
	var list string
	name, a, asJSON, err := volumeArgs(env, "accept-loss", "NAME [--chunks LIST]", args, func(fs *flag.FlagSet) {
		fs.StringVar(&list, "chunks", "", "lost chunks to accept, e.g. 3,7-9 (default: every lost chunk)")
	})
	if err != nil {
		return err
	}
	var info node.VolumeInfo
	if err := a.call(ctx, http.MethodGet, node.AdminPrefix+"volumes/"+url.PathEscape(name), nil, &info); err != nil {
		return explainMissingVolume(ctx, a, name, err)
	}
	if len(info.Lost) == 0 {
		if asJSON {
			return json.NewEncoder(env.Stdout).Encode(info)
		}
		fmt.Fprintf(env.Stdout, "volume %s has no lost chunks\n", name)
		return nil
	}
	accept := info.Lost
	if list != "" {
		if accept, err = parseChunkList(list); err != nil {
			return usagef("--chunks %q: %v", list, err)
		}
		for _, c := range accept {
			if !slices.Contains(info.Lost, c) {
				return fmt.Errorf("chunk %d of volume %s is not lost (lost: %s)", c, name, chunkList(info.Lost))
			}
		}
	}
	body := struct {
		Lost []int64 `json:"lost"`
	}{accept}
	if err := a.call(ctx, http.MethodPost, node.AdminPrefix+"volumes/"+url.PathEscape(name)+"/accept-loss", body, &info); err != nil {
		return explainMissingVolume(ctx, a, name, err)
	}
	if asJSON {
		return json.NewEncoder(env.Stdout).Encode(info)
	}
	fmt.Fprintf(env.Stdout, "volume %s: the loss of %s accepted (chunks %s); they read as zeros now\n", name, plural(len(accept), "chunk"), chunkList(accept))
	if len(info.Lost) > 0 {
		fmt.Fprintf(env.Stdout, "still lost: chunks %s\n", chunkList(info.Lost))
	}
	return nil
}

// parseChunkList parses "3,7-9" into sorted chunk numbers.
func parseChunkList(s string) ([]int64, error) {
	var out []int64
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.ParseInt(lo, 10, 64)
		b := a
		if err == nil && isRange {
			b, err = strconv.ParseInt(hi, 10, 64)
		}
		switch {
		case err != nil || a < 0:
			return nil, fmt.Errorf("%q is not a chunk number or range", part)
		case b < a || b-a > 1<<20:
			return nil, fmt.Errorf("bad range %q", part)
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// chunkList writes sorted chunk numbers as "3, 7-9", the first 20 runs.
func chunkList(cs []int64) string {
	var runs []string
	for i := 0; i < len(cs); {
		j := i
		for j+1 < len(cs) && cs[j+1] == cs[j]+1 {
			j++
		}
		if len(runs) == 20 {
			runs = append(runs, fmt.Sprintf("... (%d in all)", len(cs)))
			break
		}
		if j > i {
			runs = append(runs, fmt.Sprintf("%d-%d", cs[i], cs[j]))
		} else {
			runs = append(runs, strconv.FormatInt(cs[i], 10))
		}
		i = j + 1
	}
	return strings.Join(runs, ", ")
}

// printVolume describes a volume; stale, if known, counts the chunks each
// stale mirror missed.
func printVolume(env Env, v node.VolumeInfo, stale map[string]int, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(env.Stdout).Encode(v)
	}
	fmt.Fprintf(env.Stdout, "volume %s: %s, %s, %s chunks (%d)\n", v.Name, humanBytes(v.Size), plural(v.Copies, "copy", "copies"), humanBytes(v.ChunkSize), v.Chunks)
	fmt.Fprintf(env.Stdout, "placed on: %s\n", strings.Join(v.Nodes, ", "))
	for _, id := range v.Removed {
		fmt.Fprintf(env.Stdout, "WARNING: %s is no longer a member: its %d chunk copies are missing until a node joins under the ID %s (see docs/operations.md, replacing a dead server)\n", id, v.ChunksPerNode[id], id)
	}
	if len(v.Lost) > 0 {
		fmt.Fprintf(env.Stdout, "LOST: %s (%s): every copy was on nodes removed from the cluster; reads and writes of them fail until 'slipstream volume accept-loss %s', and they then read as zeros\n", plural(len(v.Lost), "chunk"), chunkList(v.Lost), v.Name)
	}
	fmt.Fprint(env.Stdout, volumeHealth(v, stale))
	switch {
	case v.Prev != nil && v.Copied:
		fmt.Fprintf(env.Stdout, "re-placed: every chunk is copied to the nodes above; their old owners are still written until every node has seen it (placed on %s before)\n", strings.Join(v.Prev, ", "))
	case v.Prev != nil && len(v.Added) > 0:
		fmt.Fprintf(env.Stdout, "re-placing: %d chunk copies are being copied to %s, added by a rebalance (placed on %s before)\n", v.Copying, strings.Join(v.Added, ", "), strings.Join(v.Prev, ", "))
	case v.Prev != nil:
		fmt.Fprintf(env.Stdout, "re-placing: %d chunk copies of removed or drained nodes are being copied to the nodes above (placed on %s before)\n", v.Copying, strings.Join(v.Prev, ", "))
	}
	if v.Writer != "" {
		fmt.Fprintf(env.Stdout, "written through: %s (claim %d; writes through other nodes go through it while its own clients write)\n", v.Writer, v.Epoch)
	}
	fmt.Fprintln(env.Stdout, "NBD URIs (any node serves the whole volume):")
	for _, u := range v.URIs {
		fmt.Fprintln(env.Stdout, "  "+u)
	}
	ids := make([]string, 0, len(v.ChunksPerNode))
	for id := range v.ChunksPerNode {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	fmt.Fprintln(env.Stdout, "chunk copies per node:")
	for _, id := range ids {
		fmt.Fprintf(env.Stdout, "  %s: %d\n", id, v.ChunksPerNode[id])
	}
	for i, p := range v.Placement {
		fmt.Fprintf(env.Stdout, "  chunk %d: %s\n", i, strings.Join(p, ", "))
	}
	return nil
}

// volumeCerts writes a certificate authority (kept if DIR has one), a
// server certificate for the given hosts and a client certificate into
// DIR, and prints how to use them.
func volumeCerts(ctx context.Context, env Env, args []string) error {
	fs := newFlagSet(env, "volume certs", "DIR --host H [--host H]...")
	var hosts []string
	fs.Func("host", "a host name or IP address clients use to reach an NBD address (repeat for every node and interface)", func(v string) error {
		hosts = append(hosts, v)
		return nil
	})
	client := fs.String("client", "slipstream-client", "the client certificate's common name")
	days := fs.Int("days", 365, "days the server and client certificates are valid (at most 3650)")
	var dir string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		dir, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if dir == "" || fs.NArg() > 0 || len(hosts) == 0 || *days < 1 || *days > 3650 {
		return usagef("volume certs DIR --host H [--host H]... [--client NAME] [--days N]")
	}
	o := pki.Options{Hosts: hosts, Client: *client, Validity: time.Duration(*days) * 24 * time.Hour}
	if err := pki.Write(dir, o); err != nil {
		return err
	}
	abs, _ := filepath.Abs(dir)
	fmt.Fprintf(env.Stdout, `wrote %s: %s, %s, %s (server, for %s), %s, %s (client)
nodes (config):  nbd_tls: {cert: %s, key: %s, client_ca: %s}
clients:         copy %s, %s and %s; then
  nbdinfo 'nbds://HOST:10809/VOLUME?tls-certificates=DIR'
  qemu-img info --object tls-creds-x509,id=tls0,endpoint=client,dir=DIR --image-opts driver=nbd,host=HOST,port=10809,export=VOLUME,tls-creds=tls0
keep %s private: it signs new certificates (run this again for more hosts)
`, abs, pki.CACert, pki.ServerCert, pki.ServerKey, strings.Join(hosts, ", "), pki.ClientCert, pki.ClientKey,
		filepath.Join(abs, pki.ServerCert), filepath.Join(abs, pki.ServerKey), filepath.Join(abs, pki.CACert),
		pki.CACert, pki.ClientCert, pki.ClientKey, pki.CAKey)
	return nil
}
