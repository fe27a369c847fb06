#!/usr/bin/env bash
# Device run 13 (4 GPUs): how often does alltoall with one process per GPU (4 processes, auto 16
# lanes each) start below NET/Socket at 1 and 4 MiB (run 11: 0.34 / 0.75 x; run 12: 2.64 / 3.60)?
# Five rounds, Socket and xport tcp;ofi_rxm interleaved.
set -u
p=$PWD/.devcarry/x4
nproc; date -u
tar -xJf $p/nccl-tests-mpi.tar.xz -C $p
OUT0=$OUT
for r in 1 2 3 4 5; do
  OUT=$OUT0/r$r NCCL_TESTS=alltoall NCCL_TESTS_ARGS="-b 1M -e 16M -f 4 -c 1 -n 20 -w 5" NCCL_TESTS_PROCS=1 NCCL_TESTS_GPUS=4 timeout 100 scripts/nccl-tests-gpu.sh $p socket xport-tcp >/dev/null 2>&1; echo "round $r exit $?"
  grep "^| alltoall" $OUT0/r$r/summary.md
done
date -u
tar -czf $OUT0/rounds.tar.gz -C $OUT0 r1 r2 r3 r4 r5 && rm -rf $OUT0/r?
