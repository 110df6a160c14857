#!/usr/bin/env bash
# Runs the benchmarks; each measures Slipstream against a limit or a peer in
# the same run and writes its table to docs/bench-*.md, which
# docs/benchmarks.md collects.
set -euo pipefail
cd "$(dirname "$0")/.."
unset AWS_CA_BUNDLE || true
export SLIPSTREAM_BENCH=1
go test -count=1 -timeout 30m -run 'TestWarmGetVsServeContent' -v ./test/bench 2>&1 | grep -E '^\||^(--- |ok|FAIL)'
for extra in scripts/bench-*.sh scripts/fabric/bench.sh; do
	[ -x "$extra" ] && { echo "== $extra"; bash "$extra"; }
done
echo "bench: tables written to docs/bench-*.md"
