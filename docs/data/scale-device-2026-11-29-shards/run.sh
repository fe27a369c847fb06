#!/usr/bin/env bash
# Scale runs on the device host: shm with endpoint shards (1,024 initiators), in one process and
# in 16; tcp;ofi_rxm 16 and 256 for comparison; two-sided shm. Raw JSON lines to $OUT.
set -u
P=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH=$P/lib
S=$P/tools/xport-scale
O=${OUT:-/tmp/out}
mkdir -p "$O"
{ hostname; nproc; nvidia-smi -L 2>/dev/null; date -u; } > "$O/host.txt"
RXM="FI_OFI_RXM_BUFFER_SIZE=4096 FI_OFI_RXM_RX_SIZE=64 FI_OFI_RXM_TX_SIZE=64 FI_OFI_RXM_MSG_RX_SIZE=16 FI_OFI_RXM_MSG_TX_SIZE=16 FI_TCP_RX_SIZE=64 FI_TCP_TX_SIZE=64"
run() { local name=$1; shift; echo "== $name: $*" >> "$O/cmds.txt"; "$@" > "$O/$name.jsonl" 2> "$O/$name.err"; echo "rc=$?" >> "$O/$name.err"; }
run shm-1proc $S --provider shm --peers 16,64,256,1024 --rounds 20 --timeout 120 --json
run shm-procs16 $S --provider shm --peers 16,64,256,1024 --rounds 20 --timeout 120 --procs 16 --threads 4 --json
run shm-1proc-b $S --provider shm --peers 16,1024 --rounds 20 --timeout 120 --json
run shm-two-sided $S --provider shm --mode two-sided --peers 16,256,1024 --timeout 120 --procs 16 --threads 4 --json
env $RXM $S --provider 'tcp;ofi_rxm' --nics lo --peers 16,256 --rounds 20 --timeout 120 --procs 16 --threads 4 --json > "$O/tcp-procs16.jsonl" 2> "$O/tcp-procs16.err"
echo done >> "$O/cmds.txt"
