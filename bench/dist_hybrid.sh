#!/bin/bash
# Hybrid against sync training with added network latency (issue: "with 2 ms of added
# latency per message, hybrid trains at least 2x faster than sync").
# A job of trainers + embedding servers on this machine (dlrm launch, default 2 + 2);
# every message leaves DLRM_NET_DELAY_MS after it is sent. Rounds alternate sync and
# hybrid; the steady samples/s (after the warm-up steps) of each round and the medians
# are printed.
# usage: bench/dist_hybrid.sh [--build DIR] [--rounds N] [--delay_ms D] [--batch B]
#                             [--steps S] [--config FILE] [--trainers T] [--servers S]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build/bench ROUNDS=3 DELAY=2 BATCH=256 STEPS=600 CONFIG=tools/configs/demo.pbtxt
TRAINERS=2 SERVERS=2
while [ $# -gt 0 ]; do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --delay_ms) DELAY=$2; shift 2 ;;
    --batch) BATCH=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --config) CONFIG=$2; shift 2 ;;
    --trainers) TRAINERS=$2; shift 2 ;;
    --servers) SERVERS=$2; shift 2 ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
done
DLRM=$BUILD/dlrm
DATA=${DLRM_BENCH_DATA:-/tmp/dlrm_dist_bench}
[ -f "$DATA/train.tsv" ] || "$DLRM" generate --out_dir="$DATA" --train_samples=300000 \
  --test_samples=1000 > /dev/null 2>&1
echo "machine: $(nproc) cores; $TRAINERS trainers + $SERVERS servers, 1 thread each;"
echo "global batch $BATCH;"
echo "added latency ${DELAY} ms per message; $STEPS steps per run, first 50 not timed"
declare -A runs
for round in $(seq 1 "$ROUNDS"); do
  for mode in sync hybrid; do
    line=$(DLRM_NET_DELAY_MS=$DELAY DLRM_TIMEOUT_MS=60000 "$DLRM" launch --trainers="$TRAINERS" \
      --servers="$SERVERS" -- train --config="$CONFIG" --train="$DATA/train.tsv" \
      --batch_size="$BATCH" \
      --threads=1 --mode=$mode --max_steps="$STEPS" --warmup_steps=50 \
      --log_every_seconds=1000 2>&1 | grep -o 'steady [0-9]* samples/s ([0-9.]* ms/step')
    rate=$(echo "$line" | awk '{print $2}')
    echo "round $round $mode: $line)"
    runs[$mode]="${runs[$mode]:-} $rate"
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
sync=$(echo "${runs[sync]}" | median)
hybrid=$(echo "${runs[hybrid]}" | median)
ratio=$(awk -v h="$hybrid" -v s="$sync" 'BEGIN {printf "%.2f", h / s}')
echo "median samples/s: sync $sync, hybrid $hybrid, hybrid/sync $ratio"
