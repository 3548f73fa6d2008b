"""Batch validation, zero-copy, and the engine's errors for bad values."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest
from conftest import make_batch, same_bits

import dlrm


def _arrays(rng, batch_size=8):
    b = make_batch(rng, batch_size=batch_size, weights=True)
    return dict(dense=b.dense.copy(), labels=b.labels.copy(), lengths=b.lengths.copy(),
                ids=b.ids.copy(), weights=b.weights.copy())


def test_zero_copy_for_contiguous_inputs(rng, engine):
    a = _arrays(rng)
    batch = dlrm.Batch(**a)
    for name, array in a.items():
        kept = getattr(batch, name)
        assert kept is array and np.shares_memory(kept, array), name
        assert (kept.__array_interface__["data"][0] == array.__array_interface__["data"][0])
    s = batch._struct
    for name in a:
        assert ctypes.cast(getattr(s, name), ctypes.c_void_p).value == a[name].ctypes.data, name
    assert (s.batch_size, s.num_dense, s.num_sparse, s.num_ids) == batch.shape
    # In-place edits are seen by the engine: it reads the caller's buffer on every call.
    before = engine.predict(batch)
    a["dense"][:] += 1.0
    assert not same_bits(engine.predict(batch), before)


def test_non_contiguous_inputs_are_copied(rng, engine):
    a = _arrays(rng)
    wide = np.zeros((a["dense"].shape[0], 2 * a["dense"].shape[1]), np.float32)
    wide[:, ::2] = a["dense"]
    strided = wide[:, ::2]
    assert not strided.flags.c_contiguous
    fortran = np.asfortranarray(a["lengths"])
    batch = dlrm.Batch(strided, a["labels"], fortran, a["ids"], a["weights"])
    assert batch.dense.flags.c_contiguous and not np.shares_memory(batch.dense, wide)
    assert batch.lengths.flags.c_contiguous
    assert same_bits(engine.predict(batch), engine.predict(dlrm.Batch(**a)))


def test_read_only_inputs_are_accepted(rng, engine):
    a = _arrays(rng)
    for v in a.values():
        v.flags.writeable = False
    assert engine.predict(dlrm.Batch(**a)).shape == (8,)


@pytest.mark.parametrize("name, bad, expected", [
    ("dense", np.float64, "float32"),
    ("labels", np.float64, "float32"),
    ("lengths", np.int64, "int32"),
    ("ids", np.int32, "int64"),
    ("ids", np.uint64, "int64"),
    ("weights", np.float16, "float32"),
])
def test_wrong_dtype_is_a_type_error(rng, name, bad, expected):
    a = _arrays(rng)
    a[name] = a[name].astype(bad)
    with pytest.raises(TypeError, match=rf"{name} must have dtype {expected}, got {np.dtype(bad)}"):
        dlrm.Batch(**a)


def test_non_native_byte_order_is_a_type_error(rng):
    a = _arrays(rng)
    a["dense"] = a["dense"].astype(">f4")
    with pytest.raises(TypeError, match="dense must have dtype float32"):
        dlrm.Batch(**a)


def test_lists_are_a_type_error(rng):
    a = _arrays(rng)
    a["labels"] = a["labels"].tolist()
    with pytest.raises(TypeError, match="labels must be a numpy.ndarray of dtype float32"):
        dlrm.Batch(**a)


@pytest.mark.parametrize("name, change, message", [
    ("dense", lambda x: x.ravel(), "dense must be 2-D"),
    ("labels", lambda x: x[:-1], "labels has 7 entries but dense has 8 rows"),
    ("labels", lambda x: x[:, None], "labels must be 1-D"),
    ("lengths", lambda x: x.T.copy(), r"lengths must have shape \[num_sparse, batch_size=8\]"),
    ("lengths", lambda x: x.ravel(), "lengths must be 2-D"),
    ("ids", lambda x: x[:-1], "ids has .* entries but the lengths sum to"),
    ("weights", lambda x: x[:-1], "weights has .* entries but ids has"),
])
def test_wrong_shape_is_a_value_error(rng, name, change, message):
    a = _arrays(rng)
    a[name] = change(a[name])
    with pytest.raises(ValueError, match=message):
        dlrm.Batch(**a)


def _check_unchanged(engine, probe, before, step):
    assert engine.step == step
    assert same_bits(engine.predict(probe), before)


def test_id_out_of_range_is_out_of_range(engine, rng):
    probe = make_batch(rng)
    before = engine.predict(probe)
    a = _arrays(rng)
    first_t1 = int(a["lengths"][0].sum())  # ids of feature 1 (table t1, 20 rows) start here
    a["ids"][first_t1] = 20
    a["lengths"][1, :] = 0
    a["lengths"][1, 0] = a["ids"].shape[0] - first_t1
    batch = dlrm.Batch(**a)
    for call in (engine.train_step, engine.predict, lambda b: engine.evaluate([b])):
        with pytest.raises(dlrm.DlrmError) as info:
            call(batch)
        err = info.value
        assert err.code == dlrm.StatusCode.OUT_OF_RANGE and err.code_name == "OUT_OF_RANGE"
        assert f"batch.ids[{first_t1}] = 20" in err.message and "[0, 20)" in err.message
        assert err.message in str(err)
    _check_unchanged(engine, probe, before, 0)


def test_negative_id_is_out_of_range(engine, rng):
    a = _arrays(rng)
    a["ids"][0] = -1
    with pytest.raises(dlrm.DlrmError, match=r"batch.ids\[0\] = -1") as info:
        engine.predict(dlrm.Batch(**a))
    assert info.value.code_name == "OUT_OF_RANGE"


def test_nan_label_is_invalid_argument(engine, rng):
    probe = make_batch(rng)
    before = engine.predict(probe)
    a = _arrays(rng)
    a["labels"][5] = np.nan
    batch = dlrm.Batch(**a)
    with pytest.raises(dlrm.DlrmError) as info:
        engine.train_step(batch)
    assert info.value.code_name == "INVALID_ARGUMENT"
    assert "batch.labels[5]" in info.value.message
    with pytest.raises(dlrm.DlrmError, match=r"batches\[1\]: batch.labels\[5\] is not finite"):
        engine.evaluate([probe, batch])
    _check_unchanged(engine, probe, before, 0)


@pytest.mark.parametrize("name, index, value, needle", [
    ("labels", 2, 1.5, "batch.labels[2] = 1.5 is outside [0, 1]"),
    ("dense", 3, np.inf, "batch.dense[1][0] is not finite"),
    ("weights", 0, np.nan, "batch.weights[0] is not finite"),
    ("lengths", 4, -1, "batch.lengths[4]"),
])
def test_bad_values_are_invalid_argument(engine, rng, name, index, value, needle):
    probe = make_batch(rng)
    before = engine.predict(probe)
    a = _arrays(rng)
    a[name].reshape(-1)[index] = value
    with pytest.raises(dlrm.DlrmError) as info:
        engine.train_step(dlrm.Batch(**a))
    assert info.value.code_name == "INVALID_ARGUMENT"
    assert needle in info.value.message
    _check_unchanged(engine, probe, before, 0)


def test_batch_that_does_not_fit_the_model(engine, rng):
    wrong_dense = make_batch(rng, num_dense=4)
    with pytest.raises(dlrm.DlrmError, match="batch.num_dense is 4 but the model has 3"):
        engine.predict(wrong_dense)
    wrong_sparse = make_batch(rng, rows=(50, 20, 20))
    with pytest.raises(dlrm.DlrmError, match="batch.num_sparse is 3 but the model has 2"):
        engine.predict(wrong_sparse)
    empty = dlrm.Batch(np.zeros((0, 3), np.float32), None, np.zeros((2, 0), np.int32),
                       np.zeros(0, np.int64))
    with pytest.raises(dlrm.DlrmError, match=r"batch_size must be in \[1, 2\^31 - 1\], got 0"):
        engine.predict(empty)
    with pytest.raises(TypeError, match="must be a dlrm.Batch"):
        engine.predict(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"batches\[1\] must be a dlrm.Batch"):
        engine.evaluate([make_batch(rng), "x"])  # type: ignore[list-item]


def test_batch_accessors(rng):
    b = make_batch(rng, batch_size=5, weights=True)
    assert len(b) == 5 and b.shape == (5, 3, 2, b.ids.shape[0])
    assert "batch_size=5" in repr(b)
    with pytest.raises(AttributeError):
        b.dense = b.dense  # type: ignore[misc]


def test_sample_major_layout_is_converted_to_the_engines(rng):
    from conftest import make_batch
    fm = make_batch(rng, batch_size=6, weights=True)
    # The same samples, sample-major: sample s's bags of feature 0, 1, ... in turn.
    n, f = fm.batch_size, fm.num_sparse
    starts = np.concatenate([[0], np.cumsum(fm.lengths.ravel())])
    bags = [[(starts[k * n + s], starts[k * n + s + 1]) for k in range(f)] for s in range(n)]
    ids = np.concatenate([fm.ids[a:b] for row in bags for a, b in row])
    w = np.concatenate([fm.weights[a:b] for row in bags for a, b in row])
    sm = dlrm.Batch(fm.dense, fm.labels, np.ascontiguousarray(fm.lengths.T), ids, w,
                    layout="sample_major")
    assert np.array_equal(sm.lengths, fm.lengths)
    assert np.array_equal(sm.ids, fm.ids) and np.array_equal(sm.weights, fm.weights)
    with pytest.raises(ValueError, match="layout='sample_major'"):
        dlrm.Batch(fm.dense, fm.labels, np.ascontiguousarray(fm.lengths.T), ids)
    with pytest.raises(ValueError, match="layout must be"):
        dlrm.Batch(fm.dense, fm.labels, fm.lengths, fm.ids, layout="columns")
    with pytest.raises(ValueError, match="lengths sum to"):
        dlrm.Batch(fm.dense, fm.labels, fm.lengths.T.copy(), ids[:-1], layout="sample_major")
