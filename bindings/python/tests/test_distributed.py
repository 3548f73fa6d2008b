"""dlrm.distributed: a job of a coordinator, 2 embedding servers and 2 trainers as threads
of this process over loopback TCP (every call releases the GIL). Sync training equals the
single-process Engine on the same global batches, bitwise, with the built-in collective
and with a Python all-gather; bad settings are refused by name."""
from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import pytest

import dlrm
from conftest import SMALL_CONFIG, make_batch

CONFIG = SMALL_CONFIG + "\nsharding { data_parallel_max_bytes: 0 }\n"  # tables on servers
TRAINERS, STEPS, GLOBAL = 2, 4, 8


def _part(batch: dlrm.Batch, r: int) -> dlrm.Batch:
    """Samples of trainer r (of 2) of a global batch of 8."""
    lo, hi = r * GLOBAL // TRAINERS, (r + 1) * GLOBAL // TRAINERS
    lengths = batch.lengths
    offsets = np.concatenate([[0], np.cumsum(lengths.reshape(-1))])
    ids = np.concatenate([batch.ids[offsets[f * GLOBAL + lo]:offsets[f * GLOBAL + hi]]
                          for f in range(lengths.shape[0])])
    return dlrm.Batch(batch.dense[lo:hi].copy(), batch.labels[lo:hi].copy(),
                      np.ascontiguousarray(lengths[:, lo:hi]), ids)


def _cluster(role: str, rank: int, port: int) -> Dict[str, object]:
    c: Dict[str, object] = {"DLRM_ROLE": role, "DLRM_WORLD_SIZE": 4,
                            "DLRM_COORDINATOR": f"127.0.0.1:{port}", "DLRM_TIMEOUT_MS": 20000}
    if rank >= 0:
        c["DLRM_RANK"] = rank
    return c


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _PythonAllGather:
    """Every trainer's bytes in rank order, over a barrier (a stand-in for MPI)."""

    def __init__(self) -> None:
        self.barrier = threading.Barrier(TRAINERS)
        self.slots: List[bytes] = [b""] * TRAINERS

    def member(self, rank: int):
        def allgather(mine: bytes) -> Sequence[bytes]:
            self.slots[rank] = mine
            self.barrier.wait()
            everything = list(self.slots)
            self.barrier.wait()
            return everything
        return allgather


def _run_job(batches: List[dlrm.Batch], python_allgather: bool,
             checkpoint_dir: Optional[Path] = None) -> List[List[float]]:
    """Trains the batches on the job; with checkpoint_dir, the trainers then checkpoint."""
    port = _free_port()
    errors: List[BaseException] = []
    losses: List[List[float]] = [[] for _ in range(TRAINERS)]

    def role(name: str, rank: int) -> None:
        try:
            dlrm.distributed.run_role(CONFIG, _cluster(name, rank, port))
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    gather = _PythonAllGather()

    def trainer(r: int) -> None:
        try:
            with dlrm.distributed.Trainer(
                    CONFIG, _cluster("trainer", 2 + r, port),
                    allgather=gather.member(r) if python_allgather else None) as t:
                assert (t.rank, t.num_trainers, t.step) == (r, TRAINERS, 0)
                t.enqueue(_part(batches[0], r))
                for i in range(1, STEPS):
                    t.enqueue(_part(batches[i], r))  # one part's lookups in flight
                    losses[r].append(t.train_step())
                losses[r].append(t.train_step())
                assert t.step == STEPS
                if checkpoint_dir is not None:
                    t.checkpoint(checkpoint_dir)
                t.finish()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=role, args=("coordinator", -1))]
    threads[0].start()
    time.sleep(0.2)  # the coordinator binds its port before the peers bind theirs
    threads += [threading.Thread(target=role, args=("server", s)) for s in range(2)]
    threads += [threading.Thread(target=trainer, args=(r,)) for r in range(TRAINERS)]
    for t in threads[1:]:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    return losses


@pytest.mark.parametrize("python_allgather", [False, True], ids=["transport", "python"])
def test_sync_job_equals_one_engine_bitwise(python_allgather: bool) -> None:
    rng = np.random.default_rng(7)
    batches = [make_batch(rng, batch_size=GLOBAL) for _ in range(STEPS)]
    with dlrm.Engine(CONFIG) as engine:
        want = [engine.train_step(b) for b in batches]
    losses = _run_job(batches, python_allgather)
    for r in range(TRAINERS):
        assert np.array(losses[r], np.float32).tobytes() == np.array(want, np.float32).tobytes()


def test_bad_settings_are_refused_by_name() -> None:
    with pytest.raises(dlrm.DlrmError, match="DLRM_ROLE=server"):
        dlrm.distributed.Trainer(CONFIG, _cluster("server", 0, 5555))
    with pytest.raises(dlrm.DlrmError, match="not a DLRM_"):
        dlrm.distributed.Trainer(CONFIG, {"HOME": "/root"})
    with pytest.raises(ValueError, match="single line"):
        dlrm.distributed.Trainer(CONFIG, {"DLRM_ROLE": "trainer\nDLRM_RANK=1"})
    with pytest.raises(dlrm.DlrmError, match="dlrm_trainer_create"):
        dlrm.distributed.run_role(CONFIG, _cluster("trainer", 2, 5555))
    with pytest.raises(TypeError):
        dlrm.distributed.Trainer(b"not text")  # type: ignore[arg-type]


def test_nul_in_strings_is_refused_by_name(tmp_path: Path) -> None:
    # C would cut each string at the NUL: a config or setting shortened without a word.
    settings = _cluster("trainer", 2, 5555)
    with pytest.raises(ValueError, match="^config contains a NUL character"):
        dlrm.distributed.Trainer(CONFIG + "\0 model { oops }", settings)
    with pytest.raises(ValueError, match="^config contains a NUL character"):
        dlrm.distributed.run_role(CONFIG + "\0", _cluster("server", 0, 5555))
    with pytest.raises(ValueError, match="^cluster setting 'DLRM_ROLE' contains a NUL"):
        dlrm.distributed.Trainer(CONFIG, dict(settings, DLRM_ROLE="trainer\0server"))
    with pytest.raises(ValueError, match="^restore_dir contains a NUL character"):
        dlrm.distributed.Trainer(CONFIG, settings, restore_dir=f"{tmp_path}\0x")


class _FakeGpu:
    def __init__(self, addresses: Sequence[str]) -> None:
        self.addresses = addresses


class _FakeTaskContext:
    """What dlrm.spark reads of a BarrierTaskContext: the task's address and resources."""

    def __init__(self, resources: Dict[str, _FakeGpu]) -> None:
        self._resources = resources

    def partitionId(self) -> int:  # noqa: N802 - Spark's name
        return 1

    def getTaskInfos(self) -> List[object]:  # noqa: N802 - Spark's name
        info = type("Info", (), {"address": "127.0.0.1:4040"})
        return [info, info]

    def resources(self) -> Dict[str, _FakeGpu]:
        return self._resources


def test_spark_trainer_task_takes_the_gpu_spark_assigned_it():
    from dlrm import spark
    job = spark._Job(SMALL_CONFIG, dlrm.Columns(dense=[], sparse=[], label="y"), 64, 0, 2, 3,
                     "127.0.0.1:1", None, 1000)
    ctx = _FakeTaskContext({"gpu": _FakeGpu(["3"])})
    assert "DLRM_DEVICE" not in spark._settings(ctx, job, None)  # the config's device
    for device, want in (("cuda", "cuda:3"), ("cpu", "cpu"), ("cuda:1", "cuda:1")):
        settings = spark._settings(ctx, job, spark._task_device(ctx, device))
        assert settings["DLRM_DEVICE"] == want and settings["DLRM_RANK"] == 3
    with pytest.raises(RuntimeError, match="spark.task.resource.gpu.amount"):
        spark._task_device(_FakeTaskContext({}), "cuda")
    with pytest.raises(RuntimeError, match="GPU address 'gpu-a'"):
        spark._task_device(_FakeTaskContext({"gpu": _FakeGpu(["gpu-a"])}), "cuda")
    spark._require_gpu_tasks({"spark.task.resource.gpu.amount": "1"}, "cuda")
    spark._require_gpu_tasks({}, "cpu")
    with pytest.raises(ValueError, match="this session sets none"):
        spark._require_gpu_tasks({}, "cuda")
    columns = dlrm.Columns(dense=["d"], sparse=[], label="y")
    for bad in ("gpu", "cuda:", "cuda:x", "cuda:12345", "CUDA", 0):
        with pytest.raises(ValueError, match="device must be None, 'cpu', 'cuda' or 'cuda:N'"):
            spark.DlrmEstimator(SMALL_CONFIG, columns, part_rows=64, device=bad)


def test_dlrm_device_in_the_cluster_settings_is_checked_by_name():
    """DLRM_DEVICE (a trainer's device in place of the config's) is refused by name
    before the trainer joins when it cannot be used as given."""
    settings = {"DLRM_ROLE": "trainer", "DLRM_RANK": 0, "DLRM_WORLD_SIZE": 1,
                "DLRM_COORDINATOR": "127.0.0.1:1", "DLRM_TIMEOUT_MS": 1000,
                "DLRM_DEVICE": "cuda:local"}
    with pytest.raises(dlrm.DlrmError, match="DLRM_DEVICE=cuda:local needs DLRM_LOCAL_RANK"):
        dlrm.distributed.Trainer(SMALL_CONFIG, settings)
    settings["DLRM_DEVICE"] = "tpu"
    with pytest.raises(dlrm.DlrmError, match="DLRM_DEVICE must be cpu, cuda, cuda:N or cuda:local"):
        dlrm.distributed.Trainer(SMALL_CONFIG, settings)


def _one_trainer_job(errors: List[str]) -> Tuple[Dict[str, object], List[threading.Thread]]:
    """Starts a coordinator and a server in threads (run_role's errors go to errors) for
    one trainer; returns that trainer's settings and the threads, for _join."""
    port = _free_port()

    def cluster(role: str, rank: int) -> Dict[str, object]:
        return dict(_cluster(role, rank, port), DLRM_WORLD_SIZE=2, DLRM_TIMEOUT_MS=5000)

    def role(name: str, rank: int) -> None:
        try:
            dlrm.distributed.run_role(CONFIG, cluster(name, rank))
        except dlrm.DlrmError as e:
            errors.append(str(e))

    threads = [threading.Thread(target=role, args=("coordinator", -1))]
    threads[0].start()
    time.sleep(0.2)  # the coordinator binds its port before the peers bind theirs
    threads.append(threading.Thread(target=role, args=("server", 0)))
    threads[1].start()
    return cluster("trainer", 1), threads


def _join(threads: List[threading.Thread]) -> None:
    for thread in threads:
        thread.join(60)
        assert not thread.is_alive(), thread


def test_a_trainer_closed_after_a_failed_call_tells_the_job_why() -> None:
    """A host that gives up on a trainer after an error (closes it unfinished) ends the
    job, and the other processes' errors name that error, not only that it left."""
    errors: List[str] = []
    settings, threads = _one_trainer_job(errors)
    with dlrm.distributed.Trainer(CONFIG, settings) as t:
        with pytest.raises(dlrm.DlrmError, match="no part queued"):
            t.train_step()
    _join(threads)
    assert len(errors) == 2, errors  # the coordinator's and the server's
    for e in errors:
        assert "its last call failed" in e and "no part queued" in e, e


def test_trainer_calls_are_serialized() -> None:
    """Calls on one trainer, destroy included, must not overlap (dlrm.h): close() from
    another thread waits for a train_step blocked in the host all-gather, which runs
    inside it without needing the trainer's lock; a call from the all-gather is refused."""
    errors: List[str] = []
    entered, release, close_returned = threading.Event(), threading.Event(), threading.Event()
    seen: Dict[str, object] = {}

    def allgather(mine: bytes) -> Sequence[bytes]:
        try:
            t.step  # re-entry on this thread, inside train_step: refused, no deadlock
        except RuntimeError as e:
            seen["reentry"] = str(e)
        entered.set()
        assert release.wait(60)
        return [mine]

    def releaser() -> None:
        entered.wait(60)
        time.sleep(0.5)  # meanwhile close() runs on the main thread
        seen["close_returned_early"] = close_returned.is_set()
        release.set()

    settings, threads = _one_trainer_job(errors)
    t = dlrm.distributed.Trainer(CONFIG, settings, allgather=allgather)
    part = make_batch(np.random.default_rng(3), batch_size=8)
    stepper = threading.Thread(target=lambda: seen.setdefault("loss", t.train_step(part)))
    helpers = [stepper, threading.Thread(target=releaser)]
    for thread in helpers:
        thread.start()
    assert entered.wait(60)
    t.close()  # waits for the train_step in flight
    close_returned.set()
    _join(helpers)
    assert seen["close_returned_early"] is False
    assert "must not call its Trainer" in str(seen["reentry"])
    assert isinstance(seen["loss"], float)  # the step finished before the trainer went
    with pytest.raises(dlrm.EngineClosedError):
        t.train_step(part)
    _join(threads)  # the job ends: the trainer left without finish()
    assert len(errors) == 2, errors
