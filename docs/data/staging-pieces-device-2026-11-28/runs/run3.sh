#!/usr/bin/env bash
# GIN A/B on 2 GPUs: A = the plugin at 3891bc4 (iput copies its source in the call:
# .devcarry/gin-a), B = the team's windows read sources until local completion
# (SourceRead::until_local: .devcarry/gin). Three interleaved rounds, both providers.
set -u
o=$OUT/r; mkdir -p "$o"
nvidia-smi -L > "$o/gpus.txt" 2>&1; nproc >> "$o/gpus.txt"
for round in 1 2 3; do
  for c in "a xport-shm" "b xport-shm" "a xport-tcp" "b xport-tcp"; do
    set -- $c; pack=.devcarry/gin; [ "$1" = a ] && pack=.devcarry/gin-a
    OUT=$o/gin-$round-$1-$2 GIN_GPU_TIMEOUT=60 timeout 100 scripts/gin-gpu.sh $pack $2 > /dev/null 2>&1
    echo "$round $1 $2 exit $?" >> "$o/exits.txt"
  done
done
cd "$OUT" && tar czf r.tgz r && rm -rf r
