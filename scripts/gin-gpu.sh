#!/usr/bin/env bash
# xport-gin-nccl (tests/gpu/gin: NCCL 2.28's device API with GIN, next to host-initiated
# send/recv) through libnccl-net-xport.so's net and GIN tables, on the GPU machine (2 GPUs, device
# tool kind nvidia-h100-x2). From the repository root:
#   scripts/nccl-gpu-pack.sh build            # here: plugin, its libraries, xport-gin-nccl
#   (device tool, carry ["build/nccl-gpu"])  scripts/gin-gpu.sh build/nccl-gpu [CONFIG...]
# CONFIGs (default: both, in this order):
#   xport-tcp  libxport on tcp;ofi_rxm over lo
#   xport-shm  libxport on shm
#   CONFIG+VAR=VALUE[+VAR=VALUE...]   more XPORT_*/NCCL_*/FI_* variables, e.g.
#              xport-tcp+NCCL_GIN_NCONTEXTS=1
# Every config: NCCL_NET_PLUGIN=xport NCCL_NET=xport NCCL_GIN_TYPE=2 (GIN of the proxy type, or
# NCCL fails the run) NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_DEBUG=INFO
# NCCL_DEBUG_SUBSYS=INIT,NET; libnccl.so.2 from torch (GIN_GPU_NCCL_LIB, default torch's
# nvidia/nccl/lib). Each config runs under a deadline (GIN_GPU_TIMEOUT s, default 200, and 30 s
# more for the backstop): both configs fit the device tool's 10 minutes even when each hangs.
# GIN_GPU_ARGS: more arguments for xport-gin-nccl (e.g. "--sizes 8,4K,1M --iterations 200").
# One GPU (kind nvidia-h200): both ranks share it, each under an NCCL_HOSTID of its own (the
# launcher sets them), NCCL's net and GIN through the plugin all the same; the two processes'
# kernels time-slice the GPU unless GIN_GPU_MPS=1 starts an MPS daemon for the run (its pipe
# and log folders under $OUT/mps; stopped at the end). Figures of such a run compare GIN with
# send/recv on one GPU, not with a two-GPU run's.
# Writes to $OUT (or ./gin-gpu-out): environment.txt, ldd.txt, summary.md (every config's table),
# and per config launcher.log, rank0.log, rank1.log, result.json, env.txt, status. Exit 0 only
# when xport-gin-nccl passed for every config and NCCL's logs show both that it assigned xport's
# GIN plugin and that its channels went via NET/xport.
set -uo pipefail

pack=${1:?usage: scripts/gin-gpu.sh PACK_DIR [xport-tcp|xport-shm ...]}
shift
configs=("$@")
[ ${#configs[@]} -gt 0 ] || configs=(xport-tcp xport-shm)
out=${OUT:-$PWD/gin-gpu-out}
limit=${GIN_GPU_TIMEOUT:-200}
read -r -a extra_args <<<"${GIN_GPU_ARGS:-}"
mkdir -p "$out"
summary=$out/summary.md
say() { echo "gin-gpu: $*" | tee -a "$out/gin-gpu.log"; }
die() { say "FAILED: $*"; exit 1; }

pack=$(cd "$pack" 2>/dev/null && pwd) || die "no pack folder '$1' (scripts/nccl-gpu-pack.sh, carried)"
plugin=$pack/libnccl-net-xport.so
prog=$pack/xport-gin-nccl
[ -f "$plugin" ] || die "$plugin is missing"
[ -x "$prog" ] || die "$prog is missing: the pack was made from a build without it (nvcc and NCCL's headers under cuda-root)"

nccl_lib=${GIN_GPU_NCCL_LIB:-}
if [ -z "$nccl_lib" ]; then
  for d in /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib \
           /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib; do
    [ -f "$d/libnccl.so.2" ] && { nccl_lib=$d; break; }
  done
fi
[ -f "$nccl_lib/libnccl.so.2" ] ||
  die "no libnccl.so.2 in ${nccl_lib:-/opt/torch/.venv (nvidia/nccl/lib)}: set GIN_GPU_NCCL_LIB"

# ---- the machine ----
{
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(uname -a)"
  grep PRETTY_NAME /etc/os-release 2>/dev/null
  echo "glibc: $(ldd --version 2>&1 | head -1)"
  timeout 30 nvidia-smi --query-gpu=index,name,pci.bus_id,memory.total,driver_version --format=csv 2>&1
  timeout 30 nvidia-smi topo -m 2>&1 | head -4
  echo "nccl: $(readlink -f "$nccl_lib/libnccl.so.2")"
  echo "pack:"; cat "$pack/MANIFEST" 2>/dev/null
} > "$out/environment.txt"
cat "$out/environment.txt"
gpus=$(timeout 30 nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
[ "${gpus:-0}" -ge 1 ] || die "nvidia-smi lists no GPU (environment.txt)"
[ "$gpus" -ge 2 ] || say "one GPU: both ranks share it, each under an NCCL_HOSTID of its own"
mps=
if [ "${GIN_GPU_MPS:-0}" = 1 ]; then
  command -v nvidia-cuda-mps-control >/dev/null || die "GIN_GPU_MPS=1: no nvidia-cuda-mps-control here"
  export CUDA_MPS_PIPE_DIRECTORY=$out/mps/pipe CUDA_MPS_LOG_DIRECTORY=$out/mps/log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d || die "GIN_GPU_MPS=1: nvidia-cuda-mps-control -d failed"
  mps=1
  trap 'echo quit | nvidia-cuda-mps-control' EXIT
  say "MPS daemon started (pipes in $CUDA_MPS_PIPE_DIRECTORY)"
fi

# ---- the libraries: the pack's, libstdc++ from it only where the machine's is older ----
libpath=$pack/lib
unresolved() {
  LD_LIBRARY_PATH="$1:$nccl_lib" ldd "$plugin" "$prog" 2>&1 | grep -E "not found" || true
}
if [ -n "$(unresolved "$libpath")" ]; then
  libpath=$pack/lib:$pack/compat
  say "the machine's libstdc++/libgcc_s are older than the pack needs: using the pack's"
fi
bad=$(unresolved "$libpath")
[ -z "$bad" ] || die "the plugin or xport-gin-nccl does not load here: $bad"
LD_LIBRARY_PATH="$libpath:$nccl_lib" ldd "$plugin" "$prog" > "$out/ldd.txt" 2>&1

# ---- one config ----
run_config() {  # name
  local name=$1 dir=$out/$1 rc
  rm -rf "$dir"
  mkdir -p "$dir"
  # shellcheck disable=SC2054  # INIT,NET is one value
  local -a env=(NCCL_NET_PLUGIN=xport NCCL_NET=xport NCCL_GIN_TYPE=2
                NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1
                NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET
                "LD_LIBRARY_PATH=$pack:$libpath:$nccl_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  local base=${name%%+*} extra=
  [ "$base" = "$name" ] || extra=${name#*+}
  case "$base" in
    xport-tcp) env+=("XPORT_PROVIDER=tcp;ofi_rxm" XPORT_DOMAIN=lo) ;;
    xport-shm) env+=(XPORT_PROVIDER=shm) ;;
    *) say "unknown config $name"; return 2 ;;
  esac
  if [ -n "$extra" ]; then
    local IFS_old=$IFS kv
    IFS=+
    for kv in $extra; do
      [[ "$kv" =~ ^(XPORT|NCCL|FI)_[A-Z0-9_]+=[^[:space:]]*$ ]] ||
        { IFS=$IFS_old; say "$name: '$kv' is not XPORT_*/NCCL_*/FI_*=VALUE"; return 2; }
      env+=("$kv")  # after the defaults: env(1) takes the last value of a name
    done
    IFS=$IFS_old
  fi
  printf '%s\n' "${env[@]}" > "$dir/env.txt"
  say "$name: running (at most $limit s)"
  local t0=$SECONDS
  # The launcher keeps its own deadline (kills its ranks); timeout is the backstop.
  env "${env[@]}" timeout -k 10 $((limit + 30)) "$prog" --logdir "$dir" \
    --out "$dir/result.json" --timeout "$limit" "${extra_args[@]}" > "$dir/launcher.log" 2>&1
  rc=$?
  say "$name: exit $rc after $((SECONDS - t0)) s"
  # What NCCL says it used: xport's GIN table, and its net table for the host-initiated side.
  if ! grep -q "Assigned GIN plugin xport" "$dir"/rank*.log 2>/dev/null; then
    say "$name: NCCL's log has no 'Assigned GIN plugin xport'"
    grep -h -m5 -E "GIN|NET/Plugin|Assigned|WARN" "$dir"/rank*.log 2>/dev/null | sed 's/^/  /' | tee -a "$out/gin-gpu.log"
    [ $rc -eq 0 ] && rc=3
  fi
  if ! grep -q "via NET/xport" "$dir"/rank*.log 2>/dev/null; then
    say "$name: no channel 'via NET/xport' in NCCL's log"
    grep -h -m5 -E "via |NET/Plugin|Using network|WARN" "$dir"/rank*.log 2>/dev/null | sed 's/^/  /' | tee -a "$out/gin-gpu.log"
    [ $rc -eq 0 ] && rc=3
  fi
  if [ $rc -ne 0 ]; then
    say "$name: FAILED; the end of the logs:"
    tail -n 25 "$dir/launcher.log" | sed 's/^/  /' | tee -a "$out/gin-gpu.log"
  fi
  echo $rc > "$dir/status"
  return $rc
}

status=0
for c in "${configs[@]}"; do
  run_config "$c" || status=1
done

# ---- summary: each config's table as xport-gin-nccl printed it ----
{
  for c in "${configs[@]}"; do
    st=$(cat "$out/$c/status" 2>/dev/null || echo "?")
    echo "### $c: $([ "$st" = 0 ] && echo passed || echo "FAILED (exit $st)")"
    echo
    echo '```'
    sed -n '/^=== xport-gin-nccl results/,/^=== end of results/p' "$out/$c/launcher.log" 2>/dev/null
    echo '```'
    echo
  done
  version=$(cat "$out"/*/rank0.log 2>/dev/null | grep -o -m1 "NCCL version [^ ]*")
  echo "${version:-NCCL (version not logged)} from $nccl_lib; NCCL_GIN_TYPE=2 (proxy) unless a"\
       "config says otherwise; NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1; 2 ranks,"\
       "$([ "$gpus" -ge 2 ] && echo "one per GPU" || echo "both on one GPU${mps:+ under MPS}")"
} > "$summary"
cat "$summary"
say "$([ $status -eq 0 ] && echo "every config passed" || echo "some config FAILED") (logs in $out)"
exit $status
