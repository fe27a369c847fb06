#!/bin/bash
# Atomic round trips, libxport against a bare fi_fetch_atomic loop, interleaved (issue 12's
# comparison; docs/benchmarks.md "One-sided windows"). Meant for quiet cores (the device tool's
# machines, GPU unused): BIN holds xport-bench and fi-atomic-loop, LIB the Debian libraries they
# need (empty: the system's). Output also goes to $OUT/atomics.txt when OUT is set.
# Usage: scripts/bench-atomics-device.sh BIN [LIB] [ROUNDS]
set -u
B=${1:?usage: bench-atomics-device.sh BIN [LIB] [ROUNDS]}
[ -n "${2:-}" ] && export LD_LIBRARY_PATH=$2
rounds=${3:-5}
out=${OUT:-/tmp}/atomics.txt
{
  nproc
  for round in $(seq "$rounds"); do
    for p in shm "tcp;ofi_rxm"; do
      X=()
      [ "$p" = "tcp;ofi_rxm" ] && X=(--nics lo)
      echo "== round $round provider $p bare"
      taskset -c 2-5 "$B/fi-atomic-loop" "$p" 10000 2>&1 | tail -1
      echo "== round $round provider $p native"
      taskset -c 2-5 "$B/xport-bench" --provider "$p" "${X[@]}" --op atomic --size 8 \
        --iterations 10000 --json 2>&1 | grep '^{' 
      echo "== round $round provider $p emulated"
      XPORT_ATOMICS=emulated taskset -c 2-5 "$B/xport-bench" --provider "$p" "${X[@]}" \
        --op atomic --size 8 --iterations 10000 --json 2>&1 | grep '^{' 
    done
  done
  for p in shm "tcp;ofi_rxm"; do
    X=()
    [ "$p" = "tcp;ofi_rxm" ] && X=(--nics lo)
    echo "== put-signal $p"
    taskset -c 2-5 "$B/xport-bench" --provider "$p" "${X[@]}" --op put-signal --size 8,4K,64K \
      --iterations 5000 --json 2>&1 | grep '^{' 
  done
} 2>&1 | tee "$out"
