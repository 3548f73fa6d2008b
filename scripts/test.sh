#!/usr/bin/env bash
# README command two: install what is missing, then build and run every test suite through
# ctest: first in the ASan+UBSan build, then in the release build (whose summary line is
# printed last). The bindings are tested in the release build only: their host runtimes
# (python, java, go) are not built with the sanitizers. DLRM_SKIP_SANITIZER=1 skips the
# sanitizer pass.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
JOBS=${DLRM_JOBS:-$(nproc)}

DLRM_ROOT=$ROOT
source scripts/configure.sh

scripts/install_deps.sh

# Configured with every option named (scripts/configure.sh), so a build directory that
# demo.sh configured without tests still builds and runs all of them; a run that finds no
# test fails.
run_suite() {  # build dir, cmake args...
  local dir=$1; shift
  dlrm_configure_tests "$dir" "$@"
  cmake --build "$dir" -j "$JOBS"
  (cd "$dir" && ctest --output-on-failure --no-tests=error -j "$JOBS" --timeout 600)
}

if [ "${DLRM_SKIP_SANITIZER:-0}" != "1" ]; then
  echo "=== sanitizer build (ASan + UBSan) ==="
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    run_suite "$ROOT/build/sanitize" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLRM_SANITIZE=ON \
      -DDLRM_BUILD_BINDINGS=OFF
fi
echo "=== release build ==="
run_suite "$ROOT/build/release"
