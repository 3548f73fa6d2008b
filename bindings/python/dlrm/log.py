"""The library's log in Python: where the lines libdlrm writes go (C ABI
``dlrm_set_log_callback``).

Every line libdlrm writes (the coordinator's "rendezvous complete", a server's "serves ...",
a trainer's "checkpoint of step ...", warnings about rejected or dropped messages) goes to
one process-wide sink, by default stderr as ``[dlrm LEVEL file:line] message`` at INFO and
above. :func:`set_logger` sends them to a :class:`logging.Logger` instead, as LogRecords
whose ``pathname`` / ``lineno`` are the library's source file ("engine/ps/server.cc") and
line; :func:`set_log_callback` sends them to any function.

    dlrm.set_logger(logging.getLogger("dlrm"), logging.INFO)  # into logging
    dlrm.set_logger(None)                                     # back to stderr
    dlrm.set_log_callback(None, dlrm.LogLevel.OFF)            # silence the library

Contract:
  * Process-wide: one sink for every engine, trainer and role of the process; each call
    replaces the previous sink. Once a call returns, the previous function is never
    called again.
  * Threads: the function runs on whichever library thread logs (often not a Python
    thread; ctypes takes the GIL for it), one message at a time: the library holds its
    log lock meanwhile, so the function must be quick and must not call into libdlrm
    (that deadlocks).
  * Ownership: this module keeps the ctypes callback of the installed function alive for
    as long as the library may call it. At interpreter exit the sink goes back to stderr
    (atexit), so no library thread calls into a finalizing interpreter.
  * Errors: a ``min_level`` that is no DLRM_LOG_* value raises DlrmError
    (INVALID_ARGUMENT, naming min_level) and changes nothing; bad Python types raise
    TypeError / ValueError before the library is called. An exception raised by the
    function never reaches the library: ctypes reports it through sys.unraisablehook.
"""
from __future__ import annotations

import atexit
import ctypes
import enum
import logging
import threading
from typing import Callable, Optional, Union

from . import _native


class LogLevel(enum.IntEnum):
    """Mirror of the ``DLRM_LOG_*`` levels in ``include/dlrm/dlrm.h``."""

    DEBUG = 0
    INFO = 1
    WARNING = 2
    ERROR = 3
    OFF = 4  # as a threshold: nothing is logged


#: fn(level, file, line, message): file is the library's source file ("engine/ps/server.cc").
LogCallback = Callable[[LogLevel, str, int, str], None]

#: The logging level of each library level.
PYTHON_LEVELS = {LogLevel.DEBUG: logging.DEBUG, LogLevel.INFO: logging.INFO,
                 LogLevel.WARNING: logging.WARNING, LogLevel.ERROR: logging.ERROR}

_lock = threading.Lock()  # serializes replacing the sink and _installed with it
_installed: Optional[object] = None  # the ctypes callback the library may call, or None
_min_level = int(LogLevel.INFO)  # the threshold of the installed sink


def _text(raw: Optional[bytes]) -> str:
    return raw.decode("utf-8", "replace") if raw else ""


def _level(raw: int) -> Union[LogLevel, int]:
    try:
        return LogLevel(raw)
    except ValueError:  # a level newer than this binding
        return raw


def _c_callback(fn: LogCallback) -> object:
    def call(_user: Optional[int], level: int, file: Optional[bytes], line: int,
             message: Optional[bytes]) -> None:
        fn(_level(level), _text(file), int(line), _text(message))  # type: ignore[arg-type]
    return _native.LOG_FN(call)


def set_log_callback(fn: Optional[LogCallback],
                     min_level: Union[LogLevel, int] = LogLevel.INFO) -> None:
    """Sends every library message of level >= ``min_level`` to ``fn(level, file, line,
    message)``, or to stderr when ``fn`` is None; ``LogLevel.OFF`` silences the library.

    Raises:
        DlrmError: INVALID_ARGUMENT when ``min_level`` is not a :class:`LogLevel` value
            (nothing changes).
        TypeError / ValueError: ``fn`` is not callable, ``min_level`` is not an int or
            does not fit in int32.
    """
    global _installed, _min_level
    if fn is not None and not callable(fn):
        raise TypeError(f"fn must be callable or None, got {type(fn).__name__}")
    if isinstance(min_level, bool) or not isinstance(min_level, int):
        raise TypeError(f"min_level must be a dlrm.LogLevel, got {type(min_level).__name__}")
    if not -2 ** 31 <= min_level < 2 ** 31:  # (`in range` would scan for an IntEnum)
        raise ValueError(f"min_level must fit in int32, got {min_level}")
    callback = _c_callback(fn) if fn is not None else _native.LOG_FN()
    with _lock:
        # On failure the library kept the old sink, and _installed keeps its callback.
        _native.check(_native.lib.dlrm_set_log_callback(callback, None, int(min_level)))
        # Only now may the previous callback go: the library no longer calls it.
        _installed = callback if fn is not None else None
        _min_level = int(min_level)


def min_level_for(level: int) -> LogLevel:
    """The library threshold that passes exactly the messages a logger at ``level``
    accepts: the lowest library level whose logging level is >= ``level``, or OFF when
    ``level`` is above ERROR (the library writes nothing higher)."""
    for lib_level, py_level in PYTHON_LEVELS.items():
        if py_level >= level:
            return lib_level
    return LogLevel.OFF


def _logging_level(level: Union[int, str]) -> int:
    if isinstance(level, str):
        number = logging.getLevelName(level)
        if not isinstance(number, int):
            raise ValueError(f"level {level!r} is not a logging level name")
        return number
    if isinstance(level, bool) or not isinstance(level, int):
        raise TypeError(f"level must be a logging level (int or name), got "
                        f"{type(level).__name__}")
    return level


def to_logger(logger: logging.Logger) -> LogCallback:
    """A log callback that hands each library message to ``logger`` as a LogRecord with
    the mapped logging level, ``pathname`` = the library's source file and ``lineno`` =
    its line (the message is not %-formatted)."""
    if not isinstance(logger, logging.Logger):
        raise TypeError(f"logger must be a logging.Logger, got {type(logger).__name__}")

    def forward(level: Union[LogLevel, int], file: str, line: int, message: str) -> None:
        py_level = PYTHON_LEVELS.get(level, logging.ERROR)  # type: ignore[call-overload]
        if logger.isEnabledFor(py_level):
            logger.handle(logger.makeRecord(logger.name, py_level, file, line, message,
                                            None, None))
    return forward


def set_logger(logger: Optional[logging.Logger] = logging.getLogger("dlrm"),
               level: Union[int, str] = logging.INFO) -> None:
    """Routes the library's log into ``logger`` (default: the "dlrm" logger), or back to
    stderr when ``logger`` is None.

    ``level`` is a logging level (int or name): the library formats and sends only the
    messages that pass it (DEBUG, INFO, WARNING, ERROR; a level above ERROR sends none).
    The logger's own level and handlers filter further as usual.
    """
    threshold = min_level_for(_logging_level(level))
    set_log_callback(None if logger is None else to_logger(logger), threshold)


@atexit.register
def _restore_stderr_at_exit() -> None:
    # Library threads (a role still running in a daemon thread) may log during shutdown.
    global _installed
    with _lock:
        if _installed is not None:
            _native.lib.dlrm_set_log_callback(_native.LOG_FN(), None, _min_level)
            _installed = None
