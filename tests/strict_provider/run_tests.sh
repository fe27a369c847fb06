#!/bin/sh
# Runs libxport and raw libfabric through the strict provider in each configuration that
# docs/testing.md ("The strict test provider") lists; fails when any of them fails.
# Usage: run_tests.sh RAW_TESTS SUITE_TESTS INJECTION_TESTS (FI_PROVIDER_PATH, XTEST_PEER_BIN set).
set -u
raw=$1 suite=$2 injection=$3
status=0
# Each configuration's output is kept so that, when one fails, its failure lines are repeated
# at the very end on stderr: a log cut to its tail (CI shows only the last lines) still names
# the configuration and the test that failed.
logdir=$(mktemp -d "${TMPDIR:-/tmp}/strict-provider.XXXXXX") || exit 1
trap 'rm -rf "$logdir"' EXIT
failures="$logdir/failures"
: >"$failures"
n=0

run() {
  name=$1
  shift
  n=$((n + 1))
  log="$logdir/$n.log"
  echo "=== strict provider: $name"
  # A configuration that hangs is stopped and named, rather than the whole test timing out.
  timeout -k 10 "${STRICT_RUN_TIMEOUT:-600}" env "$@" >"$log" 2>&1
  rc=$?
  [ "$rc" -eq 124 ] && echo "(stopped after ${STRICT_RUN_TIMEOUT:-600} s: hung)" >>"$log"
  cat "$log"
  if [ "$rc" -eq 0 ]; then
    echo "=== passed: $name"
  else
    echo "=== FAILED: $name (exit status $rc)"
    {
      echo "=== FAILED: $name (exit status $rc)"
      { grep -E -A4 ': Failure$' "$log"; grep -E 'ERROR: |^\[  FAILED  \]|hung\)$' "$log"
        [ "$rc" -eq 124 ] && grep -E '^\[ RUN' "$log" | tail -n 1; } | head -n 60
    } >>"$failures"
    status=1
  fi
}

if [ -z "${FI_PROVIDER_PATH:-}" ] || [ ! -e "$FI_PROVIDER_PATH/libstrict-fi.so" ]; then
  echo "FI_PROVIDER_PATH must name the directory of libstrict-fi.so" >&2
  exit 1
fi

# The raw tests set each mode they test themselves (FI_MR_ENDPOINT, injections, 4-byte CQ data,
# FI_RX_CQ_DATA, reorder and delays, CQ overrun, all of them at once); here only the base and
# its progress change.
run "raw libfabric: every mode over tcp;ofi_rxm, manual progress" \
  STRICT_FI_VERBOSE=1 "$raw"
# STRICT_SUITE_QUICK=1 (the sanitizer build) leaves out the configurations another one covers:
# auto progress (manual is the stricter), and FI_MR_ENDPOINT alone (with -FI_EAGAIN below).
quick=${STRICT_SUITE_QUICK:-0}
[ "$quick" = 1 ] || run "raw libfabric: every mode over tcp;ofi_rxm, auto progress" \
  STRICT_TEST_PROGRESS=auto "$raw"
run "raw libfabric: every mode over shm" \
  STRICT_FI_BASE=shm STRICT_FI_VERBOSE=1 "$raw"
[ "$quick" = 1 ] || run "libxport transfer suite with FI_MR_ENDPOINT enforced" \
  STRICT_FI_MR_ENDPOINT=1 STRICT_FI_VERBOSE=1 "$suite" --gtest_filter='Strict/*'
run "libxport transfer suite with FI_MR_ENDPOINT and -FI_EAGAIN on every 7th post" \
  STRICT_FI_MR_ENDPOINT=1 STRICT_FI_EAGAIN_EVERY=7 STRICT_FI_VERBOSE=1 "$suite" \
  --gtest_filter='Strict/*'
run "libxport transfer suite over shm with FI_MR_ENDPOINT enforced" \
  STRICT_FI_BASE=shm STRICT_FI_MR_ENDPOINT=1 "$suite" --gtest_filter='Strict/*auto'
# Hardware as strict as it gets, every mode at once: 4-byte remote CQ data (the eager header path,
# stripe counts in the CQ data), writes with data consuming posted receives (FI_RX_CQ_DATA),
# FI_MR_ENDPOINT, completions reordered across endpoints and delayed, posts delayed (a slow
# NIC), and a CQ that fails if libxport ever lets more completions be outstanding than it holds.
# Not the teardown tests (the configurations above run them): a post the strict provider delays
# reaches the base provider after libxport handed it over, so after a device of the process
# that it names has closed, and both bases then crash inside libfabric now and then (shm on the
# closed device's unmapped region; tcp;ofi_rxm in its progress, 2 of 4 runs before and after
# libxport stopped posting to closed devices). A NIC would fail such a post.
for base in "tcp;ofi_rxm" shm; do
  filter='Strict/*:-Strict/Teardown*'
  run "libxport transfer suite over $base with every hardware mode at once" \
    STRICT_FI_BASE="$base" STRICT_FI_CQ_DATA_SIZE=4 STRICT_FI_RX_CQ_DATA=1 STRICT_FI_MR_ENDPOINT=1 \
    STRICT_FI_REORDER=1 STRICT_FI_DELAY_US=200 STRICT_FI_DELAY_POST_US=200 STRICT_FI_CQ_OVERRUN=1 \
    STRICT_FI_VERBOSE=1 "$suite" --gtest_filter="$filter"
done
run "libxport under injected error completions and a dead domain" \
  STRICT_FI_MR_ENDPOINT=1 STRICT_FI_VERBOSE=1 "$injection"
if [ "$status" -ne 0 ]; then
  echo "=== strict provider: the configurations that failed, and their failure lines:" >&2
  cat "$failures" >&2
fi
exit $status
