"""A batch of samples as borrowed numpy memory (TorchRec KeyedJaggedTensor layout).

The C ABI borrows the caller's memory for the duration of a call, so a Batch validates
its arrays once, keeps references to them and hands the engine raw pointers: C-contiguous
inputs of the right dtype are never copied. Dtypes are never converted silently, because
a float64 -> float32 or int32 -> int64 cast would hide a copy (and often a bug) on the
hot path; the error says what to convert instead.
"""
from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Optional, Tuple

import numpy as np

from . import _native

if TYPE_CHECKING:
    from .arrow import Columns

_INT32_MAX = 2**31 - 1


def _checked(value: object, name: str, dtype: type, ndim: int) -> np.ndarray:
    """Validates type, dtype and ndim; returns a C-contiguous, aligned view or copy."""
    expected = np.dtype(dtype)
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray of dtype {expected.name}, "
                        f"got {type(value).__name__}")
    if value.dtype != expected:
        raise TypeError(f"{name} must have dtype {expected.name}, got {value.dtype} "
                        f"(convert explicitly, e.g. {name}.astype(np.{expected.name}))")
    if value.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got {value.ndim}-D with shape "
                         f"{value.shape}")
    # Same object when already contiguous and aligned: the engine reads the caller's buffer.
    return np.require(value, requirements=("C_CONTIGUOUS", "ALIGNED"))


def _pointer(array: Optional[np.ndarray], ctype: type) -> Optional[ctypes._Pointer]:
    return None if array is None else array.ctypes.data_as(ctypes.POINTER(ctype))


def _to_feature_major(lengths: np.ndarray, ids: np.ndarray, weights: Optional[np.ndarray]
                      ) -> Tuple[np.ndarray, np.ndarray, Optional[np.ndarray]]:
    """Sample-major lengths [B, F] and ids (sample 0's features in order, then sample 1's)
    as the engine's feature-major layout (copies)."""
    lengths = _checked(lengths, "lengths", np.int32, 2)
    ids = _checked(ids, "ids", np.int64, 1)
    if lengths.size and lengths.min() < 0:
        raise ValueError("lengths has a negative entry")
    ends = np.cumsum(lengths.ravel(), dtype=np.int64)  # sample-major bag ends
    if ends.size and ends[-1] != ids.shape[0]:
        raise ValueError(f"ids has {ids.shape[0]} entries but the lengths sum to {ends[-1]}")
    starts = (ends - lengths.ravel()).reshape(lengths.shape).T.ravel()  # feature-major
    sizes = lengths.T.ravel()
    # Each bag's positions in the sample-major ids, bags in feature-major order.
    index = np.repeat(starts - np.cumsum(sizes) + sizes, sizes) + np.arange(int(sizes.sum()))
    w = None if weights is None else _checked(weights, "weights", np.float32, 1)[index]
    return np.ascontiguousarray(lengths.T), ids[index], w


class Batch:
    """One batch for train_step / predict / evaluate.

    Args:
        dense: float32 ``[batch_size, num_dense]``.
        labels: float32 ``[batch_size]`` in [0, 1], or None (predict needs none).
        lengths: int32 ``[num_sparse, batch_size]``, feature-major: the bag sizes of
            feature 0 for every sample, then feature 1, ... (0 = empty bag).
        ids: int64 ``[sum(lengths)]``, in the same order as ``lengths``.
        weights: float32 like ``ids`` (per-id weights), or None for all 1.
        layout: ``"sample_major"`` takes lengths as ``[batch_size, num_sparse]`` and ids
            (and weights) sample by sample, each sample's features in order, and copies
            them into the engine's feature-major layout.

    Raises:
        TypeError: an argument is not an ndarray of the expected dtype.
        ValueError: an argument has the wrong number of dimensions or a size that does
            not match the others.

    Values (id ranges, NaN, labels outside [0, 1], negative lengths) are checked by the
    engine on each call and reported as :class:`~dlrm.DlrmError` with its message.
    Arrays are referenced, not copied: mutating them in place changes the batch.
    """

    __slots__ = ("_dense", "_labels", "_lengths", "_ids", "_weights", "_struct")

    def __init__(self, dense: np.ndarray, labels: Optional[np.ndarray], lengths: np.ndarray,
                 ids: np.ndarray, weights: Optional[np.ndarray] = None,
                 layout: str = "feature_major") -> None:
        if layout == "sample_major":
            lengths, ids, weights = _to_feature_major(lengths, ids, weights)
        elif layout != "feature_major":
            raise ValueError(f"layout must be 'feature_major' or 'sample_major', got {layout!r}")
        dense = _checked(dense, "dense", np.float32, 2)
        batch_size, num_dense = dense.shape
        if labels is not None:
            labels = _checked(labels, "labels", np.float32, 1)
            if labels.shape[0] != batch_size:
                raise ValueError(f"labels has {labels.shape[0]} entries but dense has "
                                 f"{batch_size} rows (batch_size)")
        lengths = _checked(lengths, "lengths", np.int32, 2)
        num_sparse = lengths.shape[0]
        if lengths.shape[1] != batch_size:
            raise ValueError(f"lengths must have shape [num_sparse, batch_size={batch_size}] "
                             f"(feature-major), got {lengths.shape}; for [batch_size, "
                             f"num_sparse] lengths and ids sample by sample, pass "
                             f"layout='sample_major'")
        ids = _checked(ids, "ids", np.int64, 1)
        # Negative lengths are left to the engine, whose message names the bag.
        if lengths.size and lengths.min() >= 0:
            total = int(lengths.sum(dtype=np.int64))
            if ids.shape[0] != total:
                raise ValueError(f"ids has {ids.shape[0]} entries but the lengths sum to "
                                 f"{total}")
        if weights is not None:
            weights = _checked(weights, "weights", np.float32, 1)
            if weights.shape != ids.shape:
                raise ValueError(f"weights has {weights.shape[0]} entries but ids has "
                                 f"{ids.shape[0]}; give one weight per id")
        if num_dense > _INT32_MAX or num_sparse > _INT32_MAX:
            raise ValueError("num_dense and num_sparse must fit in int32")

        self._dense, self._labels, self._lengths = dense, labels, lengths
        self._ids, self._weights = ids, weights
        self._struct = _native.BatchStruct(
            struct_size=ctypes.sizeof(_native.BatchStruct),
            batch_size=batch_size,
            num_dense=num_dense,
            num_sparse=num_sparse,
            dense=_pointer(dense, ctypes.c_float),
            labels=_pointer(labels, ctypes.c_float),
            lengths=_pointer(lengths, ctypes.c_int32),
            ids=_pointer(ids, ctypes.c_int64),
            num_ids=ids.shape[0],
            weights=_pointer(weights, ctypes.c_float),
        )

    # Read-only: the C struct points at these exact buffers.
    @property
    def dense(self) -> np.ndarray:
        return self._dense

    @property
    def labels(self) -> Optional[np.ndarray]:
        return self._labels

    @property
    def lengths(self) -> np.ndarray:
        return self._lengths

    @property
    def ids(self) -> np.ndarray:
        return self._ids

    @property
    def weights(self) -> Optional[np.ndarray]:
        return self._weights

    @property
    def batch_size(self) -> int:
        return int(self._dense.shape[0])

    @property
    def num_dense(self) -> int:
        return int(self._dense.shape[1])

    @property
    def num_sparse(self) -> int:
        return int(self._lengths.shape[0])

    @property
    def num_ids(self) -> int:
        return int(self._ids.shape[0])

    @property
    def shape(self) -> Tuple[int, int, int, int]:
        """(batch_size, num_dense, num_sparse, num_ids)."""
        return (self.batch_size, self.num_dense, self.num_sparse, self.num_ids)

    # ---- from the data users hold (dlrm.arrow: one Columns mapping for all three) -------
    @classmethod
    def from_arrow(cls, data: object, columns: "Columns") -> "Batch":
        """From a pyarrow RecordBatch, Table or StructArray (see :mod:`dlrm.arrow`)."""
        from . import arrow
        return arrow.from_arrow(data, columns)

    @classmethod
    def from_pandas(cls, df: object, columns: "Columns") -> "Batch":
        """From a pandas DataFrame whose sparse columns hold a list of ids per row."""
        from . import arrow
        return arrow.from_pandas(df, columns)

    @classmethod
    def from_rows(cls, rows: object, columns: "Columns") -> "Batch":
        """From records (mappings by column name); errors name the row and column."""
        from . import arrow
        return arrow.from_rows(rows, columns)  # type: ignore[arg-type]

    def without_labels(self) -> "Batch":
        """The same buffers without labels (what serving-time predict sees)."""
        return Batch(self._dense, None, self._lengths, self._ids, self._weights)

    def __len__(self) -> int:
        return self.batch_size

    def __repr__(self) -> str:
        return (f"Batch(batch_size={self.batch_size}, num_dense={self.num_dense}, "
                f"num_sparse={self.num_sparse}, num_ids={self.num_ids}, "
                f"labels={'yes' if self._labels is not None else 'no'}, "
                f"weights={'yes' if self._weights is not None else 'no'})")
