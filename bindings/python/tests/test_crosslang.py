"""The cross-language fixture: Python trains and exports, Java and Go must agree bitwise.

When DLRM_CROSSLANG_DIR is set (ctest fixture "crosslang"), writes there, as raw
little-endian arrays (ndarray.tofile):
  model.ckpt      the trained engine's checkpoint (engine.save)
  batch_meta.txt  one line: "batch_size num_dense num_sparse num_ids"
  dense.f32       [batch_size * num_dense]
  lengths.i32     [num_sparse * batch_size], feature-major
  ids.i64         [num_ids]
  weights.f32     [num_ids]
  expected.f32    [batch_size]: this engine's predictions, taken after saving
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from conftest import same_bits

import dlrm

CONFIG = """
model {
  num_dense_features: 4
  tables { name: 'user' num_rows: 40 dim: 8 }
  tables { name: 'item' num_rows: 25 dim: 8 }
  sparse_features { name: 'user' table: 'user' }
  sparse_features { name: 'item' table: 'item' pooling: MEAN }
  sparse_features { name: 'history' table: 'item' }
  bottom_mlp { layer_sizes: 16 layer_sizes: 8 }
  top_mlp { layer_sizes: 16 layer_sizes: 8 layer_sizes: 1 }
  interaction: DOT
}
dense_optimizer { learning_rate: 0.05 sgd { momentum: 0.9 } }
sparse_optimizer { learning_rate: 0.1 adagrad {} }
seed: 11 num_threads: 2 reduction_chunk_rows: 8
"""
ROWS = (40, 25, 25)
BATCH_SIZE, NUM_DENSE = 12, 4


def _batch(rng: np.random.Generator) -> dlrm.Batch:
    dense = rng.standard_normal((BATCH_SIZE, NUM_DENSE), dtype=np.float32)
    lengths = rng.integers(0, 4, size=(len(ROWS), BATCH_SIZE)).astype(np.int32)
    lengths[:, 0] = 0  # sample 0 has only empty bags
    lengths[2, 1] = 0
    ids = np.concatenate([rng.integers(0, rows, size=int(lengths[f].sum()), dtype=np.int64)
                          for f, rows in enumerate(ROWS)])
    weights = rng.uniform(0.25, 2.0, size=ids.shape[0]).astype(np.float32)
    labels = (rng.random(BATCH_SIZE) < 0.4).astype(np.float32)
    return dlrm.Batch(dense, labels, lengths, ids, weights)


def _export(out: Path, engine: dlrm.Engine, batch: dlrm.Batch) -> np.ndarray:
    out.mkdir(parents=True, exist_ok=True)
    engine.save(out / "model.ckpt")
    expected = engine.predict(batch)  # after saving: equals the checkpoint's predictions
    (out / "batch_meta.txt").write_text(
        f"{batch.batch_size} {batch.num_dense} {batch.num_sparse} {batch.num_ids}\n")
    little = {"dense.f32": (batch.dense, "<f4"), "lengths.i32": (batch.lengths, "<i4"),
              "ids.i64": (batch.ids, "<i8"), "weights.f32": (batch.weights, "<f4"),
              "expected.f32": (expected, "<f4")}
    for name, (array, dtype) in little.items():
        np.ascontiguousarray(array, dtype=dtype).tofile(out / name)
    return expected


def test_crosslang_export(tmp_path):
    rng = np.random.default_rng(2024)
    out = Path(os.environ.get("DLRM_CROSSLANG_DIR") or tmp_path / "crosslang")
    batch = _batch(rng)
    assert np.any(batch.lengths == 0)
    with dlrm.Engine(CONFIG) as engine:
        for _ in range(6):
            engine.train_step(_batch(rng))
        engine.train_step(batch)
        assert engine.step == 7
        expected = _export(out, engine, batch)

    # Read everything back from the files, as the Java and Go halves do.
    meta = [int(v) for v in (out / "batch_meta.txt").read_text().split()]
    b, nd, nf, n = meta
    assert meta == [BATCH_SIZE, NUM_DENSE, len(ROWS), batch.num_ids]
    loaded = dlrm.Batch(np.fromfile(out / "dense.f32", "<f4").reshape(b, nd), None,
                        np.fromfile(out / "lengths.i32", "<i4").reshape(nf, b),
                        np.fromfile(out / "ids.i64", "<i8"),
                        np.fromfile(out / "weights.f32", "<f4"))
    assert loaded.num_ids == n
    file_expected = np.fromfile(out / "expected.f32", "<f4")
    assert same_bits(file_expected, expected)
    with dlrm.Engine.from_checkpoint(out / "model.ckpt") as restored:
        assert restored.step == 7
        assert same_bits(restored.predict(loaded), file_expected)
        assert same_bits(restored.predict(batch), file_expected)
