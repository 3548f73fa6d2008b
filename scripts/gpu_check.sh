#!/usr/bin/env bash
# The GPU suites, for a lent GPU machine (which has the NVIDIA driver and nothing of ours:
# no package registry, none of our Debian libraries). Run here:
#   scripts/gpu_check.sh            builds the CUDA backend and its suites (DLRM_CUDA=ON)
#                                   into build/gpu, then gathers every GPU test binary with
#                                   every shared library it loads (ldd; not glibc's own nor
#                                   the driver's) into build/gpu-bundle/ (git-ignored)
# and packs it as build/gpu-bundle.tar.gz (~22 MB; the folder itself is over the device
# tool's 64 MiB carry limit). Carry the tarball to the device and run there:
#   tar xzf build/gpu-bundle.tar.gz -C /tmp && /tmp/gpu-bundle/run.sh
#   gpu-bundle/run.sh               runs each binary with the bundle on LD_LIBRARY_PATH;
#                                   exits non-zero if any test fails
#   gpu-bundle/cuda_pooled_bench [FLAGS]
#                                   the pooled forward, the backward's sort and its update
#                                   (at 1, 2, 4, 8 warps a block) against a device-to-device
#                                   copy (multihot's shape, uniform ids; bench/cuda/)
#   gpu-bundle/cuda_linear_bench [FLAGS]
#                                   DOT's forward and backward at multihot's shape, then
#                                   multihot's top MLP, its input 415 wide and padded to
#                                   416, at each matmul precision (bench/cuda/)
#   gpu-bundle/bench.sh small [FLAGS]
#                                   `dlrm bench --device cuda` on configs/small.pbtxt, then
#                                   the PyTorch reference on the same GPU (bench/README.md)
#   gpu-bundle/all.sh               everything above in one device call, each part with a
#                                   time limit, what is least measured first: the suites,
#                                   the forward and update against the copy, the top MLP
#                                   at 415 / 416, multihot at batch 8192 in fp32 and TF32
#                                   against PyTorch, multihot with BF16 against FP32
#                                   tables (fp32 and bf16 GEMMs), PyTorch with batches
#                                   copied from host memory each step (--host_batches, as
#                                   the engine), the update's test under compute-sanitizer
#                                   (racecheck, memcheck); then small and kaggle, MLPerf's
#                                   DCNv2 in fp32 and bf16, and a 1-server 1-trainer job
#                                   (dlrm launch) with the trainer on the CPU, the GPU,
#                                   and the GPU over NCCL; then ncu's per-kernel times of
#                                   eager multihot steps; full logs under $OUT (or
#                                   /tmp/gpu-out)
set -euo pipefail
cd "$(dirname "$0")/.."
DLRM_ROOT=$(pwd)
source scripts/configure.sh
BUILD=${DLRM_GPU_BUILD_DIR:-build/gpu}
BUNDLE=build/gpu-bundle

dlrm_configure_tests "$BUILD" -DDLRM_CUDA=ON -DDLRM_BUILD_BINDINGS=OFF -DDLRM_BUILD_BENCH=ON
tests=()
for src in tests/engine/cuda/*_test.cc; do tests+=("$(basename "$src" .cc)"); done
cmake --build "$BUILD" -j "${DLRM_JOBS:-$(nproc)}" --target "${tests[@]}" dlrm_cli \
  cuda_pooled_bench cuda_linear_bench

rm -rf "$BUNDLE" && mkdir -p "$BUNDLE/lib"
for bin in "${tests[@]/#/tests/}" dlrm bench/cuda_pooled_bench bench/cuda_linear_bench; do
  cp "$BUILD/$bin" "$BUNDLE/"
  # Libraries by path, leaving out the C library's own and the driver (the device has both).
  ldd "$BUILD/$bin" | awk '$3 ~ /^\// {print $3}' |
    grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libcuda)\.so' |
    while read -r lib; do cp -L "$lib" "$BUNDLE/lib/"; done
done
cp -r bench/configs "$BUNDLE/configs"
cp tools/configs/demo.pbtxt "$BUNDLE/configs/demo.pbtxt"
cp bench/torch_reference.py "$BUNDLE/"
cat > "$BUNDLE/env.sh" <<'ENV'
# Sourced by run.sh and bench.sh: the bundle's libraries on the library path.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# cuBLASLt is opened at run time (engine/cuda/cublas_lt.h), too large to carry: the lent
# machines have it in their PyTorch venv's nvidia-* wheels, or a toolkit in /usr/local/cuda.
for d in /usr/local/cuda/lib64 $(find /opt /usr/local/lib -maxdepth 8 -type d \
    -path '*site-packages/nvidia/*/lib' 2>/dev/null); do
  LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
done
# The PyTorch reference's interpreter: the device image's venv, else the system's.
python=/opt/torch/.venv/bin/python3
[ -x "$python" ] || python=python3
ENV
cat > "$BUNDLE/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs every GPU test binary of this bundle with its libraries (scripts/gpu_check.sh).
set -uo pipefail
source "$(dirname "$0")/env.sh"
status=0
for t in "$here"/*_test; do
  echo "=== $(basename "$t")"
  "$t" "$@" || status=1
done
exit $status
RUN
cat > "$BUNDLE/bench.sh" <<'BENCH'
#!/usr/bin/env bash
# bench.sh CONFIG [FLAGS]: dlrm bench --device cuda on configs/CONFIG.pbtxt (CUDA graphs,
# then eager), then the PyTorch reference with the same flags on the same GPU, one after
# the other.
set -euo pipefail
source "$(dirname "$0")/env.sh"
config="$here/configs/$1.pbtxt"
shift
# With CUDA graphs, plus the asynchronous path (the next batch copied in during a step),
# then eager: the step time with and without the graph, one invocation.
"$here/dlrm" bench --config "$config" --device cuda --async_host sleep --prepare_factor 0 "$@"
"$here/dlrm" bench --config "$config" --device cuda --cuda_graph=false "$@"
"$python" "$here/torch_reference.py" --config "$config" --device cuda "$@"
BENCH
cat > "$BUNDLE/all.sh" <<'ALL'
#!/usr/bin/env bash
# One device call (scripts/gpu_check.sh): suites, the embedding forward and update and the
# linear benches, multihot against PyTorch and with BF16 tables, the update's test under
# compute-sanitizer, small and kaggle, MLPerf DCNv2, the jobs, then ncu with what time is
# left of the call's 540 s. Logs under $OUT.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/gpu-out}
mkdir -p "$out"
nvidia-smi -L
timeout 200 "$here/run.sh" > "$out/tests.log" 2>&1
echo "suites: exit $? ($(grep -c '^\[  PASSED' "$out/tests.log") of $(ls "$here"/*_test | wc -l) passed)"
grep -E 'FAILED|Failure' "$out/tests.log" | head -20
(source "$here/env.sh" && timeout 90 "$here/cuda_pooled_bench") 2>&1 | tee "$out/forward.log" | tail -8
(source "$here/env.sh" && timeout 60 "$here/cuda_linear_bench") 2>&1 | tee "$out/linear.log"
# report LABEL OURS_LOG TORCH_LOG: our train samples/s (synchronous steps, then the
# asynchronous path that copies the next batch in during a step), PyTorch's, the ratios.
report() {
  local ours async torch ratio async_ratio
  ours=$(grep -m1 '^train ' "$2" | awk '{print $4}')
  async=$(grep -m1 '^async ' "$2" | awk '{print $4}')
  torch=$(sed -n 's/^RESULT train=\([0-9.]*\).*/\1/p' "$3")
  ratio=$(awk -v a="$ours" -v b="$torch" 'BEGIN { if (b > 0) printf "%.2f", a / b }')
  async_ratio=$(awk -v a="$async" -v b="$torch" 'BEGIN { if (b > 0) printf "%.2f", a / b }')
  echo "$1: ours ${ours:-?} (async ${async:-?}) torch ${torch:-?} ratio ${ratio:-?} (async ${async_ratio:-?})"
  # Where the host's time per step went (Engine::step_phases): graph run (train, then
  # async), then eager.
  [ "$2" = "$3" ] && grep '^phases' "$2" | sed 's/^\(phases[a-z_]*\) */  \1: /'
}
# What has not been measured on a GPU comes first, in case the call runs out of time:
# multihot against PyTorch (the sort beside the network), in fp32 and TF32.
bench_config() {  # bench_config CONFIG PRECISION
  local bag=1 log="$out/bench_$1_$2.log"
  [ "$1" = multihot ] && bag=10
  timeout 150 "$here/bench.sh" "$1" --batch_size 8192 --bag_size "$bag" --steps 200 \
    --matmul_precision "$2" > "$log" 2>&1
  report "$1 $2" "$log" "$log"
}
bench_config multihot highest
bench_config multihot high
# Issue 16: multihot's train samples/s with BF16 tables against FP32 tables (ours only, the
# asynchronous path), with fp32 and with bf16 GEMMs; tables capped at 500K rows (still
# 26 x 128 MB of fp32 rows, far beyond the L2) so that their initialization fits the call.
for precision in highest medium; do
  for tables in fp32 bf16; do
    log="$out/half_tables_${precision}_$tables.log"
    (source "$here/env.sh" && timeout 90 "$here/dlrm" bench --config "$here/configs/multihot.pbtxt" \
      --device cuda --async_host sleep --prepare_factor 0 --batch_size 8192 --bag_size 10 \
      --max_rows 500000 --steps 200 --matmul_precision "$precision" \
      --table_precision "$tables") > "$log" 2>&1
    echo "multihot tables $tables, matmul $precision: $(grep -m1 '^train ' "$log" | awk '{print $4}') (async $(grep -m1 '^async ' "$log" | awk '{print $4}')) train samples/s"
  done
done
# The peer paying what the engine pays: each step's batch copied from pinned host memory.
torch_host() {  # torch_host CONFIG
  local bag=1 log="$out/torch_host_$1.log"
  [ "$1" = multihot ] && bag=10
  (source "$here/env.sh" && timeout 100 "$python" "$here/torch_reference.py" \
    --config "$here/configs/$1.pbtxt" --device cuda --batch_size 8192 --bag_size "$bag" \
    --steps 200 --host_batches) > "$log" 2>&1
  report "$1 highest, torch batches from host" "$out/bench_$1_highest.log" "$log"
}
torch_host multihot
# The embedding update under compute-sanitizer, where the machine has it: races on shared
# memory and out-of-bounds accesses (the suites check only the bits). The OptIn test's two
# layouts are small: 4 warps a block at 3000 columns, one at 8192.
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if [ -n "$sanitizer" ]; then
  for tool in racecheck memcheck; do
    (source "$here/env.sh" && timeout -k 5 45 "$sanitizer" --tool "$tool" --error-exitcode 9 \
      "$here/cuda_embedding_backward_test" --gtest_filter='*OptIn*') \
      > "$out/sanitizer_$tool.log" 2>&1
    echo "compute-sanitizer $tool: exit $? ($(grep -m1 -o 'ERROR SUMMARY: [0-9]* error' "$out/sanitizer_$tool.log" || echo 'no summary'))"
  done
fi
# Then what earlier calls measured, to follow it: small and kaggle, MLPerf's DCNv2, jobs.
for precision in highest high; do
  for config in small kaggle; do bench_config "$config" "$precision"; done
done
for config in small kaggle; do torch_host "$config"; done
# MLPerf's DLRM-DCNv2 (multi-hot bags, 3 low-rank cross layers; tables capped so their
# host-side initialization fits the call) in fp32 and with bf16 GEMMs on both sides.
for precision in highest medium; do
  log="$out/bench_mlperf_dcnv2_$precision.log"
  timeout 180 "$here/bench.sh" mlperf_dcnv2 --batch_size 16384 --bag_size -1 --max_rows 100000 \
    --steps 30 --matmul_precision "$precision" > "$log" 2>&1
  report "mlperf_dcnv2 $precision" "$log" "$log"
done
# A multi-process job (dlrm launch: 1 embedding server, 1 trainer, sync) on the demo model:
# the trainer's dense step on the CPU, on the GPU, and on the GPU exchanging over NCCL;
# then 2 trainers owning the shards (no server), dense steps and shards on the GPU.
data=/tmp/dlrm-job-data
(source "$here/env.sh" && timeout 60 "$here/dlrm" generate --out_dir="$data" --train_samples=400000 \
  --test_samples=8192) > "$out/job_generate.log" 2>&1
for variant in cpu cuda nccl owners; do
  device=cuda; collective=builtin; trainers=1; servers=1
  [ "$variant" = cpu ] && device=cpu
  [ "$variant" = nccl ] && collective=nccl
  [ "$variant" = owners ] && trainers=2 && servers=0
  log="$out/job_$variant.log"
  (source "$here/env.sh" && DLRM_COLLECTIVE=$collective timeout 120 "$here/dlrm" launch \
    --trainers=$trainers --servers=$servers -- train --config="$here/configs/demo.pbtxt" \
    --train="$data/train.tsv" --test="$data/test.tsv" --batch_size=4096 --threads=4 \
    --device="$device" --max_steps=80 --warmup_steps=10 --log_every_seconds=1000) > "$log" 2>&1
  echo "job $variant: exit $? $(grep -o 'steady [0-9]* samples/s ([0-9.]* ms/step' "$log" | tail -1)) $(grep -o '^eval .* auc=[0-9.]*' "$log" | tail -1)"
done
# Last, where the machine has ncu and the call has 30 s left of 540: the device time of
# each of 150 kernel launches after the first 300 (past the warm-up's steps and
# predictions: eager multihot training steps), which the next change to the step is
# chosen by.
ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)
left=$((540 - SECONDS))
if [ -n "$ncu_bin" ] && [ "$left" -ge 30 ]; then
  (source "$here/env.sh" && timeout -k 5 "$left" "$ncu_bin" --print-summary per-kernel --launch-skip 300 \
    --launch-count 150 "$here/dlrm" bench --config "$here/configs/multihot.pbtxt" --device cuda \
    --batch_size 8192 --bag_size 10 --max_rows 500000 --steps 10 --warmup 5 --windows 1 \
    --cuda_graph=false) > "$out/ncu_multihot.log" 2>&1
  echo "ncu multihot: exit $? (ncu_multihot.log, $(grep -c 'Duration' "$out/ncu_multihot.log") kernels)"
fi
ALL
chmod +x "$BUNDLE/run.sh" "$BUNDLE/bench.sh" "$BUNDLE/all.sh"
tar czf "$BUNDLE.tar.gz" -C "$(dirname "$BUNDLE")" "$(basename "$BUNDLE")"
echo "gpu_check: ${#tests[@]} GPU suite(s) and dlrm in $BUNDLE.tar.gz ($(du -sh "$BUNDLE.tar.gz" | cut -f1)); on the device: tar xzf $BUNDLE.tar.gz -C /tmp && /tmp/gpu-bundle/run.sh"
