"""Multi-process training from Python: a trainer of a job of embedding servers and
data-parallel trainers (C ABI ``dlrm_trainer``), and the server / coordinator roles.

The job's settings are the DLRM_* variables (DLRM_ROLE, DLRM_RANK, DLRM_WORLD_SIZE,
DLRM_COORDINATOR, ...), passed as a dict or read from the environment when ``cluster`` is
None. A trainer may bring its own all-gather (an MPI or Spark collective): a function
taking this trainer's bytes and returning every trainer's bytes in rank order.

    with dlrm.distributed.Trainer(config_text, cluster={"DLRM_ROLE": "trainer", ...}) as t:
        for part in my_parts:            # this trainer's share of each global batch
            t.enqueue(part)
            loss = t.train_step()
        t.checkpoint("/ckpt/step-100")
        t.finish()
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from typing import Callable, Iterable, Iterator, List, Mapping, Optional, Sequence, Union

from . import _native
from .batch import Batch
from .engine import EvalResult, _require_batch
from .errors import EngineClosedError

AllGather = Callable[[bytes], Sequence[bytes]]
PathLike = Union[str, "os.PathLike[str]"]


def _cluster_bytes(cluster: Optional[Mapping[str, object]]) -> Optional[bytes]:
    if cluster is None:
        return None
    lines = []
    for key, value in cluster.items():
        if not isinstance(key, str) or "\n" in key or "\n" in str(value):
            raise ValueError(f"cluster setting {key!r} = {value!r} is not a single line")
        lines.append(_native.c_string(f"{key}={value}", f"cluster setting {key!r}"))
    return b"\n".join(lines) + b"\n"


def _optional_path(path: Optional[PathLike], what: str) -> Optional[bytes]:
    return None if path is None else _native.c_string(path, what, path=True)


def run_role(config: str, cluster: Optional[Mapping[str, object]] = None,
             restore_dir: Optional[PathLike] = None) -> None:
    """Runs this process's part when it is the coordinator or an embedding server, until
    the job ends (the GIL is released meanwhile)."""
    _native.check(_native.lib.dlrm_run_role(
        _native.c_string(config, "config"), _cluster_bytes(cluster),
        _optional_path(restore_dir, "restore_dir")))


class Trainer:
    """One trainer of a multi-process job. Collective calls (train_step, evaluate,
    checkpoint, finish) must be made by every trainer, in the same order.

    Calls from several threads run one at a time, close() included, as dlrm.h requires of
    a trainer. The all-gather runs inside train_step and the other collectives, on their
    thread: it must not call the trainer (that raises RuntimeError, failing the step)."""

    def __init__(self, config: str, cluster: Optional[Mapping[str, object]] = None,
                 restore_dir: Optional[PathLike] = None,
                 allgather: Optional[AllGather] = None) -> None:
        if not isinstance(config, str):
            raise TypeError(f"config must be protobuf text (str), got {type(config).__name__}")
        # Serializes every call on the trainer, close() included (dlrm.h); re-entrant so
        # train_step(part) can enqueue under it. The all-gather never takes it: C runs it
        # on the calling thread, inside the call that holds it.
        self._lock = threading.RLock()
        self._in_call = False
        self._callback = None if allgather is None else self._make_callback(allgather)
        handle = ctypes.c_void_p()
        _native.check(_native.lib.dlrm_trainer_create(
            _native.c_string(config, "config"), _cluster_bytes(cluster),
            _optional_path(restore_dir, "restore_dir"),
            self._callback if self._callback is not None else _native.ALLGATHER_FN(),
            None, ctypes.byref(handle)))
        self._handle: Optional[ctypes.c_void_p] = handle

    @staticmethod
    def _make_callback(allgather: AllGather) -> object:
        def call(_user: int, data: int, num_bytes: int, result: int) -> int:
            try:
                mine = ctypes.string_at(data, num_bytes) if num_bytes else b""
                for rank, part in enumerate(allgather(mine)):
                    part = bytes(part)
                    _native.check(_native.lib.dlrm_gather_put(result, rank, part, len(part)))
                return 0
            except Exception:  # reported to the engine as a failed collective
                return 1
        return _native.ALLGATHER_FN(call)

    @contextlib.contextmanager
    def _use(self) -> Iterator[ctypes.c_void_p]:
        """Yields the live handle for one C call, holding the lock that serializes every
        call on this trainer, close() included (dlrm.h: calls must not overlap)."""
        with self._lock:
            self._refuse_reentry()
            if self._handle is None:
                raise EngineClosedError()
            self._in_call = True
            try:
                yield self._handle
            finally:
                self._in_call = False

    def _refuse_reentry(self) -> None:
        # The lock is re-entrant and held by this thread: a call still running here can
        # only be the one whose all-gather (run on this thread, inside it) called back.
        if self._in_call:
            raise RuntimeError("the all-gather function must not call its Trainer")

    def close(self) -> None:
        """Releases the trainer. Without finish() it leaves the job as failed, which ends
        it: the other processes fail at once, naming its last failed call's error.

        Idempotent. Called from another thread, it waits for the call in flight (a
        collective returns once its peers answer or DLRM_TIMEOUT_MS passes); later calls
        raise EngineClosedError."""
        with self._lock:
            self._refuse_reentry()
            handle, self._handle = self._handle, None
            if handle is not None:
                _native.lib.dlrm_trainer_destroy(handle)

    def __enter__(self) -> "Trainer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _info(self, rank: object = None, count: object = None, step: object = None) -> None:
        with self._use() as h:
            _native.check(_native.lib.dlrm_trainer_info(h, rank, count, step))

    @property
    def rank(self) -> int:
        """This trainer's rank among the trainers."""
        rank = ctypes.c_int32()
        self._info(rank=ctypes.byref(rank))
        return int(rank.value)

    @property
    def num_trainers(self) -> int:
        count = ctypes.c_int32()
        self._info(count=ctypes.byref(count))
        return int(count.value)

    @property
    def step(self) -> int:
        """Global steps trained (a restored trainer starts at the checkpoint's)."""
        step = ctypes.c_int64()
        self._info(step=ctypes.byref(step))
        return int(step.value)

    def enqueue(self, part: Batch) -> None:
        """Queues this trainer's part of the next global batch (copied) and starts its
        lookups; a bad part fails its step on every trainer."""
        s = _require_batch(part, "part")._struct
        with self._use() as h:
            _native.check(_native.lib.dlrm_trainer_enqueue(h, ctypes.byref(s)))

    def train_step(self, part: Optional[Batch] = None) -> float:
        """Collective: trains the oldest queued part (``part``, if given, is queued first)
        and returns the global batch's mean loss."""
        loss = ctypes.c_float()
        with self._lock:  # re-entrant: no other thread's call between the two
            if part is not None:
                self.enqueue(part)
            with self._use() as h:
                _native.check(_native.lib.dlrm_trainer_train_step(h, ctypes.byref(loss)))
        return float(loss.value)

    def evaluate(self, batches: Union[Batch, Iterable[Batch]]) -> EvalResult:
        """Collective: log loss and AUC over the batches (the same on every trainer)."""
        items: List[Batch] = [batches] if isinstance(batches, Batch) else list(batches)
        for i, b in enumerate(items):
            _require_batch(b, f"batches[{i}]")
        structs = (_native.BatchStruct * len(items))(*(b._struct for b in items))
        result = _native.EvalResultStruct(struct_size=ctypes.sizeof(_native.EvalResultStruct))
        with self._use() as h:
            _native.check(_native.lib.dlrm_trainer_evaluate(h, structs, len(items),
                                                            ctypes.byref(result)))
        return EvalResult(float(result.log_loss), float(result.auc), int(result.num_samples))

    def checkpoint(self, directory: PathLike) -> None:
        """Collective: a sharded checkpoint of the current step in ``directory``."""
        directory_bytes = _native.c_string(directory, "directory", path=True)
        with self._use() as h:
            _native.check(_native.lib.dlrm_trainer_checkpoint(h, directory_bytes))

    def finish(self) -> None:
        """Collective: waits for every update, tells the servers, leaves the job."""
        with self._use() as h:
            _native.check(_native.lib.dlrm_trainer_finish(h))
