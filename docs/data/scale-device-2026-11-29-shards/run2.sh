#!/usr/bin/env bash
# Second call: two-sided shm (the tool now drains every ready connection per tick), tcp;ofi_rxm
# one-sided for comparison, and a third one-process shm 16/1,024 sample. Few files back.
set -u
P=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH=$P/lib
S=$P/tools/xport-scale
O=${OUT:-/tmp/out}
mkdir -p "$O"
{ hostname; nproc; nvidia-smi -L 2>/dev/null; date -u; } > "$O/host2.txt"
run() { local name=$1; shift; echo "== $name: $*" >> "$O/cmds2.txt"; "$@" > "$O/$name.jsonl" 2>> "$O/run2.err"; echo "$name rc=$?" >> "$O/run2.err"; }
run shm-two-sided $S --provider shm --mode two-sided --peers 16,256,1024 --timeout 120 --procs 16 --threads 4 --json
run shm-1proc-c $S --provider shm --peers 16,1024 --rounds 20 --timeout 120 --json
export FI_OFI_RXM_BUFFER_SIZE=4096 FI_OFI_RXM_RX_SIZE=64 FI_OFI_RXM_TX_SIZE=64 FI_OFI_RXM_MSG_RX_SIZE=16 FI_OFI_RXM_MSG_TX_SIZE=16 FI_TCP_RX_SIZE=64 FI_TCP_TX_SIZE=64
run tcp-procs16 $S --provider 'tcp;ofi_rxm' --nics lo --peers 16,256 --rounds 20 --timeout 120 --procs 16 --threads 4 --json
echo done >> "$O/cmds2.txt"
