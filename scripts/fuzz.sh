#!/usr/bin/env bash
# Runs every libFuzzer harness of tests/fuzz/ longer than CI does (ctest gives each
# DLRM_FUZZ_SECONDS), one after the other, in the sanitizer build that scripts/test.sh
# configures (clang, ASan + UBSan, DLRM_FUZZ):
#   scripts/fuzz.sh [--minutes N] [HARNESS...]     default: 10 minutes each, every harness
# A crash's input is kept under build/sanitize/tests/fuzz/<harness>.run/crash-*; make it a
# regression input of the deterministic suites under tests/.
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=10
if [ "${1:-}" = "--minutes" ]; then minutes=$2; shift 2; fi
DLRM_ROOT=$(pwd)
source scripts/configure.sh
BUILD=build/sanitize
dlrm_configure_sanitizer "$BUILD" -DDLRM_FUZZ_SECONDS=$((minutes * 60))
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=(fuzz_config fuzz_wire fuzz_checkpoint fuzz_batch)
cmake --build "$BUILD" -j "${DLRM_JOBS:-$(nproc)}" --target "${harnesses[@]}"
status=0
(cd "$BUILD" && ctest --output-on-failure -L fuzz -R "^($(IFS='|'; echo "${harnesses[*]}"))\$" \
  --timeout $((minutes * 60 + 300))) || status=$?
dlrm_configure_sanitizer "$BUILD"  # test.sh's budget again
exit $status
