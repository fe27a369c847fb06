#!/usr/bin/env bash
# Device run 14 (4 GPUs, 4 processes of one GPU): the auto lane rule with a node-wide budget
# (8 lanes each on 64 CPUs) against 16 each: alltoall 1-16 MiB in 3 interleaved rounds with
# NET/Socket; then every test 1-256 MiB with auto lanes, tcp;ofi_rxm and shm, NET/Socket.
set -u
p=$PWD/.devcarry/x4
nproc; date -u
tar -xJf $p/nccl-tests-mpi.tar.xz -C $p
OUT0=$OUT
for r in 1 2 3; do
  OUT=$OUT0/r$r NCCL_TESTS=alltoall NCCL_TESTS_ARGS="-b 1M -e 16M -f 4 -c 1 -n 20 -w 5" NCCL_TESTS_PROCS=1 NCCL_TESTS_GPUS=4 timeout 100 scripts/nccl-tests-gpu.sh $p socket xport-tcp xport-tcp+XPORT_NCCL_LANES=16 >/dev/null 2>&1; echo "round $r exit $?"
  grep "^| alltoall" $OUT0/r$r/summary.md
done
grep -h "lanes" $OUT0/r1/xport-tcp/alltoall.log | head -1
date -u
OUT=$OUT0/p4 NCCL_TESTS_PROCS=1 NCCL_TESTS_GPUS=4 timeout 250 scripts/nccl-tests-gpu.sh $p socket xport-tcp xport-shm > /dev/null 2>&1; echo "p4 exit $?"
cat $OUT0/p4/summary.md; tail -2 $OUT0/p4/nccl-tests-gpu.log
date -u
tar -czf $OUT0/run14.tar.gz -C $OUT0 r1 r2 r3 p4 && rm -rf $OUT0/r? $OUT0/p4
