"""Named parameters and state_dict / load_state_dict (all or nothing)."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import SMALL_CONFIG, make_batch, same_bits, trained

import dlrm


def test_names_and_shapes(engine):
    names = engine.parameter_names()
    assert names[:4] == ["bottom_mlp.0.weight", "bottom_mlp.0.bias",
                         "bottom_mlp.1.weight", "bottom_mlp.1.bias"]
    assert "embedding.t0.weight" in names and "embedding.t1.weight" in names
    assert engine.parameter_shape("bottom_mlp.0.weight") == (8, 3)
    assert engine.parameter_shape("bottom_mlp.0.bias") == (8,)
    assert engine.parameter_shape("embedding.t0.weight") == (50, 4)
    with pytest.raises(dlrm.DlrmError, match="no parameter named") as info:
        engine.parameter_shape("nope")
    assert info.value.code_name == "NOT_FOUND"


def test_get_set_parameter(engine, batch):
    w = engine.get_parameter("embedding.t1.weight")
    assert w.dtype == np.float32 and w.shape == (20, 4) and w.flags.owndata
    w[:] = 0  # a copy: the engine is unaffected until set_parameter
    assert not same_bits(engine.get_parameter("embedding.t1.weight"), w)
    before = engine.predict(batch)
    engine.set_parameter("embedding.t1.weight", w)
    assert same_bits(engine.get_parameter("embedding.t1.weight"), w)
    assert not same_bits(engine.predict(batch), before)

    with pytest.raises(TypeError, match="float32"):
        engine.set_parameter("embedding.t1.weight", w.astype(np.float64))
    with pytest.raises(ValueError, match=r"shape \(80,\).*\(20, 4\)"):
        engine.set_parameter("embedding.t1.weight", w.ravel())
    bad = w.copy()
    bad[3, 1] = np.nan
    with pytest.raises(dlrm.DlrmError) as info:
        engine.set_parameter("embedding.t1.weight", bad)
    assert info.value.code_name == "INVALID_ARGUMENT"
    assert same_bits(engine.get_parameter("embedding.t1.weight"), w)


def test_state_dict_round_trip_is_bitwise(rng):
    probe = make_batch(rng, weights=True)
    with dlrm.Engine(SMALL_CONFIG) as src, dlrm.Engine(SMALL_CONFIG) as dst:
        trained(src, rng, steps=4)
        state = src.state_dict()
        assert list(state) == src.parameter_names()
        assert not same_bits(dst.predict(probe), src.predict(probe))
        result = dst.load_state_dict(state)
        assert result == dlrm.LoadResult([], [])
        back = dst.state_dict()
        for name, value in state.items():
            assert np.array_equal(value.view(np.uint32), back[name].view(np.uint32)), name
            assert same_bits(value, back[name])
        assert same_bits(dst.predict(probe), src.predict(probe))
        # Copies: mutating the dict does not touch the engine.
        state["top_mlp.0.bias"][:] = 123.0
        assert not np.any(src.get_parameter("top_mlp.0.bias") == 123.0)


def _other_state(rng):
    state = trained(dlrm.Engine(SMALL_CONFIG), rng, steps=2)
    try:
        return state.state_dict()
    finally:
        state.close()


def _assert_rejected(engine, state, probe, error, match):
    before_state = engine.state_dict()
    before = engine.predict(probe)
    with pytest.raises(error, match=match):
        engine.load_state_dict(state)
    assert same_bits(engine.predict(probe), before)
    after_state = engine.state_dict()
    assert all(same_bits(before_state[n], after_state[n]) for n in before_state)


def test_load_state_dict_rejects_mismatches_changing_nothing(engine, rng):
    probe = make_batch(rng)
    good = _other_state(rng)
    last = list(good)[-1]  # bad entry placed last: earlier, valid ones must not be written

    state = dict(good)
    state[last] = good[last][:-1]
    _assert_rejected(engine, state, probe, ValueError, rf"{last}.*has shape")

    state = dict(good)
    state[last] = good[last].astype(np.float64)
    _assert_rejected(engine, state, probe, TypeError, rf"{last}.*float32")

    state = dict(good)
    state[last] = good[last].copy()
    state[last][2, 3] = np.nan
    _assert_rejected(engine, state, probe, ValueError, rf"{last}.*non-finite.*\(2, 3\)")

    state = dict(good)
    state[last] = good[last].copy()
    state[last][0, 0] = -np.inf
    _assert_rejected(engine, state, probe, ValueError, "non-finite")

    state = dict(good)
    state["embedding.t9.weight"] = good[last]
    _assert_rejected(engine, state, probe, KeyError, "unexpected keys.*embedding.t9.weight")

    state = dict(good)
    del state["top_mlp.1.bias"]
    _assert_rejected(engine, state, probe, KeyError, "missing parameters.*top_mlp.1.bias")

    state = dict(good)
    state[last] = good[last].tolist()
    _assert_rejected(engine, state, probe, TypeError, "float32 numpy.ndarray")


def test_load_state_dict_non_strict(engine, rng):
    good = _other_state(rng)
    partial = {"top_mlp.1.bias": good["top_mlp.1.bias"], "extra": np.zeros(1, np.float32)}
    result = engine.load_state_dict(partial, strict=False)
    assert result.unexpected_keys == ["extra"]
    assert "top_mlp.1.bias" not in result.missing_keys
    assert len(result.missing_keys) == len(good) - 1
    assert same_bits(engine.get_parameter("top_mlp.1.bias"), good["top_mlp.1.bias"])
    # Non-strict still validates the entries it writes.
    with pytest.raises(ValueError, match="has shape"):
        engine.load_state_dict({"top_mlp.1.bias": np.zeros(7, np.float32)}, strict=False)
