#!/usr/bin/env bash
# `dlrm plan` end to end: the MLPerf DLRM-DCNv2 tables over 8 servers print every shard,
# per-server totals and the imbalance; the plan file is written; the plan for 8 trainers
# that own the shards; bad flags are errors.
set -euo pipefail
DLRM=$1
SOURCE=$2
DIR=$3
rm -rf "$DIR" && mkdir -p "$DIR"
CONFIG="$SOURCE/bench/configs/mlperf_dcnv2.pbtxt"

fail() { echo "FAIL: $*"; exit 1; }

"$DLRM" plan --config="$CONFIG" --servers=8 --plan_out="$DIR/plan.pbtxt" > "$DIR/plan.out"
grep -q "^plan: 26 tables, 8 servers, batch 65536, sparse optimizer adagrad" "$DIR/plan.out" \
  || fail "no header"
grep -qE "^C1 +RW +[0-9]+ +\[0, 5000000\) +\[0, 128\)" "$DIR/plan.out" || fail "no C1 row-wise shard"
grep -qE "^C6 +DP +- " "$DIR/plan.out" || fail "no data-parallel shard without a server"
[ "$(grep -cE '^[0-7] +[0-9]+ ' "$DIR/plan.out")" -eq 8 ] || fail "not 8 per-server lines"
load=$(sed -n 's/^load imbalance (max\/mean): \([0-9.]*\) .*/\1/p' "$DIR/plan.out")
memory=$(sed -n 's/^memory imbalance (max\/mean): \([0-9.]*\) .*/\1/p' "$DIR/plan.out")
[ -n "$load" ] && [ -n "$memory" ] || fail "imbalance not printed"
awk -v l="$load" -v m="$memory" 'BEGIN { exit !(l >= 1 && l <= 1.1 && m >= 1 && m <= 1.1) }' \
  || fail "imbalance load=$load memory=$memory"
grep -q "^load_imbalance: " "$DIR/plan.pbtxt" || fail "plan file has no load_imbalance"
[ "$(grep -c '^shards {' "$DIR/plan.pbtxt")" -gt 26 ] || fail "plan file lacks shards"

# --batch_size overrides sharding.batch_size; --print_shards=false keeps only the totals.
"$DLRM" plan --config="$CONFIG" --servers=64 --batch_size=1024 --print_shards=false > "$DIR/small.out"
grep -q "^plan: 26 tables, 64 servers, batch 1024," "$DIR/small.out" || fail "--batch_size ignored"
if grep -qE "^C1 +RW" "$DIR/small.out"; then fail "--print_shards=false printed shards"; fi
grep -q "^load imbalance" "$DIR/small.out" || fail "no imbalance without shards"

# --servers=0: the trainers own the shards; no server group's pieces (TWRW), C21 (47% of
# the lookups) cut over the trainers, and the lookups stay balanced.
"$DLRM" plan --config="$CONFIG" --servers=0 --trainers=8 > "$DIR/trainers.out"
grep -q "^plan: 26 tables, 8 trainers, batch 65536" "$DIR/trainers.out" || fail "no trainers header"
if grep -qE "^C[0-9]+ +TWRW " "$DIR/trainers.out"; then fail "a server group's piece for trainers"; fi
[ "$(grep -cE '^C21 +(RW|CW) +[0-7] ' "$DIR/trainers.out")" -gt 1 ] || fail "C21 not cut"
[ "$(grep -cE '^[0-7] +[0-9]+ ' "$DIR/trainers.out")" -eq 8 ] || fail "not 8 per-trainer lines"
load=$(sed -n 's/^load imbalance (max\/mean): \([0-9.]*\) .*/\1/p' "$DIR/trainers.out")
awk -v l="$load" 'BEGIN { exit !(l >= 1 && l <= 1.1) }' || fail "trainers' load imbalance $load"
if "$DLRM" plan --config="$CONFIG" --servers=0 --trainers=0 2> "$DIR/err0"; then
  fail "--trainers=0 accepted"
fi
grep -q -- "--trainers must be in \[1, " "$DIR/err0" || fail "bad --trainers not named"

# Usage errors name the flag.
if "$DLRM" plan --config="$CONFIG" 2> "$DIR/err1"; then fail "plan without --servers accepted"; fi
grep -q -- "--servers" "$DIR/err1" || fail "missing --servers not named"
if "$DLRM" plan --config="$CONFIG" --servers=-3 2> "$DIR/err2"; then fail "--servers=-3 accepted"; fi
grep -q -- "--servers" "$DIR/err2" || fail "bad --servers not named"
if "$DLRM" plan --config="$CONFIG" --servers=8 --batch_size=0 2> "$DIR/err3"; then
  fail "--batch_size=0 accepted"
fi
grep -q -- "--batch_size" "$DIR/err3" || fail "bad --batch_size not named"
echo "plan_cli_test: all checks passed"
