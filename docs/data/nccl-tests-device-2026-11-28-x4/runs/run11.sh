#!/usr/bin/env bash
# Device run 11 (4 GPUs): nccl-tests -g 4 with the auto lane rule and one process per GPU (4
# processes), NET/Socket in the same call; then shm puts by depth with --slots default,1 against
# fabtests' fi_rma_bw (equal memory footprint: fi_rma_bw writes one buffer to one address).
set -u
p=$PWD/.devcarry/x4
nproc; date -u; nvidia-smi -L
tar -xJf $p/nccl-tests.tar.xz -C $p && tar -xJf $p/nccl-tests-mpi.tar.xz -C $p
git log -1 --format='commit %h %s' 2>/dev/null
OUT0=$OUT
OUT=$OUT0/g4 NCCL_TESTS_GPUS=4 timeout 260 scripts/nccl-tests-gpu.sh $p socket xport-tcp xport-shm; echo "g4 exit $?"
date -u
OUT=$OUT0/p4 NCCL_TESTS_PROCS=1 NCCL_TESTS_GPUS=4 timeout 170 scripts/nccl-tests-gpu.sh $p socket xport-tcp; echo "p4 exit $?"
date -u
grep -h "lanes" $OUT0/g4/xport-tcp/*.log 2>/dev/null | head -3
LD_LIBRARY_PATH=$p/lib:$p/compat timeout 150 python3 $p/bench/scripts/bench-put-depth.py \
  --build $p/bench --pin 2,3 --rounds 3 --sizes 64K,1M --depths 16,64 --slots default,1 \
  --fi-rma-bw $p/bench/tools/fi_rma_bw > $OUT0/put-depth.log 2>&1; echo "depth exit $?"
tail -25 $OUT0/put-depth.log
date -u
