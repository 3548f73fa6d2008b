"""Table statistics of a DYNAMIC table (raw int64 ids) and of a FIXED one."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import SMALL_CONFIG, make_batch

import dlrm

FIXED_T0 = "tables { name: 't0' num_rows: 50 dim: 4 }"
DYNAMIC_T0 = "tables { name: 't0' num_rows: 6 dim: 4 kind: DYNAMIC dynamic { eviction: LFU } }"
# Raw ids of feature 'a': (k + 1) * this for k in 0..19, spread over the int64 range.
ID_SPREAD = 0x9E3779B97F4A7C1


@pytest.fixture
def dynamic_engine():
    """The small model with table t0 made DYNAMIC with 6 rows (LFU), as in the C test."""
    assert FIXED_T0 in SMALL_CONFIG
    with dlrm.Engine(SMALL_CONFIG.replace(FIXED_T0, DYNAMIC_T0)) as e:
        yield e


def raw_id_batch(rng: np.random.Generator) -> dlrm.Batch:
    """A batch whose feature-'a' ids are 20 large raw ids (wrapping past int64 is fine)."""
    b = make_batch(rng, batch_size=16, rows=(20, 20))
    ids = b.ids.copy()
    first = int(b.lengths[0].sum())
    ids[:first] = (ids[:first] + 1) * np.int64(ID_SPREAD)
    return dlrm.Batch(b.dense, b.labels, b.lengths, ids)


def test_dynamic_table_stats(dynamic_engine, rng):
    batches = [raw_id_batch(rng) for _ in range(5)]
    for b in batches:
        dynamic_engine.train_step(b)

    s = dynamic_engine.table_stats("t0")
    assert isinstance(s, dlrm.TableStats)
    assert s.dynamic is True and s.capacity == 6 and 0 < s.size <= 6
    assert s.admitted > 6 and s.evicted > 0 and s.admitted - s.evicted == s.size
    assert 0 < s.lookups and 0 <= s.hits <= s.lookups
    assert s.hit_rate == pytest.approx(s.hits / s.lookups) and 0 <= s.hit_rate <= 1
    assert s.rejected >= 0 and s.memory_bytes > 6 * 4 * 4

    # Prediction admits nothing and counts no lookups.
    dynamic_engine.predict(batches[0])
    after = dynamic_engine.table_stats("t0")
    assert (after.lookups, after.admitted, after.size) == (s.lookups, s.admitted, s.size)


def test_fixed_table_stats(dynamic_engine, rng):
    dynamic_engine.train_step(raw_id_batch(rng))
    s = dynamic_engine.table_stats("t1")
    assert s.dynamic is False and s.capacity == 20 and s.size == 20
    assert s.lookups == 0 and s.hits == 0 and s.hit_rate == 0.0
    assert s.admitted == 0 and s.evicted == 0 and s.rejected == 0 and s.memory_bytes > 0


def test_unknown_table_is_not_found(dynamic_engine):
    with pytest.raises(dlrm.DlrmError, match="nope") as info:
        dynamic_engine.table_stats("nope")
    assert info.value.status == dlrm.StatusCode.NOT_FOUND
    dynamic_engine.close()
    with pytest.raises(dlrm.EngineClosedError):
        dynamic_engine.table_stats("t0")
