#!/usr/bin/env bash
# Installs everything the tests, benchmarks and demo need on a fresh Debian
# machine: Debian packages (fio, strace, qemu tools, libnbd tools, nbdkit, iproute2,
# Node.js to test the live page's script, promtool to check the alert rules),
# the AWS CLI and boto3 from PyPI, and versitygw (a real S3 server used as the
# remote backend in integration tests) and staticcheck, cached in $GOPATH/bin.
# Safe to run again: each step is skipped when already done.
set -euo pipefail

need_apt=()
for pair in fio:fio strace:strace qemu-img:qemu-utils nbdinfo:libnbd-bin nbdkit:nbdkit ip:iproute2 tc:iproute2 iperf3:iperf3 node:nodejs; do
	cmd=${pair%%:*}; pkg=${pair#*:}
	command -v "$cmd" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
	echo "setup: installing Debian packages: ${need_apt[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

GOBIN=$(go env GOPATH)/bin
if ! command -v promtool >/dev/null 2>&1 && [ ! -x "$GOBIN/promtool" ]; then
	# Only the checker: installing the package would also install (and,
	# under systemd, start) a Prometheus server.
	echo "setup: extracting promtool from Debian's prometheus package (into $GOBIN)"
	tmp=$(mktemp -d)
	(cd "$tmp" && { apt-get download -qq prometheus 2>/dev/null || { apt-get update -qq && apt-get download -qq prometheus; }; })
	dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x"
	mkdir -p "$GOBIN"
	install -m 0755 "$tmp/x/usr/bin/promtool" "$GOBIN/promtool"
	rm -rf "$tmp"
fi

if ! python3 -c 'import boto3' 2>/dev/null || ! command -v aws >/dev/null 2>&1; then
	echo "setup: installing awscli and boto3 from PyPI"
	python3 -m pip install -q 'awscli==1.45.11' 'boto3==1.43.11'
fi

if [ ! -x "$GOBIN/versitygw" ]; then
	echo "setup: building versitygw v1.8.0 (once; cached in $GOBIN)"
	go install github.com/versity/versitygw/cmd/versitygw@v1.8.0
fi
if [ ! -x "$GOBIN/staticcheck" ] || ! "$GOBIN/staticcheck" -version | grep -q "(0.8.2)"; then
	echo "setup: building staticcheck v0.8.2 (once; cached in $GOBIN)"
	go install honnef.co/go/tools/cmd/staticcheck@v0.8.2
fi
echo "setup: ok"
