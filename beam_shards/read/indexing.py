"""Index checks shared by the readers: a position, a slice or many indices, checked against a length.

Pure logic: ints, numpy arrays and the errors that name what was wrong (a bool or a
float taken for an index, a position out of range with the length it missed).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from beam_shards.display import short_repr


def as_int(value: Any, what: str = "index") -> int:
    """`value` as a Python int: an int or numpy integer, not a bool, float, None or string.

    Raises:
      TypeError: naming `what` and the value.
    """
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{what} must be an int, not a bool; got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an int; got {short_repr(value)}") from None


def check_index(index: int, length: int, what: str = "cache", limit: int | None = None) -> int:
    """`index` as a position in 0..length-1 (negative counts from the end); with `limit`, up to
    limit - 1 (a `Mixture`'s later epochs).

    Raises:
      TypeError: `index` is not an int (a bool is not taken for one). IndexError: it
        is out of range (names both).
    """
    index = as_int(index)
    if not -length <= index < (length if limit is None else limit):
        raise _out_of_range(index, length, what)
    return index + length if index < 0 else index


def check_slice(index: slice) -> slice:
    """`index` with each of its bounds an int or None.

    Raises:
      TypeError: a bound is a bool, a float or a string (naming it).
    """
    bounds = {"start": index.start, "stop": index.stop, "step": index.step}
    return slice(*(None if value is None else as_int(value, f"slice {name}") for name, value in bounds.items()))


def _out_of_range(index: int, length: int, what: str) -> IndexError:
    return IndexError(f"index {index} out of range for a {what} of {length} rows")


def check_indices(indices: Sequence[int] | np.ndarray, length: int, what: str = "cache",
                  limit: int | None = None) -> np.ndarray:
    """`check_index` over many indices at once, as a new int64 array; with `limit`, indices from
    `length` up to `limit` are taken too (a `Mixture`'s later epochs), negative ones still count
    from `length`.

    Raises:
      TypeError: an index is not an int (floats, bools, None, objects). ValueError:
        `indices` is not flat (its shape is named). IndexError: an index is out of range.
    """
    limit = length if limit is None else limit
    idx = _int_array(indices, limit, what)
    if idx.size == 0:
        return idx.astype(np.int64)
    low = idx.min()
    if low < -length or idx.max() >= limit:
        bad = (idx < -length) | (idx >= limit)
        raise _out_of_range(int(idx[np.argmax(bad)]), length, what)
    idx = idx.astype(np.int64)  # a copy: the caller's array is never handed back
    return np.where(idx < 0, idx + length, idx) if low < 0 else idx


def _int_array(indices: Sequence[int] | np.ndarray, length: int, what: str) -> np.ndarray:
    """`indices` as a flat array of an integer dtype, its range not checked yet.

    Raises:
      as `check_indices`; IndexError only for an int numpy cannot hold (past uint64).
    """
    if isinstance(indices, np.ndarray) and indices.ndim == 1 and indices.dtype.kind in "iu":
        return indices
    if type(indices) is list and set(map(type, indices)) == {int}:
        try:  # only plain ints, the common case: no bool hides among them
            return np.array(indices, dtype=np.int64)
        except OverflowError:
            pass  # an int past int64: read below, it is named out of range
    try:
        idx = np.asarray(indices)
    except ValueError:
        raise ValueError(f"indices must be a flat sequence of ints; got {short_repr(indices)}") from None
    if idx.ndim > 1:
        raise ValueError(f"indices must be one-dimensional; got shape {idx.shape}")
    if idx.dtype.kind == "b" or _holds_bools(indices, idx):
        raise TypeError(f"indices must be ints, not bools; got {short_repr(indices)}")
    if idx.dtype == object and idx.ndim == 1 and all(_is_int(i) for i in idx):
        # numpy keeps ints past int64 and uint64 as objects: such an index is out of range.
        raise _out_of_range(next(i for i in idx if not -length <= i < length), length, what)
    if idx.dtype.kind not in "iu" and idx.size:
        raise TypeError(f"indices must be ints; got {short_repr(indices)}")
    return idx.reshape(-1)


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _holds_bools(indices: Any, idx: np.ndarray) -> bool:
    """Whether a sequence that numpy read as ints holds bools (numpy takes them for 0 and 1)."""
    return idx.dtype.kind in "iu" and idx.ndim == 1 and not isinstance(indices, np.ndarray) and any(
        issubclass(kind, (bool, np.bool_)) for kind in set(map(type, indices)))
