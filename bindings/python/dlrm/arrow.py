"""Batches from the data users already hold: Arrow tables, pandas DataFrames, records.

One mapping, :class:`Columns`, names which column is which; every converter returns an
ordinary :class:`~dlrm.Batch` (the engine's layout: dense row-major, lengths and ids
feature-major), so the classic mistake of hand-built batches, ids in sample-major order,
cannot happen here.

    cols = dlrm.Columns(dense=["i1", "i2"], sparse=["c1", "c2"], label="click")
    batch = dlrm.Batch.from_pandas(df, cols)          # df["c1"]: lists of ids per row
    batch = dlrm.Batch.from_arrow(record_batch, cols)  # pyarrow Table / RecordBatch
    batch = dlrm.Batch.from_rows([{"i1": 0.5, ..., "c1": [3, 7], "click": 1}], cols)

Arrow data crosses into the engine through the Arrow C Data Interface
(``dlrm_arrow_batch_create``): dense columns may be float32/float64/int32/int64, the label
also bool; a sparse column is list<int64|int32> (a null list is an empty bag); weights are
list<float> with the same lengths. Errors name the column and the row. pyarrow is needed
for from_arrow and from_pandas only.
"""
from __future__ import annotations

import ctypes
from typing import Any, Iterable, List, Mapping, NamedTuple, Optional, Sequence

import numpy as np

from . import _native
from .batch import Batch


class Columns(NamedTuple):
    """Which column is which. ``weights``: None, or one name per sparse feature (None for
    an unweighted one). ``label``: None for batches to predict."""

    dense: Sequence[str]
    sparse: Sequence[str]
    label: Optional[str] = None
    weights: Optional[Sequence[Optional[str]]] = None


def _names(value: object, field: str, allow_none: bool = False) -> List[Optional[str]]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"columns.{field} must be a list of column names, got "
                        f"{type(value).__name__}")
    names = list(value)
    for i, name in enumerate(names):
        if not (isinstance(name, str) or (allow_none and name is None)):
            raise TypeError(f"columns.{field}[{i}] must be a str, got {type(name).__name__}")
    return names


def _checked_columns(columns: object) -> Columns:
    if not isinstance(columns, Columns):
        raise TypeError(f"columns must be a dlrm.Columns, got {type(columns).__name__}")
    if columns.label is not None and not isinstance(columns.label, str):
        raise TypeError(f"columns.label must be a str or None, got "
                        f"{type(columns.label).__name__}")
    sparse = _names(columns.sparse, "sparse")
    weights = None if columns.weights is None else _names(columns.weights, "weights", True)
    if weights is not None and len(weights) != len(sparse):
        raise ValueError(f"columns.weights has {len(weights)} names but columns.sparse has "
                         f"{len(sparse)}; give one per sparse feature (None for none)")
    return Columns(_names(columns.dense, "dense"), sparse, columns.label, weights)


# ---- Arrow ---------------------------------------------------------------------------------
def _pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError as e:
        raise ImportError("Arrow and pandas input need pyarrow: pip install pyarrow") from e
    return pyarrow


def _struct_array(data: object) -> Any:
    """A RecordBatch, Table or StructArray as one StructArray (rows = samples)."""
    pa = _pyarrow()
    if isinstance(data, pa.RecordBatch):
        return data.to_struct_array()
    if isinstance(data, pa.Table):
        chunked = data.to_struct_array()
        return chunked.chunk(0) if chunked.num_chunks == 1 else chunked.combine_chunks()
    if isinstance(data, pa.StructArray):
        return data
    raise TypeError(f"expected a pyarrow RecordBatch, Table or StructArray, got "
                    f"{type(data).__name__}")


def _c_names(names: Sequence[Optional[str]], field: str) -> Any:
    array = (ctypes.c_char_p * max(len(names), 1))()
    for i, name in enumerate(names):
        array[i] = None if name is None else _native.c_string(name, f"columns.{field}[{i}]")
    return array


def _columns_struct(columns: Columns) -> _native.ArrowColumnsStruct:
    label = columns.label
    return _native.ArrowColumnsStruct(
        struct_size=ctypes.sizeof(_native.ArrowColumnsStruct),
        label=None if label is None else _native.c_string(label, "columns.label"),
        dense=_c_names(columns.dense, "dense"), num_dense=len(columns.dense),
        sparse=_c_names(columns.sparse, "sparse"), num_sparse=len(columns.sparse),
        weights=None if columns.weights is None else _c_names(columns.weights, "weights"))


def _release(struct: ctypes.Structure) -> None:
    if struct.release:
        _native.ARROW_RELEASE_FN(struct.release)(ctypes.addressof(struct))


def _copied(pointer: Any, count: int, dtype: type) -> np.ndarray:
    if count == 0:
        return np.empty(0, dtype)
    return np.ctypeslib.as_array(pointer, shape=(count,)).copy()


def _batch_of(view: _native.BatchStruct) -> Batch:
    """A Batch owning copies of the arrays view points at."""
    n, nd, ns = int(view.batch_size), int(view.num_dense), int(view.num_sparse)
    dense = _copied(view.dense, n * nd, np.float32).reshape(n, nd)
    labels = _copied(view.labels, n, np.float32) if view.labels else None
    lengths = _copied(view.lengths, ns * n, np.int32).reshape(ns, n)
    ids = _copied(view.ids, int(view.num_ids), np.int64)
    weights = _copied(view.weights, int(view.num_ids), np.float32) if view.weights else None
    return Batch(dense, labels, lengths, ids, weights)


def from_arrow(data: object, columns: Columns) -> Batch:
    """A Batch from a pyarrow RecordBatch, Table or StructArray; see the module doc.

    Raises:
        TypeError: data or columns of the wrong type.
        ValueError: a column name containing a NUL character (named as columns.<field>).
        DlrmError: INVALID_ARGUMENT naming the column (and row) the engine refused.
    """
    mapping = _columns_struct(_checked_columns(columns))  # its strings stay alive with it
    struct = _struct_array(data)
    schema, array = _native.ArrowSchemaStruct(), _native.ArrowArrayStruct()
    struct._export_to_c(ctypes.addressof(array), ctypes.addressof(schema))
    handle = ctypes.c_void_p()
    try:
        _native.check(_native.lib.dlrm_arrow_batch_create(
            ctypes.byref(schema), ctypes.byref(array), ctypes.byref(mapping),
            ctypes.byref(handle)))
    finally:
        _release(array)
        _release(schema)
    try:
        view = _native.BatchStruct(struct_size=ctypes.sizeof(_native.BatchStruct))
        _native.check(_native.lib.dlrm_arrow_batch_view(handle, ctypes.byref(view)))
        return _batch_of(view)
    finally:
        _native.lib.dlrm_arrow_batch_destroy(handle)


def from_pandas(df: object, columns: Columns) -> Batch:
    """A Batch from a pandas DataFrame (through pyarrow): sparse columns hold a list (or
    array) of ids per row, None for an empty bag."""
    pa = _pyarrow()
    return from_arrow(pa.RecordBatch.from_pandas(df, preserve_index=False), columns)


# ---- records -------------------------------------------------------------------------------
def _field(row: Mapping[str, Any], name: str, i: int) -> Any:
    try:
        return row[name]
    except (KeyError, TypeError, IndexError):
        raise ValueError(f"row {i} has no column {name!r}") from None


def _number(row: Mapping[str, Any], name: str, i: int) -> float:
    value = _field(row, name, i)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"row {i}, column {name!r}: expected a number, got {value!r}") from None


def _bag(value: Any, name: str, i: int, kind: str) -> np.ndarray:
    """Row i's list of ids (kind "i") or weights (kind "f") in column name."""
    bag = np.asarray([] if value is None else value)
    if bag.ndim != 1 or (bag.size and bag.dtype.kind not in ("iu" if kind == "i" else "iuf")):
        what = "integer ids" if kind == "i" else "numbers"
        raise ValueError(f"row {i}, column {name!r}: expected a list of {what}, got "
                         f"{value!r}")
    return bag


def from_rows(rows: Iterable[Mapping[str, Any]], columns: Columns) -> Batch:
    """A Batch from records (dicts, or any mapping by column name); needs no pyarrow.
    Errors name the row and the column."""
    columns = _checked_columns(columns)
    rows = list(rows)
    n, nf = len(rows), len(columns.sparse)
    dense = np.zeros((n, len(columns.dense)), np.float32)
    labels = None if columns.label is None else np.zeros(n, np.float32)
    lengths = np.zeros((nf, n), np.int32)
    ids: List[List[np.ndarray]] = [[] for _ in range(nf)]
    weights: List[List[np.ndarray]] = [[] for _ in range(nf)]
    for i, row in enumerate(rows):
        for j, name in enumerate(columns.dense):
            dense[i, j] = _number(row, name, i)
        if labels is not None:
            labels[i] = _number(row, columns.label, i)
        for f, name in enumerate(columns.sparse):
            bag = _bag(_field(row, name, i), name, i, "i")
            lengths[f, i] = bag.size
            ids[f].append(bag.astype(np.int64))
            weight_name = None if columns.weights is None else columns.weights[f]
            w = (np.ones(bag.size) if weight_name is None else
                 _bag(_field(row, weight_name, i), weight_name, i, "f"))
            if w.size != bag.size:
                raise ValueError(f"row {i}: column {weight_name!r} has {w.size} weights but "
                                 f"{name!r} has {bag.size} ids")
            weights[f].append(w.astype(np.float32))
    flat_ids = np.concatenate([a for f in ids for a in f] or [np.empty(0, np.int64)])
    flat_w = None
    if columns.weights is not None and any(w is not None for w in columns.weights):
        flat_w = np.concatenate([a for f in weights for a in f] or [np.empty(0, np.float32)])
    return Batch(dense, labels, lengths, flat_ids.astype(np.int64), flat_w)
