"""BF16 / FP16 tables against FP32 ones on the demo (issue 16, acceptance 2).

Trains the demo model (tools/configs/demo.pbtxt) on `dlrm generate` data once per table
precision: FP32, BF16 and FP16, each 16-bit one with updates rounded to nearest and
stochastically (TableConfig.precision / rounding set on every table), all with the same
data, seed and thread count. Each trained checkpoint is loaded through the Python binding
and evaluated on the whole test set; prints per model the tables' bytes (weights and
optimizer state, Engine.table_stats), eval AUC and its difference from FP32's, the largest
|prediction - FP32 prediction| and `dlrm train`'s samples/s.

    DLRM_LIBRARY=build/release/libdlrm.so python3 bench/half_tables.py \\
        [--build build/release] [--train 1000000] [--test 100000] [--threads 2]

Where the rows' bytes matter (tables far larger than the caches) `dlrm bench
--table_precision bf16` and the micro benchmarks' /bf16 variants time them (bench/README.md).
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bindings" / "python"))

import numpy as np  # noqa: E402

import dlrm  # noqa: E402
from quantized_export import generate, predict_all, run  # noqa: E402

# name: (precision, rounding or None)
MODELS = {
    "fp32": ("FP32", None),
    "bf16": ("BF16", "NEAREST"),
    "bf16_sr": ("BF16", "STOCHASTIC"),
    "fp16": ("FP16", "NEAREST"),
    "fp16_sr": ("FP16", "STOCHASTIC"),
}


def config_text(precision: str, rounding: str | None) -> str:
    """The demo config with every table's rows in `precision`, rounded as `rounding` says."""
    extra = f" precision: {precision}" + (f" rounding: {rounding}" if rounding else "")
    text = (ROOT / "tools/configs/demo.pbtxt").read_text()
    return re.sub(r"(tables \{[^}]*?)(\s*\})", lambda m: m.group(1) + extra + m.group(2), text)


def train(cli: str, work: Path, name: str, threads: int) -> float:
    """Trains model `name` into work/<name>.ckpt; returns `dlrm train`'s samples/s."""
    config = work / f"{name}.pbtxt"
    config.write_text(config_text(*MODELS[name]))
    out = run(cli, "train", f"--config={config}", f"--train={work / 'train.tsv'}",
              f"--save={work / name}.ckpt", f"--threads={threads}", "--log_every_seconds=100000")
    return float(re.search(r"([0-9.]+) samples/s", out.splitlines()[-1]).group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--train", type=int, default=1_000_000)
    ap.add_argument("--test", type=int, default=100_000)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    cli = str(ROOT / args.build / "dlrm")
    work = Path(os.environ.get("DLRM_BENCH_DATA", "/tmp/dlrm_quantized_bench")) / str(args.train)
    work.mkdir(parents=True, exist_ok=True)
    generate(cli, work, args.train, args.test)
    rates = {name: train(cli, work, name, args.threads) for name in MODELS}
    engines = {name: dlrm.Engine.from_checkpoint(work / f"{name}.ckpt") for name in MODELS}
    batches = list(dlrm.criteo.CriteoReader.for_engine(work / "test.tsv", engines["fp32"],
                                                batch_size=8192))
    preds = {name: predict_all(e, batches) for name, e in engines.items()}
    base_auc = engines["fp32"].evaluate(batches).auc

    def table_bytes(e: dlrm.Engine) -> int:
        return sum(e.table_stats(f"C{i}").memory_bytes for i in range(1, 27))

    base_bytes = table_bytes(engines["fp32"])
    print(f"data: dlrm generate, {args.train} training and "
          f"{sum(b.batch_size for b in batches)} test samples; {args.threads} threads")
    print("model    table_bytes  /fp32  auc       d_auc      max|dp|   train/s  /fp32")
    for name, e in engines.items():
        auc = e.evaluate(batches).auc
        dp = np.abs(preds[name] - preds["fp32"]).max()
        print(f"{name:7}  {table_bytes(e):11d}  {table_bytes(e) / base_bytes:.3f}  {auc:.6f}  "
              f"{auc - base_auc:+.6f}  {dp:.6f}  {rates[name]:7.0f}  "
              f"{rates[name] / rates['fp32']:.3f}")
    print("acceptance 2 (bf16): |d_auc| <= 0.001, table bytes halved (the weights; optimizer "
          "state stays fp32)")


if __name__ == "__main__":
    main()
