"""Fast access to single values of an Arrow array, for readers that serve one row at a time.

`array[k].as_py()` builds a pyarrow Scalar first and costs a few microseconds;
the getters here read the array's buffers through numpy views made once per array
(`ndarray.item` or a memoryview, never a whole `tolist`: readers of random rows touch one or two rows
of a batch), so a value costs a fraction of a microsecond. Each getter returns what
`array.to_pylist()[k]` would. Nothing is copied but the value returned.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.types as pat

Getter = Callable[[int], Any]
_NUMPY_TYPES = {pa.from_numpy_dtype(np.dtype(name)): np.dtype(name) for name in (
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32", "float64")}


def numpy_values(array: pa.Array) -> np.ndarray:
    """The values of a numeric or bool `array` as numpy: a read-only view for numbers, a copy for bools.

    Null slots hold whatever their slot holds (callers mask them). `Array.to_numpy`
    would do the same, but it imports pandas when pandas is installed: a third of a
    second in every fresh DataLoader worker.

    Raises:
      TypeError: `array` is neither numeric nor bool.
    """
    if pat.is_boolean(array.type):
        bits = array.buffers()[1]
        if bits is None:
            return np.zeros(len(array), dtype=bool)
        unpacked = np.unpackbits(np.frombuffer(bits, dtype=np.uint8), bitorder="little")
        return unpacked[array.offset:array.offset + len(array)].astype(bool)
    dtype = _NUMPY_TYPES.get(array.type)
    if dtype is None:
        raise TypeError(f"not a numeric or bool array: {array.type}")
    data = array.buffers()[1]
    if data is None or len(array) == 0:
        return np.zeros(0, dtype=dtype)
    return np.frombuffer(data, dtype=dtype, count=len(array), offset=array.offset * dtype.itemsize)


def row_getter(array: pa.Array) -> Getter:
    """A function giving `array.to_pylist()[k]` for a position `k` (not checked: the caller routes rows)."""
    if len(array) == 0:
        return _no_rows
    kind = array.type
    if pat.is_integer(kind) or pat.is_floating(kind) and kind != pa.float16() or pat.is_boolean(kind):
        getter = numpy_values(array).item
    elif pat.is_large_binary(kind) or pat.is_binary(kind):
        getter = _binary_getter(array)
    elif pat.is_large_string(kind) or pat.is_string(kind):
        raw = _binary_getter(array)

        def getter(k: int) -> str:
            return raw(k).decode("utf-8")
    else:
        return _scalar_getter(array)
    return getter if array.null_count == 0 else with_nulls(getter, array)


def with_nulls(getter: Getter, array: pa.Array) -> Getter:
    """`getter`, returning None where `array` is null."""
    null = numpy_values(array.is_null()).item

    def nullable(k: int) -> Any:
        return None if null(k) else getter(k)
    return nullable


def binary_values(array: pa.Array) -> tuple[memoryview, np.ndarray]:
    """The data buffer of a binary or string `array` and its offsets: value k is
    `data[ends[k]:ends[k + 1]]` (a null's slot is empty or holds what its slot holds)."""
    offset_type = np.int64 if pat.is_large_binary(array.type) or pat.is_large_string(array.type) else np.int32
    _, offsets_buffer, data_buffer = array.buffers()
    if offsets_buffer is None:  # an empty array may have no buffers
        return memoryview(b""), np.zeros(len(array) + 1, dtype=np.int64)
    ends = np.frombuffer(offsets_buffer, dtype=offset_type)[array.offset:array.offset + len(array) + 1]
    return (memoryview(data_buffer) if data_buffer is not None else memoryview(b"")), ends


def null_flags(array: pa.Array) -> list[bool] | None:
    """Per row of `array`, whether it is null; None when none is."""
    return numpy_values(array.is_null()).tolist() if array.null_count else None


def _binary_getter(array: pa.Array) -> Getter:
    data, ends = binary_values(array)
    ends = memoryview(ends)  # indexing it gives Python ints, faster than ndarray.item

    def getter(k: int) -> bytes:
        return data[ends[k]:ends[k + 1]].tobytes()
    return getter


def _scalar_getter(array: pa.Array) -> Getter:
    def getter(k: int) -> Any:
        return array[k].as_py()
    return getter


def _no_rows(k: int) -> Any:
    raise IndexError(f"position {k} of an empty array")
