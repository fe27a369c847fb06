#!/usr/bin/env bash
# Device run 15 (4 GPUs): lanes hand their CPU over (sched_yield) after every pass that moved
# nothing. 4 processes of one GPU: alltoall 1-16 MiB, auto (8 lanes each), 16 and 4 lanes, 3
# interleaved rounds with NET/Socket; then -g 4 in one process (auto 16 lanes), alltoall and
# sendrecv 1-256 MiB, against NET/Socket.
set -u
p=$PWD/.devcarry/x4
nproc; date -u
tar -xJf $p/nccl-tests-mpi.tar.xz -C $p && tar -xJf $p/nccl-tests.tar.xz -C $p
OUT0=$OUT
for r in 1 2 3; do
  OUT=$OUT0/r$r NCCL_TESTS=alltoall NCCL_TESTS_ARGS="-b 1M -e 16M -f 4 -c 1 -n 20 -w 5" NCCL_TESTS_PROCS=1 NCCL_TESTS_GPUS=4 timeout 120 scripts/nccl-tests-gpu.sh $p socket xport-tcp xport-tcp+XPORT_NCCL_LANES=16 xport-tcp+XPORT_NCCL_LANES=4 >/dev/null 2>&1; echo "round $r exit $?"
  grep "^| alltoall" $OUT0/r$r/summary.md
done
date -u
OUT=$OUT0/g4 NCCL_TESTS="alltoall sendrecv" NCCL_TESTS_GPUS=4 timeout 150 scripts/nccl-tests-gpu.sh $p socket xport-tcp > /dev/null 2>&1; echo "g4 exit $?"
cat $OUT0/g4/summary.md; tail -1 $OUT0/g4/nccl-tests-gpu.log
date -u
tar -czf $OUT0/run15.tar.gz -C $OUT0 r1 r2 r3 g4 && rm -rf $OUT0/r? $OUT0/g4
