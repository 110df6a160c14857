#!/usr/bin/env bash
# Runs every fuzz target of the module for the given time each (default 10s).
# Go's fuzzer sometimes ends a very short run with "context deadline
# exceeded" while its workers start; such a run is tried once more.
set -euo pipefail
cd "$(dirname "$0")/.."
t=${1:-10s}
n=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for pkg in $(go list ./...); do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
		n=$((n + 1))
		echo "fuzz $pkg $f ($t)"
		for try in 1 2; do
			if go test -run '^$' -fuzz "^$f\$" -fuzztime "$t" "$pkg" >"$log" 2>&1; then
				break
			fi
			if [ "$try" = 1 ] && grep -q 'context deadline exceeded' "$log" && ! grep -q 'Failing input' "$log"; then
				echo "  (fuzzer start-up timed out; trying again)"
				continue
			fi
			cat "$log"
			exit 1
		done
	done
done
echo "fuzz: $n targets, $t each: no failures"
