#!/usr/bin/env bash
# Builds the Slipstream network testbed on one machine (needs root, iproute2
# and tc): a "switch" namespace with two bridges (subnets 10.77.1.0/24 and
# 10.77.2.0/24), N storage hosts and M client hosts, each a namespace with
# two veth NICs (eth1 on br1, eth2 on br2), per-NIC policy routing and ARP
# settings for a host with several NICs on one machine, every NIC shaped by
# a tbf on both ends of its veth (host end = egress, switch end = ingress),
# and optionally a backend host with one slower NIC on br1.
#
# Usage: up.sh [--prefix P] [--nodes N] [--clients M] [--rate 1gbit]
#              [--burst 256kb] [--latency 20ms] [--backend-rate 200mbit]
#              [--json FILE] [--env FILE]
# Every flag can also be given in the environment (PREFIX, NODES, CLIENTS,
# RATE, BURST, LATENCY, BACKEND_RATE, JSON_OUT, ENV_OUT); RATE=0 disables
# shaping. Prints a JSON description of the hosts on stdout (and to --json).
# Every namespace is named "<prefix>-<host>"; the prefix is unique per run
# unless given, so runs never collide; down.sh <prefix> removes them all.
# If anything fails the trap tears down what was built. Running it again
# with the same prefix rebuilds from scratch.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
PREFIX=${PREFIX:-}
NODES=${NODES:-2}
CLIENTS=${CLIENTS:-1}
RATE=${RATE:-1gbit}
BURST=${BURST:-256kb}
LATENCY=${LATENCY:-20ms}
BACKEND_RATE=${BACKEND_RATE:-}
JSON_OUT=${JSON_OUT:-}
ENV_OUT=${ENV_OUT:-}

die() { echo "testbed/up.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
	case "$1" in
	--prefix) PREFIX=$2; shift 2 ;;
	--nodes) NODES=$2; shift 2 ;;
	--clients) CLIENTS=$2; shift 2 ;;
	--rate) RATE=$2; shift 2 ;;
	--burst) BURST=$2; shift 2 ;;
	--latency) LATENCY=$2; shift 2 ;;
	--backend-rate) BACKEND_RATE=$2; shift 2 ;;
	--json) JSON_OUT=$2; shift 2 ;;
	--env) ENV_OUT=$2; shift 2 ;;
	-h | --help) sed -n '2,22p' "$0"; exit 0 ;;
	*) die "unknown argument $1" ;;
	esac
done

[ "$(id -u)" = 0 ] || die "must run as root"
command -v ip >/dev/null || die "ip (iproute2) not found"
command -v tc >/dev/null || die "tc (iproute2) not found"
[[ $NODES =~ ^[0-9]+$ && $NODES -ge 1 && $NODES -le 80 ]] || die "--nodes must be 1..80"
[[ $CLIENTS =~ ^[0-9]+$ && $CLIENTS -ge 0 && $CLIENTS -le 80 ]] || die "--clients must be 0..80"
if [ -z "$PREFIX" ]; then
	PREFIX="sstb$$r$RANDOM"
fi
[[ $PREFIX =~ ^[a-z0-9][a-z0-9]{0,23}$ ]] || die "prefix must be 1-24 lowercase letters/digits"

SW="$PREFIX-sw"
log() { echo "testbed: $*" >&2; }

teardown_on_failure() {
	local rc=$?
	if [ $rc -ne 0 ]; then
		log "failed (exit $rc); tearing down $PREFIX"
		"$here/down.sh" "$PREFIX" >&2 || true
	fi
	exit $rc
}
trap teardown_on_failure EXIT
trap 'exit 130' INT TERM

# Leftovers of an earlier run with this prefix go first (idempotent).
"$here/down.sh" "$PREFIX" >&2

nsx() { local ns=$1; shift; ip netns exec "$ns" "$@"; }
setsys() { nsx "$1" sh -c "echo $3 > /proc/sys/$2"; }

shape() { # ns dev rate
	[ "$3" = 0 ] && return 0
	ip -n "$1" link set "$2" txqueuelen 1000
	tc -n "$1" qdisc replace dev "$2" root tbf rate "$3" burst "$BURST" latency "$LATENCY"
}

ip netns add "$SW"
ip -n "$SW" link set lo up
for k in 1 2; do
	ip -n "$SW" link add "br$k" type bridge
	ip -n "$SW" link set "br$k" up
done

hosts_json=""
env_lines="TB_PREFIX=$PREFIX
TB_SWITCH=$SW
TB_RATE=$RATE
"

# add_host NAME ROLE HOSTPART RATE NICS: one namespace, NICS veth NICs.
add_host() {
	local name=$1 role=$2 hostpart=$3 rate=$4 nics=$5
	local ns="$PREFIX-$name" k addr sdev nics_json="" addrs=""
	ip netns add "$ns"
	ip -n "$ns" link set lo up
	setsys "$ns" net/ipv4/conf/all/arp_ignore 1
	setsys "$ns" net/ipv4/conf/all/arp_announce 2
	setsys "$ns" net/ipv4/conf/all/rp_filter 0
	setsys "$ns" net/ipv4/conf/default/rp_filter 0
	for k in $(seq 1 "$nics"); do
		addr="10.77.$k.$hostpart"
		sdev="$name-e$k"
		ip -n "$SW" link add "$sdev" type veth peer name "eth$k" netns "$ns"
		ip -n "$SW" link set "$sdev" master "br$k" up
		setsys "$ns" "net/ipv4/conf/eth$k/rp_filter" 0
		setsys "$ns" "net/ipv4/conf/eth$k/arp_ignore" 1
		setsys "$ns" "net/ipv4/conf/eth$k/arp_announce" 2
		ip -n "$ns" addr add "$addr/24" dev "eth$k"
		ip -n "$ns" link set "eth$k" up
		ip -n "$ns" route add "10.77.$k.0/24" dev "eth$k" src "$addr" table $((100 + k))
		ip -n "$ns" rule add from "$addr" table $((100 + k)) priority $((1000 + k))
		shape "$ns" "eth$k" "$rate"
		shape "$SW" "$sdev" "$rate"
		nics_json+="${nics_json:+,}{\"dev\":\"eth$k\",\"addr\":\"$addr\",\"subnet\":\"10.77.$k.0/24\",\"bridge\":\"br$k\",\"switch_dev\":\"$sdev\",\"rate\":\"$rate\"}"
		addrs+="${addrs:+,}$addr"
	done
	hosts_json+="${hosts_json:+,}
    {\"name\":\"$name\",\"role\":\"$role\",\"netns\":\"$ns\",\"addrs\":[\"${addrs//,/\",\"}\"],\"nics\":[$nics_json]}"
	local up=${name^^}
	env_lines+="TB_${up}_NS=$ns
TB_${up}_ADDRS=$addrs
"
	log "$role $name: netns $ns, addresses $addrs, rate $rate"
}

nodes="" clients=""
for i in $(seq 1 "$NODES"); do
	add_host "n$i" storage $((10 + i)) "$RATE" 2
	nodes+="${nodes:+ }n$i"
done
for j in $(seq 1 "$CLIENTS"); do
	add_host "c$j" client $((100 + j)) "$RATE" 2
	clients+="${clients:+ }c$j"
done
if [ -n "$BACKEND_RATE" ]; then
	add_host be backend 200 "$BACKEND_RATE" 1
fi
env_lines+="TB_NODES=\"$nodes\"
TB_CLIENTS=\"$clients\"
"

# Every host must reach every other on both subnets (checked when ping exists).
if command -v ping >/dev/null; then
	for h in $(seq 1 "$NODES") $(seq 91 $((90 + CLIENTS))); do
		for k in 1 2; do
			nsx "$PREFIX-n1" ping -c1 -W2 -I "10.77.$k.11" "10.77.$k.$((10 + h))" >/dev/null ||
				die "no ping from 10.77.$k.11 to 10.77.$k.$((10 + h))"
		done
	done
fi

json="{
  \"prefix\": \"$PREFIX\",
  \"switch\": \"$SW\",
  \"rate\": \"$RATE\",
  \"burst\": \"$BURST\",
  \"subnets\": [\"10.77.1.0/24\", \"10.77.2.0/24\"],
  \"hosts\": [$hosts_json
  ]
}"
[ -n "$JSON_OUT" ] && printf '%s\n' "$json" >"$JSON_OUT"
[ -n "$ENV_OUT" ] && printf '%s' "$env_lines" >"$ENV_OUT"
printf '%s\n' "$json"
log "up: prefix $PREFIX ($NODES storage, $CLIENTS client${BACKEND_RATE:+, backend at $BACKEND_RATE}); tear down with: $here/down.sh $PREFIX"
