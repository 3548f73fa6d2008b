#!/usr/bin/env bash
# README's "Using libdlrm outside this repository", step by step, in a fresh directory
# outside the repository (under $TMPDIR, removed afterwards): cmake --install into a
# prefix there, then a C program (pkg-config and CMake), a Go module (vendored, `#cgo
# pkg-config: dlrm`), a Java program (the installed dlrm.jar only) and a Python venv (pip
# install of the package) each build and run with nothing of the build tree on their paths.
# usage: outside_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
BUILD=$1
SRC=$2
APPS=$SRC/tests/install/outside
MODEL=$SRC/tests/data/small_model.pbtxt
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dlrm-outside-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
PREFIX=$WORK/prefix
cmake --install "$BUILD" --prefix "$PREFIX" > install.log
export PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig
unset LD_LIBRARY_PATH DLRM_LIBRARY

# C: pkg-config, then CMake's find_package(dlrm).
mkdir capp && cp "$SRC/tests/install/consumer.c" "$SRC/tests/install/CMakeLists.txt" capp/
(
  cd capp
  cc -std=c99 -Wall -Werror consumer.c $(pkg-config --cflags --libs dlrm) -o app_pc
  ./app_pc
  cmake -S . -B build -DCMAKE_PREFIX_PATH="$PREFIX" > /dev/null
  cmake --build build > /dev/null
  ./build/consumer
)

# Go: a module of its own; libdlrm.dev/dlrm comes from the source tree by a replace
# directive (no module proxy serves it), vendored, found by pkg-config.
mkdir goapp && cp "$APPS/main.go" goapp/
(
  cd goapp
  export GOFLAGS=-mod=mod GOPROXY=off GOSUMDB=off GOTOOLCHAIN=local GOWORK=off
  export GOCACHE=$WORK/gocache GOPATH=$WORK/gopath HOME=$WORK
  go mod init example.com/app > /dev/null 2>&1
  go mod edit -require=libdlrm.dev/dlrm@v0.0.0 -replace=libdlrm.dev/dlrm="$SRC/bindings/go"
  go mod tidy > /dev/null
  go mod vendor
  GOFLAGS=-mod=vendor go build -o app .
  ./app "$MODEL"
)

# Java: the installed jar carries the native libraries.
mkdir javaapp && cp "$APPS/App.java" javaapp/
(
  cd javaapp
  javac -cp "$PREFIX/share/java/dlrm.jar" App.java
  java -cp "$PREFIX/share/java/dlrm.jar:." App "$MODEL"
)

# Python: a venv (its numpy from the system), the package pip-installed from the source
# with the installed library and command bundled.
python3 -m venv --system-site-packages venv
DLRM_LIBRARY=$(ls "$PREFIX"/lib/libdlrm.so.*.*) DLRM_CLI=$PREFIX/bin/dlrm \
  venv/bin/pip install --no-deps --no-build-isolation --no-index --quiet \
  --disable-pip-version-check "$SRC/bindings/python"
(cd "$WORK" && venv/bin/python "$APPS/app.py" "$MODEL")
venv/bin/dlrm generate --out_dir="$WORK/data" --train_samples=20 --test_samples=2 > /dev/null
echo "outside_test: C, Go, Java and Python built and ran in $WORK"
