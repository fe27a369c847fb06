#!/usr/bin/env bash
# A/B on 2 GPUs: A = puts in pieces (run1's build, .devcarry/gin-a, bench-a), B = pieces and the
# staging pool's page-locked slab grown at registration (.devcarry/gin, bench). The real-GPU
# tests on B; xport-gin-nccl A / B interleaved (B also with pieces off); xport-bench puts from
# and into GPU memory A / B and from host memory, interleaved.
set -u
o=$OUT/r; mkdir -p "$o"
nvidia-smi -L > "$o/gpus.txt" 2>&1; nproc >> "$o/gpus.txt"
L=$PWD/.devcarry/bench/lib
LD_LIBRARY_PATH=$L XPORT_TEST_GPU_SRC=0 XPORT_TEST_GPU_DST=1 timeout 150 .devcarry/bench/tools/xport-gpu-tests > "$o/gpu-tests.log" 2>&1
echo "gpu-tests exit $?" >> "$o/gpu-tests.log"
for round in 1 2; do
  for c in "a xport-shm" "b xport-shm" "b xport-shm+XPORT_GPU_STAGING_PIECE=0" "a xport-tcp" "b xport-tcp"; do
    set -- $c; pack=.devcarry/gin; [ "$1" = a ] && pack=.devcarry/gin-a
    OUT=$o/gin-$round-$1-${2//[^a-z0-9]/_} GIN_GPU_TIMEOUT=60 timeout 100 scripts/gin-gpu.sh $pack $2 > /dev/null 2>&1
  done
done
export LD_LIBRARY_PATH=$L
for P in shm "tcp;ofi_rxm"; do
  X=""; [ "$P" != shm ] && X="--nics lo"
  for round in 1 2; do
    for v in a b host; do
      bin=.devcarry/bench/tools/xport-bench; [ $v = a ] && bin=.devcarry/bench-a/tools/xport-bench
      m="--memory cuda --gpu 0 --peer-gpu 1"; [ $v = host ] && m=""
      echo "== $P round $round $v put 1M,8M depth 16; 64M depth 8" >> "$o/bench.log"
      timeout 40 $bin --provider "$P" $X --op put $m --size 1M,8M --iterations 200 2>&1 | grep -E "^ +[0-9]|rror|again" >> "$o/bench.log"
      timeout 40 $bin --provider "$P" $X --op put $m --size 64M --depth 8 --iterations 16 2>&1 | grep -E "^ +[0-9]|rror|again" >> "$o/bench.log"
    done
  done
  for v in a b; do
    bin=.devcarry/bench/tools/xport-bench; [ $v = a ] && bin=.devcarry/bench-a/tools/xport-bench
    echo "== $P $v put_signal round trip GPU memory 8,4K,1M,16M" >> "$o/bench.log"
    timeout 40 $bin --provider "$P" $X --op put-signal --round-trip --memory cuda --gpu 0 --peer-gpu 1 --size 8,4K,1M,16M --iterations 300 2>&1 | grep -E "^ +[0-9]|rror" >> "$o/bench.log"
  done
done
cd "$OUT" && tar czf r.tgz r && rm -rf r
