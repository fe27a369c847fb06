#!/usr/bin/env bash
# Third call: two-sided shm with a listener backlog of 2,048, and again at the default backlog.
set -u
P=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH=$P/lib
S=$P/tools/xport-scale
O=${OUT:-/tmp/out}
mkdir -p "$O"
{ hostname; nproc; nvidia-smi -L 2>/dev/null; date -u; } > "$O/host3.txt"
echo "== XPORT_LISTEN_BACKLOG=2048 $S --provider shm --mode two-sided --peers 16,256,1024 --timeout 120 --procs 16 --threads 4 --json" > "$O/cmds3.txt"
XPORT_LISTEN_BACKLOG=2048 $S --provider shm --mode two-sided --peers 16,256,1024 --timeout 120 --procs 16 --threads 4 --json > "$O/shm-two-sided-backlog.jsonl" 2> "$O/run3.err"
echo "rc=$?" >> "$O/run3.err"
