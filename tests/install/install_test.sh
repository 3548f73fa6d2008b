#!/usr/bin/env bash
# Installs the build into a fresh prefix, runs the installed `dlrm` command, then builds a
# C program against the installed copy twice: with pkg-config and with CMake's
# find_package(dlrm).
set -euo pipefail
BUILD=$1
SRC=$2
WORK=$3
EXTRA_CFLAGS=${4:-}  # e.g. the sanitizer flags the library was built with
CC=${5:-cc}  # the library's compiler: its sanitizer runtime is the one the consumer links
rm -rf "$WORK" && mkdir -p "$WORK"
PREFIX=$WORK/prefix
cmake --install "$BUILD" --prefix "$PREFIX" > "$WORK/install.log"
LIBDIR=$(dirname "$(find "$PREFIX" -name 'libdlrm.so' | head -1)")
[ -f "$PREFIX/include/dlrm/dlrm.h" ] || { echo "header not installed"; exit 1; }
ls "$LIBDIR"/libdlrm.so.* > /dev/null || { echo "no versioned library"; exit 1; }
soname=$(objdump -p "$LIBDIR/libdlrm.so" | awk '/SONAME/ { print $2 }')
[[ "$soname" == libdlrm.so.* ]] || { echo "bad soname: $soname"; exit 1; }

# The installed command runs from the prefix, with nothing else on the paths.
[ -x "$PREFIX/bin/dlrm" ] || { echo "dlrm command not installed"; exit 1; }
env -i PATH=/usr/bin:/bin "$PREFIX/bin/dlrm" generate --out_dir="$WORK/data" \
  --train_samples=100 --test_samples=10 > "$WORK/generate.log" 2>&1 \
  || { echo "installed dlrm generate failed:"; cat "$WORK/generate.log"; exit 1; }
[ -s "$WORK/data/train.tsv" ] || { echo "installed dlrm generate wrote no data"; exit 1; }

export PKG_CONFIG_PATH=$LIBDIR/pkgconfig
"$CC" -std=c99 -Wall -Werror $EXTRA_CFLAGS "$SRC/consumer.c" $(pkg-config --cflags --libs dlrm) \
  -o "$WORK/consumer_pc"
env -u LD_LIBRARY_PATH "$WORK/consumer_pc"  # the .pc file's rpath finds the library

cmake -S "$SRC" -B "$WORK/cmake_build" -DCMAKE_PREFIX_PATH="$PREFIX" -DCMAKE_C_COMPILER="$CC" \
  -DCMAKE_C_FLAGS="$EXTRA_CFLAGS" -DCMAKE_EXE_LINKER_FLAGS="$EXTRA_CFLAGS" > /dev/null
cmake --build "$WORK/cmake_build" > /dev/null
env -u LD_LIBRARY_PATH "$WORK/cmake_build/consumer"  # CMake's build rpath finds it
echo "install_test: pkg-config and find_package consumers built and ran"
