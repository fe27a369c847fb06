#!/usr/bin/env bash
# Device run 12 (4 GPUs): nccl-tests with one process per GPU (4 processes): the auto lane rule
# sharing the node's CPUs among the node's processes (4 lanes each on 64 CPUs) against 16 lanes
# each (the rule before), NET/Socket in the same call.
set -u
p=$PWD/.devcarry/x4
nproc; date -u; nvidia-smi -L
tar -xJf $p/nccl-tests.tar.xz -C $p && tar -xJf $p/nccl-tests-mpi.tar.xz -C $p
OUT0=$OUT
OUT=$OUT0/p4 NCCL_TESTS_PROCS=1 NCCL_TESTS_GPUS=4 timeout 400 scripts/nccl-tests-gpu.sh $p socket xport-tcp xport-tcp+XPORT_NCCL_LANES=16 xport-shm; echo "p4 exit $?"
date -u
grep -h "lanes" $OUT0/p4/xport-tcp/alltoall.log 2>/dev/null | head -2
grep -h "lanes" $OUT0/p4/xport-tcp+XPORT_NCCL_LANES=16/alltoall.log 2>/dev/null | head -1
cat $OUT0/p4/summary.md
tar -czf $OUT0/p4.tar.gz -C $OUT0 p4 && rm -rf $OUT0/p4
