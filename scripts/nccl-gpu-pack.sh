#!/usr/bin/env bash
# Packs what the NCCL GPU runs (scripts/nccl-gpu.sh, scripts/gin-gpu.sh) need from this (Debian)
# machine into one folder small enough to carry to the GPU machine: the plugin (debug info
# stripped) and the libraries it loads that a stock GPU machine may lack (libfabric and what it
# links, found with ldd); and xport-gin-nccl where the build has it (tests/gpu/gin: needs nvcc and
# NCCL's headers; it loads libnccl.so.2, which the GPU machine's torch provides). glibc stays the
# GPU machine's own (the plugin needs GLIBC <= 2.34); libstdc++ and libgcc_s go to compat/, used
# there only when the machine's own are older than the plugin needs.
#   scripts/nccl-gpu-pack.sh [BUILD_DIR (build)] [PACK_DIR (BUILD_DIR/nccl-gpu)]
# With NCCL_TESTS_BUILD=<nccl-tests' build folder> also nccl-tests (scripts/nccl-tests-gpu.sh);
# with NCCL_TESTS_MPI_BUILD=<a build of it with MPI=1> that and Debian's Open MPI to launch it.
# Then, with the device tool: carry PACK_DIR and run `scripts/nccl-gpu.sh PACK_DIR` or
# `scripts/gin-gpu.sh PACK_DIR`.
set -euo pipefail

build=${1:-build}
pack=${2:-$build/nccl-gpu}
plugin=$build/plugins/nccl/libnccl-net-xport.so
gin=$build/tests/gpu/xport-gin-nccl
die() { echo "nccl-gpu-pack: $*" >&2; exit 1; }

[ -f "$plugin" ] || die "$plugin is missing: build with -Dnccl_plugin=enabled (ninja -C $build)"
rm -rf "$pack"
mkdir -p "$pack/lib" "$pack/compat"
strip --strip-debug -o "$pack/libnccl-net-xport.so" "$plugin"

# Exported: the plugin tables only, the net table and, where the plugin has GIN, the GIN table.
exported=$(nm -D --defined-only "$pack/libnccl-net-xport.so" | awk '{print $3}' | sort | tr '\n' ' ')
case "$exported" in
  "ncclNetPlugin_v11 "|"ncclGinPlugin_v11 ncclNetPlugin_v11 ") ;;
  *) die "the plugin exports other than ncclNetPlugin_v11 (and ncclGinPlugin_v11): $exported" ;;
esac

# Every library ldd resolves, but glibc's own parts (the GPU machine's glibc must serve).
is_glibc() {
  case "$1" in
    libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*|linux-vdso*) return 0 ;;
  esac
  return 1
}
ldd "$plugin" | while read -r name arrow path _; do
  [ "$arrow" = "=>" ] || continue
  [ -f "$path" ] || die "ldd: $name is not found here ($path)"
  is_glibc "$name" && continue
  case "$name" in
    libstdc++.so.*|libgcc_s.so.*) cp -L "$path" "$pack/compat/$name" ;;
    *) cp -L "$path" "$pack/lib/$name" ;;
  esac
done
# libibverbs' provider drivers are left out: no RDMA device is used (shm, tcp;ofi_rxm).

# Nothing unresolved with the packed folders (the check nccl-gpu.sh repeats on the GPU machine).
missing=$(LD_LIBRARY_PATH="$pack/lib:$pack/compat" ldd "$pack/libnccl-net-xport.so" | grep "not found" || true)
[ -z "$missing" ] || die "unresolved with the pack: $missing"

# xport-gin-nccl: libnccl.so.2 comes from the GPU machine; everything else from the pack or glibc.
binaries=(libnccl-net-xport.so)
if [ -x "$gin" ]; then
  strip --strip-debug -o "$pack/xport-gin-nccl" "$gin"
  missing=$(LD_LIBRARY_PATH="$pack/lib:$pack/compat" ldd "$pack/xport-gin-nccl" |
    grep "not found" | grep -v "libnccl.so.2" || true)
  [ -z "$missing" ] || die "xport-gin-nccl: unresolved with the pack: $missing"
  binaries+=(xport-gin-nccl)
else
  echo "nccl-gpu-pack: no $gin (needs nvcc and NCCL's headers under cuda-root): packed without it"
fi

# The tests scripts/nccl-tests-gpu.sh runs, from nccl-tests' build folder $1 into $pack/$2, and
# the CUDA runtime they were linked with (libnccl.so.2 comes from the GPU machine).
pack_nccl_tests() {
  mkdir -p "$pack/$2" "$pack/cudart"
  for t in all_reduce all_gather reduce_scatter alltoall sendrecv; do
    [ -x "$1/${t}_perf" ] || die "$1/${t}_perf is missing"
    strip --strip-debug -o "$pack/$2/${t}_perf" "$1/${t}_perf"
  done
  cudart=$(ldd "$1/all_reduce_perf" | awk '/libcudart/ {print $3}')
  [ -z "$cudart" ] || cp -L "$cudart" "$pack/cudart/"
}

# nccl-tests (one process, -g N), when NCCL_TESTS_BUILD names its build folder.
[ -z "${NCCL_TESTS_BUILD:-}" ] || pack_nccl_tests "$NCCL_TESTS_BUILD" nccl-tests

# nccl-tests built with MPI=1 (NCCL_TESTS_MPI_BUILD: its build folder), for one process per GPU
# (scripts/nccl-tests-gpu.sh with NCCL_TESTS_PROCS=1): the tests, and Debian's Open MPI to launch
# them (orterun, its components, help files, PMIx), relocated under ompi/usr (OPAL_PREFIX) with
# the libraries they load in lib/.
if [ -n "${NCCL_TESTS_MPI_BUILD:-}" ]; then
  pack_nccl_tests "$NCCL_TESTS_MPI_BUILD" nccl-tests-mpi
  ompi_lib=/usr/lib/x86_64-linux-gnu/openmpi/lib
  pmix=/usr/lib/x86_64-linux-gnu/pmix2
  [ -x /usr/bin/orterun ] && [ -d "$ompi_lib/openmpi3" ] && [ -d "$pmix/lib/pmix" ] ||
    die "Debian's Open MPI is missing (openmpi-bin, libopenmpi3, libpmix2)"
  o=$pack/ompi/usr
  mkdir -p "$o/bin" "$o/lib/x86_64-linux-gnu/openmpi/lib" "$o/share" "$o/lib/x86_64-linux-gnu/pmix2/lib"
  cp -L /usr/bin/orterun /usr/bin/orted "$o/bin/"
  cp -rL "$ompi_lib/openmpi3" "$o/lib/x86_64-linux-gnu/openmpi/lib/"
  cp -rL /usr/share/openmpi "$o/share/"
  cp -rL "$pmix/lib/pmix" "$o/lib/x86_64-linux-gnu/pmix2/lib/"
  [ -d "$pmix/share" ] && cp -rL "$pmix/share" "$o/lib/x86_64-linux-gnu/pmix2/"
  for f in "$o/bin/orterun" "$o/bin/orted" "$pack/nccl-tests-mpi/all_reduce_perf" \
           "$o"/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/*.so "$o"/lib/x86_64-linux-gnu/pmix2/lib/pmix/*.so; do
    ldd "$f" | while read -r name arrow path _; do
      [ "$arrow" = "=>" ] && [ -f "$path" ] || continue
      is_glibc "$name" && continue
      case "$name" in
        libcudart*|libnccl*|libcuda.so*|libstdc++.so.*|libgcc_s.so.*) continue ;;
      esac
      [ -f "$pack/lib/$name" ] || cp -L "$path" "$pack/lib/$name"
    done
  done
fi

need_glibc=$(cd "$pack" && objdump -T "${binaries[@]}" lib/*.so* 2>/dev/null |
  grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
need_cxx=$(cd "$pack" && objdump -T "${binaries[@]}" | grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -1)
{
  echo "built: $(git describe --always --dirty 2>/dev/null || echo unknown) on $(date -u +%FT%TZ)"
  echo "needs: $need_glibc $need_cxx"
  (cd "$pack" && sha256sum "${binaries[@]}" lib/* compat/*)
} > "$pack/MANIFEST"
echo "nccl-gpu-pack: $pack ($(du -sh "$pack" | cut -f1)); needs $need_glibc, $need_cxx"
