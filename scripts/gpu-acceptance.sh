#!/usr/bin/env bash
# Issue 15's figures on the device machine (docs/benchmarks.md): the GPU tests, then xport-bench
# with GPU memory, host- and device-initiated. Two GPUs by default (GPU 0 -> GPU 1); ONE=1 DST=0
# for one GPU; SKIP_TESTS=1 for xport-bench alone. Run from a bench pack (scripts/bench-pack.sh
# with PACK_BINS="tools/xport-bench tests/gpu/xport-gpu-tests tests/gpu/xport-gpu-ring-tests
# tests/gpu/xport-gpu-peer"), this script copied into it.
cd "$(dirname "$0")"
export LD_LIBRARY_PATH=$PWD/lib
B=tools/xport-bench
G="--gpu 0 --peer-gpu 1"; [ "${ONE:-0}" = 1 ] && G="--gpu 0"
nvidia-smi -L; nvidia-smi topo -m | head -4
if [ "${SKIP_TESTS:-0}" != 1 ]; then
echo "== gpu tests"
XPORT_TEST_GPU_SRC=0 XPORT_TEST_GPU_DST=${DST:-1} timeout 150 tools/xport-gpu-tests 2>&1 | grep -E "staging:|copy latency|round trip:|PASSED|FAILED|Failure" | head -30
XTEST_GPU_PEER_BIN=$PWD/tools/xport-gpu-peer XPORT_TEST_GPU_SRC=0 XPORT_TEST_GPU_DST=${DST:-1} timeout 150 tools/xport-gpu-ring-tests 2>&1 | grep -E "proxy:|PASSED|FAILED|Failure" | head -30
fi
for P in shm "tcp;ofi_rxm"; do
  X=""; [ "$P" != shm ] && X="--nics lo"
  echo "== $P check"
  timeout 60 $B --provider "$P" $X --op put --memory cuda $G --initiator device --size 4K,1M --iterations 50 --check 2>&1 | tail -4
  timeout 60 $B --provider "$P" $X --op put-signal --memory cuda $G --initiator device --size 8,4K --iterations 50 --check 2>&1 | tail -4
  # host-initiated from and into GPU memory, every byte checked (staging's copies both ways)
  timeout 60 $B --provider "$P" $X --op put --memory cuda $G --size 8,4K,1M --iterations 200 --check 2>&1 | grep -E "^ +[0-9]|check failed"
  echo "== $P put bandwidth from GPU memory: host, then device"
  timeout 90 $B --provider "$P" $X --op put --memory cuda $G --size 1M,8M,64M 2>&1 | grep -E "^ +[0-9]"
  timeout 90 $B --provider "$P" $X --op put --memory cuda $G --initiator device --size 1M,8M,64M 2>&1 | grep -E "^ +[0-9]"
  echo "== $P put_signal round trip, GPU memory: host, then device"
  timeout 60 $B --provider "$P" $X --op put-signal --round-trip --memory cuda $G --size 8,4K --iterations 2000 2>&1 | grep -E "^ +[0-9]"
  timeout 60 $B --provider "$P" $X --op put-signal --initiator device --memory cuda $G --size 8,4K --iterations 2000 2>&1 | grep -E "^ +[0-9]"
  echo "== $P staging 64 MiB: put host, put cuda, send stream host, send stream cuda"
  timeout 60 $B --provider "$P" $X --op put --size 64M --iterations 40 2>&1 | grep -E "^ +[0-9]"
  timeout 60 $B --provider "$P" $X --op put --size 64M --iterations 40 --memory cuda $G 2>&1 | grep -E "^ +[0-9]"
  timeout 60 $B --provider "$P" $X --op send --depth 4 --size 64M --iterations 40 2>&1 | grep -E "^ +[0-9]"
  timeout 60 $B --provider "$P" $X --op send --depth 4 --size 64M --iterations 40 --memory cuda $G 2>&1 | grep -E "^ +[0-9]"
done
