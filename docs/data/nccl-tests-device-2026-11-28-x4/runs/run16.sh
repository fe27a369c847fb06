#!/usr/bin/env bash
# Device run 16 (4 GPUs): the shipped auto lane rule (the node's processes share its CPUs: 4
# lanes each for 4 processes on 64 CPUs, 8 each for 2). 4 processes: alltoall 1-16 MiB, 3 rounds
# with NET/Socket; every test 1-256 MiB, tcp;ofi_rxm and shm against NET/Socket; 2 processes on
# 2 GPUs: alltoall and sendrecv 1-256 MiB.
set -u
p=$PWD/.devcarry/x4
nproc; date -u
tar -xJf $p/nccl-tests-mpi.tar.xz -C $p
OUT0=$OUT
for r in 1 2 3; do
  OUT=$OUT0/r$r NCCL_TESTS=alltoall NCCL_TESTS_ARGS="-b 1M -e 16M -f 4 -c 1 -n 20 -w 5" NCCL_TESTS_PROCS=1 NCCL_TESTS_GPUS=4 timeout 60 scripts/nccl-tests-gpu.sh $p socket xport-tcp >/dev/null 2>&1; echo "round $r exit $?"
  grep "^| alltoall" $OUT0/r$r/summary.md
done
grep -h "lanes" $OUT0/r1/xport-tcp/alltoall.log | head -1
date -u
OUT=$OUT0/p4 NCCL_TESTS_PROCS=1 NCCL_TESTS_GPUS=4 timeout 230 scripts/nccl-tests-gpu.sh $p socket xport-tcp xport-shm > /dev/null 2>&1; echo "p4 exit $?"
cat $OUT0/p4/summary.md; tail -1 $OUT0/p4/nccl-tests-gpu.log
date -u
OUT=$OUT0/p2 NCCL_TESTS="alltoall sendrecv" NCCL_TESTS_PROCS=1 NCCL_TESTS_GPUS=2 timeout 90 scripts/nccl-tests-gpu.sh $p socket xport-tcp > /dev/null 2>&1; echo "p2 exit $?"
cat $OUT0/p2/summary.md; tail -1 $OUT0/p2/nccl-tests-gpu.log
grep -h "lanes" $OUT0/p2/xport-tcp/alltoall.log | head -1
date -u
tar -czf $OUT0/run16.tar.gz -C $OUT0 r1 r2 r3 p4 p2 && rm -rf $OUT0/r? $OUT0/p4 $OUT0/p2
