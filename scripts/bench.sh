#!/usr/bin/env bash
# Runs the benchmarks. Each measures Slipstream against a limit or a peer in
# the same run and writes its table to docs/bench-*.md; the last step
# assembles docs/benchmarks.md from them. BENCH_SUITES=core,tier,evict,...
# runs a subset.
set -euo pipefail
cd "$(dirname "$0")/.."
unset AWS_CA_BUNDLE || true
export SLIPSTREAM_BENCH=1
only=${BENCH_SUITES:-core,tier,evict,store,multihome,nbd,fabric}
want() { [[ ",$only," == *",$1,"* ]]; }
show() { grep -E '^\||^(--- |ok|FAIL)|hit ratio' || true; }

if want core; then
	echo "== warm GET vs http.ServeContent"
	go test -count=1 -timeout 20m -run 'TestWarmGetVsServeContent' -v ./test/bench 2>&1 | show || true
	echo "== intra-cluster TLS vs plain intra-cluster HTTP"
	go test -count=1 -timeout 20m -run 'TestIntraTLSCost' -v ./test/bench 2>&1 | show || true
fi
if want tier; then
	echo "== fast tier: cold/warm vs direct, write paths"
	go test -count=1 -timeout 20m -run 'TestColdWarmVsDirect|TestWritePaths' -v ./test/bench 2>&1 | show || true
fi
if want evict; then
	echo "== eviction: S3-FIFO vs LRU under scans (real store)"
	out=$(go test -count=1 -run 'TestStoreScanResistance' -v ./internal/store 2>&1)
	echo "$out" | show
	{
		echo "<!-- written by scripts/bench.sh from internal/store TestStoreScanResistance on $(date -u '+%Y-%m-%d %H:%M UTC') -->"
		echo "A store capped at 50 objects; a hot set of 8 objects is read between scans of 150 other objects (3x the cache), two rounds. Hit ratio of the hot set:"
		echo
		echo '```'
		echo "$out" | grep 'hit ratio'
		echo '```'
	} >docs/bench-evict.md
fi
if want store; then
	echo "== store: work files over one directory vs spread, after a burst of deletes"
	out=$(go test -count=1 -timeout 10m -run 'TestWorkDirSpread' -v ./internal/store 2>&1)
	echo "$out" | show
	{
		echo "<!-- written by scripts/bench.sh from internal/store TestWorkDirSpread on $(date -u '+%Y-%m-%d %H:%M UTC') -->"
		echo "3000 PUTs of 4 KiB into one mountpath right after 3000 objects were deleted (as an eviction pass does), 3 rounds interleaved, median shown; CPU is the test process's user + system time. The machine's ext4 has no journal (see docs/architecture.md, Durability)."
		echo
		echo "$out" | grep -E '^\||^CPU per PUT'
	} >docs/bench-store.md
fi
if want multihome && [ -f test/multihome/bench_test.go ]; then
	echo "== multihoming: one NIC vs two (network namespaces, root)"
	go test -count=1 -timeout 20m -run 'TestBenchMultihoming' -v ./test/multihome 2>&1 | show || true
fi
if want nbd && [ -x scripts/bench-nbd.sh ]; then
	echo "== NBD fio matrix"
	BENCH_IMG="$PWD/docs/img" bash scripts/bench-nbd.sh "$PWD/docs/bench-nbd-run.md"
fi
if want nbd; then
	echo "== volume writes through a node without the claim vs through the holder"
	go test -count=1 -timeout 20m -run 'TestVolumeForwardCost' -v ./test/bench 2>&1 | show || true
	echo "== volume re-placement after a node is removed vs the disk"
	BENCH_OUT="$PWD/docs/bench-replace.md" go test -count=1 -timeout 20m -run 'TestBenchReplacement' -v ./internal/volume 2>&1 | show || true
	echo "== NBD over TLS vs plain NBD"
	BENCH_OUT="$PWD/docs/bench-nbd-tls.md" go test -count=1 -timeout 10m -run 'TestBenchTLS' -v ./internal/volume/nbd 2>&1 | show || true
fi
if want fabric && [ -x scripts/fabric/bench.sh ]; then
	echo "== fabric analyzer"
	bash scripts/fabric/bench.sh
fi
bash scripts/benchmarks-md.sh
