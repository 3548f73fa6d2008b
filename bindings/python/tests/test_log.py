"""dlrm.set_logger / dlrm.set_log_callback: the library's log in Python's logging.

The acceptance test runs a job (a coordinator, 2 servers and 2 trainers as threads, see
test_distributed.py) with the library's log routed into a logging.Logger: the
coordinator's, the servers' and the trainers' lines arrive there as INFO records pointing
at engine/ sources, and none reaches stderr. Then: back to stderr, a threshold, silence; a
bad level is refused by name and changes nothing. Every test restores the default sink.
"""
from __future__ import annotations

import gc
import logging
import re
import threading
from pathlib import Path
from typing import Iterator, List

import numpy as np
import pytest

import dlrm
from conftest import make_batch
from test_distributed import GLOBAL, STEPS, _run_job

LogLevel = dlrm.LogLevel


class _Collect(logging.Handler):
    """Keeps every record (emit runs on library threads)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: List[logging.LogRecord] = []
        self.mu = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        with self.mu:
            self.records.append(record)

    def messages(self) -> List[str]:
        with self.mu:
            return [r.getMessage() for r in self.records]


@pytest.fixture(autouse=True)
def default_sink() -> Iterator[None]:
    yield
    dlrm.set_log_callback(None, LogLevel.INFO)
    assert dlrm.log._installed is None


@pytest.fixture
def collect(request: pytest.FixtureRequest) -> Iterator[_Collect]:
    """A handler on a logger of this test's own, which does not propagate to the root."""
    logger = logging.getLogger(f"dlrm.test.{request.node.name}")
    handler = _Collect()
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    handler.logger = logger  # type: ignore[attr-defined]
    yield handler
    logger.removeHandler(handler)


def _job(checkpoint_dir: Path | None = None) -> None:
    rng = np.random.default_rng(3)
    _run_job([make_batch(rng, batch_size=GLOBAL) for _ in range(STEPS)], False, checkpoint_dir)


def test_bad_min_level_is_refused_by_name_and_changes_nothing() -> None:
    dlrm.set_log_callback(lambda *message: None, LogLevel.WARNING)
    installed = dlrm.log._installed
    assert installed is not None
    for bad in (LogLevel.OFF + 1, -1, 2 ** 31 - 1):
        with pytest.raises(dlrm.DlrmError) as refused:
            dlrm.set_log_callback(lambda *message: None, bad)
        assert refused.value.status == dlrm.StatusCode.INVALID_ARGUMENT
        assert "min_level" in refused.value.message and str(bad) in refused.value.message
        assert dlrm.log._installed is installed and dlrm.log._min_level == LogLevel.WARNING
    with pytest.raises(dlrm.DlrmError, match="min_level"):
        dlrm.set_log_callback(None, 7)
    # Caught before the library, which would see the value cut to 32 bits.
    with pytest.raises(ValueError, match="min_level must fit in int32"):
        dlrm.set_log_callback(None, 2 ** 32 + 1)
    with pytest.raises(TypeError, match="min_level"):
        dlrm.set_log_callback(None, "INFO")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="fn must be callable"):
        dlrm.set_log_callback(42, LogLevel.INFO)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'LOUD' is not a logging level"):
        dlrm.set_logger(logging.getLogger("dlrm"), "LOUD")
    with pytest.raises(TypeError, match="level must be a logging level"):
        dlrm.set_logger(logging.getLogger("dlrm"), 1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="logger must be a logging.Logger"):
        dlrm.set_logger("dlrm")  # type: ignore[arg-type]
    assert dlrm.log._installed is installed


def test_logging_levels_map_to_library_thresholds() -> None:
    want = {logging.NOTSET: LogLevel.DEBUG, logging.DEBUG: LogLevel.DEBUG, 15: LogLevel.INFO,
            logging.INFO: LogLevel.INFO, 25: LogLevel.WARNING,
            logging.WARNING: LogLevel.WARNING, logging.ERROR: LogLevel.ERROR,
            logging.CRITICAL: LogLevel.OFF}
    assert {level: dlrm.log.min_level_for(level) for level in want} == want


def test_a_library_message_becomes_a_record(collect: _Collect) -> None:
    forward = dlrm.log.to_logger(collect.logger)  # type: ignore[attr-defined]
    forward(LogLevel.WARNING, "engine/net/endpoint.cc", 289, "100% rejected %s")
    forward(LogLevel.DEBUG, "engine/ps/server.cc", 7, "debug")
    collect.logger.setLevel(logging.INFO)  # type: ignore[attr-defined]
    forward(LogLevel.DEBUG, "engine/ps/server.cc", 8, "filtered by the logger")
    [warning, debug] = collect.records
    assert (warning.levelname, warning.pathname, warning.filename, warning.lineno) == (
        "WARNING", "engine/net/endpoint.cc", "endpoint.cc", 289)
    assert warning.getMessage() == "100% rejected %s"  # not %-formatted
    assert warning.name == collect.logger.name  # type: ignore[attr-defined]
    assert (debug.levelname, debug.lineno) == ("DEBUG", 7)


def test_job_log_reaches_logging_instead_of_stderr(collect: _Collect, capfd: pytest.CaptureFixture,
                                                   tmp_path: Path) -> None:
    dlrm.set_logger(collect.logger)  # type: ignore[attr-defined]
    refused: List[str] = []
    with pytest.raises(dlrm.DlrmError, match="min_level"):  # keeps the logger installed
        dlrm.set_log_callback(lambda *message: refused.append(message[3]), 9)
    gc.collect()  # set_logger's callback is held by the module alone
    capfd.readouterr()
    _job(tmp_path / "ckpt")
    err = capfd.readouterr().err

    messages = collect.messages()
    wanted = {"coordinator": r"coordinator .*: rendezvous complete: ",
              "servers": r"server [01] \(rank [01]\) serves ",
              "servers done": r"server [01]: every trainer is done",
              "trainers": r"trainer [01]: checkpoint of step 4 in "}
    counts = {what: sum(bool(re.match(p, m)) for m in messages) for what, p in wanted.items()}
    assert counts == {"coordinator": 1, "servers": 2, "servers done": 2, "trainers": 2}, messages
    for record in collect.records:
        assert record.pathname.startswith("engine/") and record.lineno > 0, record
        if any(re.match(p, record.getMessage()) for p in wanted.values()):
            assert record.levelname == "INFO", record
    assert not refused
    assert "[dlrm " not in err and "rendezvous complete" not in err, err


@pytest.mark.parametrize("sink", ["stderr", "warning", "off"])
def test_job_log_follows_the_sink(sink: str, collect: _Collect,
                                  capfd: pytest.CaptureFixture) -> None:
    dlrm.set_logger(collect.logger)  # type: ignore[attr-defined]
    if sink == "stderr":
        dlrm.set_logger(None)
    elif sink == "warning":
        dlrm.set_logger(collect.logger, logging.WARNING)  # type: ignore[attr-defined]
    else:
        dlrm.set_log_callback(None, LogLevel.OFF)
    capfd.readouterr()
    _job()
    err = capfd.readouterr().err
    if sink == "stderr":
        assert collect.records == []
        assert re.search(r"^\[dlrm INFO engine/cluster/coordinator\.cc:\d+\] coordinator .*: "
                         r"rendezvous complete: ", err, re.MULTILINE), err
        assert len(re.findall(r"^\[dlrm INFO engine/\S+\] server [01] \(rank [01]\) serves ",
                              err, re.MULTILINE)) == 2, err
    else:
        assert all(r.levelno >= logging.WARNING for r in collect.records), collect.messages()
        assert "[dlrm " not in err, err
