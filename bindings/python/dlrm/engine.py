"""dlrm.Engine: one DLRM model with its optimizers, over the C handle ``dlrm_engine``.

Thread safety follows dlrm.h: predict / evaluate / save / getters may run concurrently
from several Python threads (the GIL is released inside every call); train_step and
mutations serialize inside the engine. The Python object adds one guarantee the C ABI
leaves to the caller: close() waits for calls in flight, so destroy never races a call,
and so does the backstop that releases an engine never closed (at garbage collection, or
at interpreter exit while daemon threads may still be calling it).
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import weakref
from typing import (TYPE_CHECKING, Any, Dict, Iterable, Iterator, List, Mapping, NamedTuple,
                    Optional, Tuple, Union)

import numpy as np

from . import _native
from .batch import Batch
from .errors import EngineClosedError

if TYPE_CHECKING:
    from .arrow import Columns
    from .fit import History

PathLike = Union[str, "os.PathLike[str]"]

_LR_TARGETS = {"all": _native.LR_ALL, "dense": _native.LR_DENSE, "sparse": _native.LR_SPARSE}
_EXPORT_PRECISIONS = {"fp32": _native.EXPORT_FP32, "int8": _native.EXPORT_INT8,
                      "int4": _native.EXPORT_INT4}
_EXPORT_DENSE_PRECISIONS = {"fp32": 0, "bf16": _native.EXPORT_DENSE_BF16,
                            "fp16": _native.EXPORT_DENSE_FP16}


class EvalResult(NamedTuple):
    """Metrics over all samples of the evaluated batches."""

    log_loss: float
    auc: float  # NaN when the labels hold one class only
    num_samples: int


class TableStats(NamedTuple):
    """How an embedding table is used; see :meth:`Engine.table_stats`.

    A DYNAMIC table gives rows to the raw int64 ids it admits and evicts ids when full; a
    FIXED table reports its rows as capacity and size and counts nothing. The counters run
    from the engine's creation and are saved in checkpoints.
    """

    dynamic: bool  # True for a DYNAMIC table, False for a FIXED one
    capacity: int  # rows ids may hold (a DYNAMIC table's rows less its default row)
    size: int  # rows held by ids now
    lookups: int  # id occurrences trained on
    hits: int  # of those, occurrences of ids that held a row
    admitted: int  # ids given a row
    evicted: int  # ids that lost their row (to make room, or past their TTL)
    rejected: int  # new ids that qualified for a row at a step and found none
    memory_bytes: int  # weights, sparse optimizer state and the id index

    @property
    def hit_rate(self) -> float:
        """hits / lookups, 0.0 before any lookup."""
        return self.hits / self.lookups if self.lookups else 0.0


class LoadResult(NamedTuple):
    """What load_state_dict(strict=False) skipped (both empty in strict mode)."""

    missing_keys: List[str]
    unexpected_keys: List[str]


def _require_batch(batch: object, name: str = "batch") -> Batch:
    if not isinstance(batch, Batch):
        raise TypeError(f"{name} must be a dlrm.Batch, got {type(batch).__name__}")
    return batch


class _Lifetime:
    """An engine's handle and its calls in flight, guarded by one condition.

    Shared by the Engine and its finalizer (which must not hold the Engine), so that every
    way of releasing the handle (close(), garbage collection, interpreter exit while a
    daemon thread still predicts) waits for the calls in flight and makes later calls
    raise EngineClosedError instead of reaching a destroyed engine.
    """

    def __init__(self, handle: ctypes.c_void_p) -> None:
        self.handle: Optional[ctypes.c_void_p] = handle
        self.cond = threading.Condition()
        self.in_flight = 0

    def enter(self) -> ctypes.c_void_p:
        """The live handle, with the call counted as in flight; pair with leave()."""
        with self.cond:
            if self.handle is None:
                raise EngineClosedError()
            self.in_flight += 1
            return self.handle

    def leave(self) -> None:
        with self.cond:
            self.in_flight -= 1
            if self.in_flight == 0:
                self.cond.notify_all()

    def release(self) -> None:
        """Refuses new calls, waits for those in flight, then destroys the engine."""
        with self.cond:
            handle, self.handle = self.handle, None  # new calls fail from here on
            while self.in_flight:
                self.cond.wait()
        if handle is not None:
            _native.lib.dlrm_engine_destroy(handle)


class Engine:
    """A DLRM model, its optimizers and its training state.

    Create it from a config in protobuf text (schema: engine/config/dlrm.proto), from a
    config file, or from a checkpoint. Use it as a context manager, or call close();
    a garbage-collected engine is released as a backstop.

    Example::

        with dlrm.Engine.from_file("model.pbtxt") as engine:
            loss = engine.train_step(batch)
            probabilities = engine.predict(batch)
    """

    def __init__(self, config: str) -> None:
        """Creates an engine from a config in protobuf text format."""
        if not isinstance(config, str):
            raise TypeError(f"config must be protobuf text (str), got {type(config).__name__}"
                            "; use Engine.from_file(path) for a file")
        self._adopt(self._create(_native.lib.dlrm_engine_create,
                                 _native.c_string(config, "config")))

    @classmethod
    def from_file(cls, path: PathLike) -> "Engine":
        """Creates an engine from a protobuf text config file."""
        return cls._from_handle(cls._create(_native.lib.dlrm_engine_create_from_file,
                                            _native.c_string(path, "path", path=True)))

    @classmethod
    def from_checkpoint(cls, path: PathLike, device: Optional[str] = None) -> "Engine":
        """Creates an engine from a checkpoint (it stores its config) and restores it.

        ``device`` runs it on ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` instead of the device it
        was trained on (None or ``""``: the checkpoint's own). The state is the same on
        every device, so a checkpoint trained on a GPU serves on a machine without one.
        Any other name raises DlrmError INVALID_ARGUMENT naming it; a CUDA device this
        machine cannot use raises FAILED_PRECONDITION.
        """
        path_bytes = _native.c_string(path, "path", path=True)
        if device is None:
            return cls._from_handle(cls._create(
                _native.lib.dlrm_engine_create_from_checkpoint, path_bytes))
        if not isinstance(device, str):
            raise TypeError(f"device must be a str such as 'cpu' or 'cuda:0', "
                            f"got {type(device).__name__}")
        return cls._from_handle(cls._create(
            _native.lib.dlrm_engine_create_from_checkpoint_on, path_bytes,
            _native.c_string(device, "device")))

    # ---- lifetime ---------------------------------------------------------------------
    @staticmethod
    def _create(fn: ctypes._CFuncPtr, *args: bytes) -> ctypes.c_void_p:
        handle = ctypes.c_void_p()
        _native.check(fn(*args, ctypes.byref(handle)))
        return handle

    @classmethod
    def _from_handle(cls, handle: ctypes.c_void_p) -> "Engine":
        engine = cls.__new__(cls)
        engine._adopt(handle)
        return engine

    def _adopt(self, handle: ctypes.c_void_p) -> None:
        self._life = _Lifetime(handle)
        # Backstop for engines never closed, at garbage collection or interpreter exit
        # (where daemon threads may still be calling): it holds the lifetime, not self.
        self._finalizer = weakref.finalize(self, self._life.release)

    @contextlib.contextmanager
    def _use(self) -> Iterator[ctypes.c_void_p]:
        """Yields the live handle, counting the call as in flight so close() waits."""
        handle = self._life.enter()
        try:
            yield handle
        finally:
            self._life.leave()

    def close(self) -> None:
        """Releases the engine. Idempotent; waits for calls in flight on other threads."""
        self._finalizer()  # _Lifetime.release, exactly once

    @property
    def closed(self) -> bool:
        return self._life.handle is None

    def __enter__(self) -> "Engine":
        with self._use():  # entering a closed engine is an error too
            return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self) -> None:
        # A copy would share the C handle (and free it twice); state is copied explicitly.
        raise TypeError("a dlrm.Engine cannot be copied or pickled; use save() / "
                        "from_checkpoint() or state_dict() / load_state_dict()")

    def __repr__(self) -> str:
        if self.closed:
            return "<dlrm.Engine (closed)>"
        return f"<dlrm.Engine step={self.step}>"

    # ---- training and inference -----------------------------------------------------
    def train_step(self, batch: Batch) -> float:
        """One optimizer step; returns the batch's mean BCE loss before the update."""
        s = _require_batch(batch)._struct
        loss = ctypes.c_float()
        with self._use() as h:
            _native.check(_native.lib.dlrm_engine_train_step(h, ctypes.byref(s),
                                                             ctypes.byref(loss)))
        return float(loss.value)

    def train_submit(self, batch: Batch) -> int:
        """Queues a training step and returns its ticket without waiting for it.

        The engine validates and copies the batch during this call (a bad batch raises
        here and nothing is queued), so the arrays may be reused at once: the host can
        prepare the next batch while this one trains. Steps run in submission order and
        give bitwise the results of :meth:`train_step` in that order.
        """
        s = _require_batch(batch)._struct
        ticket = ctypes.c_int64()
        with self._use() as h:
            _native.check(_native.lib.dlrm_engine_train_submit(h, ctypes.byref(s),
                                                               ctypes.byref(ticket)))
        return int(ticket.value)

    def train_wait(self, ticket: int) -> float:
        """Waits for a submitted step and returns its loss (or raises its error)."""
        loss = ctypes.c_float()
        with self._use() as h:
            _native.check(_native.lib.dlrm_engine_train_wait(h, int(ticket), ctypes.byref(loss)))
        return float(loss.value)

    def predict(self, batch: Batch, out: Optional[np.ndarray] = None) -> np.ndarray:
        """Click probabilities, float32 ``[batch_size]``. Labels are ignored.

        ``out`` (optional): a float32, aligned, C-contiguous 1-D array of at least batch_size
        values to write into instead of allocating (it is returned, cut to batch_size).
        """
        s = _require_batch(batch)._struct
        n = batch.batch_size
        if out is None:
            out = np.empty(n, dtype=np.float32)  # exactly n: out[:n] below is all of it
        else:
            if not isinstance(out, np.ndarray) or out.dtype != np.float32:
                raise TypeError("out must be a numpy.ndarray of dtype float32")
            flags = out.flags
            if out.ndim != 1 or not (flags.c_contiguous and flags.writeable and flags.aligned):
                # The engine writes through a float*: a misaligned one is undefined behaviour.
                raise ValueError("out must be a writeable, aligned, C-contiguous 1-D array")
            if out.shape[0] < n:
                raise ValueError(f"out holds {out.shape[0]} values but batch_size is {n}")
        with self._use() as h:
            _native.check(_native.lib.dlrm_engine_predict(
                h, ctypes.byref(s), out.ctypes.data_as(_native.c_float_p), out.shape[0]))
        return out if out.shape[0] == n else out[:n]

    def evaluate(self, batches: Union[Batch, Iterable[Batch]]) -> EvalResult:
        """Log loss and ROC AUC over all samples of the batches (labels required)."""
        items = [batches] if isinstance(batches, Batch) else list(batches)
        for i, b in enumerate(items):
            _require_batch(b, f"batches[{i}]")
        # The array holds copies of the structs; `items` keeps their buffers alive.
        structs = (_native.BatchStruct * len(items))(*(b._struct for b in items))
        result = _native.EvalResultStruct(struct_size=ctypes.sizeof(_native.EvalResultStruct))
        with self._use() as h:
            _native.check(_native.lib.dlrm_engine_evaluate(h, structs, len(items),
                                                           ctypes.byref(result)))
        return EvalResult(float(result.log_loss), float(result.auc), int(result.num_samples))

    def fit(self, batches: Iterable[Any], epochs: int = 1,
            eval_batches: Optional[Iterable[Any]] = None, progress: bool = True,
            columns: Optional["Columns"] = None, shuffle: bool = False,
            seed: int = 0) -> "History":
        """Trains over ``batches`` for ``epochs``; see :func:`dlrm.fit`."""
        from .fit import fit
        return fit(self, batches, epochs=epochs, eval_batches=eval_batches, progress=progress,
                   columns=columns, shuffle=shuffle, seed=seed)

    def set_learning_rate(self, lr: float, target: str = "all") -> None:
        """Overrides the base learning rate of the dense and/or sparse optimizer.

        ``target`` is "all", "dense" or "sparse". The config's schedule still multiplies
        it, and it is saved in checkpoints.
        """
        try:
            code = _LR_TARGETS[target]
        except (KeyError, TypeError):
            raise ValueError(f"target must be one of {sorted(_LR_TARGETS)}, got {target!r}")
        with self._use() as h:
            _native.check(_native.lib.dlrm_engine_set_learning_rate(h, code, float(lr)))

    @property
    def step(self) -> int:
        """Number of train steps taken (restored by load)."""
        out = ctypes.c_int64()
        with self._use() as h:
            _native.check(_native.lib.dlrm_engine_get_step(h, ctypes.byref(out)))
        return int(out.value)

    @property
    def config(self) -> str:
        """The engine's config as protobuf text."""
        ptr = ctypes.c_void_p()
        with self._use() as h:
            _native.check(_native.lib.dlrm_engine_get_config(h, ctypes.byref(ptr)))
        return _native.take_string(ptr)

    # ---- checkpoints ------------------------------------------------------------------
    def save(self, path: PathLike) -> None:
        """Writes parameters, optimizer state, step and learning rates atomically."""
        path_bytes = _native.c_string(path, "path", path=True)
        with self._use() as h:
            _native.check(_native.lib.dlrm_engine_save(h, path_bytes))

    def load(self, path: PathLike) -> None:
        """Restores a checkpoint of the same model; on failure the engine is unchanged."""
        path_bytes = _native.c_string(path, "path", path=True)
        with self._use() as h:
            _native.check(_native.lib.dlrm_engine_load(h, path_bytes))

    def export(self, path: PathLike, quantize: str = "fp32", dense: str = "fp32") -> None:
        """Writes a compact read-only model for serving, atomically; takes the reader lock.

        It holds the config, step, dense parameters, every table's rows and each DYNAMIC
        table's ids, but no optimizer state; :meth:`from_checkpoint` loads it. ``quantize``
        is "fp32" (tables as they are), "int8" or "int4" (FP32 tables row-wise quantized).
        A quantized engine predicts and evaluates, but train_step, train_submit, save, load
        and set_parameter of a table raise DlrmError FAILED_PRECONDITION naming the table.
        ``dense`` is "fp32" (the dense parameters as they are), "bf16" or "fp16" (rounded to
        nearest: half their bytes; the loading engine predicts with those values).
        """
        code = 0
        for name, value, choices in (("quantize", quantize, _EXPORT_PRECISIONS),
                                     ("dense", dense, _EXPORT_DENSE_PRECISIONS)):
            try:
                code |= choices[value]
            except (KeyError, TypeError):
                raise ValueError(f"{name} must be one of {sorted(choices)}, got {value!r}")
        path_bytes = _native.c_string(path, "path", path=True)
        with self._use() as h:
            _native.check(_native.lib.dlrm_engine_export(h, path_bytes, code))

    # ---- parameters -------------------------------------------------------------------
    def parameter_names(self) -> List[str]:
        """Names: "bottom_mlp.<i>.weight|bias", "top_mlp.<i>...", "embedding.<t>.weight"."""
        count = ctypes.c_int64()
        names = []
        with self._use() as h:
            _native.check(_native.lib.dlrm_engine_parameter_count(h, ctypes.byref(count)))
            for i in range(count.value):
                ptr = ctypes.c_void_p()
                _native.check(_native.lib.dlrm_engine_parameter_name(h, i, ctypes.byref(ptr)))
                names.append(_native.take_string(ptr))
        return names

    def parameter_shape(self, name: str) -> Tuple[int, ...]:
        """Shape of the named parameter ([out, in] weights, [out] biases, [rows, dim])."""
        name_bytes = _native.c_string(name, "name")
        shape = (ctypes.c_int64 * _native.MAX_PARAMETER_DIMS)()
        ndim = ctypes.c_int32()
        with self._use() as h:
            _native.check(_native.lib.dlrm_engine_parameter_shape(
                h, name_bytes, shape, _native.MAX_PARAMETER_DIMS, ctypes.byref(ndim)))
        return tuple(int(d) for d in shape[:ndim.value])

    def get_parameter(self, name: str) -> np.ndarray:
        """A float32 copy of the named parameter, with its shape."""
        out = np.empty(self.parameter_shape(name), dtype=np.float32)
        name_bytes = _native.c_string(name, "name")
        with self._use() as h:
            _native.check(_native.lib.dlrm_engine_read_parameter(
                h, name_bytes, out.ctypes.data_as(_native.c_float_p), out.size))
        return out

    def set_parameter(self, name: str, value: np.ndarray) -> None:
        """Replaces the named parameter's values (optimizer state is kept).

        ``value`` must be float32 with exactly the parameter's shape; the engine rejects
        non-finite values, changing nothing.
        """
        expected = self.parameter_shape(name)
        self._write_parameter(name, self._checked_value(value, name, expected, "value"))

    def state_dict(self) -> Dict[str, np.ndarray]:
        """Every parameter by name, as float32 copies.

        Parameters are read one by one: a train_step on another thread meanwhile would
        make the dict mix steps (save() is the atomic snapshot).
        """
        return {name: self.get_parameter(name) for name in self.parameter_names()}

    def load_state_dict(self, state: Mapping[str, np.ndarray], strict: bool = True) -> LoadResult:
        """Writes the parameters in ``state``, all or nothing.

        Every name, shape, dtype (float32) and value (finite) is validated before the
        first write, so a bad entry leaves the engine unchanged. With ``strict`` the keys
        must match parameter_names() exactly; otherwise missing and unexpected keys are
        skipped and returned.

        Raises:
            KeyError: (strict) a parameter is missing or a key names no parameter.
            TypeError: a value is not a float32 ndarray.
            ValueError: a value has the wrong shape or holds NaN/Inf.
        """
        names = self.parameter_names()
        known = set(names)
        missing = [n for n in names if n not in state]
        unexpected = [str(k) for k in state if k not in known]
        if strict and (missing or unexpected):
            parts = []
            if missing:
                parts.append(f"missing parameters {missing}")
            if unexpected:
                parts.append(f"unexpected keys {unexpected} (no such parameter)")
            raise KeyError("state_dict does not match the engine: " + "; ".join(parts))
        writes = []
        for name in names:
            if name in state:
                value = self._checked_value(state[name], name, self.parameter_shape(name),
                                            f"state_dict[{name!r}]")
                bad = ~np.isfinite(value)
                if bad.any():
                    index = tuple(int(i) for i in np.argwhere(bad)[0])
                    raise ValueError(f"state_dict[{name!r}] holds a non-finite value "
                                     f"{value[index]} at index {index}")
                writes.append((name, value))
        for name, value in writes:
            self._write_parameter(name, value)
        return LoadResult(missing, unexpected)

    @staticmethod
    def _checked_value(value: object, name: str, expected: Tuple[int, ...],
                       label: str) -> np.ndarray:
        if not isinstance(value, np.ndarray) or value.dtype != np.float32:
            got = value.dtype if isinstance(value, np.ndarray) else type(value).__name__
            raise TypeError(f"{label} for parameter {name!r} must be a float32 numpy.ndarray, "
                            f"got {got}")
        if value.shape != expected:
            raise ValueError(f"{label} for parameter {name!r} has shape {value.shape}, but the "
                             f"parameter has shape {expected}")
        return np.require(value, requirements=("C_CONTIGUOUS", "ALIGNED"))

    # ---- table statistics -------------------------------------------------------------
    def table_stats(self, name: str) -> TableStats:
        """Statistics of the embedding table ``name`` (a ``model.tables`` name).

        Raises DlrmError NOT_FOUND, naming it, for a name that is not a table. May run
        concurrently with predict.
        """
        name_bytes = _native.c_string(name, "name")
        out = _native.TableStatsStruct(struct_size=ctypes.sizeof(_native.TableStatsStruct))
        with self._use() as h:
            _native.check(_native.lib.dlrm_engine_table_stats(h, name_bytes, ctypes.byref(out)))
        return TableStats(bool(out.dynamic), int(out.capacity), int(out.size),
                          int(out.lookups), int(out.hits), int(out.admitted),
                          int(out.evicted), int(out.rejected), int(out.memory_bytes))

    def _write_parameter(self, name: str, value: np.ndarray) -> None:
        name_bytes = _native.c_string(name, "name")
        with self._use() as h:
            _native.check(_native.lib.dlrm_engine_write_parameter(
                h, name_bytes, value.ctypes.data_as(_native.c_float_p), value.size))
