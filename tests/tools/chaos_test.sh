#!/bin/bash
# Chaos (issue 17, acceptance 4): a 2 + 2 sync job with a checkpoint every CKPT steps. A
# bounded loop starts it (restoring the last complete checkpoint, if any), kills a random
# one of its 5 processes (SIGKILL) at a random moment (during start-up, rendezvous,
# restore, training or a save), and checks that
#   - the job ends within the timeout (no process hangs; fast failure does the rest),
#   - every checkpoint that is complete (has its MANIFEST) loads whole and evaluates,
#     and none is left half-written under a complete name.
# After KILLS kills the job runs to STEPS undisturbed; its final checkpoint must equal an
# uninterrupted run's file for file (sync training restores bitwise), and so must their
# evaluations. The victims and moments come from bash's RANDOM seeded with SEED.
# usage: chaos_test.sh DLRM CONFIG WORKDIR [KILLS] [SEED]
set -u
DLRM=$1
CONFIG=$2
WORK=$3
KILLS=${4:-20}
SEED=${5:-17}
STEPS=3000
CKPT=20
TIMEOUT_MS=10000
fail() {
  echo "FAIL: $*"
  for f in "$WORK"/run*.log; do [ -f "$f" ] && { echo "--- $f"; tail -20 "$f"; }; done
  exit 1
}

source "$(dirname "$0")/job_lib.sh"

rm -rf "$WORK" && mkdir -p "$WORK"
"$DLRM" generate --out_dir="$WORK/data" --train_samples=20000 --test_samples=500 \
  > "$WORK/generate.log" 2>&1 || fail "generate"
export DLRM_TIMEOUT_MS=$TIMEOUT_MS
RANDOM=$SEED

# job OUT_DIR LOG [--restore=...]: the job, in the background; its pid in $job_pid.
job() {
  local out=$1 log=$2
  shift 2
  "$DLRM" launch --trainers=2 --servers=2 -- train --config="$CONFIG" \
    --train="$WORK/data/train.tsv" --test="$WORK/data/test.tsv" --batch_size=256 --threads=1 \
    --epochs=1000 --max_steps=$STEPS --checkpoint_dir="$out" --checkpoint_every=$CKPT \
    --log_every_seconds=1000 "$@" > "$log" 2>&1 &
  job_pid=$!
}

# The complete checkpoints (step-N with a MANIFEST) under $1, by step.
complete() { ls -d "$1"/step-*/MANIFEST 2> /dev/null | sed 's|/MANIFEST$||' | sort -t- -k2 -n; }

# Loads every complete checkpoint not checked yet whole (CRCs of every file against the
# manifest) and evaluates it; then keeps only the newest, to bound the disk used.
declare -A verified
verify_and_prune() {
  local dirs newest
  dirs=$(complete "$WORK/chaos")
  for d in $dirs; do
    [ -n "${verified[$d]:-}" ] && continue
    "$DLRM" eval --checkpoint="$d" --test="$WORK/data/test.tsv" > "$WORK/eval.log" 2>&1 \
      || fail "a complete checkpoint does not load: $d: $(tail -2 "$WORK/eval.log")"
    verified[$d]=1
  done
  newest=$(echo "$dirs" | tail -1)
  for d in "$WORK"/chaos/step-*; do
    [ -d "$d" ] && [ "$d" != "$newest" ] && rm -rf "$d"
  done
}

# 1. The uninterrupted run.
start=$(date +%s)
job "$WORK/reference" "$WORK/run-reference.log"
wait $job_pid || fail "the uninterrupted run failed"
echo "uninterrupted run: $STEPS steps in $(( $(date +%s) - start )) s"

# 2. Kills, each followed by a restart from the last complete checkpoint.
start=$(date +%s)
declare -A killed
for k in $(seq 1 "$KILLS"); do
  restore=()
  [ -n "$(complete "$WORK/chaos")" ] && restore=(--restore="$WORK/chaos")
  log="$WORK/run-$k.log"
  job "$WORK/chaos" "$log" "${restore[@]}"
  names=(coordinator "server 0" "server 1" "trainer 0" "trainer 1")
  victim=${names[$((RANDOM % 5))]}
  pid=$(pid_of "$victim" "$log") || fail "kill $k: launch did not report the pid of $victim"
  sleep "0.$(printf %03d $((RANDOM % 1000)))"
  kill -0 $job_pid 2> /dev/null || fail "kill $k: the job ended before $victim was killed"
  kill -9 "$pid" 2> /dev/null || fail "kill $k: $victim (pid $pid) was not running"
  killed[$victim]=$(( ${killed[$victim]:-0} + 1 ))
  kill_time=$(date +%s%N)
  wait $job_pid && fail "kill $k: the job succeeded although $victim was killed"
  ended_ms=$(( ($(date +%s%N) - kill_time) / 1000000 ))
  ! grep -q "^launch: killing" "$log" || fail "kill $k: launch had to kill a process that hung"
  [ $ended_ms -le $((TIMEOUT_MS + 5000)) ] \
    || fail "kill $k: the job took ${ended_ms} ms to end after $victim was killed"
  verify_and_prune
  last=$(complete "$WORK/chaos" | tail -1)
  echo "kill $k: $victim, job ended in ${ended_ms} ms; last complete checkpoint ${last##*/}"
done
summary=""
for v in "${!killed[@]}"; do summary+=" $v x${killed[$v]}"; done
echo "$KILLS kills in $(( $(date +%s) - start )) s:$summary; ${#verified[@]} complete checkpoints" \
  "loaded and evaluated, none corrupted"

# 3. The last restart runs to the end; its checkpoint is the uninterrupted run's.
job "$WORK/chaos" "$WORK/run-final.log" --restore="$WORK/chaos"
wait $job_pid || fail "the final restart failed"
for f in "$WORK/reference/step-$STEPS"/*; do
  cmp -s "$f" "$WORK/chaos/step-$STEPS/${f##*/}" \
    || fail "step $STEPS: ${f##*/} differs from the uninterrupted run's"
done
ref_eval=$(grep -o "^eval .*" "$WORK/run-reference.log")
chaos_eval=$(grep -o "^eval .*" "$WORK/run-final.log")
[ -n "$ref_eval" ] && [ "$ref_eval" = "$chaos_eval" ] \
  || fail "evaluation '$chaos_eval' differs from the uninterrupted run's '$ref_eval'"
echo "step $STEPS after $KILLS kills equals the uninterrupted run bitwise: $chaos_eval"
echo PASS
