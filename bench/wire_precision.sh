#!/bin/bash
# Compressed communication (issue 16, acceptance 5): the demo model trained by a
# multi-process sync job (dlrm launch, 2 trainers + 2 embedding servers, one thread each)
# once per DistributedConfig.wire_precision (FP32, BF16, FP16) on the same data, and once
# more with BF16 tables on the servers (and a BF16 wire); prints each run's eval AUC, the
# payload bytes trainer 0 sent and received per step (the lookups' ids and rows, the
# update parts, the trainers' all-gather), samples/s, and the servers' planned memory.
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
# tables/wire precisions of each run
for run in FP32/FP32 FP32/BF16 FP32/FP16 BF16/BF16; do
  tables=${run%/*} wire=${run#*/} config="$work/${run/\//_}.pbtxt"
  { sed "s/dim: 16 }/dim: 16 precision: $tables }/" tools/configs/demo.pbtxt
    echo "distributed { wire_precision: $wire }"; } > "$config"
  memory=$("$DLRM" plan --config="$config" --servers=2 | grep -o 'servers: total memory [0-9.]* [KMG]*i*B')
  out=$(DLRM_TIMEOUT_MS=120000 "$DLRM" launch --trainers=2 --servers=2 -- train \
    --config="$config" --train="$DATA/train.tsv" --test="$DATA/test.tsv" \
    --batch_size="$BATCH" --threads=1 --mode=sync --log_every_seconds=100000 2>&1)
  auc=$(echo "$out" | grep -o 'auc=[0-9.]*' | head -1)
  bytes=$(echo "$out" | grep -o 'sent [0-9]* and received [0-9]*' | head -1)
  rate=$(echo "$out" | grep -o '[0-9]* samples/s' | head -1)
  echo "tables $tables, wire $wire: $auc; trainer 0 $bytes payload bytes per step; $rate; $memory"
done
