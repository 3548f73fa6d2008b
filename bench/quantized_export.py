"""Quantized serving exports against the FP32 one (issue 16, acceptance 3).

Trains the demo model once on `dlrm generate` data (unless the checkpoint exists), then
`dlrm export`s it four ways: FP32, --quantize int8, --quantize int4 and int8 with
--dense_precision fp16 (int8+d16: the MLPs' weights in 16 bits too). Each is loaded
through the Python binding (dlrm.Engine.from_checkpoint, the C ABI's
create_from_checkpoint) and predicts the whole test set; prints per model the file's and
the tables' bytes, eval AUC, the largest and mean |prediction - FP32 prediction| and
predict samples/s (the models take turns, `--rounds` each, median), all in one
invocation on one machine.

The demo's tables (1.1 MB) stay in the CPU's caches, where pooling codes costs more
arithmetic than pooling floats and saves no memory traffic. `--large CONFIG` (e.g.
bench/configs/kaggle.pbtxt, 2.16 GB of fp32 rows) also times prediction where the rows'
bytes matter: that model at its initial values (a step-0 checkpoint, exported FP32 and
INT8), on batches of ids drawn uniformly over each table.

    DLRM_LIBRARY=build/release/libdlrm.so python3 bench/quantized_export.py \
        [--build build/release] [--train 4000000] [--test 200000] [--rounds 5] \
        [--large bench/configs/kaggle.pbtxt]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bindings" / "python"))

import numpy as np  # noqa: E402

import dlrm  # noqa: E402

# name: (--quantize, --dense_precision); "+d16": the dense parameters in fp16 as well.
MODELS = {"fp32": ("none", "fp32"), "int8": ("int8", "fp32"), "int4": ("int4", "fp32"),
          "int8+d16": ("int8", "fp16")}


def run(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def generate(cli: str, work: Path, train: int, test: int) -> None:
    """The demo's synthetic train.tsv and test.tsv in work (kept when they exist)."""
    if not (work / "test.tsv").exists():
        run(cli, "generate", f"--out_dir={work}", f"--train_samples={train}",
            f"--test_samples={test}")


def prepare(cli: str, work: Path, train: int, test: int, threads: int) -> None:
    """The data, the trained checkpoint and its three exports (what exists is kept)."""
    generate(cli, work, train, test)
    ckpt = work / "model.ckpt"
    if not ckpt.exists():
        run(cli, "train", f"--config={ROOT / 'tools/configs/demo.pbtxt'}",
            f"--train={work / 'train.tsv'}", f"--save={ckpt}", f"--threads={threads}",
            "--log_every_seconds=100000")
    for model, (quantize, dense) in MODELS.items():
        run(cli, "export", f"--checkpoint={ckpt}", f"--out={work / model}.serving",
            f"--quantize={quantize}", f"--dense_precision={dense}")


def large_model(cli: str, work: Path, config: Path, batch_size: int, rounds: int) -> None:
    """Prediction of a model whose tables are far larger than the caches, FP32 vs INT8."""
    text = config.read_text()
    ckpt = work / f"{config.stem}.ckpt"
    if not ckpt.exists():
        with dlrm.Engine(text) as engine:
            engine.save(ckpt)
    for model in ("fp32", "int8"):
        quantize = "none" if model == "fp32" else model
        run(cli, "export", f"--checkpoint={ckpt}", f"--out={work / config.stem}.{model}",
            f"--quantize={quantize}")
    engines = {m: dlrm.Engine.from_checkpoint(work / f"{config.stem}.{m}") for m in ("fp32", "int8")}
    rows = dlrm.criteo.table_rows_of(text)
    num_dense = int(text.split("num_dense_features:")[1].split()[0])
    rng = np.random.default_rng(1)
    batches = []
    for _ in range(8):
        dense = rng.random((batch_size, num_dense), dtype=np.float32)
        lengths = np.ones((len(rows), batch_size), dtype=np.int32)
        ids = np.concatenate([rng.integers(0, r, batch_size, dtype=np.int64) for r in rows])
        batches.append(dlrm.Batch(dense, None, lengths, ids))
    samples = batch_size * len(batches)
    preds = {m: predict_all(e, batches) for m, e in engines.items()}
    times: dict = {m: [] for m in engines}
    for _ in range(rounds):
        for m, e in engines.items():
            start = time.perf_counter()
            predict_all(e, batches)
            times[m].append(samples / (time.perf_counter() - start))
    print(f"{config.name} at step 0, uniform ids, {samples} samples per round:")
    base = statistics.median(times["fp32"])
    for m, e in engines.items():
        tables = sum(e.table_stats(f"C{i}").memory_bytes for i in range(1, 27))
        rate = statistics.median(times[m])
        paired = statistics.median(t / f for t, f in zip(times[m], times["fp32"]))
        print(f"  {m}: table_bytes {tables} predict/s {rate:.0f} ({rate / base:.3f} of fp32, "
              f"paired {paired:.3f}) "
              f"max|dp| {np.abs(preds[m] - preds['fp32']).max():.6f}")


def predict_all(engine: dlrm.Engine, batches: list) -> np.ndarray:
    return np.concatenate([engine.predict(b) for b in batches])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--train", type=int, default=4_000_000)
    ap.add_argument("--test", type=int, default=200_000)
    ap.add_argument("--batch_size", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=-1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--large", type=Path, help="also time this config's model, FP32 vs INT8")
    args = ap.parse_args()
    work = Path(os.environ.get("DLRM_BENCH_DATA", "/tmp/dlrm_quantized_bench")) / str(args.train)
    work.mkdir(parents=True, exist_ok=True)
    prepare(str(ROOT / args.build / "dlrm"), work, args.train, args.test, args.threads)

    engines = {m: dlrm.Engine.from_checkpoint(work / f"{m}.serving") for m in MODELS}
    batches = list(dlrm.criteo.CriteoReader.for_engine(work / "test.tsv", engines["fp32"],
                                                batch_size=args.batch_size))
    samples = sum(b.batch_size for b in batches)
    preds = {m: predict_all(e, batches) for m, e in engines.items()}
    times: dict = {m: [] for m in MODELS}
    for _ in range(args.rounds):  # the models take turns
        for m, e in engines.items():
            start = time.perf_counter()
            predict_all(e, batches)
            times[m].append(samples / (time.perf_counter() - start))

    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), "?")
    print(f"machine: {os.cpu_count()} cores, {cpu}")
    print(f"data: dlrm generate, {args.train} training and {samples} test samples; "
          f"batch {args.batch_size}; {args.rounds} rounds")
    base_size = (work / "fp32.serving").stat().st_size
    base_tables = sum(engines["fp32"].table_stats(f"C{i}").memory_bytes for i in range(1, 27))
    base_rate = statistics.median(times["fp32"])
    paired = {m: statistics.median(t / f for t, f in zip(times[m], times["fp32"])) for m in MODELS}
    base_auc = engines["fp32"].evaluate(batches).auc
    print("model     file_bytes  file/fp32  table_bytes  tables/fp32  auc       d_auc     "
          "max|dp|   mean|dp|  predict/s   /fp32  paired")
    for m, e in engines.items():
        size = (work / f"{m}.serving").stat().st_size
        tables = sum(e.table_stats(f"C{i}").memory_bytes for i in range(1, 27))
        auc = e.evaluate(batches).auc
        dp = np.abs(preds[m] - preds["fp32"])
        rate = statistics.median(times[m])
        print(f"{m:8}  {size:10d}  {size / base_size:9.3f}  {tables:11d}  "
              f"{tables / base_tables:11.3f}  {auc:.6f}  {auc - base_auc:+.6f}  "
              f"{dp.max():.6f}  {dp.mean():.6f}  {rate:10.0f}  {rate / base_rate:6.3f}  "
              f"{paired[m]:6.3f}")
    print("paired: the median over rounds of (this model's samples/s / fp32's in that round)")
    print("acceptance 3 (int8): max|dp| <= 0.005, |d_auc| <= 0.001, file about 1/4, "
          "predict/s >= fp32")
    if args.large:
        for e in engines.values():
            e.close()
        large_model(str(ROOT / args.build / "dlrm"), work, args.large, args.batch_size, args.rounds)


if __name__ == "__main__":
    main()
