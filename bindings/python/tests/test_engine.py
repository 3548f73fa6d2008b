"""Engine lifecycle, training, prediction, evaluation and checkpoints."""
from __future__ import annotations

import math
import threading

import numpy as np
import pytest
from conftest import SMALL_CONFIG, make_batch, same_bits, trained

import dlrm


def test_train_predict_evaluate(engine, rng):
    batches = [make_batch(rng, batch_size=16, weights=True) for _ in range(4)]
    losses = [engine.train_step(b) for b in batches]
    assert all(isinstance(x, float) and math.isfinite(x) and x > 0 for x in losses)
    assert engine.step == 4

    p = engine.predict(batches[0])
    assert p.dtype == np.float32 and p.shape == (16,)
    assert np.all((p > 0) & (p < 1))

    result = engine.evaluate(batches)
    assert isinstance(result, dlrm.EvalResult)
    assert result.num_samples == 64
    assert math.isfinite(result.log_loss) and 0 <= result.auc <= 1
    # A single Batch is accepted as well as an iterable (here a generator).
    assert engine.evaluate(batches[0]).num_samples == 16
    assert engine.evaluate(b for b in batches[:2]).num_samples == 32
    with pytest.raises(dlrm.DlrmError, match="at least one batch"):
        engine.evaluate([])


def test_predict_without_labels_matches_with_labels(engine, rng):
    batch = make_batch(rng, weights=True)
    unlabeled = batch.without_labels()
    assert unlabeled.labels is None
    assert same_bits(engine.predict(batch), engine.predict(unlabeled))
    built = dlrm.Batch(batch.dense, None, batch.lengths, batch.ids, batch.weights)
    assert same_bits(engine.predict(batch), engine.predict(built))


def test_predict_into_caller_buffer(engine, batch):
    out = np.full(batch.batch_size + 3, -1, dtype=np.float32)
    result = engine.predict(batch, out=out)
    assert np.shares_memory(result, out) and result.shape == (batch.batch_size,)
    assert same_bits(result, engine.predict(batch))
    assert np.all(out[batch.batch_size:] == -1)
    with pytest.raises(ValueError, match="out holds 2 values"):
        engine.predict(batch, out=np.empty(2, np.float32))
    with pytest.raises(TypeError, match="float32"):
        engine.predict(batch, out=np.empty(8, np.float64))


def test_predict_refuses_unaligned_out(engine, batch):
    # The engine writes through a float*: a misaligned buffer is refused, not written.
    n = batch.batch_size
    raw = bytearray(4 * n + 1)
    out = np.frombuffer(raw, np.float32, offset=1, count=n)
    assert out.flags.writeable and out.flags.c_contiguous and not out.flags.aligned
    with pytest.raises(ValueError, match="out must be a writeable, aligned"):
        engine.predict(batch, out=out)
    assert raw == bytearray(4 * n + 1)


def test_nul_in_strings_is_refused(engine, tmp_path):
    # C would cut each string at the NUL (save("ckpt\0.bak") writing "ckpt") and succeed.
    good = tmp_path / "model.ckpt"
    engine.save(good)
    calls = {
        "path": [lambda: engine.save(str(tmp_path / "ckpt") + "\0.bak"),
                 lambda: engine.load(str(good) + "\0.bak"),
                 lambda: engine.export(str(tmp_path / "export") + "\0.bak"),
                 lambda: dlrm.Engine.from_checkpoint(str(good) + "\0.bak"),
                 lambda: dlrm.Engine.from_checkpoint(str(good) + "\0.bak", device="cpu"),
                 lambda: dlrm.Engine.from_file(str(good) + "\0.bak")],
        "device": [lambda: dlrm.Engine.from_checkpoint(good, device="cpu\0gpu")],
        "config": [lambda: dlrm.Engine(SMALL_CONFIG + "\0 model { oops }")],
        "name": [lambda: engine.parameter_shape("top_mlp.0.weight\0x"),
                 lambda: engine.get_parameter("top_mlp.0.weight\0x"),
                 lambda: engine.set_parameter("top_mlp.0.weight\0x",
                                              engine.get_parameter("top_mlp.0.weight")),
                 lambda: engine.table_stats("t0\0x")],
    }
    for argument, refused in calls.items():
        for call in refused:
            with pytest.raises(ValueError, match=f"^{argument} contains a NUL character"):
                call()
    assert sorted(tmp_path.iterdir()) == [good]  # nothing written under a cut name
    with pytest.raises(TypeError, match="name must be a str"):
        engine.table_stats(b"t0")  # type: ignore[arg-type]


def test_train_step_needs_labels(engine, batch):
    with pytest.raises(dlrm.DlrmError, match="batch.labels is NULL") as info:
        engine.train_step(batch.without_labels())
    assert info.value.code_name == "INVALID_ARGUMENT"
    assert engine.step == 0


def test_weights_change_predictions(engine, rng):
    batch = make_batch(rng, weights=True)
    unweighted = dlrm.Batch(batch.dense, batch.labels, batch.lengths, batch.ids)
    assert not same_bits(engine.predict(batch), engine.predict(unweighted))
    ones = dlrm.Batch(batch.dense, batch.labels, batch.lengths, batch.ids,
                      np.ones(batch.num_ids, np.float32))
    assert same_bits(engine.predict(ones), engine.predict(unweighted))


def test_determinism_same_config_same_batches(rng):
    batches = [make_batch(rng, weights=True) for _ in range(3)]
    runs = []
    for _ in range(2):
        with dlrm.Engine(SMALL_CONFIG) as e:
            losses = [e.train_step(b) for b in batches]
            runs.append((losses, e.predict(batches[0])))
    assert runs[0][0] == runs[1][0]
    assert same_bits(runs[0][1], runs[1][1])


def test_save_load_from_checkpoint(engine, rng, tmp_path):
    batch = make_batch(rng, weights=True)
    trained(engine, rng, steps=3)
    path = tmp_path / "model.ckpt"
    engine.save(path)  # os.PathLike and str both work
    saved = engine.predict(batch)

    trained(engine, rng, steps=2)
    assert engine.step == 5
    assert not same_bits(engine.predict(batch), saved)
    engine.load(str(path))
    assert engine.step == 3
    assert same_bits(engine.predict(batch), saved)

    with dlrm.Engine.from_checkpoint(path) as restored:
        assert restored.step == 3
        assert same_bits(restored.predict(batch), saved)
        assert restored.config == engine.config


def test_from_checkpoint_on_device(engine, rng, tmp_path):
    # A checkpoint serves on a named device; "cpu" here restores the same state, bitwise.
    batch = make_batch(rng, weights=True)
    trained(engine, rng, steps=3)
    path = tmp_path / "model.ckpt"
    engine.save(path)
    saved = engine.predict(batch)
    with dlrm.Engine.from_checkpoint(path, device="cpu") as restored:
        assert restored.step == 3
        assert same_bits(restored.predict(batch), saved)
    with dlrm.Engine.from_checkpoint(path, device=None) as restored:
        assert same_bits(restored.predict(batch), saved)

    with pytest.raises(dlrm.DlrmError) as info:
        dlrm.Engine.from_checkpoint(path, device="gpu")
    assert info.value.status == dlrm.StatusCode.INVALID_ARGUMENT
    assert "'gpu'" in info.value.message
    with pytest.raises(TypeError, match="device"):
        dlrm.Engine.from_checkpoint(path, device=0)  # type: ignore[arg-type]


def test_export_fp32_is_bitwise_and_int8_is_close_and_smaller(engine, rng, tmp_path):
    batch = make_batch(rng, batch_size=32, weights=True)
    trained(engine, rng, steps=5)
    expected = engine.predict(batch)
    fp32_path, int8_path = tmp_path / "fp32.model", tmp_path / "int8.model"
    engine.export(fp32_path)  # quantize="fp32"; os.PathLike and str both work
    engine.export(str(int8_path), quantize="int8")
    with dlrm.Engine.from_checkpoint(fp32_path) as fp32:
        assert fp32.step == 5
        assert np.array_equal(fp32.predict(batch), expected)
        assert same_bits(fp32.predict(batch), expected)
    with dlrm.Engine.from_checkpoint(int8_path) as int8:
        assert int8.step == 5
        got = int8.predict(batch)
    assert np.max(np.abs(got - expected)) <= 0.005
    assert not np.array_equal(got, expected)
    assert int8_path.stat().st_size < fp32_path.stat().st_size


def test_int8_export_refuses_training_and_keeps_predictions(engine, rng, tmp_path, batch):
    trained(engine, rng, steps=3)
    path = tmp_path / "int8.model"
    engine.export(path, quantize="int8")
    with dlrm.Engine.from_checkpoint(path) as served:
        before = served.predict(batch)
        with pytest.raises(dlrm.DlrmError) as info:
            served.train_step(batch)
        assert info.value.status == dlrm.StatusCode.FAILED_PRECONDITION
        assert "has precision INT8" in info.value.message
        assert served.step == 3
        assert same_bits(served.predict(batch), before)
        for refused in (lambda: served.save(tmp_path / "x.ckpt"),
                        lambda: served.set_parameter("embedding.t0.weight",
                                                     np.zeros((50, 4), np.float32))):
            with pytest.raises(dlrm.DlrmError, match="precision INT8") as info:
                refused()
            assert info.value.status == dlrm.StatusCode.FAILED_PRECONDITION
        assert same_bits(served.predict(batch), before)


def test_export_with_16_bit_dense_parameters_is_smaller_and_close(engine, rng, tmp_path):
    batch = make_batch(rng, batch_size=32, weights=True)
    trained(engine, rng, steps=5)
    expected = engine.predict(batch)
    fp32_path = tmp_path / "fp32.model"
    engine.export(fp32_path)
    dense = [n for n in engine.parameter_names() if not n.startswith("embedding.")]
    dense_bytes = sum(4 * engine.get_parameter(n).size for n in dense)
    for precision, dtype in (("bf16", None), ("fp16", np.float16)):
        path = tmp_path / f"{precision}.model"
        engine.export(path, dense=precision)
        # Each dense value takes 2 bytes instead of 4; everything else is as it was, but for
        # each tensor's 64-byte alignment.
        saved = fp32_path.stat().st_size - path.stat().st_size
        assert 0 < saved and abs(saved - dense_bytes // 2) <= 64 * len(dense)
        with dlrm.Engine.from_checkpoint(path) as served:
            for name in dense:
                w = engine.get_parameter(name)
                rounded = (w.astype(dtype).astype(np.float32) if dtype else
                           ((w.view(np.uint32) + 0x7FFF + ((w.view(np.uint32) >> 16) & 1))
                            & 0xFFFF0000).view(np.float32))
                assert same_bits(served.get_parameter(name), rounded), name
            assert np.array_equal(served.get_parameter("embedding.t0.weight"),
                                  engine.get_parameter("embedding.t0.weight"))
            got = served.predict(batch)
        assert np.max(np.abs(got - expected)) <= 0.005
    engine.export(tmp_path / "both.model", quantize="int8", dense="fp16")
    with dlrm.Engine.from_checkpoint(tmp_path / "both.model") as served:
        assert np.max(np.abs(served.predict(batch) - expected)) <= 0.005


def test_export_rejects_unknown_quantize(engine, tmp_path):
    path = tmp_path / "model.int3"
    with pytest.raises(ValueError, match=r"quantize must be one of \['fp32', 'int4', 'int8'\], "
                                         r"got 'int3'"):
        engine.export(path, quantize="int3")
    with pytest.raises(ValueError, match="quantize"):
        engine.export(path, quantize=8)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"dense must be one of \['bf16', 'fp16', 'fp32'\], "
                                         r"got 'int8'"):
        engine.export(path, dense="int8")
    assert not path.exists()


def test_from_file_and_config(tmp_path, batch):
    path = tmp_path / "model.pbtxt"
    path.write_text(SMALL_CONFIG)
    with dlrm.Engine.from_file(path) as a, dlrm.Engine(SMALL_CONFIG) as b:
        assert "num_dense_features: 3" in a.config
        assert a.config == b.config
        assert same_bits(a.predict(batch), b.predict(batch))
        # The config text round-trips into an identical engine.
        with dlrm.Engine(a.config) as c:
            assert same_bits(c.predict(batch), a.predict(batch))


def test_set_learning_rate(rng):
    batch = make_batch(rng)
    with dlrm.Engine(SMALL_CONFIG) as frozen, dlrm.Engine(SMALL_CONFIG) as ref:
        before = frozen.predict(batch)
        frozen.set_learning_rate(0.0)  # target="all"
        frozen.train_step(batch)
        assert same_bits(frozen.predict(batch), before)
        frozen.set_learning_rate(0.05, target="dense")
        frozen.set_learning_rate(0.5, target="sparse")
        frozen.train_step(batch)
        assert not same_bits(frozen.predict(batch), before)
        assert ref.step == 0
    with dlrm.Engine(SMALL_CONFIG) as e:
        with pytest.raises(ValueError, match="target must be one of"):
            e.set_learning_rate(0.1, target="embeddings")
        with pytest.raises(dlrm.DlrmError, match="learning rate must be finite") as info:
            e.set_learning_rate(-1.0)
        assert info.value.code == dlrm.StatusCode.INVALID_ARGUMENT


def test_close_is_idempotent_and_guards_every_call(batch, tmp_path):
    e = dlrm.Engine(SMALL_CONFIG)
    assert not e.closed and "step=0" in repr(e)
    e.close()
    e.close()
    assert e.closed and "closed" in repr(e)
    calls = [
        lambda: e.train_step(batch), lambda: e.predict(batch), lambda: e.evaluate([batch]),
        lambda: e.step, lambda: e.config, lambda: e.save(tmp_path / "x"),
        lambda: e.load(tmp_path / "x"), lambda: e.export(tmp_path / "x"),
        lambda: e.set_learning_rate(0.1),
        e.parameter_names, lambda: e.parameter_shape("top_mlp.0.weight"),
        lambda: e.get_parameter("top_mlp.0.weight"), e.state_dict,
        lambda: e.load_state_dict({}), lambda: e.__enter__(),
    ]
    for call in calls:
        with pytest.raises(dlrm.EngineClosedError, match="engine is closed"):
            call()
    assert issubclass(dlrm.EngineClosedError, ValueError)
    assert not (tmp_path / "x").exists()


def test_context_manager_closes(batch):
    with dlrm.Engine(SMALL_CONFIG) as e:
        e.predict(batch)
    assert e.closed
    with pytest.raises(dlrm.EngineClosedError):
        e.predict(batch)


def test_close_waits_for_calls_in_flight(rng):
    # close() from one thread while others predict: every predict either completes or
    # raises EngineClosedError; none touches a destroyed handle.
    batch = make_batch(rng, batch_size=64)
    e = dlrm.Engine(SMALL_CONFIG)
    outcomes = []
    start = threading.Barrier(5)

    def worker():
        start.wait()
        for _ in range(200):
            try:
                e.predict(batch)
            except dlrm.EngineClosedError:
                outcomes.append("closed")
                return
        outcomes.append("done")

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    start.wait()
    e.close()
    for t in threads:
        t.join()
    assert len(outcomes) == 4 and set(outcomes) <= {"closed", "done"}


def test_garbage_collected_engine_is_released(batch):
    import gc
    import weakref

    e = dlrm.Engine(SMALL_CONFIG)
    finalizer = e._finalizer
    ref = weakref.ref(e)
    del e
    gc.collect()
    assert ref() is None and not finalizer.alive


def test_bad_config_and_missing_files(tmp_path):
    with pytest.raises(dlrm.DlrmError) as info:
        dlrm.Engine("model { num_dense_features: -1 }")
    assert info.value.code_name == "INVALID_ARGUMENT" and info.value.message
    with pytest.raises(dlrm.DlrmError) as info:
        dlrm.Engine("this is { not protobuf")
    assert info.value.code_name == "INVALID_ARGUMENT"
    with pytest.raises(TypeError, match="protobuf text"):
        dlrm.Engine(b"model {}")  # type: ignore[arg-type]
    with pytest.raises(dlrm.DlrmError) as info:
        dlrm.Engine.from_file(tmp_path / "missing.pbtxt")
    assert info.value.code_name in ("IO", "NOT_FOUND") and "missing.pbtxt" in info.value.message
    with pytest.raises(dlrm.DlrmError) as info:
        dlrm.Engine.from_checkpoint(tmp_path / "missing.ckpt")
    assert info.value.code_name in ("IO", "NOT_FOUND") and "missing.ckpt" in info.value.message


def test_corrupt_checkpoint_leaves_engine_unchanged(engine, rng, tmp_path, batch):
    trained(engine, rng, steps=2)
    path = tmp_path / "model.ckpt"
    engine.save(path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    before, step = engine.predict(batch), engine.step
    trained(engine, rng, steps=1)
    after_train = engine.predict(batch)
    with pytest.raises(dlrm.DlrmError) as info:
        engine.load(path)
    assert info.value.code_name in ("DATA_LOSS", "IO", "INVALID_ARGUMENT")
    assert engine.step == step + 1
    assert same_bits(engine.predict(batch), after_train)
    assert not same_bits(before, after_train)


def test_checkpoint_of_another_model_is_rejected(engine, tmp_path, batch):
    other = SMALL_CONFIG.replace("layer_sizes: 8 layer_sizes: 4", "layer_sizes: 6 layer_sizes: 4")
    path = tmp_path / "other.ckpt"
    with dlrm.Engine(other) as e:
        e.save(path)
    before = engine.predict(batch)
    with pytest.raises(dlrm.DlrmError) as info:
        engine.load(path)
    assert info.value.message
    assert same_bits(engine.predict(batch), before)


def test_engine_cannot_be_copied(engine):
    import copy
    import pickle

    for attempt in (copy.copy, copy.deepcopy, pickle.dumps):
        with pytest.raises(TypeError, match="cannot be copied"):
            attempt(engine)


def test_error_pickles_with_its_fields():
    import pickle

    err = dlrm.DlrmError(2, "OUT_OF_RANGE", "batch.ids[3] = 99")
    copy = pickle.loads(pickle.dumps(err))
    assert (copy.code, copy.code_name, copy.message) == (2, "OUT_OF_RANGE", "batch.ids[3] = 99")
    assert copy.status is dlrm.StatusCode.OUT_OF_RANGE
    assert str(copy) == "OUT_OF_RANGE: batch.ids[3] = 99"


def test_async_submit_wait_matches_synchronous_steps(rng):
    batches = [make_batch(rng) for _ in range(5)]
    with dlrm.Engine(SMALL_CONFIG) as sync, dlrm.Engine(SMALL_CONFIG) as async_engine:
        expected = [sync.train_step(b) for b in batches]
        tickets = [async_engine.train_submit(b) for b in batches]
        losses = [async_engine.train_wait(t) for t in tickets]
        assert np.array_equal(np.array(losses, np.float32).view(np.uint32),
                              np.array(expected, np.float32).view(np.uint32))
        probe = batches[0]
        assert same_bits(sync.predict(probe), async_engine.predict(probe))
        with pytest.raises(dlrm.DlrmError) as err:
            async_engine.train_wait(tickets[0])
        assert "already waited" in err.value.message


def test_cuda_device_is_refused_naming_the_cause_or_trains(rng):
    # The same library trains on this machine's CPU. Asking it for a GPU it cannot use
    # (built without CUDA, no driver or device, cuBLASLt missing) is an error that says
    # which, never a crash and never CPU training behind a CUDA config; where there is
    # one, the engine trains there.
    try:
        gpu = dlrm.Engine(SMALL_CONFIG + "\ndevice { kind: CUDA }\n")
    except dlrm.DlrmError as e:
        assert e.status == dlrm.StatusCode.FAILED_PRECONDITION
        assert any(cause in e.message for cause in (
            "built without CUDA", "no usable CUDA device", "cannot open cuBLASLt"))
    else:
        with gpu:
            assert math.isfinite(gpu.train_step(make_batch(rng, batch_size=8)))
    with dlrm.Engine(SMALL_CONFIG + "\ndevice { kind: CPU }\n") as cpu:
        assert cpu.step == 0
