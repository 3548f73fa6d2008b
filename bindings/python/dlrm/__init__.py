"""Python binding of libdlrm, a training engine for DLRM recommendation models.

Thin and faithful to the C ABI (include/dlrm/dlrm.h) over ctypes + numpy: batches are
numpy arrays passed without copies, every call releases the GIL, and every failing call
raises DlrmError with the engine's status and message.

    import dlrm, numpy as np
    with dlrm.Engine.from_file("model.pbtxt") as engine:
        batch = dlrm.Batch(dense, labels, lengths, ids)
        loss = engine.train_step(batch)
        p = engine.predict(batch)

The library's log goes to stderr unless routed elsewhere: ``dlrm.set_logger(logger)``
sends it into :mod:`logging`, ``dlrm.set_log_callback(fn, level)`` to any function.
"""
from . import _native, arrow, criteo, distributed, log
from ._version import __version__
from .arrow import Columns
from .batch import Batch
from .engine import Engine, EvalResult, LoadResult, TableStats
from .errors import DlrmError, EngineClosedError, StatusCode
from .fit import History, fit
from .log import LogLevel, set_log_callback, set_logger

#: The C ABI version this package speaks (checked against the library at import).
ABI_VERSION = _native.ABI_VERSION


def library_version() -> str:
    """Version string of the loaded libdlrm, e.g. "0.1.0"."""
    return _native.lib.dlrm_version().decode("utf-8")


def library_abi_version() -> int:
    """dlrm_abi_version() of the loaded library (equal to ABI_VERSION, or import failed)."""
    return int(_native.lib.dlrm_abi_version())


def library_path() -> str:
    """Where the loaded libdlrm came from (see _native for the lookup order)."""
    return _native.library_path


__all__ = [
    "ABI_VERSION", "Batch", "Columns", "DlrmError", "criteo", "Engine", "EngineClosedError", "EvalResult",
    "History", "LoadResult", "StatusCode", "TableStats", "__version__", "fit",
    "library_abi_version", "distributed", "library_path", "library_version", "log", "LogLevel",
    "set_log_callback", "set_logger",
]
