#!/usr/bin/env bash
# Device run 3 of 2026-11-29: main at e235cf7 (CopyLanes shared per GPU), one GPU: the GPU tests
# and ring tests twice, and the staged put rows.
cd "$(dirname "$0")/.."
export FI_TCP_IFACE=lo LD_LIBRARY_PATH=$PWD/build/gp-main/lib
M=build/gp-main/tools
nvidia-smi -L
for r in 1 2; do
  echo "== round $r: gpu tests"
  XPORT_TEST_GPU_SRC=0 XPORT_TEST_GPU_DST=0 timeout 170 $M/xport-gpu-tests 2>&1 | grep -E "staging:|copy latency|round trip:|signal order|PASSED|FAILED|Failure" | head -40
  echo "== round $r: gpu ring tests"
  XTEST_GPU_PEER_BIN=$PWD/$M/xport-gpu-peer XPORT_TEST_GPU_SRC=0 XPORT_TEST_GPU_DST=0 timeout 150 $M/xport-gpu-ring-tests 2>&1 | grep -E "proxy:|PASSED|FAILED|Failure" | head -30
done
for P in shm "tcp;ofi_rxm"; do for r in 1 2; do
  timeout 40 $M/xport-bench --provider "$P" --op put --size 1M,64M --iterations 40 --memory cuda --gpu 0 2>&1 | grep -E "^ +[0-9]" | sed "s|^|$P |"
done; done
