#!/usr/bin/env bash
# One command from a fresh Debian machine (as root) to a result:
#   scripts/dev.sh loopback  installs what is missing, builds, runs xport-loopback (default provider)
#   scripts/dev.sh test      installs what is missing, builds, runs the whole test suite:
#                            the suite (debugoptimized), again under ASan+UBSan (debug), the
#                            threaded tests under ThreadSanitizer, a release build of everything
#                            a user builds, and the libFuzzer targets for a bounded time. Every
#                            build here treats warnings as errors (a user's build does not).
# Knobs for this script: XPORT_BUILD_DIR (default build), XPORT_FUZZ_SECONDS (default 30 per target),
# XPORT_SKIP_SANITIZE=1, XPORT_SKIP_TSAN=1, XPORT_SKIP_RELEASE=1, XPORT_SKIP_FUZZ=1 (for quick
# local runs; CI runs everything).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
mode=${1:-}
shift || true

packages=(
  build-essential pkg-config meson ninja-build python3
  libfabric-dev libfabric-bin libhwloc-dev hwloc libcli11-dev
  libgtest-dev libgmock-dev prometheus-cpp-dev
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

configure_build() {  # dir, extra meson args... (ninja targets in $targets: all when empty)
  local dir=$1
  shift
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" "$@" >"$dir.setup.log" 2>&1 || { cat "$dir.setup.log"; exit 1; }
  fi
  # shellcheck disable=SC2086
  ninja -C "$dir" ${targets:-} >"$dir.ninja.log" 2>&1 || { tail -60 "$dir.ninja.log"; exit 1; }
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
    # Warnings are errors here (development and CI), never in a user's build.
    configure_build "$build_dir" -Dwerror=true
    status=0
    python3 scripts/run-tests.py "$build_dir" || status=1
    if [ "${XPORT_SKIP_SANITIZE:-0}" != 1 ]; then
      # Everything but the MPI bench (4 ranks of MPI under ASan: 4 minutes alone for the same
      # library paths the two-host bench takes), the integration suite's knob variant (suite
      # variant: the same code paths as the plain integration run) and the strict provider's
      # configurations that another one covers (STRICT_SUITE_QUICK).
      configure_build "$build_dir-asan" -Dwerror=true -Db_sanitize=address,undefined \
        -Db_lundef=false -Dbuildtype=debug -Dexporter=disabled
      UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ASAN_OPTIONS=detect_leaks=1 \
        STRICT_SUITE_QUICK=1 python3 scripts/run-tests.py "$build_dir-asan" --no-suite mpi \
        --no-suite variant || status=1
    fi
    if [ "${XPORT_SKIP_TSAN:-0}" != 1 ]; then
      # The suites that run threads against one device (and the library under them; pool: two
      # threads opening and closing communicators on shared connections).
      # (TSan ignores atomic_thread_fence, which GCC says with -Wtsan: the seqlock that uses one
      # is suppressed in tests/tsan.supp instead.)
      # Only what those suites run is built (the tools and other test programs: 3-4 minutes).
      targets="tests/xport-unit-tests tests/integration/xport-integration-tests
        tests/integration/xport-test-peer tests/integration/xport-pool-tests
        tests/stress/xport-stress-tests" \
        configure_build "$build_dir-tsan" -Dwerror=true -Db_sanitize=thread -Db_lundef=false \
        -Dexporter=disabled -Dmpi=disabled -Dcpp_args=-Wno-tsan
      # The pool's unshared tcp;ofi_rxm configurations are left out here (each communicator
      # opens rxm endpoints at both ends: minutes under TSan, and libfabric is not instrumented);
      # shm's unshared ones run the same library code.
      GTEST_FILTER='-*tcp_ofi_rxm_groups0*' \
        TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$here/tests/tsan.supp" \
        python3 scripts/run-tests.py "$build_dir-tsan" --no-rebuild unit threads stress pool ||
        status=1
    fi
    if [ "${XPORT_SKIP_RELEASE:-0}" != 1 ]; then
      # What a user builds with --buildtype=release (-O3 warns differently): built, not re-run.
      configure_build "$build_dir-release" -Dwerror=true -Dbuildtype=release -Dtests=disabled
    fi
    if [ "${XPORT_SKIP_FUZZ:-0}" != 1 ]; then
      # The library is instrumented too (fuzzer-no-link), or the fuzzer would be nearly blind.
      CC=clang CXX=clang++ configure_build "$build_dir-fuzz" -Dwerror=true -Dfuzz=true \
        -Dtests=disabled -Dcpp_args=-fsanitize=fuzzer-no-link,address,undefined \
        -Dcpp_link_args=-fsanitize=address,undefined \
        -Dexporter=disabled -Db_lundef=false
      python3 scripts/run-fuzz.py "$build_dir-fuzz" "${XPORT_FUZZ_SECONDS:-20}" || status=1
    fi
    python3 scripts/summarize.py "$build_dir" "$build_dir-asan" "$build_dir-tsan" "$build_dir-fuzz"
    exit $status
    ;;
  *)
    echo "usage: scripts/dev.sh loopback [xport-loopback args] | test" >&2
    exit 2
    ;;
esac
