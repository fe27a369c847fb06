#!/usr/bin/env bash
# One command from a fresh Debian machine (as root) to a result:
#   scripts/dev.sh loopback  installs what is missing, builds, runs xport-loopback (default provider)
#   scripts/dev.sh test      installs what is missing, builds, runs the whole test suite:
#                            unit + integration tests, an ASan+UBSan build of the suite,
#                            and the libFuzzer targets for a bounded time.
# Knobs for this script: XPORT_BUILD_DIR (default build), XPORT_FUZZ_SECONDS (default 30 per target),
# XPORT_SKIP_SANITIZE=1, XPORT_SKIP_FUZZ=1 (for quick local runs; CI runs everything).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
mode=${1:-}
shift || true

packages=(
  build-essential pkg-config meson ninja-build python3
  libfabric-dev libfabric-bin libhwloc-dev hwloc libcli11-dev
  libgtest-dev libgmock-dev libibverbs-dev rdma-core prometheus-cpp-dev
  iproute2 clang libclang-rt-14-dev
  prometheus chromium
  libopenmpi-dev openmpi-bin
)

install_packages() {
  local missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "== installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

configure_build() {  # dir, extra meson args...
  local dir=$1
  shift
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" "$@" >"$dir.setup.log" 2>&1 || { cat "$dir.setup.log"; exit 1; }
  fi
  ninja -C "$dir" >"$dir.ninja.log" 2>&1 || { tail -60 "$dir.ninja.log"; exit 1; }
}

build_dir=${XPORT_BUILD_DIR:-build}

case "$mode" in
  loopback)
    install_packages
    configure_build "$build_dir"
    exec "$build_dir/tools/xport-loopback" "$@"
    ;;
  test)
    install_packages
    configure_build "$build_dir"
    status=0
    python3 scripts/run-tests.py "$build_dir" || status=1
    if [ "${XPORT_SKIP_SANITIZE:-0}" != 1 ]; then
      configure_build "$build_dir-asan" -Db_sanitize=address,undefined -Db_lundef=false \
        -Dbuildtype=debug -Dexporter=disabled -Dcuda=disabled
      UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ASAN_OPTIONS=detect_leaks=1 \
        python3 scripts/run-tests.py "$build_dir-asan" || status=1
    fi
    if [ "${XPORT_SKIP_FUZZ:-0}" != 1 ]; then
      # The library is instrumented too (fuzzer-no-link), or the fuzzer would be nearly blind.
      CC=clang CXX=clang++ configure_build "$build_dir-fuzz" -Dfuzz=true -Dtests=disabled \
        -Dcpp_args=-fsanitize=fuzzer-no-link,address,undefined \
        -Dcpp_link_args=-fsanitize=address,undefined \
        -Dexporter=disabled -Dcuda=disabled -Db_lundef=false
      python3 scripts/run-fuzz.py "$build_dir-fuzz" "${XPORT_FUZZ_SECONDS:-30}" || status=1
    fi
    python3 scripts/summarize.py "$build_dir" "$build_dir-asan" "$build_dir-fuzz"
    exit $status
    ;;
  *)
    echo "usage: scripts/dev.sh loopback [xport-loopback args] | test" >&2
    exit 2
    ;;
esac
