#!/bin/bash
# Two variants of a multi-process job, round after round, on this machine (dlrm launch of
# trainers + embedding servers, default 2 + 2); the steady samples/s (after the warm-up
# steps) of each round, the medians and their ratio are printed.
#   --compare modes (default): hybrid against sync training with added network latency
#     (issue: "with 2 ms of added latency per message, hybrid trains at least 2x faster
#     than sync"); every message leaves DLRM_NET_DELAY_MS after it is sent.
#   --compare auth: sync training with every message authenticated (DLRM_SECRET) against
#     none (issue 17: "with the secret, step time within 10% of the unauthenticated one").
# usage: bench/dist_hybrid.sh [--compare modes|auth] [--build DIR] [--rounds N]
#                             [--delay_ms D] [--batch B] [--steps S] [--config FILE]
#                             [--trainers T] [--servers S]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build/bench ROUNDS=3 DELAY=2 BATCH=256 STEPS=600 CONFIG=tools/configs/demo.pbtxt
TRAINERS=2 SERVERS=2 COMPARE=modes
while [ $# -gt 0 ]; do
  case $1 in
    --compare) COMPARE=$2; shift 2 ;;
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
case $COMPARE in
  modes) variants=(sync hybrid) ;;
  auth) variants=(plain secret); DELAY=0 ;;
  *) echo "--compare must be modes or auth, got $COMPARE"; exit 2 ;;
esac
echo "machine: $(nproc) cores; $TRAINERS trainers + $SERVERS servers, 1 thread each;"
echo "global batch $BATCH;"
echo "added latency ${DELAY} ms per message; $STEPS steps per run, first 50 not timed"
# One run of `variant`: its mode, and DLRM_SECRET for `secret`.
run() {
  local mode=$1 secret=()
  case $1 in plain) mode=sync ;; secret) mode=sync; secret=(DLRM_SECRET=bench-secret-of-32-bytes-0123456) ;; esac
  env "${secret[@]}" DLRM_NET_DELAY_MS="$DELAY" DLRM_TIMEOUT_MS=60000 "$DLRM" launch \
    --trainers="$TRAINERS" --servers="$SERVERS" -- train --config="$CONFIG" \
    --train="$DATA/train.tsv" --batch_size="$BATCH" --threads=1 --mode="$mode" \
    --max_steps="$STEPS" --warmup_steps=50 --log_every_seconds=1000 2>&1 |
    grep -o 'steady [0-9]* samples/s ([0-9.]* ms/step'
}
declare -A runs
ratios=""  # each round's second/first: the two runs of a round share the machine's mood
for round in $(seq 1 "$ROUNDS"); do
  rates=()
  for variant in "${variants[@]}"; do
    line=$(run "$variant")
    rate=$(echo "$line" | awk '{print $2}')
    echo "round $round $variant: $line)"
    runs[$variant]="${runs[$variant]:-} $rate"
    rates+=("$rate")
  done
  ratios+=" $(awk -v b="${rates[1]}" -v a="${rates[0]}" 'BEGIN {printf "%.3f", b / a}')"
done
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
first=$(echo "${runs[${variants[0]}]}" | median)
second=$(echo "${runs[${variants[1]}]}" | median)
ratio=$(awk -v b="$second" -v a="$first" 'BEGIN {printf "%.3f", b / a}')
echo "median samples/s: ${variants[0]} $first, ${variants[1]} $second," \
  "${variants[1]}/${variants[0]} $ratio"
echo "per-round ${variants[1]}/${variants[0]}:$ratios; median $(echo "$ratios" | median)"
