#!/usr/bin/env bash
# The engine against PyTorch on the reference models (bench/README.md), on the same machine
# in the same invocation: for each round, model and optimizer, `dlrm bench` and then
# bench/torch_reference.py run one after the other with the same thread count, data shape
# and step counts. Every run's numbers are printed as they come; at the end a table holds
# the medians over the rounds and the ratios engine / PyTorch.
#
#   bench/compare.sh                                   # 3 rounds, all models, sgd + adagrad
#   bench/compare.sh --rounds 1 --models small --optimizers sgd
#   bench/compare.sh --rounds 1 --models mlperf_dcnv2 --optimizers adagrad
#   bench/compare.sh --curve 200                       # and the loss curves side by side
#   bench/compare.sh --matmul_precision medium         # bf16 products on both sides
#
# --matmul_precision: the engine's device.matmul_precision (medium: bf16 GEMMs, on a CPU
# with AVX512-BF16) and PyTorch's peer (on the CPU, medium runs forward and loss under
# torch.autocast(bfloat16)). Default highest: fp32 on both sides.
#
# --reference_precision: PyTorch's matmul precision alone (default: --matmul_precision's),
# e.g. the engine's bf16 GEMMs against MLPerf's fp32 reference. --table_precision: the
# engine's tables (fp32, bf16, fp16; PyTorch's stay fp32). The header names both sides.
#
# Optimizers: sgd (SGD everywhere); adagrad (engine: dense and sparse Adagrad; PyTorch:
# torch.optim.Adagrad on dense and sparse gradients); rowwise_adagrad (engine: dense
# Adagrad, row-wise sparse Adagrad; against the same PyTorch Adagrad run).
#
# Needs a Release build of the `dlrm` command line (--dlrm, default build/bench/dlrm; see
# bench/README.md) and PyTorch: `apt-get install python3-torch` (run with /usr/bin/python3,
# found automatically) or `pip install torch`. PyTorch is a benchmark dependency only.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
rounds=3
threads=2
models="small kaggle multihot"
optimizers="sgd adagrad rowwise_adagrad"
dlrm="$root/build/bench/dlrm"
python=""
curve=0
steps=""
precision=highest
reference_precision=""
table_precision=fp32

usage() { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --optimizers) optimizers=$2; shift 2 ;;
    --dlrm) dlrm=$2; shift 2 ;;
    --python) python=$2; shift 2 ;;
    --curve) curve=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --matmul_precision) precision=$2; shift 2 ;;
    --reference_precision) reference_precision=$2; shift 2 ;;
    --table_precision) table_precision=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "compare.sh: unknown argument '$1'" >&2; usage 2 ;;
  esac
done

[[ -x "$dlrm" ]] || { echo "compare.sh: no dlrm binary at $dlrm (build it: bench/README.md)" >&2; exit 2; }
if [[ -z "$python" ]]; then
  for candidate in python3 /usr/bin/python3; do
    if "$candidate" -c "import torch" 2>/dev/null; then python=$candidate; break; fi
  done
fi
[[ -n "$python" ]] || { echo "compare.sh: PyTorch not found (apt-get install python3-torch, or pip install torch)" >&2; exit 2; }

# The data shape of each reference model (the issue's definition; configs hold the model):
# batch, bag size (-1: each feature's pooling_factor), steps, table rows cap (0: none).
# mlperf_dcnv2 is MLPerf's DLRM-DCNv2 (multi-hot bags, 3 low-rank cross layers) with its
# 40M-row tables capped so that it fits here.
shape() {
  case "$1" in
    small|kaggle) echo "2048 1 60 0" ;;
    multihot) echo "1024 10 20 0" ;;
    mlperf_dcnv2) echo "2048 -1 12 20000" ;;
    *) echo "compare.sh: unknown model '$1'" >&2; exit 2 ;;
  esac
}
torch_optimizer() { [[ "$1" == sgd ]] && echo sgd || echo adagrad; }

echo "compare.sh  $(date -u +%FT%TZ)  $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
echo "engine      $dlrm"
echo "pytorch     $("$python" -c 'import torch; print(torch.__version__)') ($python)"
reference_precision=${reference_precision:-$precision}
echo "threads     $threads; rounds $rounds"
echo "precision   engine matmul $precision, tables $table_precision; pytorch matmul $reference_precision, tables fp32"
echo

results=$(mktemp)
trap 'rm -f "$results"' EXIT
field() { sed -n "s/^$1 *samples\/s *median \([0-9.]*\).*/\1/p"; }

for round in $(seq 1 "$rounds"); do
  for model in $models; do
    read -r batch bag model_steps max_rows <<< "$(shape "$model")"
    model_steps=${steps:-$model_steps}
    config="$root/bench/configs/$model.pbtxt"
    common=(--batch_size "$batch" --bag_size "$bag" --max_rows "$max_rows" --steps "$model_steps"
            --windows 4 --warmup 3)
    for opt in $optimizers; do
      out=$("$dlrm" bench --config "$config" --threads "$threads" --optimizer "$opt" "${common[@]}" \
              --matmul_precision "$precision" --table_precision "$table_precision")
      e_train=$(field train <<< "$out"); e_predict=$(field predict <<< "$out")
      background=$(sed -n 's/^background *\([0-9.]*\).*/\1/p' <<< "$out")
      out=$("$python" "$root/bench/torch_reference.py" --config "$config" --threads "$threads" \
              --optimizer "$(torch_optimizer "$opt")" "${common[@]}" --matmul_precision "$reference_precision")
      t_train=$(field train <<< "$out"); t_predict=$(field predict <<< "$out")
      printf "round %d  %-9s %-16s engine train %8.0f predict %8.0f | pytorch train %8.0f predict %8.0f | background %s\n" \
        "$round" "$model" "$opt" "$e_train" "$e_predict" "$t_train" "$t_predict" "${background:-?}"
      echo "$model $opt $e_train $e_predict $t_train $t_predict" >> "$results"
    done
  done
done

echo
echo "Medians over $rounds round(s), samples/s, $threads threads (PyTorch's Adagrad is the peer of both engine Adagrads):"
"$python" - "$results" "$models" "$optimizers" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
print("| model | optimizer | engine train | PyTorch train | train ratio |")
print("|---|---|---|---|---|")
for model in sys.argv[2].split():
    for opt in sys.argv[3].split():
        sel = [list(map(float, r[2:])) for r in rows if r[0] == model and r[1] == opt]
        if sel:
            et, _, tt, _ = (statistics.median(c) for c in zip(*sel))
            print(f"| {model} | {opt} | {et:,.0f} | {tt:,.0f} | {et / tt:.2f}x |")
print()
print("Prediction does not depend on the optimizer: medians over every run of a model.")
print("| model | engine predict | PyTorch predict | predict ratio |")
print("|---|---|---|---|")
for model in sys.argv[2].split():
    sel = [list(map(float, r[2:])) for r in rows if r[0] == model]
    if sel:
        _, ep, _, tp = (statistics.median(c) for c in zip(*sel))
        print(f"| {model} | {ep:,.0f} | {tp:,.0f} | {ep / tp:.2f}x |")
EOF

if [[ "$curve" -gt 0 ]]; then
  lib="$(dirname "$dlrm")/libdlrm.so"
  # Adagrad at the configs' SGD rate (0.1) makes sign-like first steps that blow the loss
  # up on both sides alike; at PyTorch's default Adagrad rate (0.01) the curves are readable.
  for run in "sgd 0.1" "adagrad 0.01"; do
    read -r opt lr <<< "$run"
    echo
    echo "Loss curves, small model, $opt (lr $lr), the same initial weights and batches (learnable labels):"
    DLRM_LIBRARY="$lib" PYTHONPATH="$root/bindings/python${PYTHONPATH:+:$PYTHONPATH}" \
      "$python" "$root/bench/torch_reference.py" --config "$root/bench/configs/small.pbtxt" \
      --threads "$threads" --optimizer "$opt" --lr "$lr" --curve "$curve" --curve_every 10 \
      --batch_size 2048
  done
fi
