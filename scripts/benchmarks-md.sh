#!/usr/bin/env bash
# Assembles docs/benchmarks.md from the tables each benchmark writes
# (docs/bench-*.md), in a fixed order, under one page.
set -euo pipefail
cd "$(dirname "$0")/.."
out=docs/benchmarks.md
{
	cat <<'HDR'
# Benchmarks

Every figure here is a ratio measured in one run against the hardware limit
or a peer on the same machine, because the machines are shared and absolute
figures swing 2-3x between runs. All of them ran on a 2-core, 24 GiB VM with
one virtio disk: the "drives" of a test node are directories on that one disk,
and clients, nodes and limit servers share the two cores. `make bench`
refreshes every table; each section names the test that wrote it.

HDR
	section() { # title file
		if [ -f "docs/$2" ]; then
			printf '## %s\n\n' "$1"
			sed -e "s/^#/##/" "docs/$2"
			printf '\n'
		fi
	}
	notes() { # file: a part with its own title, or notes under the part before
		if [ -f "docs/$1" ]; then
			sed -e "s/^#/##/" "docs/$1"
			printf '\n'
		fi
	}
	section "Warm GET through the S3 API vs http.ServeContent (issue: core)" bench-core.md
	notes bench-core-notes.md
	section "Fast tier: cold and warm epochs vs reading the backend directly" bench-tier-read.md
	section "Write paths: write-back copies=1 vs copies=2 (WB+0 vs WB+1) vs write-through" bench-tier-write.md
	section "Write paths with the drives in memory (no shared disk)" bench-tier-write-mem.md
	notes bench-tier-write-notes.md
	section "Eviction: S3-FIFO vs LRU under scans" bench-evict.md
	notes bench-evict-notes.md
	section "Store: work files spread over directories (file creation on ext4 without a journal)" bench-store.md
	notes bench-multihoming.md # has its own title
	section "Block volumes over NBD: the fio matrix (analysis of the set-up in docs/bench-nbd.md)" bench-nbd-run.md
	notes bench-nbd-notes.md
	section "Intra-cluster TLS (intra_tls) vs plain intra-cluster HTTP" bench-intra-tls.md
	section "Volume writes through a node without the claim (forwarded) vs through the holder" bench-volume-forward.md
	notes bench-volume-forward-notes.md
	section "Volume re-placement (a node removed, or one added by a rebalance) vs the disk" bench-replace.md
	notes bench-replace-notes.md
	section "NBD over TLS vs plain NBD" bench-nbd-tls.md
	notes bench-nbd-tls-notes.md
	notes bench-fabric.md # has its own title
} >"$out"
echo "wrote $out"
