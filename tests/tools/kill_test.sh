#!/bin/bash
# Fast failure (issue 17, acceptance 6): killing one process of a 2 + 2 job (a server, a
# trainer, the coordinator) with SIGKILL ends every other process by itself, each with
# an error naming the dead peer, in under 10 s with the default DLRM_TIMEOUT_MS (60 s).
# `dlrm launch` kills the survivors only after the timeout, so each exit here is the
# process's own.
# usage: kill_test.sh DLRM CONFIG WORKDIR
set -u
DLRM=$1
CONFIG=$2
WORK=$3
LIMIT_MS=10000
fail() {
  echo "FAIL: $*"
  for f in "$WORK"/kill-*.log; do echo "--- $f"; tail -30 "$f"; done
  exit 1
}

source "$(dirname "$0")/job_lib.sh"

rm -rf "$WORK" && mkdir -p "$WORK"
"$DLRM" generate --out_dir="$WORK/data" --train_samples=40000 --test_samples=1000 \
  > "$WORK/generate.log" 2>&1 || fail "generate"
unset DLRM_TIMEOUT_MS

# kill_one VICTIM PATTERN: runs a job, kills VICTIM once it has checkpointed, and checks
# that each other process exits with status 1 within LIMIT_MS, its own error (glog's
# E line from its pid) matching PATTERN.
kill_one() {
  local victim=$1 pattern=$2
  local log="$WORK/kill-${victim// /-}.log" ckpt="$WORK/ckpt-${victim// /-}"
  "$DLRM" launch --trainers=2 --servers=2 -- train --config="$CONFIG" \
    --train="$WORK/data/train.tsv" --batch_size=256 --threads=1 --epochs=1000 \
    --checkpoint_dir="$ckpt" --checkpoint_every=20 --log_every_seconds=1000 > "$log" 2>&1 &
  local launch=$!
  await_file "$ckpt/step-20/MANIFEST" $launch "its first checkpoint ($victim's run)"
  local target
  target=$(pid_of "$victim" "$log") || fail "launch did not report the pid of $victim"
  local start
  start=$(date +%s%N)
  kill -9 "$target"
  wait $launch
  local rc=$?
  local elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
  [ $rc -ne 0 ] || fail "$victim: the job succeeded although $victim was killed"
  ! grep -q "^launch: killing" "$log" || fail "$victim: launch had to kill a survivor"
  for other in coordinator "server 0" "server 1" "trainer 0" "trainer 1"; do
    [ "$other" = "$victim" ] && continue
    local pid
    pid=$(pid_of "$other" "$log") || fail "launch did not report the pid of $other"
    grep -q "^launch: $other (pid $pid) exited with status 1" "$log" \
      || fail "$victim: $other did not exit with an error of its own"
    grep -E "^E[0-9]+ [0-9:.]+ +$pid " "$log" | grep -qE "$pattern" \
      || fail "$victim: the error of $other (pid $pid) does not name $victim"
  done
  [ $elapsed_ms -lt $LIMIT_MS ] \
    || fail "$victim: the job took ${elapsed_ms} ms to end (limit ${LIMIT_MS})"
  echo "killed $victim: every other process ended with an error naming it in ${elapsed_ms} ms"
}

kill_one "server 1" "server 1 \(rank 1 at tcp://.*\) is gone"
kill_one "trainer 0" "trainer 0 \(rank 2 at tcp://.*\) is gone"
kill_one coordinator "the coordinator at tcp://127.0.0.1:[0-9]+ is gone"
echo PASS
