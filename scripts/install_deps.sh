#!/usr/bin/env bash
# Installs the Debian packages libdlrm needs, only those that are missing.
set -euo pipefail

PACKAGES=(
  cmake make g++ pkg-config
  libprotobuf-dev protobuf-compiler
  libgoogle-glog-dev libgflags-dev
  libgtest-dev libgmock-dev
  libopenblas-dev
  libzmq3-dev libsodium-dev libssl-dev  # engine/net: transport, message authentication
  libgloo-dev  # engine/collective: the DLRM_COLLECTIVE=gloo all-gather of the trainers
  libbenchmark-dev  # bench/: dlrm_micro_bench
  libabsl-dev  # bench/: absl::flat_hash_map, the peer of the dynamic table's id map
  openmpi-bin libopenmpi-dev  # examples/mpi: the MPI host and its 2-rank test
  binutils
  clang libclang-rt-14-dev  # the sanitizer build and tests/fuzz/'s libFuzzer harnesses
  patchelf  # scripts/bundle_runtime.py: the wheel's and jar's libraries load from $ORIGIN
  # bindings: Java (JDK 17, SWIG, JUnit 4) and Go (cgo)
  openjdk-17-jdk-headless swig junit4
  golang-go
)
# Python test dependencies come from PyPI.
PIP_PACKAGES=(numpy pytest tqdm matplotlib pyarrow pandas pyspark)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#PACKAGES[@]} Debian packages present"
else
  echo "install_deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

PYTHON=${PYTHON:-python3}
missing_py=()
for p in "${PIP_PACKAGES[@]}"; do
  "$PYTHON" -c "import $p" 2>/dev/null || missing_py+=("$p")
done
if [ ${#missing_py[@]} -gt 0 ]; then
  echo "install_deps: pip installing ${missing_py[*]}"
  "$PYTHON" -m pip install -q "${missing_py[@]}"
fi
