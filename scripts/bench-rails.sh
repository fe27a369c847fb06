#!/usr/bin/env bash
# Put bandwidth over 1..N rails between two network namespaces joined by N veth pairs, each
# limited by tc's token bucket (so the link, not the CPU, is the bottleneck, as on real nodes).
#   scripts/bench-rails.sh [RAILS=4] [RATE=1gbit|none] [SIZE=4M] [ITERATIONS=200] [BUILD=build]
# Prints one xport-bench JSON line per rail count (1, 2, 4, ... up to RAILS).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
rails=${1:-4}
rate=${2:-1gbit}
size=${3:-4M}
iters=${4:-200}
bench=$(cd "${5:-build}" && pwd)/tools/xport-bench
export XBENCH=$bench XSIZE=$size XITERS=$iters XRAILS=$rails
exec bash "$here/tests/multirail/run_netns.sh" "$rails" "$rate" bash -c '
  set -euo pipefail
  IFS=, read -ra A <<< "$XTEST_IF_A"
  IFS=, read -ra B <<< "$XTEST_IF_B"
  n=1
  while [ $n -le $XRAILS ]; do
    a=$(IFS=,; echo "${A[*]:0:$n}")
    b=$(IFS=,; echo "${B[*]:0:$n}")
    ip netns exec "$XTEST_NS_B" "$XBENCH" --server --port 18515 --nics "$b" --op put \
      --size "$XSIZE" --iterations "$XITERS" --warmup 10 --window 16 --timeout 60 >/dev/null &
    server=$!
    "$XBENCH" --connect 10.231.0.2:18515 --nics "$a" --op put --size "$XSIZE" \
      --iterations "$XITERS" --warmup 10 --window 16 --timeout 60 --json
    wait $server
    n=$((n * 2))
  done'
