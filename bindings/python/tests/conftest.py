"""Shared fixtures: a small model (the C99 test's config) and numpy batch generators.

The package is imported from this source tree; DLRM_LIBRARY (set by ctest) picks the
library under test.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dlrm  # noqa: E402

# The small model shared with the C ABI test and the Java and Go suites.
SMALL_CONFIG = (Path(__file__).resolve().parents[3] / "tests" / "data" / "small_model.pbtxt").read_text()
SMALL_ROWS = (50, 20)
SMALL_DENSE = 3


def make_batch(rng: np.random.Generator, batch_size: int = 8, num_dense: int = SMALL_DENSE,
               rows: Sequence[int] = SMALL_ROWS, max_len: int = 3, labels: bool = True,
               weights: bool = False) -> dlrm.Batch:
    """A random batch with bags of 0..max_len ids (empty bags included)."""
    dense = rng.standard_normal((batch_size, num_dense), dtype=np.float32)
    lengths = rng.integers(0, max_len + 1, size=(len(rows), batch_size)).astype(np.int32)
    ids = np.concatenate([rng.integers(0, r, size=int(lengths[f].sum()), dtype=np.int64)
                          for f, r in enumerate(rows)])
    y = (rng.random(batch_size) < 0.5).astype(np.float32) if labels else None
    w = rng.uniform(0.5, 1.5, size=ids.shape[0]).astype(np.float32) if weights else None
    return dlrm.Batch(dense, y, lengths, ids, w)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


@pytest.fixture
def engine():
    with dlrm.Engine(SMALL_CONFIG) as e:
        yield e


@pytest.fixture
def batch(rng: np.random.Generator) -> dlrm.Batch:
    return make_batch(rng, weights=True)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Bitwise equality (NaN-safe, and -0.0 differs from 0.0)."""
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def trained(engine: dlrm.Engine, rng: np.random.Generator, steps: int = 5,
            batch: Optional[dlrm.Batch] = None) -> dlrm.Engine:
    for _ in range(steps):
        engine.train_step(batch or make_batch(rng, weights=True))
    return engine
