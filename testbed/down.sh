#!/usr/bin/env bash
# Tears down a testbed built by up.sh: stops the processes still running in
# its namespaces (by PID, as listed by `ip netns pids`) and deletes every
# namespace named "<prefix>-*". Idempotent: nothing to remove is not an error.
#
# Usage: down.sh PREFIX
set -euo pipefail
PREFIX=${1:-${PREFIX:-}}
[ -n "$PREFIX" ] || { echo "usage: down.sh PREFIX" >&2; exit 2; }
[[ $PREFIX =~ ^[a-z0-9][a-z0-9]{0,23}$ ]] || { echo "down.sh: bad prefix $PREFIX" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "down.sh: must run as root" >&2; exit 2; }

namespaces=$(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${PREFIX}-[a-z0-9-]+$" || true)
[ -z "$namespaces" ] && exit 0
for ns in $namespaces; do
	for pid in $(ip netns pids "$ns" 2>/dev/null); do
		kill "$pid" 2>/dev/null || true
	done
done
for ns in $namespaces; do
	for _ in 1 2 3 4 5 6 7 8 9 10; do
		[ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && break
		sleep 0.2
	done
	for pid in $(ip netns pids "$ns" 2>/dev/null); do
		kill -9 "$pid" 2>/dev/null || true
	done
	ip netns delete "$ns" 2>/dev/null || true
done
echo "testbed: removed $(echo "$namespaces" | wc -w) namespaces of $PREFIX" >&2
