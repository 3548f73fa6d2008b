#!/usr/bin/env bash
# README's command two after command one in the same checkout: demo.sh's configure (tests
# off) and then test.sh's, in one build directory, must leave a build that has every suite
# (before the fix, test.sh found "No tests" and exited 0). Configures only; builds nothing.
# usage: test_after_demo_test.sh SOURCE_DIR WORKDIR
set -euo pipefail
DLRM_ROOT=$1
work=$2
rm -rf "$work" && mkdir -p "$work"
source "$DLRM_ROOT/scripts/configure.sh"

dlrm_configure_demo "$work/build"
cached() { sed -n "s/^$1:BOOL=//p" "$work/build/CMakeCache.txt"; }
[ "$(cached DLRM_BUILD_TESTS)" = "OFF" ] || { echo "demo's configure left tests on"; exit 1; }

dlrm_configure_tests "$work/build"
for option in DLRM_BUILD_TESTS DLRM_BUILD_BINDINGS DLRM_BUILD_BENCH; do
  [ "$(cached $option)" = "ON" ] || { echo "after test.sh's configure $option is $(cached $option)"; exit 1; }
done
listed=$(cd "$work/build" && ctest -N)
for suite in cli_test launch_test install_test capi_c99_test layering_rejects_upward_include \
             bench_smoke python_tests java_tests go_tests; do
  grep -q " $suite\$" <<<"$listed" || { echo "test.sh's build lacks $suite:"; echo "$listed"; exit 1; }
done
total=$(sed -n 's/^Total Tests: //p' <<<"$listed")
echo "test.sh after demo.sh: $total tests listed before the build (GoogleTest cases are added when built)"
