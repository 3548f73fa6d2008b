#!/usr/bin/env bash
# Runs one libFuzzer harness of tests/fuzz/ for a budget, from a fresh corpus directory
# seeded by the harness itself (-dlrm_seeds, fuzz_support.h) and by any seed directories
# given; prints the harness's executions per second and the corpus it ended with. Exits
# non-zero when the fuzzer found a crash (its input is saved beside the corpus as crash-*).
#   run_fuzzer.sh HARNESS SECONDS WORK_DIR [SEED_DIR...]
set -euo pipefail
harness=$1 seconds=$2 work=$3
shift 3
rm -rf "$work" && mkdir -p "$work/corpus"
name=$(basename "$harness")
# Leaks are checked at exit by ASan; libFuzzer's own per-input leak check would also flag
# the engine's caches that live for the process.
status=0
"$harness" -max_total_time="$seconds" -print_final_stats=1 -detect_leaks=0 -timeout=30 \
  -rss_limit_mb=4096 -artifact_prefix="$work/" -dlrm_seeds="$work/corpus" \
  "$work/corpus" "$@" > "$work/log.txt" 2>&1 || status=$?
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log.txt")
rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/log.txt")
files=$(find "$work/corpus" -type f | wc -l)
bytes=$(du -sb "$work/corpus" | cut -f1)
echo "$name: ${seconds} s, ${runs:-?} inputs, ${rate:-?} exec/s, corpus $files files ($bytes bytes)"
if [ "$status" -ne 0 ]; then
  echo "$name: the fuzzer stopped with status $status; the end of its log:"
  tail -40 "$work/log.txt"
fi
exit "$status"
