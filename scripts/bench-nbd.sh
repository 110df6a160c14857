#!/usr/bin/env bash
# NBD benchmark: the fio matrix (4K/8K random read and write, 64K random
# read/write, 1M sequential read and write; iodepth 32) against Slipstream's
# NBD server (a file device, and copies=1 / copies=2 volumes on two
# in-process nodes whose replicas talk over loopback) and, in the same run,
# against nbdkit null, nbdkit memory and a local file through libaio, with
# ratios; plus the 4K/32K/256K random-write sweep, copies=1 vs copies=2.
#
# Usage: scripts/bench-nbd.sh [output.md]
# Environment: BENCH_RUNTIME (s per job, default 5), BENCH_JOBS (fio jobs =
# NBD connections, default 2), BENCH_ONLY (comma-separated job names),
# BENCH_CPUPROFILE (a directory: CPU profiles of the NBD server per job and target),
# BENCH_PIN (set: two hosts of one CPU each: fio, nbdkit, the NBD server and
# node a on CPU 0, node b on CPU 1).
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in fio nbdkit; do
	command -v "$tool" >/dev/null || { echo "bench-nbd: $tool is required (scripts/setup.sh installs it)" >&2; exit 1; }
done
out=${1:-/tmp/bench-nbd.md}
img=${BENCH_IMG:-$(dirname "$out")/img}
fiodir=$(mktemp -d)
trap 'rm -rf "$fiodir"' EXIT
echo "bench-nbd: $(nproc) CPUs, load average: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
SLIPSTREAM_BENCH_NBD=1 BENCH_OUT="$out" BENCH_IMG="$img" BENCH_FIO_DIR="$fiodir" go test -count=1 -timeout 60m -run '^TestBenchNBD$' -v ./internal/volume/ |
	grep -v -E '^(=== RUN|--- PASS|PASS|ok )' || true
test -s "$out" || { echo "bench-nbd: no results" >&2; exit 1; }
# The two-worker sweep's fio outputs, drawn by `slipstream report`.
for d in "$fiodir"/qd*; do
	[ -d "$d" ] || continue
	q=${d##*/}
	rep="$img/nbd-sweep-$q"
	rm -rf "$rep"
	go run ./cmd/slipstream report "$d"/*.json -table=false -o "$rep" >/dev/null
	# index.html embeds every chart; keep only the PNGs the page below shows.
	find "$rep" -name '*.png' ! -name 'compare-requests.png' ! -name 'compare-latency.png' ! -name 'compare-timeline.png' -delete
	r="img/nbd-sweep-$q"
	printf '\n`slipstream report` of the sweep, %s writes in flight per job (every run over time in the [report](%s/index.html)):\n\n![IOPS](%s/compare-requests.png)\n\n![latency](%s/compare-latency.png)\n\n![over time](%s/compare-timeline.png)\n' \
		"${q#qd}" "$r" "$r" "$r" "$r" >>"$out"
done
echo "bench-nbd: results in $out" >&2
