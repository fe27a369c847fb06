#!/usr/bin/env bash
# Real NCCL through libnccl-net-xport.so on the GPU machine (2 GPUs, device tool kind
# nvidia-h200-x2), next to NCCL's own NET/Socket in the same run. From the repository root:
#   scripts/nccl-gpu-pack.sh build            # here: plugin + Debian libraries -> build/nccl-gpu
#   (device tool, carry ["build/nccl-gpu"])  scripts/nccl-gpu.sh build/nccl-gpu [CONFIG...]
# CONFIGs (default: all three, in this order):
#   socket     NCCL_NET=Socket (NCCL's built-in, the baseline)
#   xport-tcp  NCCL_NET=xport, libxport on tcp;ofi_rxm over lo
#   xport-shm  NCCL_NET=xport, libxport on shm
#   xport-tcp@MBPS, xport-shm@MBPS   the same with XPORT_NCCL_SPEED_MBPS=MBPS: the port speed the
#              plugin reports (lo and shm report no link rate: 10000 by default, as NCCL's socket
#              transport assumes; NCCL sizes its channels by it), e.g. xport-tcp@100000
#   CONFIG+VAR=VALUE[+VAR=VALUE...]   any config with more XPORT_*/NCCL_* variables, e.g.
#              xport-tcp+XPORT_NCCL_MAX_RECVS=8 (grouped receives), xport-tcp+XPORT_PROGRESS=manual
# Every config: NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_DEBUG=INFO;
# scripts/nccl_gpu_check.py runs all_reduce, all_gather, reduce_scatter, broadcast and send/recv
# for 1 KiB .. 1 GiB (NCCL_GPU_MAX_BYTES), checked on the host, then all_reduce bus bandwidth at
# 1, 64, 256 MiB. Each config runs under a deadline (NCCL_GPU_TIMEOUT s, default 170, and 30 s
# more for the backstop): three configs fit the device tool's 10 minutes even when each hangs;
# a normal config takes about a minute. More configs: split them over several calls (each call
# writes only its configs' rows; keep $OUT apart per call).
# Writes to $OUT (or ./nccl-gpu-out): <config>/rank{0,1}.log (NCCL's INFO log), result.json,
# environment.txt, summary.md (the table for docs/benchmarks.md). Exit 0 only when every config
# passed every check and the xport configs' channels went "via NET/xport".
set -uo pipefail

pack=${1:?usage: scripts/nccl-gpu.sh PACK_DIR [socket|xport-tcp|xport-shm ...]}
shift
configs=("$@")
[ ${#configs[@]} -gt 0 ] || configs=(socket xport-tcp xport-shm)
out=${OUT:-$PWD/nccl-gpu-out}
py=${NCCL_GPU_PYTHON:-/opt/torch/.venv/bin/python}
limit=${NCCL_GPU_TIMEOUT:-170}
max_bytes=${NCCL_GPU_MAX_BYTES:-1G}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
summary=$out/summary.md
say() { echo "nccl-gpu: $*" | tee -a "$out/nccl-gpu.log"; }
die() { say "FAILED: $*"; exit 1; }

pack=$(cd "$pack" 2>/dev/null && pwd) || die "no pack folder '$1' (scripts/nccl-gpu-pack.sh, carried)"
plugin=$pack/libnccl-net-xport.so
[ -f "$plugin" ] || die "$plugin is missing"
[ -x "$py" ] || die "no python at $py (NCCL_GPU_PYTHON)"

# ---- the machine ----
{
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(uname -a)"
  grep PRETTY_NAME /etc/os-release 2>/dev/null
  echo "glibc: $(ldd --version 2>&1 | head -1)"
  df -h /dev/shm 2>&1 | tail -1 | sed "s/^/dev-shm: /"
  timeout 30 nvidia-smi --query-gpu=index,name,pci.bus_id,memory.total --format=csv 2>&1
  timeout 60 "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())' 2>&1
  echo "pack:"; cat "$pack/MANIFEST" 2>/dev/null
} > "$out/environment.txt"
cat "$out/environment.txt"
gpus=$(timeout 60 "$py" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null | tail -1)
[ "${gpus:-0}" -ge 2 ] 2>/dev/null || die "torch sees ${gpus:-no} GPUs, 2 are needed (environment.txt)"

# ---- the plugin's libraries: the pack's, libstdc++ from it only where the machine's is older ----
libpath=$pack/lib
unresolved() { LD_LIBRARY_PATH="$1" ldd "$plugin" 2>&1 | grep -E "not found|version .* not found" || true; }
if [ -n "$(unresolved "$libpath")" ]; then
  libpath=$pack/lib:$pack/compat
  say "the machine's libstdc++/libgcc_s are older than the plugin needs: using the pack's"
fi
bad=$(unresolved "$libpath")
[ -z "$bad" ] || die "the plugin does not load here: $bad"
LD_LIBRARY_PATH="$libpath" ldd "$plugin" > "$out/ldd.txt" 2>&1

# ---- one config ----
run_config() {  # name
  local name=$1 dir=$out/$1 rc
  rm -rf "$dir"
  mkdir -p "$dir"
  local -a env=(NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_DEBUG=INFO
                NCCL_DEBUG_SUBSYS=INIT,NET,ENV)
  local spec=${name%%+*} extra=
  [ "$spec" = "$name" ] || extra=${name#*+}
  if [ -n "$extra" ]; then
    local IFS_old=$IFS kv
    IFS=+
    for kv in $extra; do
      [[ "$kv" =~ ^(XPORT|NCCL|FI)_[A-Z0-9_]+=[^[:space:]]*$ ]] ||
        { IFS=$IFS_old; say "$name: '$kv' is not XPORT_*/NCCL_*/FI_*=VALUE"; return 2; }
      env+=("$kv")
    done
    IFS=$IFS_old
  fi
  local base=${spec%%@*} speed=
  [ "$base" = "$spec" ] || speed=${spec#*@}
  if [ -n "$speed" ]; then
    [[ "$speed" =~ ^[0-9]+$ ]] || { say "$name: the speed after @ must be Mbit/s"; return 2; }
    env+=("XPORT_NCCL_SPEED_MBPS=$speed")
  fi
  case "$base" in
    socket) env+=(NCCL_NET=Socket) ;;
    xport-tcp) env+=(NCCL_NET_PLUGIN=xport NCCL_NET=xport "XPORT_PROVIDER=tcp;ofi_rxm"
                     XPORT_DOMAIN=lo "LD_LIBRARY_PATH=$pack:$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}") ;;
    xport-shm) env+=(NCCL_NET_PLUGIN=xport NCCL_NET=xport XPORT_PROVIDER=shm
                     "LD_LIBRARY_PATH=$pack:$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}") ;;
    *) say "unknown config $name"; return 2 ;;
  esac
  printf '%s\n' "${env[@]}" > "$dir/env.txt"
  say "$name: running (at most $limit s)"
  local t0=$SECONDS
  # The checker keeps its own deadline (kills its ranks); timeout is the backstop.
  env "${env[@]}" timeout -k 10 $((limit + 30)) "$py" "$here/nccl_gpu_check.py" --out "$dir" \
    --max-bytes "$max_bytes" --timeout "$limit" > "$dir/launcher.log" 2>&1
  rc=$?
  say "$name: exit $rc after $((SECONDS - t0)) s"
  # What NCCL says it used.
  local want=Socket
  [ "$base" = socket ] || want=xport
  if ! grep -q "via NET/$want" "$dir"/rank*.log 2>/dev/null; then
    say "$name: no channel 'via NET/$want' in NCCL's log"
    grep -h -m5 -E "via |NET/Plugin|Using network|WARN" "$dir"/rank*.log 2>/dev/null | sed 's/^/  /' | tee -a "$out/nccl-gpu.log"
    [ $rc -eq 0 ] && rc=3
  fi
  if [ $rc -ne 0 ]; then
    say "$name: FAILED; the end of the logs:"
    tail -n 15 "$dir/launcher.log" "$dir"/rank*.log 2>/dev/null | sed 's/^/  /' | tee -a "$out/nccl-gpu.log"
  fi
  echo $rc > "$dir/status"
  return $rc
}

status=0
for c in "${configs[@]}"; do
  run_config "$c" || status=1
done

# ---- summary ----
"$py" - "$out" "${configs[@]}" > "$summary" <<'EOF'
import json, os, sys
out, configs = sys.argv[1], sys.argv[2:]
meta = {}
print("| config | status | checks | failed | all_reduce busbw 1 MiB | 64 MiB | 256 MiB |")
print("|---|---|---|---|---|---|---|")
for c in configs:
    d = os.path.join(out, c)
    st = open(os.path.join(d, "status")).read().strip() if os.path.exists(os.path.join(d, "status")) else "?"
    try:
        r = json.load(open(os.path.join(d, "result.json")))
    except Exception:
        print(f"| {c} | exit {st} | - | - | - | - | - |")
        continue
    meta = r
    bw = [r["bandwidth"].get(str(s), {}).get("busbw_GBps") for s in (1 << 20, 64 << 20, 256 << 20)]
    cells = [f"{b:.2f} GB/s" if b is not None else "-" for b in bw]
    print(f"| {c} | {'ok' if st == '0' else 'exit ' + st} | {r['checks']} | {len(r['failures'])} | " + " | ".join(cells) + " |")
    for f in r["failures"][:5]:
        print(f"<!-- {c}: {f} -->")
print()
print(f"NCCL {meta.get('nccl', '?')}, torch {meta.get('torch', '?')}; NCCL_P2P_DISABLE=1 "
      "NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1; bus bandwidth of a 2-rank all_reduce")
EOF
cat "$summary"
say "$([ $status -eq 0 ] && echo "every config passed" || echo "some config FAILED") (logs in $out)"
exit $status
