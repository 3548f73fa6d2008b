"""Batches from Arrow, pandas and records (dlrm.arrow): the same parameters, bitwise, as
hand-built batches of the same samples, and refusals that name the column and row."""
from __future__ import annotations

import re
from typing import List

import numpy as np
import pytest

import dlrm
from conftest import SMALL_CONFIG, make_batch, same_bits

pa = pytest.importorskip("pyarrow")
pd = pytest.importorskip("pandas")

COLS = dlrm.Columns(dense=["d0", "d1", "d2"], sparse=["a", "b"], label="click")
WEIGHTED = COLS._replace(weights=["wa", None])


def records_of(batch: dlrm.Batch) -> List[dict]:
    """The hand-built batch's samples as records (the sample-major view users hold)."""
    n = batch.batch_size
    starts = np.concatenate([[0], np.cumsum(batch.lengths.reshape(-1))])
    rows = []
    for s in range(n):
        row = {f"d{j}": float(batch.dense[s, j]) for j in range(batch.num_dense)}
        row["click"] = float(batch.labels[s])
        for f, name in enumerate(["a", "b"]):
            k = f * n + s
            row[name] = batch.ids[starts[k]:starts[k + 1]].tolist()
            if name == "a" and batch.weights is not None:
                row["wa"] = batch.weights[starts[k]:starts[k + 1]].tolist()
        rows.append(row)
    return rows


def arrow_of(rows: List[dict]) -> "pa.RecordBatch":
    schema = pa.schema([("d0", pa.float32()), ("d1", pa.float32()), ("d2", pa.float32()),
                        ("click", pa.float32()), ("a", pa.list_(pa.int64())),
                        ("b", pa.list_(pa.int64()))] +
                       ([("wa", pa.list_(pa.float32()))] if "wa" in rows[0] else []))
    return pa.RecordBatch.from_pylist(rows, schema=schema)


def parameters(engine: dlrm.Engine) -> List[np.ndarray]:
    return [engine.get_parameter(name) for name in engine.parameter_names()]


def train_both(batches: List[dlrm.Batch], converted: List[dlrm.Batch]) -> None:
    with dlrm.Engine(SMALL_CONFIG) as want, dlrm.Engine(SMALL_CONFIG) as got:
        for b, c in zip(batches, converted):
            assert same_bits(np.float32(want.train_step(b)), np.float32(got.train_step(c)))
        for w, g in zip(parameters(want), parameters(got)):
            assert same_bits(w, g)


def test_arrow_pandas_and_rows_train_bitwise_as_hand_built_batches(rng):
    batches = [make_batch(rng, batch_size=8, weights=False) for _ in range(4)]
    for convert in (lambda r: dlrm.Batch.from_arrow(arrow_of(r), COLS),
                    lambda r: dlrm.Batch.from_arrow(pa.Table.from_batches([arrow_of(r)]), COLS),
                    lambda r: dlrm.Batch.from_pandas(arrow_of(r).to_pandas(), COLS),
                    lambda r: dlrm.Batch.from_rows(r, COLS)):
        converted = [convert(records_of(b)) for b in batches]
        for b, c in zip(batches, converted):
            assert same_bits(b.lengths, c.lengths) and same_bits(b.ids, c.ids)
            assert same_bits(b.dense, c.dense) and same_bits(b.labels, c.labels)
        train_both(batches, converted)


def test_weights_follow_their_ids(rng):
    hand = make_batch(rng, batch_size=8, weights=True)
    # Only feature a is weighted in the records: b's weights become 1.
    nb = int(hand.lengths[0].sum())
    w = hand.weights.copy()
    w[nb:] = 1.0
    hand = dlrm.Batch(hand.dense, hand.labels, hand.lengths, hand.ids, w)
    rows = records_of(hand)
    for c in (dlrm.Batch.from_arrow(arrow_of(rows), WEIGHTED),
              dlrm.Batch.from_rows(rows, WEIGHTED)):
        assert same_bits(c.weights, hand.weights)
    train_both([hand], [dlrm.Batch.from_arrow(arrow_of(rows), WEIGHTED)])


def test_a_sliced_chunked_table_converts_its_own_rows(rng):
    rows = records_of(make_batch(rng, batch_size=8, weights=False))
    table = pa.Table.from_batches([arrow_of(rows[:3]), arrow_of(rows[3:])])  # 2 chunks
    whole = dlrm.Batch.from_rows(rows, COLS)
    assert same_bits(dlrm.Batch.from_arrow(table, COLS).ids, whole.ids)
    part = dlrm.Batch.from_arrow(arrow_of(rows).slice(2, 4), COLS)
    assert same_bits(part.ids, dlrm.Batch.from_rows(rows[2:6], COLS).ids)


def test_null_lists_are_empty_bags_and_no_label_is_a_batch_to_predict():
    df = pd.DataFrame({"d0": [0.5, 1.0], "d1": [1, 2], "d2": [0.0, 0.0],
                       "a": [[1, 2], None], "b": [[3], [4]]})
    b = dlrm.Batch.from_pandas(df, COLS._replace(label=None))
    assert b.labels is None
    assert b.lengths.tolist() == [[2, 0], [1, 1]]
    assert b.ids.tolist() == [1, 2, 3, 4]
    with dlrm.Engine(SMALL_CONFIG) as engine:
        assert engine.predict(b).shape == (2,)


def test_refusals_name_the_column_and_row(rng):
    rb = arrow_of(records_of(make_batch(rng, batch_size=8, weights=False)))
    with pytest.raises(dlrm.DlrmError, match='"nope": is not a column') as e:
        dlrm.Batch.from_arrow(rb, COLS._replace(label="nope"))
    assert e.value.status == dlrm.StatusCode.INVALID_ARGUMENT
    with pytest.raises(dlrm.DlrmError, match='"d0": has Arrow format "f"; expected a list'):
        dlrm.Batch.from_arrow(rb, COLS._replace(sparse=["d0", "b"]))
    nulls = pa.RecordBatch.from_pydict({"d0": [1.0, None], "d1": [1.0, 2.0], "d2": [0.0, 1.0],
                                        "click": [0.0, 1.0], "a": [[1], [2]], "b": [[1], [2]]})
    with pytest.raises(dlrm.DlrmError, match='"d0": row 1 is null'):
        dlrm.Batch.from_arrow(nulls, COLS)
    with pytest.raises(TypeError, match="columns.dense must be a list"):
        dlrm.Batch.from_arrow(rb, COLS._replace(dense="d0"))
    with pytest.raises(ValueError, match="columns.weights has 1 names"):
        dlrm.Batch.from_arrow(rb, COLS._replace(weights=["wa"]))
    with pytest.raises(TypeError, match="expected a pyarrow RecordBatch"):
        dlrm.Batch.from_arrow({"d0": [1.0]}, COLS)


def test_nul_in_column_names_is_refused(rng):
    # C would read "d0\0x" as "d0" and convert the wrong column without a word.
    rb = arrow_of(records_of(make_batch(rng, batch_size=8, weights=True)))
    for field, columns in (("dense[0]", COLS._replace(dense=["d0\0x", "d1", "d2"])),
                           ("sparse[1]", COLS._replace(sparse=["a", "b\0x"])),
                           ("label", COLS._replace(label="click\0x")),
                           ("weights[0]", WEIGHTED._replace(weights=["wa\0x", None]))):
        with pytest.raises(ValueError, match=rf"^columns\.{re.escape(field)} contains a NUL"):
            dlrm.Batch.from_arrow(rb, columns)


def test_row_refusals_name_the_row():
    good = {"d0": 1.0, "d1": 2.0, "d2": 3.0, "click": 1, "a": [1], "b": [2]}
    with pytest.raises(ValueError, match="row 1 has no column 'b'"):
        dlrm.Batch.from_rows([good, {k: v for k, v in good.items() if k != "b"}], COLS)
    with pytest.raises(ValueError, match="row 0, column 'a': expected a list of integer ids"):
        dlrm.Batch.from_rows([dict(good, a=[1.5])], COLS)
    with pytest.raises(ValueError, match="row 0, column 'd1': expected a number"):
        dlrm.Batch.from_rows([dict(good, d1="x")], COLS)
    with pytest.raises(ValueError, match="row 0: column 'wa' has 2 weights but 'a' has 1"):
        dlrm.Batch.from_rows([dict(good, wa=[1.0, 2.0])], WEIGHTED)


def test_ids_outside_a_table_fail_the_step_and_change_nothing(rng):
    rows = records_of(make_batch(rng, batch_size=8, weights=False))
    rows[5]["a"] = [50]  # table a has 50 rows
    bad = dlrm.Batch.from_arrow(arrow_of(rows), COLS)
    with dlrm.Engine(SMALL_CONFIG) as engine:
        before = parameters(engine)
        with pytest.raises(dlrm.DlrmError) as e:
            engine.train_step(bad)
        assert e.value.status == dlrm.StatusCode.OUT_OF_RANGE
        assert all(same_bits(x, y) for x, y in zip(before, parameters(engine)))


def test_fit_streams_a_parquet_dataset_bitwise_as_its_batches(rng, tmp_path):
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq
    batches = [make_batch(rng, batch_size=8, weights=False) for _ in range(6)]
    for i in range(3):  # 3 files of 2 record batches each
        table = pa.Table.from_batches([arrow_of(records_of(b)) for b in batches[2 * i:2 * i + 2]])
        pq.write_table(table, tmp_path / f"part-{i}.parquet", row_group_size=8)
    dataset = ds.dataset(sorted(str(p) for p in tmp_path.glob("*.parquet")), format="parquet")
    with dlrm.Engine(SMALL_CONFIG) as want, dlrm.Engine(SMALL_CONFIG) as got:
        want_history = dlrm.fit(want, batches, epochs=2, progress=False)
        got_history = dlrm.fit(got, dataset, epochs=2, progress=False, columns=COLS,
                               eval_batches=[arrow_of(records_of(batches[0])).to_pandas()])
        assert np.array_equal(np.float32(want_history.loss), np.float32(got_history.loss))
        assert len(got_history.eval_auc) == 2
        for w, g in zip(parameters(want), parameters(got)):
            assert same_bits(w, g)


def test_fit_shuffles_reproducibly_and_reports_conversion_errors(rng):
    rows = [records_of(make_batch(rng, batch_size=8, weights=False)) for _ in range(5)]
    frames = [arrow_of(r) for r in rows]
    losses = []
    for _ in range(2):
        with dlrm.Engine(SMALL_CONFIG) as engine:
            losses.append(dlrm.fit(engine, frames, epochs=2, progress=False, columns=COLS,
                                   shuffle=True, seed=3).loss)
    assert losses[0] == losses[1]
    with dlrm.Engine(SMALL_CONFIG) as engine:
        in_order = dlrm.fit(engine, frames, epochs=1, progress=False, columns=COLS).loss
    assert losses[0][:5] != in_order
    with dlrm.Engine(SMALL_CONFIG) as engine:
        with pytest.raises(TypeError, match="pass columns=dlrm.Columns"):
            dlrm.fit(engine, frames, progress=False)
        with pytest.raises(dlrm.DlrmError, match='"nope": is not a column'):
            dlrm.fit(engine, frames, progress=False, columns=COLS._replace(label="nope"))
        with pytest.raises(ValueError, match="shuffle=True needs a sized sequence"):
            dlrm.fit(engine, iter(frames), progress=False, columns=COLS, shuffle=True)
        assert engine.step == 0
