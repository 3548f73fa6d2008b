#!/bin/bash
# Compressed communication (issue 16, acceptance 5): the demo model trained by a
# multi-process sync job (dlrm launch, 2 trainers + 2 embedding servers, one thread each)
# once per DistributedConfig.wire_precision (FP32, BF16, FP16) on the same data; prints
# each run's eval AUC, the payload bytes trainer 0 sent and received per step (the
# lookups' ids and rows, the update parts, the trainers' all-gather) and samples/s.
# usage: bench/wire_precision.sh [--build DIR] [--batch B] [--train N] [--test N]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build/release BATCH=2048 TRAIN=1000000 TEST=100000
while [ $# -gt 0 ]; do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    --batch) BATCH=$2; shift 2 ;;
    --train) TRAIN=$2; shift 2 ;;
    --test) TEST=$2; shift 2 ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
done
DLRM=$BUILD/dlrm
DATA=${DLRM_BENCH_DATA:-/tmp/dlrm_quantized_bench}/$TRAIN
mkdir -p "$DATA"
[ -f "$DATA/test.tsv" ] || "$DLRM" generate --out_dir="$DATA" --train_samples="$TRAIN" \
  --test_samples="$TEST" > /dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "machine: $(nproc) cores; 2 trainers + 2 servers, 1 thread each; global batch $BATCH;" \
  "$TRAIN training samples, one pass"
for wire in FP32 BF16 FP16; do
  { cat tools/configs/demo.pbtxt; echo "distributed { wire_precision: $wire }"; } > "$work/$wire.pbtxt"
  out=$(DLRM_TIMEOUT_MS=120000 "$DLRM" launch --trainers=2 --servers=2 -- train \
    --config="$work/$wire.pbtxt" --train="$DATA/train.tsv" --test="$DATA/test.tsv" \
    --batch_size="$BATCH" --threads=1 --mode=sync --log_every_seconds=100000 2>&1)
  auc=$(echo "$out" | grep -o 'auc=[0-9.]*' | head -1)
  bytes=$(echo "$out" | grep -o 'sent [0-9]* and received [0-9]*' | head -1)
  rate=$(echo "$out" | grep -o '[0-9]* samples/s' | head -1)
  echo "$wire: $auc; trainer 0 $bytes payload bytes per step; $rate"
done
