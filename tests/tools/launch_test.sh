#!/bin/bash
# A multi-process job end to end with `dlrm launch` (2 trainers, 2 embedding servers):
#  1. it trains and writes sharded checkpoints;
#  2. killing a server (SIGKILL) mid-run makes both trainers exit with an error naming that
#     server, and the whole job ends, within seconds;
#  3. a new job restored from the last complete checkpoint continues from its step and
#     finishes cleanly, with an evaluation, and one process loads its last checkpoint whole
#     and evaluates it the same; a job without servers (the trainers own the shards)
#     evaluates as the job with them.
# usage: launch_test.sh DLRM CONFIG WORKDIR
set -u
DLRM=$1
CONFIG=$2
WORK=$3
TIMEOUT_MS=5000
fail() {
  echo "FAIL: $*"
  for f in "$WORK"/run*.log; do echo "--- $f"; tail -30 "$f"; done
  exit 1
}

source "$(dirname "$0")/job_lib.sh"

rm -rf "$WORK" && mkdir -p "$WORK"
"$DLRM" generate --out_dir="$WORK/data" --train_samples=40000 --test_samples=4000 \
  > "$WORK/generate.log" 2>&1 || fail "generate"
export DLRM_TIMEOUT_MS=$TIMEOUT_MS
common=(--config="$CONFIG" --train="$WORK/data/train.tsv" --batch_size=256 --threads=1
        --epochs=1000 --checkpoint_dir="$WORK/ckpt" --checkpoint_every=20 --log_every_seconds=1000)

# 1-2. Train until a checkpoint exists, then kill server 1.
"$DLRM" launch --trainers=2 --servers=2 -- train "${common[@]}" > "$WORK/run1.log" 2>&1 &
launch=$!
await_file "$WORK/ckpt/step-40/MANIFEST" $launch "its second checkpoint"
server=$(pid_of "server 1" "$WORK/run1.log") || fail "launch did not report server 1's pid"
start=$(date +%s%N)
kill -9 "$server"
wait $launch
rc=$?
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
[ $rc -ne 0 ] || fail "the job succeeded although a server was killed"
for t in 0 1; do
  grep -q "launch: trainer $t (pid [0-9]*) exited with status 1" "$WORK/run1.log" \
    || fail "trainer $t did not exit with an error"
done
errors=$(grep -c "E[0-9]*.*NETWORK: server 1 (rank 1 at tcp://.*) is gone" "$WORK/run1.log")
[ "$errors" -ge 2 ] || fail "expected both trainers to name server 1 in their errors"
# The coordinator takes server 1 for dead after the liveness silence (3 s) and tells the
# others within a beat (kill_test.sh covers every role with the default timeout).
limit_ms=15000
[ $elapsed_ms -le $limit_ms ] || fail "the job took ${elapsed_ms} ms to end (limit ${limit_ms})"
echo "killed server 1: job ended in ${elapsed_ms} ms with exit code $rc"

# 3. Restart from the last complete checkpoint and go on for 30 steps.
last=$(ls -d "$WORK"/ckpt/step-* | sed 's/.*step-//' | sort -n | tail -1)
while [ ! -f "$WORK/ckpt/step-$last/MANIFEST" ]; do
  last=$(ls -d "$WORK"/ckpt/step-* | sed 's/.*step-//' | sort -n \
         | awk -v l=$last '$1 < l' | tail -1)
  [ -n "$last" ] || fail "no complete checkpoint"
done
"$DLRM" launch --trainers=2 --servers=2 -- train "${common[@]}" --restore="$WORK/ckpt" \
  --max_steps=$((last + 30)) --test="$WORK/data/test.tsv" > "$WORK/run2.log" 2>&1 \
  || fail "the restored job failed"
grep -q "trainer 0: restored step $last from" "$WORK/run2.log" \
  || fail "trainer 0 did not restore step $last"
grep -q "server 1: restored step $last from" "$WORK/run2.log" \
  || fail "server 1 did not restore step $last"
grep -q "trained 30 steps (to step $((last + 30)))" "$WORK/run2.log" \
  || fail "did not train 30 more steps"
grep -q "^eval .*auc=0\.[5-9]" "$WORK/run2.log" || fail "no evaluation after the restored run"
echo "restored step $last and trained to step $((last + 30))"

# 3b. One process loads the job's last checkpoint whole: its evaluation is the job's, and
#     it exports a serving model.
final="$WORK/ckpt/step-$((last + 30))"
[ -f "$final/MANIFEST" ] || fail "no checkpoint at the end of the restored run"
"$DLRM" eval --checkpoint="$final" --test="$WORK/data/test.tsv" > "$WORK/eval.log" 2>&1 \
  || fail "eval of the sharded checkpoint: $(tail -3 "$WORK/eval.log")"
job_eval=$(grep -o "log_loss=[0-9.]* auc=[0-9.]*" "$WORK/run2.log" | tail -1)
one_eval=$(grep -o "log_loss=[0-9.]* auc=[0-9.]*" "$WORK/eval.log" | tail -1)
[ -n "$job_eval" ] && [ "$job_eval" = "$one_eval" ] \
  || fail "one process's $one_eval differs from the job's $job_eval"
"$DLRM" export --checkpoint="$final" --out="$WORK/serving.model" > "$WORK/export.log" 2>&1 \
  || fail "export of the sharded checkpoint: $(tail -3 "$WORK/export.log")"
echo "one process loaded step $((last + 30)) whole: $one_eval, as the job"

# 3c. A job without servers: the trainers own the embedding shards (the Neo layout). It
#     trains as the job with servers does (both are one process bitwise: the same AUC), and
#     one process loads its checkpoint whole.
for servers in 0 2; do
  "$DLRM" launch --trainers=2 --servers=$servers -- train "${common[@]}" --max_steps=30 \
    --checkpoint_dir="$WORK/owners$servers" --test="$WORK/data/test.tsv" \
    > "$WORK/run_owners$servers.log" 2>&1 || fail "the job with $servers servers failed"
  grep -q "job: 2 trainers, $servers servers" "$WORK/run_owners$servers.log" \
    || fail "the job with $servers servers did not say so"
done
neo_eval=$(grep -o "log_loss=[0-9.]* auc=[0-9.]*" "$WORK/run_owners0.log" | tail -1)
ps_eval=$(grep -o "log_loss=[0-9.]* auc=[0-9.]*" "$WORK/run_owners2.log" | tail -1)
[ -n "$neo_eval" ] && [ "$neo_eval" = "$ps_eval" ] \
  || fail "the trainers owning the shards evaluate $neo_eval, the job with servers $ps_eval"
"$DLRM" eval --checkpoint="$WORK/owners0/step-30" --test="$WORK/data/test.tsv" \
  > "$WORK/eval_owners.log" 2>&1 || fail "eval of the trainers' checkpoint"
one_eval=$(grep -o "log_loss=[0-9.]* auc=[0-9.]*" "$WORK/eval_owners.log" | tail -1)
[ "$one_eval" = "$neo_eval" ] || fail "one process's $one_eval differs from the job's $neo_eval"
echo "trainers owning the shards: $neo_eval, as the job with servers and one process"

# 4. Bad launches and bad job flags end with an error naming the problem.
"$DLRM" launch --trainers=0 --servers=1 -- train > "$WORK/run3.log" 2>&1 \
  && fail "launched 0 trainers"
grep -q "needs --trainers >= 1" "$WORK/run3.log" || fail "no message for 0 trainers"
"$DLRM" launch --trainers=1 --servers=-1 -- train > "$WORK/run3b.log" 2>&1 \
  && fail "launched -1 servers"
grep -q "and --servers >= 0 (0: the trainers own the embedding shards), got 1 and -1" \
  "$WORK/run3b.log" || fail "no message for -1 servers"
"$DLRM" launch --trainers=1 --servers=1 > "$WORK/run4.log" 2>&1 && fail "launched no command"
grep -q "launch needs the command" "$WORK/run4.log" || fail "no message for a missing command"
"$DLRM" launch --trainers=2 --servers=1 -- train "${common[@]}" --batch_size=255 \
  > "$WORK/run5.log" 2>&1 && fail "trained with a batch the trainers cannot split"
grep -q "batch_size 255 must be a positive multiple of the 2 trainers" "$WORK/run5.log" \
  || fail "no message for an unsplittable batch"
"$DLRM" launch --trainers=1 --servers=1 -- train "${common[@]}" --mode=fast \
  > "$WORK/run6.log" 2>&1 && fail "trained in mode fast"
grep -q "mode must be sync or hybrid" "$WORK/run6.log" || fail "no message for a bad mode"
# A trainer asked for a GPU where none can be used ends the job naming why, never trains on
# the CPU instead (on a GPU machine it trains there: cuda_trainer_test).
if ! command -v nvidia-smi > /dev/null; then
  "$DLRM" launch --trainers=1 --servers=1 -- train "${common[@]}" --device=cuda \
    --max_steps=5 > "$WORK/run7.log" 2>&1 && fail "trained on cuda without a GPU"
  grep -Eq "FAILED_PRECONDITION: (no usable CUDA device|device.kind is CUDA but this libdlrm was built without CUDA)" \
    "$WORK/run7.log" || fail "no message naming why cuda cannot be used"
  DLRM_COLLECTIVE=nccl "$DLRM" launch --trainers=1 --servers=1 -- train "${common[@]}" \
    --max_steps=5 > "$WORK/run8.log" 2>&1 && fail "DLRM_COLLECTIVE=nccl was taken by a CPU trainer"
  grep -q "DLRM_COLLECTIVE=nccl needs device.kind CUDA" "$WORK/run8.log" \
    || fail "no message for nccl on a CPU trainer"
  # cuda:local is the GPU of the trainer's DLRM_LOCAL_RANK, which dlrm launch sets ...
  "$DLRM" launch --trainers=1 --servers=1 -- train "${common[@]}" --device=cuda:local \
    --max_steps=5 > "$WORK/run9.log" 2>&1 && fail "trained on cuda:local without a GPU"
  grep -Eq "FAILED_PRECONDITION: (no usable CUDA device|device.kind is CUDA but)" \
    "$WORK/run9.log" || fail "cuda:local did not reach the device"
  # DLRM_DEVICE says the same for one config (a Spark task's GPU); every process of the job
  # inherits it here, and the servers ignore it ...
  DLRM_DEVICE=cuda:local "$DLRM" launch --trainers=1 --servers=1 -- train "${common[@]}" \
    --max_steps=5 > "$WORK/run11.log" 2>&1 && fail "trained on DLRM_DEVICE=cuda:local without a GPU"
  grep -Eq "FAILED_PRECONDITION: (no usable CUDA device|device.kind is CUDA but)" \
    "$WORK/run11.log" || fail "DLRM_DEVICE did not reach the trainer's device"
  # ... and a trainer's --device overrides it.
  DLRM_DEVICE=cuda "$DLRM" launch --trainers=1 --servers=1 -- train "${common[@]}" \
    --device=cpu --max_steps=2 > "$WORK/run12.log" 2>&1 \
    || fail "--device=cpu did not override DLRM_DEVICE=cuda: $(tail -3 "$WORK/run12.log")"
  # ... and another launcher must.
  DLRM_ROLE=trainer DLRM_RANK=1 DLRM_WORLD_SIZE=2 DLRM_COORDINATOR=127.0.0.1:1 "$DLRM" train \
    "${common[@]}" --device=cuda:local > "$WORK/run10.log" 2>&1 \
    && fail "cuda:local without DLRM_LOCAL_RANK was taken"
  grep -q "device=cuda:local needs DLRM_LOCAL_RANK" "$WORK/run10.log" \
    || fail "no message for cuda:local without DLRM_LOCAL_RANK"
fi
echo PASS
