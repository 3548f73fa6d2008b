"""The Criteo display-ads TSV reader, with the ``dlrm`` command's exact preprocessing
(engine/data/criteo_tsv.h), so a notebook trains on the same batches as ``dlrm train``:

    label \\t I1..I13 (integers, may be empty) \\t C1..C26 (hex, may be empty) \\n

* dense: an integer x becomes float32(log(1 + x)) for x > 0, else 0; empty is 0;
* categorical: 1 to 16 hex digits, the value modulo the feature's table rows (a DYNAMIC
  table's feature keeps the 64-bit value, as an int64); empty is an empty bag;
* a malformed line raises ValueError "path:line: field: reason 'text'" (the command's
  message), or with ``skip_malformed`` is dropped and counted.

    with dlrm.Engine(config) as engine:
        for batch in dlrm.criteo.CriteoReader.for_engine("train.tsv", engine, 2048):
            engine.train_step(batch)
"""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from .batch import Batch

NUM_DENSE, NUM_SPARSE = 13, 26
_FIELDS = 1 + NUM_DENSE + NUM_SPARSE
_INT = re.compile(rb"[+-]?[0-9]+\Z")
_HEX = re.compile(rb"[0-9a-fA-F]{1,16}\Z")
_INT64_MAX = 2**63 - 1


def _field_name(k: int) -> str:
    return "label" if k == 0 else f"I{k}" if k <= NUM_DENSE else f"C{k - NUM_DENSE}"


def _fail(k: int, reason: str, text: bytes) -> str:
    shown = text[:40].decode("latin-1") + ("..." if len(text) > 40 else "")
    return f"{_field_name(k)}: {reason} '{shown}'"


def _dense(text: bytes) -> Tuple[float, Optional[str]]:
    """The dense value of an integer field, or an error reason."""
    if not text:
        return 0.0, None
    if not _INT.match(text):
        return 0.0, "not an integer:"
    x = int(text)
    if abs(x) > _INT64_MAX:
        return 0.0, "integer out of range:"
    return (float(np.float32(math.log1p(float(x)))) if x > 0 else 0.0), None


def parse_line(line: bytes, table_rows: Sequence[int]) -> Tuple[Any, Optional[str]]:
    """(label, dense[13], ids[26] with None for an empty field) of one line without its
    newline, or (None, error) naming the field."""
    if line.endswith(b"\r"):
        line = line[:-1]
    fields = line.split(b"\t")
    if len(fields) != _FIELDS:
        return None, f"line: expected {_FIELDS} tab-separated fields, found {len(fields)}"
    if fields[0] not in (b"0", b"1"):
        return None, _fail(0, "expected 0 or 1, got", fields[0])
    dense = []
    for k in range(1, NUM_DENSE + 1):
        value, reason = _dense(fields[k])
        if reason:
            return None, _fail(k, reason, fields[k])
        dense.append(value)
    ids = []
    for f, text in enumerate(fields[1 + NUM_DENSE:]):
        if not text:
            ids.append(None)  # a raw id may be -1: absence is not a value
            continue
        if not _HEX.match(text):
            return None, _fail(1 + NUM_DENSE + f, "not 1 to 16 hex digits:", text)
        value, rows = int(text, 16), table_rows[f]
        ids.append((value - 2**64 if value > _INT64_MAX else value) if rows == 0
                   else value % rows)
    return (float(fields[0] == b"1"), dense, ids), None


def _batch(rows: List[Any]) -> Batch:
    """Rows as a Batch: dense row-major, a bag of 0 or 1 id per feature, feature-major."""
    n = len(rows)
    labels = np.array([r[0] for r in rows], np.float32)
    dense = np.array([r[1] for r in rows], np.float32).reshape(n, NUM_DENSE)
    present = np.array([[x is not None for x in r[2]] for r in rows], bool).reshape(
        n, NUM_SPARSE).T  # [F, n]
    ids = np.array([[0 if x is None else x for x in r[2]] for r in rows], np.int64).reshape(
        n, NUM_SPARSE).T
    # Present ids, feature by feature (row order within each): the engine's layout.
    return Batch(dense, labels, present.astype(np.int32), np.ascontiguousarray(ids[present]))


class CriteoReader:
    """Batches of ``batch_size`` lines of a Criteo TSV file (the last may be smaller).
    Iterating again reads the file again (epochs); ``lines_read`` and ``lines_skipped``
    count the last pass."""

    def __init__(self, path: Union[str, Path], table_rows: Sequence[int],
                 batch_size: int = 2048, skip_malformed: bool = False) -> None:
        if not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size must be an int > 0, got {batch_size!r}")
        rows = list(table_rows)
        if len(rows) != NUM_SPARSE or any(not isinstance(r, int) or r < 0 for r in rows):
            raise ValueError(f"table_rows must be {NUM_SPARSE} ints >= 0 (0: raw ids of a "
                             f"DYNAMIC table), got {rows!r}")
        self.path, self.table_rows = str(path), rows
        self.batch_size, self.skip_malformed = batch_size, skip_malformed
        self.lines_read = self.lines_skipped = 0

    @classmethod
    def for_engine(cls, path: Union[str, Path], engine: Any, batch_size: int = 2048,
                   skip_malformed: bool = False) -> "CriteoReader":
        """A reader with the table rows of ``engine``'s 26 sparse features."""
        return cls(path, table_rows_of(engine.config), batch_size, skip_malformed)

    def __iter__(self) -> Iterator[Batch]:
        self.lines_read = self.lines_skipped = 0
        rows: List[Any] = []
        with open(self.path, "rb") as f:
            for line in f:
                self.lines_read += 1
                row, error = parse_line(line.rstrip(b"\n"), self.table_rows)
                if row is not None:
                    rows.append(row)
                elif self.skip_malformed:
                    self.lines_skipped += 1
                else:
                    raise ValueError(f"{self.path}:{self.lines_read}: {error}")
                if len(rows) == self.batch_size:
                    yield _batch(rows)
                    rows = []
        if rows:
            yield _batch(rows)


# ---- the table rows of a config -----------------------------------------------------------
_TOKEN = re.compile(r'\s*(?:#[^\n]*\n\s*)*("(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|[{}:]|[^\s{}:#]+)')


def _parse_text(text: str) -> Dict[str, List[Any]]:
    """Protobuf text format as nested {field: [values or messages]} (enough for configs)."""
    stack: List[Dict[str, List[Any]]] = [{}]
    tokens = [t for t in _TOKEN.findall(text)]
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok == "}":
            stack.pop()
            i += 1
            continue
        name, i = tok, i + 1
        if i < len(tokens) and tokens[i] == ":":
            i += 1
        if i < len(tokens) and tokens[i] == "{":
            child: Dict[str, List[Any]] = {}
            stack[-1].setdefault(name, []).append(child)
            stack.append(child)
        else:
            stack[-1].setdefault(name, []).append(tokens[i].strip("\"'"))
        i += 1
    return stack[0]


def table_rows_of(config: str) -> List[int]:
    """For each sparse feature of the config, in order: its table's num_rows, or 0 for a
    DYNAMIC table (raw ids), as the ``dlrm`` command maps Criteo's categorical fields."""
    model = _parse_text(config).get("model", [{}])[0]
    tables = {t["name"][0]: t for t in model.get("tables", [])}
    out = []
    for feature in model.get("sparse_features", []):
        table = tables[feature["table"][0]]
        out.append(0 if table.get("kind", [""])[0] == "DYNAMIC" else int(table["num_rows"][0]))
    return out
