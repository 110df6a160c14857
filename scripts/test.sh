#!/usr/bin/env bash
# Runs the whole test suite: lint, unit and integration tests, short fuzzing.
# Called by `make test` and by CI. Bounded: every go test has a timeout.
set -euo pipefail
cd "$(dirname "$0")/.."
# Plain-HTTP clients on loopback must not try to use the machine's CA bundle.
unset AWS_CA_BUNDLE || true

echo "== lint"
go vet ./...
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then echo "gofmt needed: $unformatted"; exit 1; fi
"$(go env GOPATH)/bin/staticcheck" ./...

echo "== tests"
# The multi-NIC test measures throughput ratios on shaped links; it runs on
# its own, after the rest, so that other packages' tests do not skew them.
go test -count=1 -timeout 40m -p 2 $(go list ./... | grep -v /test/multihome)
go test -count=1 -timeout 10m ./test/multihome
echo "== race detector (unit tests, -short)"
go test -race -short -count=1 -timeout 20m -p 2 ./internal/...
echo "== fuzz (short)"
bash scripts/fuzz.sh 20000x
