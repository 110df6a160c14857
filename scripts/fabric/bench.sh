#!/usr/bin/env bash
# Fabric analyzer benchmark: full analysis (parse the dumps, every route in
# both directions, link loads, route weights) of the 1024-host sample and of
# generated 4096- and 8192-host fat trees (real OpenSM under ibsim, see
# gen-big.sh), plain and gzipped. For each: wall time and peak RSS of one
# process doing one analysis, next to the time to merely read (or gunzip)
# the LFT dump, the I/O floor. Then a before/after diff of the 2048-host
# sample, and the Go benchmark comparing per-destination trees with walking
# every route.
# usage: scripts/fabric/bench.sh [WORKDIR]   (default /tmp/slipstream-fabric-bench)
# Needs ~2.5 GB of disk in WORKDIR; the generated fabrics are reused.
set -euo pipefail
cd "$(dirname "$0")/../.."
W=${1:-/tmp/slipstream-fabric-bench}
mkdir -p "$W"
bash scripts/fabric/gen-big.sh "$W/big" 4096 8192 >&2
for s in 4096 8192; do
	d=$W/big/h$s
	if [ ! -s "$W/big/h$s-gz/opensm-lfts.dump.gz" ]; then
		mkdir -p "$W/big/h$s-gz"
		for f in opensm-lfts.dump opensm-subnet.lst guid2lid osm.log opensm.out; do
			gzip -1 -c "$d/$f" > "$W/big/h$s-gz/$f.gz"
		done
	fi
done
# The test binary holds the benchmark (and nothing else of the tree).
go test -c -o "$W/fabric.test" ./internal/fabric
S=$PWD/internal/fabric/testdata/samples
export FABRIC_BENCH_DIR=$W/big

floor() { # "wall cpu" seconds to read or gunzip a file
	local cmd=cat
	case $1 in *.gz) cmd="gzip -dc" ;; esac
	{ /usr/bin/time -f '%e %U %S' $cmd "$1" >/dev/null; } 2>&1 | tail -1 | awk '{printf "%.2f %.2f", $1, $2+$3}'
}

echo "| fabric | routes | LFT dump | analysis wall | analysis CPU | peak RSS | read/gunzip only: wall, CPU | analysis / read (CPU) |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for name in h1024 h4096 h4096-gz h8192 h8192-gz; do
	case $name in
	h1024) lft=$S/ft3-k16-h1024/ftree/opensm-lfts.dump.gz ;;
	*-gz) lft=$W/big/$name/opensm-lfts.dump.gz ;;
	*) lft=$W/big/$name/opensm-lfts.dump ;;
	esac
	read -r rd rdcpu <<<"$(floor "$lft")"
	out=$(cd internal/fabric && /usr/bin/time -f 'TIME %M %U %S' "$W/fabric.test" -test.run '^$' \
		-test.bench "FullAnalysis/^$name\$" -test.benchtime 1x 2>&1)
	ns=$(awk '/ns\/op/{for(i=1;i<=NF;i++) if($(i+1)=="ns/op") print $i}' <<<"$out")
	routes=$(awk '/routes/{for(i=1;i<=NF;i++) if($(i+1)=="routes") print $i}' <<<"$out")
	kb=$(awk '/^TIME/{print $2}' <<<"$out")
	cpu=$(awk '/^TIME/{printf "%.2f", $3+$4}' <<<"$out")
	secs=$(awk -v n="$ns" 'BEGIN{printf "%.2f", n/1e9}')
	printf '| %s | %s | %d MB %s | %s s | %s s | %d MB | %s s, %s s | %s |\n' "$name" "$routes" \
		$(($(stat -c %s "$lft") / 1000000)) "$(basename "$lft")" "$secs" "$cpu" $((kb / 1024)) "$rd" "$rdcpu" \
		"$(awk -v a="$cpu" -v b="$rdcpu" 'BEGIN{printf "%.1fx", (b>0)?a/b:0}')"
done
echo
(cd internal/fabric && /usr/bin/time -f 'peak RSS %M KB' "$W/fabric.test" -test.run 'TestRouteChangeCounts/ft2-h2048' -test.v 2>&1 | grep -E -- '--- |peak')
echo
(cd internal/fabric && "$W/fabric.test" -test.run '^$' -test.bench 'TreesVsWalk' -test.benchtime 3x | grep -E 'faster|ns/op')
echo
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"
