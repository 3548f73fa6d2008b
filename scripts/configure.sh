# The cmake configure lines of README's two commands, defined once (sourced by demo.sh,
# test.sh and tests/tools/test_after_demo_test.sh). Each names every option it relies on,
# so whatever an earlier configure cached in the same build directory (demo.sh turns the
# tests off) is overridden.
#
#   dlrm_configure_demo BUILD_DIR
#   dlrm_configure_tests BUILD_DIR [extra cmake args...]
#   dlrm_configure_sanitizer BUILD_DIR [extra cmake args...]   the tests' ASan + UBSan
#       build, with clang and the libFuzzer harnesses (tests/fuzz/) run for
#       DLRM_FUZZ_SECONDS each (30 unless an extra argument sets it)
#   dlrm_configure_tsan BUILD_DIR [extra cmake args...]   the ThreadSanitizer build (clang),
#       for the suites labelled concurrency (target concurrency_tests)

dlrm_configure_demo() {
  cmake -S "$DLRM_ROOT" -B "$1" -DCMAKE_BUILD_TYPE=Release -DDLRM_BUILD_TESTS=OFF \
    -DDLRM_BUILD_BINDINGS=OFF >/dev/null
}

dlrm_configure_tests() {
  local dir=$1; shift
  cmake -S "$DLRM_ROOT" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DDLRM_WERROR=ON \
    -DDLRM_BUILD_TESTS=ON -DDLRM_BUILD_BINDINGS=ON -DDLRM_BUILD_BENCH=ON -DDLRM_SANITIZE=OFF \
    "$@" >/dev/null
}

dlrm_configure_tsan() {
  local dir=$1; shift
  dlrm_configure_tests "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLRM_TSAN=ON \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DDLRM_BUILD_BINDINGS=OFF \
    -DDLRM_BUILD_BENCH=OFF "$@"
}

dlrm_configure_sanitizer() {
  local dir=$1; shift
  dlrm_configure_tests "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLRM_SANITIZE=ON \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DDLRM_FUZZ=ON -DDLRM_FUZZ_SECONDS=30 \
    -DDLRM_BUILD_BINDINGS=OFF "$@"
}
