#!/usr/bin/env bash
# Puts in pieces (XPORT_GPU_STAGING_PIECE) on 2 GPUs: the real-GPU tests, xport-gin-nccl with
# pieces off (0) and on (default 512K) interleaved, xport-bench puts and put_signal round trips
# from and into GPU memory, pieces off and on. Carry .devcarry/gin (scripts/nccl-gpu-pack.sh)
# and .devcarry/bench (scripts/bench-pack.sh with the GPU tests).
set -u
o=$OUT/r; mkdir -p "$o"
nvidia-smi -L > "$o/gpus.txt" 2>&1; nproc >> "$o/gpus.txt"
B=.devcarry/bench
export LD_LIBRARY_PATH=$PWD/$B/lib
# 1. the real-GPU tests (source reuse at 1 MiB: two pieces), GPU 0 -> GPU 1
XPORT_TEST_GPU_SRC=0 XPORT_TEST_GPU_DST=1 timeout 150 $B/tools/xport-gpu-tests > "$o/gpu-tests.log" 2>&1
echo "gpu-tests exit $?" >> "$o/gpu-tests.log"
unset LD_LIBRARY_PATH
# 2. GIN, pieces off / on, two interleaved rounds
for round in 1 2; do
  OUT=$o/gin$round GIN_GPU_TIMEOUT=90 timeout 280 scripts/gin-gpu.sh .devcarry/gin \
    xport-shm+XPORT_GPU_STAGING_PIECE=0 xport-shm xport-tcp+XPORT_GPU_STAGING_PIECE=0 xport-tcp \
    > "$o/gin$round.log" 2>&1
done
# 3. xport-bench from and into GPU memory (GPU 0 -> GPU 1), pieces off / on
export LD_LIBRARY_PATH=$PWD/$B/lib
for P in shm "tcp;ofi_rxm"; do
  X=""; [ "$P" != shm ] && X="--nics lo"
  for piece in 0 512K 0 512K; do
    echo "== $P piece=$piece put 1M,8M" >> "$o/bench.log"
    XPORT_GPU_STAGING_PIECE=$piece timeout 40 $B/tools/xport-bench --provider "$P" $X --op put --memory cuda --gpu 0 --peer-gpu 1 --size 1M,8M --iterations 200 >> "$o/bench.log" 2>&1
    echo "== $P piece=$piece put 64M" >> "$o/bench.log"
    XPORT_GPU_STAGING_PIECE=$piece timeout 40 $B/tools/xport-bench --provider "$P" $X --op put --memory cuda --gpu 0 --peer-gpu 1 --size 64M --iterations 20 >> "$o/bench.log" 2>&1
  done
  echo "== $P put_signal round trip 8,4K,1M GPU memory, piece 0 / 512K" >> "$o/bench.log"
  for piece in 0 512K; do
    XPORT_GPU_STAGING_PIECE=$piece timeout 40 $B/tools/xport-bench --provider "$P" $X --op put-signal --round-trip --memory cuda --gpu 0 --peer-gpu 1 --size 8,4K,1M --iterations 500 >> "$o/bench.log" 2>&1
  done
done
cd "$OUT" && tar czf r.tgz r && rm -rf r
