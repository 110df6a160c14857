# Slipstream build, test and benchmark entry points.
GO      ?= go
BIN     := bin/slipstream
PKGS    := ./...

.PHONY: all build setup test unit e2e fuzz lint bench demo up clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/slipstream

setup:
	bash scripts/setup.sh

# The test command of README.md: installs what the tests need, then runs
# vet, the unit and integration tests (race detector on), and short fuzzing.
test: setup build
	bash scripts/test.sh

unit:
	$(GO) test -short -count=1 $(PKGS)

e2e: build
	$(GO) test -count=1 -timeout 30m ./test/e2e/...

fuzz:
	bash scripts/fuzz.sh 500000x

lint: setup
	$(GO) vet $(PKGS)
	@test -z "$$(gofmt -l .)" || (gofmt -l .; echo "gofmt needed"; exit 1)
	$$($(GO) env GOPATH)/bin/staticcheck $(PKGS)

bench: setup build
	bash scripts/bench.sh

demo: setup build
	$(BIN) demo

up: build
	$(BIN) up

clean:
	rm -rf bin out
