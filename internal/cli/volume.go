package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/slipstream-io/slipstream/internal/cluster"
	"github.com/slipstream-io/slipstream/internal/loader"
	"github.com/slipstream-io/slipstream/internal/node"
)

func volumeCommand() Command {
	return Command{
		Summary: "create, list, resize and delete block volumes",
		Run: func(ctx context.Context, env Env) error {
			if len(env.Args) == 0 {
				return usagef("volume create NAME --size 100GiB [--copies 2] [--chunk 4MiB] | list | info NAME | resize NAME --size S | delete NAME")
			}
			sub, args := env.Args[0], env.Args[1:]
			fs := flag.NewFlagSet("volume "+sub, flag.ContinueOnError)
			fs.SetOutput(env.Stderr)
			client := newAdminClient(fs)
			size := fs.String("size", "", "volume size (e.g. 100GiB)")
			copies := fs.Int("copies", 1, "mirrors on distinct nodes")
			chunk := fs.String("chunk", "4MiB", "chunk size (a power of two, at least 4KiB)")
			asJSON := fs.Bool("json", false, "print JSON")
			name := ""
			if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
				name, args = args[0], args[1:]
			}
			if err := fs.Parse(args); err != nil {
				return err
			}
			a := client()
			needName := func() error {
				if name == "" {
					return usagef("volume %s NAME", sub)
				}
				return nil
			}
			switch sub {
			case "create", "resize":
				if err := needName(); err != nil {
					return err
				}
				sz, err := loader.ParseSize(*size)
				if err != nil || sz <= 0 {
					return usagef("--size: give a size such as 10GiB (%v)", err)
				}
				spec := cluster.VolumeSpec{Name: name, Size: sz, Copies: *copies}
				path := node.AdminPrefix + "volumes"
				if sub == "create" {
					cs, err := loader.ParseSize(*chunk)
					if err != nil {
						return usagef("--chunk: %v", err)
					}
					spec.ChunkSize = cs
				} else {
					path += "?resize=true"
				}
				var info node.VolumeInfo
				if err := a.call(ctx, http.MethodPost, path, spec, &info); err != nil {
					return err
				}
				return printVolume(env, info, *asJSON)
			case "info":
				if err := needName(); err != nil {
					return err
				}
				var info node.VolumeInfo
				if err := a.call(ctx, http.MethodGet, node.AdminPrefix+"volumes/"+name, nil, &info); err != nil {
					return err
				}
				return printVolume(env, info, *asJSON)
			case "list", "ls":
				var infos []node.VolumeInfo
				if err := a.call(ctx, http.MethodGet, node.AdminPrefix+"volumes", nil, &infos); err != nil {
					return err
				}
				if *asJSON {
					return json.NewEncoder(env.Stdout).Encode(infos)
				}
				tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "VOLUME\tSIZE\tCOPIES\tCHUNK\tCHUNKS\tNBD")
				for _, v := range infos {
					uri := ""
					if len(v.URIs) > 0 {
						uri = v.URIs[0]
					}
					fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\n", v.Name, humanBytes(v.Size), v.Copies, humanBytes(v.ChunkSize), v.Chunks, uri)
				}
				return tw.Flush()
			case "delete", "rm":
				if err := needName(); err != nil {
					return err
				}
				return a.call(ctx, http.MethodDelete, node.AdminPrefix+"volumes/"+name, nil, nil)
			default:
				return usagef("unknown volume command %q", sub)
			}
		},
	}
}

func printVolume(env Env, v node.VolumeInfo, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(env.Stdout).Encode(v)
	}
	fmt.Fprintf(env.Stdout, "volume %s: %s, %d copies, %s chunks (%d)\n", v.Name, humanBytes(v.Size), v.Copies, humanBytes(v.ChunkSize), v.Chunks)
	fmt.Fprintf(env.Stdout, "placed on: %s\n", strings.Join(v.Nodes, ", "))
	if v.Writer != "" {
		fmt.Fprintf(env.Stdout, "written through: %s (claim %d; a write through another node moves it there)\n", v.Writer, v.Epoch)
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
