#!/usr/bin/env bash
# README command one: install what is missing, build, generate the demo data, train the
# demo model and print its eval AUC next to the data's Bayes-optimal AUC.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD=${DLRM_BUILD_DIR:-$ROOT/build/release}
DATA=${DLRM_DEMO_DIR:-$ROOT/build/demo}
JOBS=${DLRM_JOBS:-$(nproc)}

DLRM_ROOT=$ROOT
source scripts/configure.sh

scripts/install_deps.sh
dlrm_configure_demo "$BUILD"
cmake --build "$BUILD" --target dlrm_cli -j "$JOBS"

"$BUILD/dlrm" generate --out_dir="$DATA" --train_samples=${DLRM_DEMO_TRAIN:-4000000} \
  --test_samples=${DLRM_DEMO_TEST:-200000}
"$BUILD/dlrm" train --config=tools/configs/demo.pbtxt --train="$DATA/train.tsv" \
  --test="$DATA/test.tsv" --save="$DATA/demo.ckpt" --threads=0
