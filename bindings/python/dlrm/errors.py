"""Exceptions raised by the binding.

Every failing call of the C library becomes a :class:`DlrmError` carrying the library's
status code, its stable name and the thread-local message from ``dlrm_last_error()``, so
a Python user sees exactly what the engine said (which argument or field was wrong).
"""
from __future__ import annotations

import enum
from typing import Any, Tuple


class StatusCode(enum.IntEnum):
    """Mirror of the ``dlrm_status`` enum in ``include/dlrm/dlrm.h`` (a stable ABI)."""

    OK = 0
    INVALID_ARGUMENT = 1
    OUT_OF_RANGE = 2
    IO = 3
    NETWORK = 4
    TIMEOUT = 5
    CANCELLED = 6
    INTERNAL = 7
    FAILED_PRECONDITION = 8
    NOT_FOUND = 9
    DATA_LOSS = 10
    RESOURCE_EXHAUSTED = 11


class DlrmError(RuntimeError):
    """A libdlrm call returned a non-OK status.

    Attributes:
        code: the numeric ``dlrm_status`` (compare with :class:`StatusCode`).
        code_name: its stable name, e.g. ``"OUT_OF_RANGE"``.
        message: the engine's message, naming the argument or field that was wrong.
    """

    def __init__(self, code: int, code_name: str, message: str) -> None:
        super().__init__(f"{code_name}: {message}")
        self.code = int(code)
        self.code_name = code_name
        self.message = message

    @property
    def status(self) -> StatusCode | int:
        """The code as a :class:`StatusCode` when this binding knows it, else the int."""
        try:
            return StatusCode(self.code)
        except ValueError:
            return self.code

    def __reduce__(self) -> Tuple[Any, ...]:
        # Keeps the three fields across pickling (multiprocessing, concurrent.futures).
        return (type(self), (self.code, self.code_name, self.message))


class EngineClosedError(ValueError):
    """A method was called on an :class:`~dlrm.Engine` after ``close()``.

    A ValueError, like Python's own "I/O operation on closed file": the caller used an
    object in a state where that call is invalid. Raised without touching the library.
    """

    def __init__(self, message: str = "engine is closed") -> None:
        super().__init__(message)
