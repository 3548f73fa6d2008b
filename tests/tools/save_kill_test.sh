#!/bin/bash
# Checkpoint under kill (issue 17), single process: a writer trains and saves a 68 MB
# checkpoint to one path, over and over; it is killed (SIGKILL) at a random moment, KILLS
# times, each time resuming from what it left. After every kill the path must load whole
# (every CRC checked) at a step no earlier than the last save the writer saw return: the
# previous checkpoint always survives, a new one is complete or absent, and the dead
# writer's temporary is gone after that load. (The sharded checkpoints of a job are
# killed the same way by chaos_test.sh.)
# usage: save_kill_test.sh SAVE_LOOP SMALL_MODEL_CONFIG WORKDIR [KILLS] [SEED]
set -u
SAVE_LOOP=$1
SMALL=$2
WORK=$3
KILLS=${4:-20}
RANDOM=${5:-5}
fail() {
  echo "FAIL: $*"
  tail -5 "$WORK/writer.log"
  exit 1
}

rm -rf "$WORK" && mkdir -p "$WORK"
# The small model with a table of 4M rows x 4: saves long enough to be killed inside.
sed "s/num_rows: 50 dim: 4/num_rows: 4000000 dim: 4/" "$SMALL" > "$WORK/model.pbtxt"
grep -q "num_rows: 4000000" "$WORK/model.pbtxt" || fail "could not enlarge the small model"
ckpt="$WORK/model.ckpt"
saved=0 inside=0
for k in $(seq 1 "$KILLS"); do
  "$SAVE_LOOP" write "$WORK/model.pbtxt" "$ckpt" > "$WORK/writer.log" 2>&1 &
  writer=$!
  for _ in $(seq 1 400); do  # until it has saved once (resuming takes a load)
    grep -q "^saved step" "$WORK/writer.log" && break
    kill -0 $writer 2> /dev/null || fail "kill $k: the writer ended: $(tail -1 "$WORK/writer.log")"
    sleep 0.05
  done
  sleep "0.$(printf %03d $((RANDOM % 1000)))"
  kill -9 $writer 2> /dev/null || fail "kill $k: the writer was not running"
  wait $writer 2> /dev/null
  last=$(sed -n 's/^saved step //p' "$WORK/writer.log" | tail -1)
  [ -n "$last" ] || fail "kill $k: the writer never saved"
  ls "$ckpt".tmp.* > /dev/null 2>&1 && inside=$((inside + 1))  # killed inside a save
  step=$("$SAVE_LOOP" check "$ckpt" 2> "$WORK/check.log" | sed -n 's/^step //p')
  [ -n "$step" ] || fail "kill $k: the checkpoint does not load: $(cat "$WORK/check.log")"
  [ "$step" -ge "$last" ] || fail "kill $k: loaded step $step, but step $last was saved"
  ! ls "$ckpt".tmp.* > /dev/null 2>&1 || fail "kill $k: the dead writer's temporary is left"
  saved=$last
done
echo "$KILLS kills ($inside inside a save): the checkpoint always loaded, last at step $saved"
[ "$inside" -gt 0 ] || fail "no kill landed inside a save: the test checked nothing"
echo PASS
