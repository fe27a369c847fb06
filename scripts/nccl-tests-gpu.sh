#!/usr/bin/env bash
# NVIDIA's nccl-tests through libnccl-net-xport.so on the GPU machine, next to NCCL's own
# NET/Socket in the same run: what NCCL users measure. nccl-tests is not part of this repository:
# fetch NVIDIA/nccl-tests and build it here against NCCL 2.28's headers and library under the CUDA
# root (no MPI: one process drives every GPU, -g N), then pack it with the plugin:
#   make -C NCCL_TESTS CUDA_HOME=/usr/local/cuda NCCL_HOME=<dir with include/ and lib/ of NCCL> \
#     NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90"
#   scripts/nccl-gpu-pack.sh build                       # plugin + its libraries -> build/nccl-gpu
#   NCCL_TESTS_BUILD=NCCL_TESTS/build scripts/nccl-gpu-pack.sh build   # ... and the tests
#   (device tool, carry ["build/nccl-gpu"])  scripts/nccl-tests-gpu.sh build/nccl-gpu [CONFIG...]
# CONFIGs (default: socket xport-tcp xport-shm): as in scripts/nccl-gpu.sh (socket, xport-tcp,
# xport-shm, CONFIG+VAR=VALUE...). Every config: NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1
# NCCL_IB_DISABLE=1, so every byte between GPUs goes through the network transport.
# NCCL_TESTS_PROCS=1: one process per GPU instead (the MPI=1 build, nccl-tests-mpi/, launched by
# the pack's Open MPI: orterun -np GPUS ... -g 1; pack with NCCL_TESTS_MPI_BUILD).
# NCCL_TESTS_GPUS (default: every GPU nvidia-smi lists), NCCL_TESTS (default: all_reduce
# all_gather reduce_scatter alltoall sendrecv), NCCL_TESTS_ARGS (default: -b 1M -e 256M -f 4
# -c 1 -n 20 -w 5: sizes 1, 4, 16, 64, 256 MiB, every result checked), NCCL_TESTS_TIMEOUT
# (seconds per test and config, default 120). libnccl.so.2 is torch's (NCCL_TESTS_NCCL_LIB).
# Writes to $OUT (or ./nccl-tests-out): <config>/<test>.log, environment.txt, summary.md (bus
# bandwidth per size, each xport figure also as a ratio of Socket's, and every #wrong count).
# Exit 0 only when every run passed its checks (no #wrong) and the xport configs' channels went
# via NET/xport (with -D N > 0, a device implementation: that the plugin's lines are there).
# nccl-tests' GIN alltoall: NCCL_TESTS=alltoall NCCL_TESTS_ARGS="... -D 3 -R 2" and configs
# xport-shm+NCCL_GIN_TYPE=2 xport-tcp+NCCL_GIN_TYPE=2 (docs/benchmarks.md, "GIN").
set -uo pipefail

pack=${1:?usage: scripts/nccl-tests-gpu.sh PACK_DIR [socket|xport-tcp|xport-shm ...]}
shift
configs=("$@")
[ ${#configs[@]} -gt 0 ] || configs=(socket xport-tcp xport-shm)
out=${OUT:-$PWD/nccl-tests-out}
limit=${NCCL_TESTS_TIMEOUT:-120}
read -r -a tests <<<"${NCCL_TESTS:-all_reduce all_gather reduce_scatter alltoall sendrecv}"
read -r -a targs <<<"${NCCL_TESTS_ARGS:--b 1M -e 256M -f 4 -c 1 -n 20 -w 5}"
device_impl=0  # nccl-tests' -D N: a device implementation (3: GIN alltoall, with -R 2)
for ((i = 0; i + 1 < ${#targs[@]}; i++)); do
  [ "${targs[i]}" = -D ] && device_impl=${targs[i + 1]}
done
mkdir -p "$out"
say() { echo "nccl-tests-gpu: $*" | tee -a "$out/nccl-tests-gpu.log"; }
die() { say "FAILED: $*"; exit 1; }

pack=$(cd "$pack" 2>/dev/null && pwd) || die "no pack folder '$1' (scripts/nccl-gpu-pack.sh, carried)"
plugin=$pack/libnccl-net-xport.so
[ -f "$plugin" ] || die "$plugin is missing"
procs=${NCCL_TESTS_PROCS:-0}
tests_dir=$pack/nccl-tests
[ "$procs" = 1 ] && tests_dir=$pack/nccl-tests-mpi
[ -d "$tests_dir" ] || die "$tests_dir is missing: pack with NCCL_TESTS_BUILD (NCCL_TESTS_MPI_BUILD) set"
gpus=${NCCL_TESTS_GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')}
[ "${gpus:-0}" -ge 2 ] 2>/dev/null || die "${gpus:-no} GPUs: 2 or more are needed"
nccl_lib=${NCCL_TESTS_NCCL_LIB:-$(ls -d /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib 2>/dev/null | head -1)}
[ -f "$nccl_lib/libnccl.so.2" ] || die "no libnccl.so.2 under '$nccl_lib' (NCCL_TESTS_NCCL_LIB)"

libpath=$pack/lib
LD_LIBRARY_PATH="$libpath" ldd "$plugin" 2>&1 | grep -q "not found" && libpath=$pack/lib:$pack/compat
{
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(uname -a)"
  timeout 30 nvidia-smi --query-gpu=index,name,pci.bus_id,memory.total --format=csv 2>&1
  echo "cpus: $(nproc)"
  echo "nccl: $nccl_lib"
  echo "gpus used: $gpus; args: ${targs[*]}; $([ "$procs" = 1 ] && echo "one process per GPU (Open MPI)" || echo "one process, -g $gpus")"
  echo "pack:"; cat "$pack/MANIFEST" 2>/dev/null
} > "$out/environment.txt"
cat "$out/environment.txt"

status=0
for name in "${configs[@]}"; do
  dir=$out/$name
  mkdir -p "$dir"
  env=(NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_DEBUG=INFO
       NCCL_DEBUG_SUBSYS=INIT,NET "LD_LIBRARY_PATH=$pack/cudart:$nccl_lib:$pack:$libpath")
  spec=${name%%+*}
  if [ "$spec" != "$name" ]; then
    IFS=+ read -r -a kvs <<<"${name#*+}"
    for kv in "${kvs[@]}"; do
      [[ "$kv" =~ ^(XPORT|NCCL|FI)_[A-Z0-9_]+=[^[:space:]]*$ ]] || die "$name: '$kv' is not VAR=VALUE"
      env+=("$kv")
    done
  fi
  case "$spec" in
    socket) env+=(NCCL_NET=Socket) ;;
    xport-tcp) env+=(NCCL_NET_PLUGIN=xport NCCL_NET=xport "XPORT_PROVIDER=tcp;ofi_rxm" XPORT_DOMAIN=lo) ;;
    xport-shm) env+=(NCCL_NET_PLUGIN=xport NCCL_NET=xport XPORT_PROVIDER=shm) ;;
    *) die "unknown config $name" ;;
  esac
  printf '%s\n' "${env[@]}" > "$dir/env.txt"
  want=Socket
  [ "$spec" = socket ] || want=xport
  for t in "${tests[@]}"; do
    bin=$tests_dir/${t}_perf
    [ -x "$bin" ] || die "$bin is missing"
    t0=$SECONDS
    if [ "$procs" = 1 ]; then
      # Every variable of env goes to each rank (-x NAME); Open MPI itself from the pack.
      xs=()
      for kv in "${env[@]}"; do xs+=(-x "${kv%%=*}"); done
      env "${env[@]}" OPAL_PREFIX="$pack/ompi/usr" PMIX_INSTALL_PREFIX="$pack/ompi/usr/lib/x86_64-linux-gnu/pmix2" \
        timeout -k 10 "$limit" "$pack/ompi/usr/bin/orterun" --allow-run-as-root --oversubscribe \
        --bind-to none --mca pml ob1 --mca btl self,vader --mca btl_vader_single_copy_mechanism none \
        -np "$gpus" "${xs[@]}" "$bin" -g 1 "${targs[@]}" > "$dir/$t.log" 2>&1
    else
      env "${env[@]}" timeout -k 10 "$limit" "$bin" -g "$gpus" "${targs[@]}" > "$dir/$t.log" 2>&1
    fi
    rc=$?
    wrong=$(awk '/^ +[0-9]+ +[0-9]+ +[a-z0-9]+ +[a-z]+/ {w += $9 + $13; n++}
                 END {print n ? w : "?"}' "$dir/$t.log")
    via=ok
    if [ "$device_impl" = 0 ]; then
      grep -q "via NET/$want" "$dir/$t.log" || via="no 'via NET/$want'"
    else
      # A device implementation (GIN) opens no NCCL channels: the plugin's own lines name it.
      grep -q "NET/$want" "$dir/$t.log" || via="no 'NET/$want' line"
    fi
    say "$name $t: exit $rc after $((SECONDS - t0)) s, #wrong ${wrong:-?}, channels $via"
    if [ $rc -ne 0 ] || [ "${wrong:-1}" != 0 ] || [ "$via" != ok ]; then
      status=1
      grep -h -m5 -E "WARN|error|Error" "$dir/$t.log" | sed 's/^/  /' | tee -a "$out/nccl-tests-gpu.log"
    fi
  done
done

# The table: out-of-place bus bandwidth per size, xport's as a ratio of Socket's.
python3 - "$out" "$gpus" "${configs[@]}" -- "${tests[@]}" > "$out/summary.md" <<'PY'
import os, re, sys
out, gpus = sys.argv[1], sys.argv[2]
sep = sys.argv.index("--")
configs, tests = sys.argv[3:sep], sys.argv[sep + 1:]
def busbw(path):
    rows = {}
    try:
        for line in open(path):
            f = line.split()
            # size count type redop root | time algbw busbw #wrong | time algbw busbw #wrong
            if len(f) >= 13 and f[0].isdigit() and re.match(r"^[0-9.]+$", f[7]):
                rows[int(f[0])] = float(f[7])
    except OSError:
        pass
    return rows
data = {c: {t: busbw(os.path.join(out, c, t + ".log")) for t in tests} for c in configs}
sizes = sorted({s for c in data.values() for t in c.values() for s in t})
mib = lambda s: f"{s >> 20} MiB" if s >= 1 << 20 else f"{s >> 10} KiB"
how = (f"one process per GPU ({gpus} processes, -g 1)" if os.environ.get("NCCL_TESTS_PROCS") == "1"
       else f"{gpus} GPUs in one process (-g {gpus})")
print(f"nccl-tests, {how}; out-of-place bus bandwidth, GB/s (ratio to NET/Socket)\n")
print("| test | config | " + " | ".join(mib(s) for s in sizes) + " |")
print("|---|---|" + "---|" * len(sizes))
for t in tests:
    for c in configs:
        cells = []
        for s in sizes:
            v = data[c][t].get(s)
            base = data.get("socket", {}).get(t, {}).get(s)
            if v is None:
                cells.append("-")
            elif c != "socket" and base:
                cells.append(f"{v:.2f} ({v / base:.2f})")
            else:
                cells.append(f"{v:.2f}")
        print(f"| {t} | {c} | " + " | ".join(cells) + " |")
PY
cat "$out/summary.md"
say "$([ $status -eq 0 ] && echo "every run passed" || echo "some run FAILED") (logs in $out)"
exit $status
