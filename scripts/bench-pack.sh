#!/usr/bin/env bash
# Packs the benchmark tools (xport-bench, fi-bare-loop, fi-atomic-loop, stripped) and the Debian
# libraries they load (libfabric and what it links, found with ldd; glibc stays the other
# machine's) into one folder to carry to a quiet host (the device tool's machines, GPU unused),
# with the scripts that drive them. There:
#   LD_LIBRARY_PATH=PACK/lib python3 PACK/scripts/bench-bare.py --build PACK --taskset 2-5
#   scripts/bench-pack.sh [BUILD_DIR (build)] [PACK_DIR (BUILD_DIR/bench-pack)]
# PACK_BINS: other programs of the build to pack instead (paths under BUILD_DIR), e.g. the GPU
# tests for the device machine: PACK_BINS="tests/gpu/xport-gpu-tests tools/xport-bench".
# FI_RMA_BW: fabtests' fi_rma_bw (built against this libfabric) packed beside them, for
#   scripts/bench-put-depth.py --fi-rma-bw PACK/tools/fi_rma_bw.
set -euo pipefail

build=${1:-build}
pack=${2:-$build/bench-pack}
die() { echo "bench-pack: $*" >&2; exit 1; }

read -r -a tools <<<"${PACK_BINS:-tools/xport-bench tools/fi-bare-loop tools/fi-atomic-loop}"
for t in "${tools[@]}"; do
  [ -x "$build/$t" ] || die "$build/$t is missing: ninja -C $build $t"
done
[ -z "${FI_RMA_BW:-}" ] || [ -x "$FI_RMA_BW" ] || die "FI_RMA_BW=$FI_RMA_BW is not a program"
rm -rf "$pack"
mkdir -p "$pack/tools" "$pack/lib" "$pack/scripts"
for t in "${tools[@]}"; do
  strip --strip-debug -o "$pack/tools/$(basename "$t")" "$build/$t"
  ldd "$build/$t" | while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    case "$name" in
      libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*|linux-vdso*) continue ;;
    esac
    [ -f "$path" ] || die "ldd: $name is not found here ($path)"
    cp -L "$path" "$pack/lib/$name"
  done
done
cp scripts/bench-bare.py scripts/bench-latency.py scripts/bench-put-depth.py "$pack/scripts/"
[ -z "${FI_RMA_BW:-}" ] || cp "$FI_RMA_BW" "$pack/tools/fi_rma_bw"
missing=$(LD_LIBRARY_PATH="$pack/lib" ldd "$pack"/tools/* | grep "not found" || true)
[ -z "$missing" ] || die "unresolved with the pack: $missing"
{
  echo "built: $(git describe --always --dirty 2>/dev/null || echo unknown) on $(date -u +%FT%TZ)"
  (cd "$pack" && sha256sum tools/* lib/*)
} > "$pack/MANIFEST"
echo "bench-pack: $pack ($(du -sh "$pack" | cut -f1))"
