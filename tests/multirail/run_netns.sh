#!/usr/bin/env bash
# Runs a command between two network namespaces joined by N veth pairs (one tcp rail per pair),
# addresses only inside the namespaces (10.231.K.1 <-> 10.231.K.2), everything removed on exit
# even when the command fails.
#   run_netns.sh RAILS RATE COMMAND...    RATE: a tc rate such as 1gbit per rail, or "none"
# The command runs in namespace A with XPORT_PROVIDER=tcp;ofi_rxm (XTEST_PROVIDER overrides it:
# the strict provider over tcp;ofi_rxm, say), XPORT_RAILS=<A's rails>,
# XTEST_PEER_WRAP="ip netns exec <B>", XTEST_PEER_RAILS=<B's rails>, XTEST_NS_A/B, XTEST_IF_A/B.
set -euo pipefail
rails=$1
rate=$2
shift 2
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null; then
  echo "SKIP: network namespaces need root and iproute2"
  exit 77
fi
tag=$$
A=xpa$tag
B=xpb$tag
cleanup() {
  ip netns del "$A" 2>/dev/null || true
  ip netns del "$B" 2>/dev/null || true
}
trap cleanup EXIT INT TERM
ip netns add "$A"
ip netns add "$B"
ip -n "$A" link set lo up
ip -n "$B" link set lo up
ra=() rb=()
for k in $(seq 0 $((rails - 1))); do
  a=xa$k-$tag b=xb$k-$tag
  ip link add "$a" netns "$A" type veth peer name "$b" netns "$B"
  ip -n "$A" addr add "10.231.$k.1/24" dev "$a"
  ip -n "$B" addr add "10.231.$k.2/24" dev "$b"
  ip -n "$A" link set "$a" up
  ip -n "$B" link set "$b" up
  if [ "$rate" != none ]; then
    # A token bucket per direction: the link, not the CPU, is the bottleneck (as on real NICs).
    ip netns exec "$A" tc qdisc add dev "$a" root tbf rate "$rate" burst 512kb latency 50ms
    ip netns exec "$B" tc qdisc add dev "$b" root tbf rate "$rate" burst 512kb latency 50ms
  fi
  ra+=("$a")
  rb+=("$b")
done
# Links come up asynchronously; libfabric lists only running interfaces. Wait for carrier.
deadline=$((SECONDS + 20))
for k in $(seq 0 $((rails - 1))); do
  for pair in "$A xa$k-$tag" "$B xb$k-$tag"; do
    set -- $pair "$@"
    until ip -n "$1" -o link show "$2" | grep -q "state UP"; do
      if [ $SECONDS -ge $deadline ]; then
        echo "FAIL: veth $2 in namespace $1 did not come up within 20 s"
        exit 1
      fi
      sleep 0.05  # polling an interface state under a deadline, not synchronising threads
    done
    shift 2
  done
done
join() { local IFS=,; echo "$*"; }
export XTEST_NS_A=$A XTEST_NS_B=$B XTEST_IF_A=$(join "${ra[@]}") XTEST_IF_B=$(join "${rb[@]}")
ip netns exec "$A" env XPORT_PROVIDER="${XTEST_PROVIDER:-tcp;ofi_rxm}" XPORT_RAILS="$XTEST_IF_A" \
  XTEST_PEER_WRAP="ip netns exec $B" XTEST_PEER_RAILS="$XTEST_IF_B" "$@"
