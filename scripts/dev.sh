#!/usr/bin/env bash
# One command from a fresh Debian machine (as root) to a result:
#   scripts/dev.sh loopback  installs what is missing, builds, runs xport-loopback (default provider)
#   scripts/dev.sh test      installs what is missing, builds, runs the whole test suite. Three
#                            builds, each made once, warnings as errors (a user's build does not):
#                            - release (what users build, -O3): the whole suite;
#                            - clang with ASan+UBSan and libFuzzer's coverage: the suites that
#                              find memory and lifetime errors (forged input, teardown, churn,
#                              threads, failures), then every fuzz target for a bounded time;
#                            - ThreadSanitizer: the suites that run threads against one device.
#                            Tests run two at a time (scripts/run-tests.py). Each stage's time is
#                            printed at the end.
# Knobs for this script: XPORT_BUILD_DIR (default build), XPORT_FUZZ_SECONDS (default 20 per target),
# XPORT_SKIP_SANITIZE=1, XPORT_SKIP_TSAN=1, XPORT_SKIP_FUZZ=1 (for quick local runs; CI runs
# everything).
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
    meson setup "$dir" "$@" >"$dir.setup.log" 2>&1 || { cat "$dir.setup.log"; return 1; }
  fi
  # shellcheck disable=SC2086
  ninja -C "$dir" ${targets:-} >"$dir.ninja.log" 2>&1 || { tail -60 "$dir.ninja.log"; return 1; }
}

build_dir=${XPORT_BUILD_DIR:-build}

# Stage timing: `stage NAME command...` runs the command and records how long it took; the
# table comes at the end of the test mode (CI's limit is on the whole run).
stage_names=()
stage_secs=()
stage() {
  local name=$1 t0 rc=0
  shift
  t0=$(date +%s)
  echo "== stage $name"
  "$@" || rc=$?
  stage_names+=("$name")
  stage_secs+=($(($(date +%s) - t0)))
  return $rc
}
print_stages() {
  local i total=0
  echo "== stage times"
  for i in "${!stage_names[@]}"; do
    printf '  %-12s %4d s\n' "${stage_names[$i]}" "${stage_secs[$i]}"
    total=$((total + stage_secs[i]))
  done
  printf '  %-12s %4d s\n' total "$total"
}
# A build failed: nothing after it can run.
stop_here() {
  print_stages
  exit 1
}

# The sanitizer build's test programs and the tests they run (scripts/dev.sh test).
asan_tests="unit integration churn pool threads stress credits-stress one-sided one-sided-strict
  gpu-staging gpu-hmem strict-provider multirail-2-stripe-error multirail-2-cq-failure nccl-plugin-shm
  nccl-plugin-tcp-ofi-rxm nccl-plugin-lanes-shm nccl-gin-shm nccl-gin-tcp-ofi-rxm nccl-gin-lanes-shm"
asan_targets="tests/xport-unit-tests tests/integration/xport-integration-tests
  tests/integration/xport-test-peer tests/integration/xport-churn-tests
  tests/integration/xport-pool-tests tests/integration/xport-one-sided-tests
  tests/integration/xport-gpu-staging-tests tests/stress/xport-stress-tests
  tests/integration/xport-credits-tests
  tests/strict_provider/libstrict-fi.so tests/strict_provider/strict-raw-tests
  tests/strict_provider/strict-suite-tests tests/strict_provider/strict-injection-tests
  tests/strict_provider/xport-gpu-hmem-tests tests/multirail/xport-multirail-tests
  plugins/nccl/libnccl-net-xport.so tests/nccl_plugin/xport-nccl-plugin-tests
  tests/nccl_plugin/xport-nccl-gin-tests"
# The fuzz targets of tests/fuzz/meson.build, as ninja targets.
fuzz_targets() {
  local f
  for f in tests/fuzz/*_fuzz.cc; do
    f=${f##*/}
    f=${f%_fuzz.cc}
    printf 'tests/fuzz/fuzz-%s ' "${f//_/-}"
  done
}

case "$mode" in
  loopback)
    install_packages
    configure_build "$build_dir" -Dbuildtype=release
    exec "$build_dir/tools/xport-loopback" "$@"
    ;;
  test)
    stage packages install_packages
    status=0
    # The suite on what users build (release, -O3): warnings are errors here, never in a user's
    # build. (The library has no assert(): NDEBUG changes nothing it checks.)
    stage build configure_build "$build_dir" -Dwerror=true -Dbuildtype=release || stop_here
    stage suite python3 scripts/run-tests.py "$build_dir" || status=1
    if [ "${XPORT_SKIP_SANITIZE:-0}" != 1 ]; then
      # One clang build for ASan+UBSan and the fuzzers: the library is instrumented for libFuzzer
      # too (fuzzer-no-link), or the fuzzers would be nearly blind; the tests link ASan's runtime,
      # which takes the coverage callbacks. Only what its stages run is built.
      targets="$asan_targets $(fuzz_targets)" CC=clang CXX=clang++ \
        stage build-asan configure_build "$build_dir-asan" -Dwerror=true -Dbuildtype=debug \
        -Dfuzz=true -Dcpp_args=-fsanitize=fuzzer-no-link,address,undefined \
        -Dcpp_link_args=-fsanitize=address,undefined -Db_lundef=false -Dexporter=disabled \
        -Dmpi=disabled || stop_here
      # What ASan and UBSan can find: forged input, lifetimes and teardown, churn, threads,
      # failures, GPU staging and the plugin tables; each suite once, on the providers whose code
      # paths differ (sockets and tcp;ofi_rxm's manual progress run the same library code as
      # tcp;ofi_rxm), the strict provider's configurations that others do not cover
      # (STRICT_SUITE_QUICK).
      UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ASAN_OPTIONS=detect_leaks=1 \
        STRICT_SUITE_QUICK=1 GTEST_FILTER='-*sockets*:*tcp_ofi_rxm_manual*' \
        stage asan python3 scripts/run-tests.py "$build_dir-asan" --no-rebuild $asan_tests ||
        status=1
      if [ "${XPORT_SKIP_FUZZ:-0}" != 1 ]; then
        stage fuzz python3 scripts/run-fuzz.py "$build_dir-asan" "${XPORT_FUZZ_SECONDS:-20}" ||
          status=1
      fi
    fi
    if [ "${XPORT_SKIP_TSAN:-0}" != 1 ]; then
      # The suites that run threads against one device (and the library under them; pool: two
      # threads opening and closing communicators on shared connections; the NCCL plugin's
      # lanes: NCCL's threads queue posts that each lane's thread makes and publishes; the GIN
      # lanes: parts of NCCL's puts that lanes' threads post and report).
      # (TSan ignores atomic_thread_fence, which GCC says with -Wtsan: the seqlock that uses one
      # is suppressed in tests/tsan.supp instead.)
      targets="tests/xport-unit-tests tests/integration/xport-integration-tests
        tests/integration/xport-test-peer tests/integration/xport-pool-tests
        tests/stress/xport-stress-tests tests/integration/xport-credits-tests
        tests/nccl_plugin/xport-nccl-plugin-tests tests/nccl_plugin/xport-nccl-gin-tests
        plugins/nccl/libnccl-net-xport.so" \
        stage build-tsan configure_build "$build_dir-tsan" -Dwerror=true -Db_sanitize=thread \
        -Db_lundef=false -Dexporter=disabled -Dmpi=disabled -Dcpp_args=-Wno-tsan || stop_here
      # The pool's unshared tcp;ofi_rxm configurations are left out here (each communicator
      # opens rxm endpoints at both ends: minutes under TSan, and libfabric is not instrumented);
      # shm's unshared ones run the same library code.
      GTEST_FILTER='-*tcp_ofi_rxm_groups0*' \
        TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$here/tests/tsan.supp" \
        stage tsan python3 scripts/run-tests.py "$build_dir-tsan" --no-rebuild unit threads \
        stress credits-stress-tcp pool nccl-plugin-lanes-shm nccl-plugin-lanes-tcp-ofi-rxm \
        nccl-gin-lanes-shm ||
        status=1
    fi
    python3 scripts/summarize.py "$build_dir" "$build_dir-asan" "$build_dir-tsan"
    print_stages
    exit $status
    ;;
  *)
    echo "usage: scripts/dev.sh loopback [xport-loopback args] | test" >&2
    exit 2
    ;;
esac
