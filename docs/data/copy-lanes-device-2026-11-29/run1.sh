#!/usr/bin/env bash
# Device run of 2026-11-29: copy lanes (main 7a570af+), old main (e25ab28 + the new kernel test),
# the after_data branch rebased on the lanes.
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/build/gp-main/lib FI_TCP_IFACE=lo
M=build/gp-main/tools; O=build/gp-old/tools; B=build/gp-branch/tools
nvidia-smi -L
t0=$(date +%s); el() { echo "-- $(( $(date +%s) - t0 )) s"; }
echo "== old main (e25ab28): the spinning-kernel test"
timeout 100 $O/xport-gpu-ring-tests --gtest_filter='*SpinningOnStaged*' 2>&1 | grep -E "OK \]|FAILED|Failure|round|block" | head -12; el
echo "== main: gpu tests"
XPORT_TEST_GPU_SRC=0 XPORT_TEST_GPU_DST=0 timeout 170 $M/xport-gpu-tests 2>&1 | grep -E "staging:|copy latency|round trip:|PASSED|FAILED|Failure|us each" | head -40; el
echo "== main: gpu ring tests"
XTEST_GPU_PEER_BIN=$PWD/$M/xport-gpu-peer XPORT_TEST_GPU_SRC=0 XPORT_TEST_GPU_DST=0 timeout 150 $M/xport-gpu-ring-tests 2>&1 | grep -E "proxy:|PASSED|FAILED|Failure|Spinning" | head -30; el
echo "== branch: spinning-kernel test (strong then after_data), after_data bursts"
timeout 60 $B/xport-gpu-ring-tests --gtest_filter='*SpinningOnStaged*' 2>&1 | grep -E "OK \]|FAILED|Failure|round" | head -12; el
XPORT_TEST_GPU_DST=0 timeout 60 $B/xport-gpu-tests --gtest_filter='*AfterData*' 2>&1 | grep -E "us each|OK \]|FAILED|Failure" | head; el
XTEST_STRONG=1 XPORT_TEST_GPU_DST=0 timeout 60 $B/xport-gpu-tests --gtest_filter='*AfterData*' 2>&1 | grep -E "us each|OK \]|FAILED|Failure" | head; el
echo "== staging 64 MiB puts from GPU memory, shm: old, main, old, main"
for r in 1 2; do for T in $O $M; do
  timeout 40 $T/xport-bench --provider shm --op put --size 1M,64M --iterations 40 --memory cuda --gpu 0 2>&1 | grep -E "^ +[0-9]" | sed "s|^|$T |"
done; done; el
