"""Loads libdlrm.so, declares every function of ``include/dlrm/dlrm.h`` and checks the ABI.

This is the only module that touches ctypes prototypes. The library is loaded with
``ctypes.CDLL`` (never ``PyDLL``) so that every call releases the GIL: predictions from
several Python threads run in parallel inside the engine's reader lock.

Lookup order, first hit wins:
  1. ``$DLRM_LIBRARY`` (path to libdlrm.so): an explicit choice is never second-guessed,
     so a wrong path is an ImportError rather than a silent fallback;
  2. the copy bundled by ``pip install`` in ``dlrm/_lib/``;
  3. ``ctypes.util.find_library("dlrm")`` (a system install).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

from .errors import DlrmError

#: The ``DLRM_ABI_VERSION`` this binding was written against.
ABI_VERSION = 1
#: ``DLRM_MAX_PARAMETER_DIMS``: capacity of the shape buffer for parameter_shape.
MAX_PARAMETER_DIMS = 8
#: ``DLRM_LR_*`` targets of dlrm_engine_set_learning_rate.
LR_DENSE, LR_SPARSE, LR_ALL = 1, 2, 3
#: ``DLRM_EXPORT_*`` table precisions of dlrm_engine_export, and its dense precisions (OR'ed).
EXPORT_FP32, EXPORT_INT8, EXPORT_INT4 = 0, 1, 2
EXPORT_DENSE_BF16, EXPORT_DENSE_FP16 = 0x100, 0x200

_BUNDLED_DIR = Path(__file__).resolve().parent / "_lib"

c_float_p = ctypes.POINTER(ctypes.c_float)
c_int32_p = ctypes.POINTER(ctypes.c_int32)
c_int64_p = ctypes.POINTER(ctypes.c_int64)
_engine_p = ctypes.c_void_p  # dlrm_engine* (opaque)
_engine_pp = ctypes.POINTER(ctypes.c_void_p)
_char_pp = ctypes.POINTER(ctypes.c_void_p)  # char** out, freed with dlrm_free


class BatchStruct(ctypes.Structure):
    """``dlrm_batch``: borrowed, column-oriented memory; see dlrm.h."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("batch_size", ctypes.c_int64),
        ("num_dense", ctypes.c_int32),
        ("num_sparse", ctypes.c_int32),
        ("dense", c_float_p),
        ("labels", c_float_p),
        ("lengths", c_int32_p),
        ("ids", c_int64_p),
        ("num_ids", ctypes.c_int64),
        ("weights", c_float_p),
    ]


class EvalResultStruct(ctypes.Structure):
    """``dlrm_eval_result``."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("log_loss", ctypes.c_double),
        ("auc", ctypes.c_double),
        ("num_samples", ctypes.c_int64),
    ]


class TableStatsStruct(ctypes.Structure):
    """``dlrm_table_stats``."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("dynamic", ctypes.c_int32),
        ("capacity", ctypes.c_int64),
        ("size", ctypes.c_int64),
        ("lookups", ctypes.c_int64),
        ("hits", ctypes.c_int64),
        ("admitted", ctypes.c_int64),
        ("evicted", ctypes.c_int64),
        ("rejected", ctypes.c_int64),
        ("memory_bytes", ctypes.c_int64),
    ]


class ArrowColumnsStruct(ctypes.Structure):
    """``dlrm_arrow_columns``: which Arrow column is which, by name."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("label", ctypes.c_char_p),
        ("dense", ctypes.POINTER(ctypes.c_char_p)),
        ("num_dense", ctypes.c_int32),
        ("sparse", ctypes.POINTER(ctypes.c_char_p)),
        ("num_sparse", ctypes.c_int32),
        ("weights", ctypes.POINTER(ctypes.c_char_p)),
    ]


class ArrowSchemaStruct(ctypes.Structure):
    """The Arrow C Data Interface's ``ArrowSchema`` (filled by pyarrow's _export_to_c)."""

    _fields_ = [
        ("format", ctypes.c_char_p),
        ("name", ctypes.c_char_p),
        ("metadata", ctypes.c_char_p),
        ("flags", ctypes.c_int64),
        ("n_children", ctypes.c_int64),
        ("children", ctypes.c_void_p),
        ("dictionary", ctypes.c_void_p),
        ("release", ctypes.c_void_p),
        ("private_data", ctypes.c_void_p),
    ]


class ArrowArrayStruct(ctypes.Structure):
    """The Arrow C Data Interface's ``ArrowArray``."""

    _fields_ = [
        ("length", ctypes.c_int64),
        ("null_count", ctypes.c_int64),
        ("offset", ctypes.c_int64),
        ("n_buffers", ctypes.c_int64),
        ("n_children", ctypes.c_int64),
        ("buffers", ctypes.c_void_p),
        ("children", ctypes.c_void_p),
        ("dictionary", ctypes.c_void_p),
        ("release", ctypes.c_void_p),
        ("private_data", ctypes.c_void_p),
    ]


#: The release callback of both Arrow structs: void (*)(struct Arrow*)
ARROW_RELEASE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

_status = ctypes.c_int32
# (name, restype, argtypes) for every function of dlrm.h, in the header's order.
# dlrm_allgather_fn: int32_t (*)(void* user_data, const void* data, int64_t num_bytes,
#                                dlrm_gather* result)
ALLGATHER_FN = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p,
                                ctypes.c_int64, ctypes.c_void_p)
# dlrm_log_fn: void (*)(void* user_data, int32_t level, const char* file, int32_t line,
#                       const char* message)
LOG_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32, ctypes.c_char_p,
                          ctypes.c_int32, ctypes.c_char_p)

_PROTOTYPES: Sequence[Tuple[str, object, List[object]]] = (
    ("dlrm_version", ctypes.c_char_p, []),
    ("dlrm_abi_version", ctypes.c_int32, []),
    ("dlrm_last_error", ctypes.c_char_p, []),
    ("dlrm_status_name", ctypes.c_char_p, [_status]),
    ("dlrm_free", None, [ctypes.c_void_p]),
    ("dlrm_set_log_callback", _status, [LOG_FN, ctypes.c_void_p, ctypes.c_int32]),
    ("dlrm_engine_create", _status, [ctypes.c_char_p, _engine_pp]),
    ("dlrm_engine_create_from_file", _status, [ctypes.c_char_p, _engine_pp]),
    ("dlrm_engine_create_from_checkpoint", _status, [ctypes.c_char_p, _engine_pp]),
    ("dlrm_engine_create_from_checkpoint_on", _status,
     [ctypes.c_char_p, ctypes.c_char_p, _engine_pp]),
    ("dlrm_engine_destroy", None, [_engine_p]),
    ("dlrm_engine_train_step", _status, [_engine_p, ctypes.POINTER(BatchStruct), c_float_p]),
    ("dlrm_engine_train_submit", _status, [_engine_p, ctypes.POINTER(BatchStruct), c_int64_p]),
    ("dlrm_engine_train_wait", _status, [_engine_p, ctypes.c_int64, c_float_p]),
    ("dlrm_engine_predict", _status,
     [_engine_p, ctypes.POINTER(BatchStruct), c_float_p, ctypes.c_size_t]),
    ("dlrm_engine_evaluate", _status,
     [_engine_p, ctypes.POINTER(BatchStruct), ctypes.c_size_t,
      ctypes.POINTER(EvalResultStruct)]),
    ("dlrm_arrow_batch_create", _status,
     [ctypes.POINTER(ArrowSchemaStruct), ctypes.POINTER(ArrowArrayStruct),
      ctypes.POINTER(ArrowColumnsStruct), ctypes.POINTER(ctypes.c_void_p)]),
    ("dlrm_arrow_batch_destroy", None, [ctypes.c_void_p]),
    ("dlrm_arrow_batch_view", _status, [ctypes.c_void_p, ctypes.POINTER(BatchStruct)]),
    ("dlrm_engine_set_learning_rate", _status, [_engine_p, ctypes.c_int32, ctypes.c_float]),
    ("dlrm_engine_get_step", _status, [_engine_p, c_int64_p]),
    ("dlrm_engine_get_config", _status, [_engine_p, _char_pp]),
    ("dlrm_engine_save", _status, [_engine_p, ctypes.c_char_p]),
    ("dlrm_engine_load", _status, [_engine_p, ctypes.c_char_p]),
    ("dlrm_engine_export", _status, [_engine_p, ctypes.c_char_p, ctypes.c_int32]),
    ("dlrm_engine_parameter_count", _status, [_engine_p, c_int64_p]),
    ("dlrm_engine_parameter_name", _status, [_engine_p, ctypes.c_int64, _char_pp]),
    ("dlrm_engine_parameter_shape", _status,
     [_engine_p, ctypes.c_char_p, c_int64_p, ctypes.c_int32, c_int32_p]),
    ("dlrm_engine_read_parameter", _status,
     [_engine_p, ctypes.c_char_p, c_float_p, ctypes.c_size_t]),
    ("dlrm_engine_write_parameter", _status,
     [_engine_p, ctypes.c_char_p, c_float_p, ctypes.c_size_t]),
    ("dlrm_engine_table_stats", _status,
     [_engine_p, ctypes.c_char_p, ctypes.POINTER(TableStatsStruct)]),
    ("dlrm_run_role", _status, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p]),
    ("dlrm_gather_put", _status,
     [ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p, ctypes.c_int64]),
    ("dlrm_trainer_create", _status,
     [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ALLGATHER_FN, ctypes.c_void_p,
      ctypes.POINTER(ctypes.c_void_p)]),
    ("dlrm_trainer_destroy", None, [ctypes.c_void_p]),
    ("dlrm_trainer_info", _status, [ctypes.c_void_p, c_int32_p, c_int32_p, c_int64_p]),
    ("dlrm_trainer_enqueue", _status, [ctypes.c_void_p, ctypes.POINTER(BatchStruct)]),
    ("dlrm_trainer_train_step", _status, [ctypes.c_void_p, c_float_p]),
    ("dlrm_trainer_evaluate", _status,
     [ctypes.c_void_p, ctypes.POINTER(BatchStruct), ctypes.c_size_t,
      ctypes.POINTER(EvalResultStruct)]),
    ("dlrm_trainer_checkpoint", _status, [ctypes.c_void_p, ctypes.c_char_p]),
    ("dlrm_trainer_finish", _status, [ctypes.c_void_p]),
)


def find_library() -> str:
    """Returns the path (or linker name) of libdlrm to load, following the lookup order."""
    explicit = os.environ.get("DLRM_LIBRARY")
    if explicit:
        if not os.path.exists(explicit):
            raise ImportError(f"DLRM_LIBRARY={explicit!r} does not exist")
        return explicit
    bundled = sorted(_BUNDLED_DIR.glob("libdlrm.so*"))
    if bundled:
        return str(bundled[0])
    found = ctypes.util.find_library("dlrm")
    if found:
        return found
    raise ImportError(
        "libdlrm.so not found: set DLRM_LIBRARY=/path/to/libdlrm.so, install this package "
        "with the library bundled (pip install bindings/python), or install libdlrm where "
        "the dynamic linker finds it")


def check_abi(found: int, path: str) -> None:
    """Refuses a library whose C ABI differs from the one these prototypes describe."""
    if found != ABI_VERSION:
        raise ImportError(
            f"{path} implements libdlrm C ABI version {found}, but this dlrm Python package "
            f"needs ABI version {ABI_VERSION}; install a matching package or library")


def load(path: Optional[str] = None) -> ctypes.CDLL:
    """Loads the library, checks its ABI version, then declares every prototype."""
    path = path or find_library()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise ImportError(f"cannot load libdlrm from {path!r}: {e}") from e
    try:
        abi = lib.dlrm_abi_version
    except AttributeError as e:
        raise ImportError(f"{path!r} is not libdlrm: it lacks dlrm_abi_version") from e
    abi.argtypes, abi.restype = [], ctypes.c_int32
    # The ABI is checked before any other symbol is touched: a mismatched library may not
    # even have them, and its prototypes may differ.
    check_abi(abi(), path)
    for name, restype, argtypes in _PROTOTYPES:
        try:
            fn = getattr(lib, name)
        except AttributeError as e:
            raise ImportError(f"{path!r} lacks {name} although it reports ABI version "
                              f"{ABI_VERSION}") from e
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


lib: ctypes.CDLL = load()
library_path: str = lib._name


def check(status: int) -> None:
    """Raises DlrmError for a non-OK status.

    Call it right after the C call, on the same thread: the message is thread-local and
    is replaced by the next failing call of that thread.
    """
    if status != 0:
        name = lib.dlrm_status_name(status).decode("utf-8", "replace")
        message = lib.dlrm_last_error().decode("utf-8", "replace")
        raise DlrmError(status, name, message)


def c_string(value: Union[str, bytes, "os.PathLike[str]"], what: str, path: bool = False) -> bytes:
    """``value`` as the bytes of a NUL-terminated C string: UTF-8 text, or with ``path`` a
    file system path (str, bytes or os.PathLike) in the file system's encoding.

    Every string passed to the library goes through here: C would silently cut it at an
    embedded NUL (``save("ckpt\\0.bak")`` writing ``ckpt``), so that is refused instead.

    Raises:
        TypeError: ``value`` is not a str (or, with ``path``, a path); ``what`` names it.
        ValueError: ``value`` contains a NUL character; ``what`` names it.
    """
    if path and isinstance(value, (str, bytes, os.PathLike)):
        data = os.fsencode(value)
    elif isinstance(value, str):
        data = value.encode("utf-8")
    else:
        kind = "a str or os.PathLike" if path else "a str"
        raise TypeError(f"{what} must be {kind}, got {type(value).__name__}")
    nul = data.find(b"\0")
    if nul >= 0:
        raise ValueError(f"{what} contains a NUL character (at byte {nul})")
    return data


def take_string(ptr: ctypes.c_void_p) -> str:
    """Copies a library-owned string into Python and releases it with dlrm_free."""
    try:
        return ctypes.string_at(ptr).decode("utf-8")
    finally:
        lib.dlrm_free(ptr)
