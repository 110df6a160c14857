#!/usr/bin/env bash
# Generates big simulated fat trees with a real OpenSM (under ibsim) for the
# fabric benchmark: 4096 and 8192 hosts, 3 levels, minhop routing.
# usage: gen-big.sh WORKDIR [4096|8192]...   (default: both)
# Needs Debian's opensm, ibsim-utils, libumad2sim0, infiniband-diags
# (installed here when missing and running as root). 8192 hosts take ~2-3 min
# and ~1.2 GB of disk; the result is reused when WORKDIR/<size>/opensm-lfts.dump exists.
set -euo pipefail
HERE=$(dirname "$(readlink -f "$0")")
W=${1:?usage: gen-big.sh WORKDIR [SIZES...]}; shift
SIZES=("$@"); [ ${#SIZES[@]} -gt 0 ] || SIZES=(4096 8192)
if ! command -v opensm >/dev/null || ! command -v ibsim >/dev/null; then
	if [ "$(id -u)" = 0 ]; then
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			opensm ibsim-utils libumad2sim0 infiniband-diags >/dev/null
	else
		echo "gen-big.sh: needs opensm and ibsim (apt-get install opensm ibsim-utils libumad2sim0 infiniband-diags)" >&2
		exit 1
	fi
fi
mkdir -p "$W"
for s in "${SIZES[@]}"; do
	case $s in
	4096) args="--levels 3 --pods 16 --leaves-per-pod 16 --aggs-per-pod 16 --cores 64 --hosts-per-leaf 16" ;;
	8192) args="--levels 3 --pods 32 --leaves-per-pod 16 --aggs-per-pod 16 --cores 128 --hosts-per-leaf 16" ;;
	*) echo "gen-big.sh: unknown size $s" >&2; exit 2 ;;
	esac
	d=$W/h$s
	if [ -s "$d/opensm-lfts.dump" ]; then echo "gen-big.sh: reusing $d"; continue; fi
	# shellcheck disable=SC2086
	python3 "$HERE/gen_fattree.py" $args -o "$W/h$s.net"
	bash "$HERE/run_opensm.sh" -n "$W/h$s.net" -o "$d" -R minhop
done
