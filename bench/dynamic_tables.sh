#!/bin/bash
# DYNAMIC tables on raw ids against FIXED tables on indexed ids (issue 14, acceptance 1):
# the same synthetic samples (`dlrm generate`, then again with --raw_ids: each id sent
# through a fixed 64-bit bijection per feature) train the demo model three times, in one
# invocation on one machine:
#   fixed  tools/configs/demo.pbtxt on the indexed data;
#   full   every table DYNAMIC with capacity = the fixed table's rows (LRU) on raw ids;
#   half   every table DYNAMIC with half those rows, LFU eviction, on raw ids;
#   half_bf16  half with BF16 rows (stochastic rounding; issue 16).
# Prints each run's samples/s, eval AUC and (dynamic runs) hit rate, admissions and
# evictions, then the AUC differences full - fixed, half - fixed and half_bf16 - half.
# usage: bench/dynamic_tables.sh [--build DIR] [--train N] [--test M] [--threads T]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build/release TRAIN=4000000 TEST=200000 THREADS=-1
while [ $# -gt 0 ]; do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    --train) TRAIN=$2; shift 2 ;;
    --test) TEST=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
done
DLRM=$BUILD/dlrm
WORK=${DLRM_BENCH_DATA:-/tmp/dlrm_dynamic_bench}/$TRAIN
mkdir -p "$WORK"
for kind in indexed raw; do
  flag=""; [ $kind = raw ] && flag=--raw_ids
  [ -f "$WORK/$kind/test.tsv" ] || "$DLRM" generate --out_dir="$WORK/$kind" $flag \
    --train_samples="$TRAIN" --test_samples="$TEST" > /dev/null 2>&1
done
# The demo's tables made DYNAMIC: rows kept (full) or halved with LFU eviction (half).
awk '/tables \{ name:/ { sub(/dim: 16 }/, "dim: 16 kind: DYNAMIC }") } { print }' \
  tools/configs/demo.pbtxt > "$WORK/full.pbtxt"
awk '/tables \{ name:/ {
       match($0, /num_rows: [0-9]+/); rows = substr($0, RSTART + 10, RLENGTH - 10)
       sub(/num_rows: [0-9]+/, "num_rows: " int((rows + 1) / 2))
       sub(/dim: 16 }/, "dim: 16 kind: DYNAMIC dynamic { eviction: LFU } }") } { print }' \
  tools/configs/demo.pbtxt > "$WORK/half.pbtxt"
sed 's/kind: DYNAMIC/kind: DYNAMIC precision: BF16 rounding: STOCHASTIC/' "$WORK/half.pbtxt" \
  > "$WORK/half_bf16.pbtxt"

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "data: $TRAIN training and $TEST test samples (dlrm generate; raw ids: --raw_ids)"
declare -A auc
run() {  # name config data
  local out
  out=$("$DLRM" train --config="$2" --train="$WORK/$3/train.tsv" --test="$WORK/$3/test.tsv" \
    --threads="$THREADS" --log_every_seconds=100000 2>&1)
  auc[$1]=$(echo "$out" | grep '^eval' | grep -o ' auc=[0-9.]*' | cut -d= -f2)
  echo "$1: $(echo "$out" | grep -o '[0-9]* samples/s$') auc=${auc[$1]}" \
    "$(echo "$out" | grep '^dynamic tables' | cut -d' ' -f4- || true)"
}
run fixed tools/configs/demo.pbtxt indexed
run full "$WORK/full.pbtxt" raw
run half "$WORK/half.pbtxt" raw
run half_bf16 "$WORK/half_bf16.pbtxt" raw
awk -v f="${auc[fixed]}" -v d="${auc[full]}" -v h="${auc[half]}" -v b="${auc[half_bf16]}" 'BEGIN {
  printf "auc full - fixed = %+.6f (acceptance: within 0.002)\n", d - f
  printf "auc half - fixed = %+.6f\n", h - f
  printf "auc half_bf16 - half = %+.6f\n", b - h }'
