#!/usr/bin/env bash
# Runs every fuzz target of the module for a fixed number of executions each
# (default 20000x). The budget is a count, not a duration: a duration
# -fuzztime races a deadline inside Go's fuzz coordinator (golang/go#75804,
# fixed after Go 1.26), which now and then fails a clean run with a bare
# "context deadline exceeded". A count has no deadline to race; -timeout
# still bounds every target in time. Targets whose every input starts a
# store get a fortieth of the budget (they run about 50 inputs a second).
set -euo pipefail
cd "$(dirname "$0")/.."
budget=${1:-20000x}
case "$budget" in
*x) ;;
*) echo "fuzz.sh: budget must be a count such as 20000x, not $budget" >&2; exit 2 ;;
esac
n=0
start=$SECONDS
for pkg in $(go list ./...); do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
		n=$((n + 1))
		b=$budget
		case "$f" in
		FuzzStreamServer) b=$((${budget%x} / 40))x ;;
		esac
		t0=$SECONDS
		if ! out=$(go test -run '^$' -fuzz "^$f\$" -fuzztime "$b" -timeout 5m "$pkg" 2>&1); then
			echo "$out"
			echo "fuzz: $pkg $f failed"
			exit 1
		fi
		echo "fuzz $pkg $f ($b): $((SECONDS - t0))s"
	done
done
echo "fuzz: $n targets, $budget each, $((SECONDS - start))s: no failures"
