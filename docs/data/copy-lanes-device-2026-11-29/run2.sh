#!/usr/bin/env bash
# Device run 2 of 2026-11-29: main with copy lanes and after_data (f02b56d+), one GPU; old main
# (e25ab28) beside it for the staging rows.
cd "$(dirname "$0")/.."
export FI_TCP_IFACE=lo
M=build/gp-main/tools; O=build/gp-old/tools
t0=$(date +%s); el() { echo "-- $(( $(date +%s) - t0 )) s"; }
ONE=1 DST=0 timeout 420 bash build/gp-main/gpu-acceptance.sh 2>&1; el
export LD_LIBRARY_PATH=$PWD/build/gp-main/lib
echo "== signal order, second round"
XPORT_TEST_GPU_DST=0 timeout 40 $M/xport-gpu-tests --gtest_filter='*AfterData*' 2>&1 | grep -E "signal order|OK \]|FAILED|Failure"; el
echo "== staging puts from GPU memory 1 MiB, 64 MiB: old, main, old, main"
for P in shm "tcp;ofi_rxm"; do for r in 1 2; do for T in $O $M; do
  timeout 40 $T/xport-bench --provider "$P" --op put --size 1M,64M --iterations 40 --memory cuda --gpu 0 2>&1 | grep -E "^ +[0-9]" | sed "s|^|$P $T |"
done; done; done; el
