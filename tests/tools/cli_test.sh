#!/usr/bin/env bash
# The `dlrm` command line end to end on a small generated data set: generate, train with
# the demo config, evaluate the saved checkpoint; then the malformed-line policies.
set -euo pipefail
DLRM=$1
CONFIG=$2
DIR=$3
rm -rf "$DIR" && mkdir -p "$DIR"

fail() { echo "FAIL: $*"; exit 1; }

"$DLRM" generate --out_dir="$DIR" --train_samples=30000 --test_samples=5000 --seed=4 > "$DIR/gen.out"
grep -q "bayes_optimal_auc_test=0\.[5-9]" "$DIR/gen.out" || fail "generate printed no Bayes AUC"
[ "$(wc -l < "$DIR/train.tsv")" -eq 30000 ] || fail "train.tsv line count"
[ "$(awk -F'\t' '{print NF}' "$DIR/train.tsv" | sort -u)" = "40" ] || fail "train.tsv field count"

"$DLRM" train --config="$CONFIG" --train="$DIR/train.tsv" --test="$DIR/test.tsv" \
  --save="$DIR/model.ckpt" --batch_size=512 --log_every_seconds=0 > "$DIR/train.out"
grep -q "^step 1/59 " "$DIR/train.out" || fail "no progress line"
grep -q "samples/s" "$DIR/train.out" || fail "no throughput"
grep -q "eta" "$DIR/train.out" || fail "no ETA"
auc=$(sed -n 's/^eval .* auc=\([0-9.]*\)$/\1/p' "$DIR/train.out")
[ -n "$auc" ] || fail "no eval line"
awk -v a="$auc" 'BEGIN { exit !(a > 0.6) }' || fail "eval AUC $auc too low"
grep -q "^bayes_optimal_auc=" "$DIR/train.out" || fail "no Bayes AUC comparison"
[ -f "$DIR/model.ckpt" ] || fail "no checkpoint"

"$DLRM" eval --checkpoint="$DIR/model.ckpt" --test="$DIR/test.tsv" > "$DIR/eval.out"
eval_auc=$(sed -n 's/^eval .* auc=\([0-9.]*\)$/\1/p' "$DIR/eval.out")
[ "$eval_auc" = "$auc" ] || fail "eval of the checkpoint gave $eval_auc, training run gave $auc"

# The same samples with raw 64-bit ids train DYNAMIC tables (issue 14): the eval AUC is
# that of the indexed run within 0.01 (the rows start from other values), the checkpoint
# evaluates to the same AUC, and the tables' statistics are printed.
"$DLRM" generate --out_dir="$DIR/raw" --train_samples=30000 --test_samples=5000 --seed=4 \
  --raw_ids > /dev/null
grep -qP '^[01](\t[0-9]*){13}\t[0-9a-f]{16}\t' "$DIR/raw/train.tsv" || fail "no 16-digit raw ids"
sed 's/dim: 16 }/dim: 16 kind: DYNAMIC }/' "$CONFIG" > "$DIR/dynamic.pbtxt"
"$DLRM" train --config="$DIR/dynamic.pbtxt" --train="$DIR/raw/train.tsv" \
  --test="$DIR/raw/test.tsv" --save="$DIR/dynamic.ckpt" --batch_size=512 > "$DIR/dynamic.out"
grep -q "^table C1: size=[1-9]" "$DIR/dynamic.out" || fail "no dynamic table statistics"
grep -q "^dynamic tables: 26 " "$DIR/dynamic.out" || fail "no dynamic totals"
raw_auc=$(sed -n 's/^eval .* auc=\([0-9.]*\)$/\1/p' "$DIR/dynamic.out")
awk -v a="$auc" -v r="$raw_auc" 'BEGIN { d = a - r; exit !(d < 0.01 && d > -0.01) }' ||
  fail "raw-id AUC $raw_auc is not within 0.01 of the indexed run's $auc"
"$DLRM" eval --checkpoint="$DIR/dynamic.ckpt" --test="$DIR/raw/test.tsv" > "$DIR/dynamic_eval.out"
grep -q " auc=$raw_auc$" "$DIR/dynamic_eval.out" || fail "the dynamic checkpoint evaluates otherwise"
# Its serving model (dlrm export: no optimizer state) is smaller and evaluates the same.
"$DLRM" export --checkpoint="$DIR/dynamic.ckpt" --out="$DIR/dynamic.serving" > /dev/null
[ "$(stat -c %s "$DIR/dynamic.serving")" -lt "$(stat -c %s "$DIR/dynamic.ckpt")" ] ||
  fail "the serving model is not smaller than the checkpoint"
"$DLRM" eval --checkpoint="$DIR/dynamic.serving" --test="$DIR/raw/test.tsv" > "$DIR/serving_eval.out"
grep -q " auc=$raw_auc$" "$DIR/serving_eval.out" || fail "the serving model evaluates otherwise"

# Quantized serving models (issue 16): --quantize int8 writes row-wise INT8 tables that
# evaluate within 0.001 AUC of the checkpoint from a smaller file; a bad value is refused.
"$DLRM" export --checkpoint="$DIR/model.ckpt" --out="$DIR/fp32.serving" > /dev/null
"$DLRM" export --checkpoint="$DIR/model.ckpt" --out="$DIR/int8.serving" --quantize=int8 \
  > "$DIR/int8_export.out"
grep -q "exported .* to $DIR/int8.serving: [0-9]* bytes" "$DIR/int8_export.out" ||
  fail "export --quantize=int8 printed no size"
[ "$(stat -c %s "$DIR/int8.serving")" -lt "$(stat -c %s "$DIR/fp32.serving")" ] ||
  fail "the INT8 serving model is not smaller than the FP32 one"
# expect_auc_close MODEL LABEL: MODEL evaluates within 0.001 AUC of the checkpoint's $auc.
expect_auc_close() {
  "$DLRM" eval --checkpoint="$1" --test="$DIR/test.tsv" > "$DIR/close_eval.out"
  local got
  got=$(sed -n 's/^eval .* auc=\([0-9.]*\)$/\1/p' "$DIR/close_eval.out")
  awk -v a="$auc" -v q="$got" 'BEGIN { d = a - q; exit !(q != "" && d < 0.001 && d > -0.001) }' ||
    fail "the $2 model's AUC $got is not within 0.001 of $auc"
}
expect_auc_close "$DIR/int8.serving" INT8
if "$DLRM" export --checkpoint="$DIR/model.ckpt" --out="$DIR/x.serving" --quantize=int3 \
  2> "$DIR/quantize.err" > /dev/null; then
  fail "--quantize=int3 was accepted"
fi
grep -q -- '--quantize must be none, int8 or int4, got "int3"' "$DIR/quantize.err" ||
  { cat "$DIR/quantize.err"; fail "the bad --quantize is not named"; }
[ ! -e "$DIR/x.serving" ] || fail "a refused export wrote a file"
# --dense_precision fp16 halves the dense parameters' bytes; its model evaluates within
# 0.001 AUC too; a precision it cannot write is refused naming the flag.
"$DLRM" export --checkpoint="$DIR/model.ckpt" --out="$DIR/int8d16.serving" --quantize=int8 \
  --dense_precision=fp16 > /dev/null
[ "$(stat -c %s "$DIR/int8d16.serving")" -lt "$(stat -c %s "$DIR/int8.serving")" ] ||
  fail "the INT8 model with fp16 dense parameters is not smaller than the INT8 one"
expect_auc_close "$DIR/int8d16.serving" "INT8 + fp16 dense"
if "$DLRM" export --checkpoint="$DIR/model.ckpt" --out="$DIR/x.serving" \
  --dense_precision=int8 2> "$DIR/dense.err" > /dev/null; then
  fail "--dense_precision=int8 was accepted"
fi
grep -q -- "--dense_precision must be fp32, bf16 or fp16, got 'int8'" "$DIR/dense.err" ||
  { cat "$DIR/dense.err"; fail "the bad --dense_precision is not named"; }
[ ! -e "$DIR/x.serving" ] || fail "a refused export wrote a file"
# An export never replaces the training checkpoint it reads (its optimizer state).
sum_before=$(cksum < "$DIR/model.ckpt")
if "$DLRM" export --checkpoint="$DIR/model.ckpt" --out="$DIR/model.ckpt" --quantize=int4 \
  2> "$DIR/over.err" > /dev/null; then
  fail "an export replaced its own training checkpoint"
fi
grep -q 'would replace a file of format "libdlrm.checkpoint.v1"' "$DIR/over.err" ||
  { cat "$DIR/over.err"; fail "the refused export does not say why"; }
[ "$(cksum < "$DIR/model.ckpt")" = "$sum_before" ] || fail "the refused export changed the checkpoint"

# A malformed line stops training with file:line:field...
head -100 "$DIR/train.tsv" > "$DIR/bad.tsv"
printf '1\t5\tx\n' >> "$DIR/bad.tsv"
head -50 "$DIR/train.tsv" >> "$DIR/bad.tsv"
if "$DLRM" train --config="$CONFIG" --train="$DIR/bad.tsv" 2> "$DIR/bad.err" > /dev/null; then
  fail "malformed input was accepted"
fi
grep -q "bad.tsv:101" "$DIR/bad.err" || { cat "$DIR/bad.err"; fail "error does not name line 101"; }
# ...or, with --skip_malformed, is skipped and counted.
"$DLRM" train --config="$CONFIG" --train="$DIR/bad.tsv" --skip_malformed > /dev/null 2> "$DIR/skip.err"
grep -q "skipped 1 malformed" "$DIR/skip.err" || { cat "$DIR/skip.err"; fail "skip not reported"; }

# A diverging run (steps queued two ahead) stops at the step that diverged, naming it, and
# saves nothing; the step queued behind it is not reported in its place.
sed 's/learning_rate: 0.001 adam/learning_rate: 1e30 adam/' "$CONFIG" > "$DIR/diverge.pbtxt"
grep -q "1e30 adam" "$DIR/diverge.pbtxt" || fail "the diverging config did not change"
if "$DLRM" train --config="$DIR/diverge.pbtxt" --train="$DIR/train.tsv" --batch_size=512 \
  --save="$DIR/diverged.ckpt" > /dev/null 2> "$DIR/diverge.err"; then
  fail "a diverging run succeeded"
fi
grep -q "training diverged at step [0-9]*: the loss or a gradient is not finite" \
  "$DIR/diverge.err" || { cat "$DIR/diverge.err"; fail "the divergence is not named"; }
if grep -qi "cancel" "$DIR/diverge.err"; then fail "a cancelled step was reported"; fi
[ ! -e "$DIR/diverged.ckpt" ] || fail "a diverged run saved a checkpoint"

# --device applies to one-process train and eval too (it was ignored there): no machine
# has CUDA device 1023, so both fail naming CUDA instead of running on the CPU; a name
# that is no device is refused naming it.
for cmd in "train --config=$CONFIG --train=$DIR/train.tsv" \
  "eval --checkpoint=$DIR/model.ckpt --test=$DIR/test.tsv"; do
  # shellcheck disable=SC2086 # the command's words
  if "$DLRM" $cmd --device=cuda:1023 > /dev/null 2> "$DIR/device.err"; then
    fail "$cmd ran with --device=cuda:1023"
  fi
  grep -q "CUDA" "$DIR/device.err" || { cat "$DIR/device.err"; fail "$cmd: no CUDA cause"; }
  if "$DLRM" $cmd --device=tpu > /dev/null 2> "$DIR/device.err"; then
    fail "$cmd ran with --device=tpu"
  fi
  grep -q "device must be cpu, cuda or cuda:N, got 'tpu'" "$DIR/device.err" ||
    { cat "$DIR/device.err"; fail "$cmd: --device=tpu not named"; }
done

# Unknown command and missing flags are usage errors, not crashes.
if "$DLRM" nonsense 2> /dev/null; then fail "unknown command accepted"; fi
if "$DLRM" train 2> /dev/null; then fail "train without flags accepted"; fi
echo "cli_test: all checks passed"
