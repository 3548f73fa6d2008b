#!/bin/bash
# The SSD tier against the same tables held in DRAM (issue 14, acceptance 3), in one
# invocation on one machine: `dlrm bench` trains one model three times on the same fresh
# Zipf batches (a pool as long as the run, so the caches see a stream, not a loop):
#   dram    TABLES tables of ROWS x DIM rows held in memory;
#   ssd     the same tables on the SSD tier under a cache budget of BUDGET_MB in all
#           (issue 14's case: 8 GiB of rows under 2 GiB);
#   stress  the same under STRESS_MB, so that the caches evict and read rows back from
#           disk at every step (a short run cannot fill the large caches).
# Prints each run's train samples/s, peak RSS and (SSD) cache hit rate and evictions, then
# the ratios ssd / dram and stress / dram, and ssd's peak RSS against budget + 1 GiB.
# --precision BF16 (or FP16) holds every table's rows in 16 bits (issue 16), in DRAM and
# on the SSD tier alike.
# usage: bench/ssd_tier.sh [--build DIR] [--tables N] [--rows R] [--dim D] [--budget_mb M]
#                          [--stress_mb M] [--steps S] [--batch_size B] [--zipf Z]
#                          [--precision FP32|BF16|FP16]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build/release TABLES=8 ROWS=16777216 DIM=16 BUDGET_MB=2048 STRESS_MB=16 STEPS=200
BATCH=2048 ZIPF=1.2 PRECISION=FP32
while [ $# -gt 0 ]; do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    --tables) TABLES=$2; shift 2 ;;
    --rows) ROWS=$2; shift 2 ;;
    --dim) DIM=$2; shift 2 ;;
    --budget_mb) BUDGET_MB=$2; shift 2 ;;
    --stress_mb) STRESS_MB=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --batch_size) BATCH=$2; shift 2 ;;
    --zipf) ZIPF=$2; shift 2 ;;
    --precision) PRECISION=$2; shift 2 ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
done
DLRM=$BUILD/dlrm
WORK=${DLRM_BENCH_DATA:-/tmp/dlrm_ssd_bench}
rm -rf "$WORK" && mkdir -p "$WORK/ssd"

config() {  # cache bytes per table, or 0 for DRAM
  echo "model {"
  echo "  num_dense_features: 13"
  for t in $(seq 0 $((TABLES - 1))); do
    local ssd=""
    [ "$1" -gt 0 ] && ssd=" ssd { cache_bytes: $1 }"
    echo "  tables { name: \"t$t\" num_rows: $ROWS dim: $DIM precision: $PRECISION$ssd }"
  done
  for t in $(seq 0 $((TABLES - 1))); do echo "  sparse_features { name: \"f$t\" table: \"t$t\" }"; done
  echo "  bottom_mlp { layer_sizes: 64 layer_sizes: $DIM }"
  echo "  top_mlp { layer_sizes: 64 layer_sizes: 1 }"
  echo "}"
  echo "sparse_optimizer { learning_rate: 0.05 sgd {} }"
  echo "dense_optimizer { learning_rate: 0.05 sgd {} }"
  echo "ssd_dir: \"$WORK/ssd\""
}
config 0 > "$WORK/dram.pbtxt"
config $((BUDGET_MB * 1048576 / TABLES)) > "$WORK/ssd.pbtxt"
config $((STRESS_MB * 1048576 / TABLES)) > "$WORK/stress.pbtxt"

declare -A rate rss
run() {  # name
  local out
  out=$("$DLRM" bench --config="$WORK/$1.pbtxt" --batch_size="$BATCH" --steps="$STEPS" \
    --pool_batches=$((STEPS + 5)) --zipf="$ZIPF" --threads=0 2>&1)
  [ "$1" = dram ] && echo "$out" | grep -E '^(machine|threads|model|data) '
  rate[$1]=$(echo "$out" | awk '/^train / { print $4 }')
  rss[$1]=$(echo "$out" | awk '/^peak_rss/ { print $2 }')
  echo "$1: train samples/s ${rate[$1]}, peak_rss ${rss[$1]} GB" \
    "$(echo "$out" | grep '^ssd tables' || true)"
}
bytes=4; [ "$PRECISION" = FP32 ] || bytes=2
echo "rows: $TABLES tables x $ROWS x $DIM $PRECISION = $((TABLES * ROWS * DIM * bytes / 1048576)) MiB;" \
  "ssd budget $BUDGET_MB MiB, stress budget $STRESS_MB MiB; store in $WORK/ssd"
run dram
run ssd
run stress
awk -v d="${rate[dram]}" -v s="${rate[ssd]}" -v x="${rate[stress]}" -v r="${rss[ssd]}" \
    -v b="$BUDGET_MB" 'BEGIN {
  printf "ssd / dram = %.3f (acceptance: >= 0.5); stress / dram = %.3f\n", s / d, x / d
  printf "ssd peak_rss %.2f GB vs budget + 1 GiB = %.2f GB\n", r, (b + 1024) * 1048576 / 1e9 }'
