#!/usr/bin/env bash
# README command two: install what is missing, then build and run every test suite through
# ctest: first in the ASan+UBSan build (clang, with the libFuzzer harnesses of tests/fuzz/,
# each fuzzing for 30 s: scripts/configure.sh), then the suites labelled concurrency in a
# ThreadSanitizer build (clang; only their targets are built), then in the release build
# (whose summary line is printed last). The bindings are tested in the release build only:
# their host runtimes (python, java, go) are not built with the sanitizers.
# DLRM_SKIP_SANITIZER=1 skips both sanitizer passes.
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
run_suite_in() {  # build dir, configure function, cmake args...
  local dir=$1 configure=$2; shift 2
  "$configure" "$dir" "$@"
  cmake --build "$dir" -j "$JOBS"
  (cd "$dir" && ctest --output-on-failure --no-tests=error -j "$JOBS" --timeout 600)
}

if [ "${DLRM_SKIP_SANITIZER:-0}" != "1" ]; then
  echo "=== sanitizer build (ASan + UBSan) ==="
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    run_suite_in "$ROOT/build/sanitize" dlrm_configure_sanitizer
  echo "=== ThreadSanitizer build (the concurrency suites) ==="
  dlrm_configure_tsan "$ROOT/build/tsan"
  cmake --build "$ROOT/build/tsan" -j "$JOBS" --target concurrency_tests
  (cd "$ROOT/build/tsan" && \
    TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$ROOT/tests/tsan.supp \
    ctest --output-on-failure --no-tests=error -j "$JOBS" --timeout 600 -L concurrency)
fi
echo "=== release build ==="
run_suite_in "$ROOT/build/release" dlrm_configure_tests
