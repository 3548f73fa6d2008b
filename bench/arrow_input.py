#!/usr/bin/env python3
"""What Arrow input costs next to the step it feeds (issue: < 10% of a training step).

Times, on the demo model (tools/configs/demo.pbtxt: 13 dense features, 26 one-id sparse
features), the conversion of an N-row pyarrow RecordBatch into a dlrm.Batch through the
C Data Interface (export, dlrm_arrow_batch_create, copy out: everything Batch.from_arrow
does) against Engine.train_step on the converted batch, in the same process, medians of
--repeats runs each, and prints their ratio.

    DLRM_LIBRARY=build/release/libdlrm.so python3 bench/arrow_input.py [--rows 2048]
"""
from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bindings" / "python"))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

import dlrm  # noqa: E402


def record_batch(config: str, rows: int, rng: np.random.Generator) -> pa.RecordBatch:
    """Dense d0.., label "click", one id per sparse column c0.. within its table."""
    table_rows = [int(n) for n in re.findall(r"num_rows:\s*(\d+)", config)]
    columns = {f"d{j}": pa.array(rng.random(rows, dtype=np.float32)) for j in range(13)}
    columns["click"] = pa.array((rng.random(rows) < 0.25).astype(np.float32))
    offsets = pa.array(np.arange(rows + 1, dtype=np.int32))
    for f, n in enumerate(table_rows):
        ids = pa.array(rng.integers(0, n, size=rows, dtype=np.int64))
        columns[f"c{f}"] = pa.ListArray.from_arrays(offsets, ids)
    return pa.RecordBatch.from_pydict(columns)


def median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    config = (ROOT / "tools" / "configs" / "demo.pbtxt").read_text()
    rb = record_batch(config, args.rows, np.random.default_rng(0))
    columns = dlrm.Columns(dense=[f"d{j}" for j in range(13)],
                           sparse=[f"c{f}" for f in range(26)], label="click")
    with dlrm.Engine(config) as engine:
        batch = dlrm.Batch.from_arrow(rb, columns)
        engine.train_step(batch)  # warm up: first-touch of the tables and the MLPs
        convert = median_seconds(lambda: dlrm.Batch.from_arrow(rb, columns), args.repeats)
        step = median_seconds(lambda: engine.train_step(batch), args.repeats)
    print(f"arrow->batch  {args.rows} rows  median {convert * 1e3:.3f} ms")
    print(f"train_step    {args.rows} rows  median {step * 1e3:.3f} ms")
    print(f"ratio convert/step {convert / step:.3f} (goal < 0.10)")


if __name__ == "__main__":
    main()
