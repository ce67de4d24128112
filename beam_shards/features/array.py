"""`Array`: a numpy array of fixed shape and dtype (the first dimension may vary)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa

from beam_shards.errors import FeatureError
from beam_shards.features.base import (NUMERIC_DTYPES, Feature, _lengths, _null_mask, _restore_nulls, cast_safely,
                                       kind)


@kind
class Array(Feature):
    """A numpy array of fixed shape and dtype; the first dimension may be None (variable).

    Stored as a fixed-size list of the flattened values (or a list of them when the
    first dimension varies), so a reader gets back an array of the declared shape
    without a copy. Values are cast only when no value changes: int64 values that
    do not fit int8 are an error, not a wrap, floats never become ints and ints
    become floats only when exact. Floats may round to a narrower float, never to inf.

    Args:
      shape: a tuple of positive ints; the first may be None.
      dtype: a numeric numpy dtype name, such as "float32" or "uint8".
    """

    def __init__(self, shape: tuple[int | None, ...], dtype: str = "float32", *, nullable: bool = False):
        shape = tuple(shape)
        if not shape:
            raise FeatureError("Array needs at least one dimension; use Value for scalars")
        if any(d is None for d in shape[1:]) or any(d is not None and (not isinstance(d, int) or d < 1) for d in shape):
            raise FeatureError(f"Array shape must be positive ints, the first may be None; got {shape}")
        if dtype not in NUMERIC_DTYPES:
            raise FeatureError(f"Array dtype must be one of {', '.join(NUMERIC_DTYPES)}; got {dtype!r}")
        self.shape = shape
        self.dtype = dtype
        self.nullable = nullable
        self._row_size = math.prod(shape[1:])
        self._np_dtype = np.dtype(dtype)

    @property
    def variable(self) -> bool:
        return self.shape[0] is None

    def arrow_type(self) -> pa.DataType:
        item = pa.from_numpy_dtype(np.dtype(self.dtype))
        if not self.variable:
            return pa.list_(item, math.prod(self.shape))
        inner = pa.list_(item, self._row_size) if len(self.shape) > 1 else item
        return pa.large_list(inner)

    def to_dict(self) -> dict[str, Any]:
        return {"_type": "Array", "shape": list(self.shape), "dtype": self.dtype, "nullable": self.nullable}

    @classmethod
    def _from_args(cls, args: dict[str, Any]) -> Array:
        return cls(tuple(args.pop("shape")), args.pop("dtype"), **args)

    def __repr__(self) -> str:
        return f"Array({self.shape}, {self.dtype!r}{self._nullable_repr()})"

    def encode(self, value: Any, field: str) -> np.ndarray:
        # Fast path (the common case, once per example): already the exact array stored.
        if (type(value) is np.ndarray and value.shape == self.shape and value.dtype == self._np_dtype
                and value.flags.c_contiguous):
            return value
        try:
            array = value if isinstance(value, np.ndarray) else np.asarray(value)
        except ValueError:
            raise self._fail("ragged nested lists are not an array", field, value) from None
        if array.dtype == object:
            raise self._fail("ragged or non-numeric values are not an array", field, value)
        if array.shape == (0,) and self.variable and not isinstance(value, np.ndarray):
            array = array.reshape((0, *self.shape[1:]))  # [] is no rows, whatever the inner dimensions
        if array.ndim != len(self.shape) or any(d is not None and d != n for d, n in zip(self.shape, array.shape)):
            raise self._fail(f"wrong shape {array.shape}, expected {self.shape}", field, value)
        try:
            array = cast_safely(array, self.dtype)
        except ValueError as error:
            raise self._fail(str(error), field, value) from None
        return np.ascontiguousarray(array)

    def build_array(self, values: list[Any]) -> pa.Array:
        mask = _null_mask(values)
        if not self.variable:
            size = math.prod(self.shape)
            zeros = np.zeros(self.shape, dtype=self.dtype)
            flat = np.stack([zeros if v is None else v for v in values]).reshape(-1) if values else zeros[:0].reshape(-1)
            return pa.FixedSizeListArray.from_arrays(pa.array(flat), size, mask=mask)
        present = [v for v in values if v is not None]
        lengths = np.array([0 if v is None else len(v) for v in values], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        flat = np.concatenate([v.reshape(-1) for v in present]) if present else np.zeros(0, dtype=self.dtype)
        child = pa.array(flat)
        if len(self.shape) > 1:
            child = pa.FixedSizeListArray.from_arrays(child, self._row_size)
        return pa.LargeListArray.from_arrays(pa.array(offsets), child, mask=mask)

    def decode(self, array: pa.Array, image_mode: str = "pil") -> list[Any]:
        """One numpy array of the declared shape per row: read-only views of Arrow memory
        where the column has no nulls (and is not bool)."""
        if len(array) == 0:
            return []
        if not self.variable:
            filled = array if array.null_count == 0 else array.fill_null(self._zeros())
            rows = list(_numpy(filled.flatten()).reshape((len(array),) + self.shape))
            return _restore_nulls(rows, array)
        values = array.flatten()
        if len(self.shape) > 1:
            values = values.flatten()
        flat = _numpy(values).reshape((-1,) + self.shape[1:])
        return _restore_nulls(np.split(flat, np.cumsum(_lengths(array))[:-1]), array)

    def _describe(self, value: np.ndarray, limit: int) -> str:
        text = np.array2string(np.asarray(value), threshold=8, edgeitems=3, precision=4, separator=", ")
        return f"{value.dtype}{list(value.shape)} {' '.join(text.split())}"

    def _zeros(self) -> pa.Scalar:
        return pa.scalar(np.zeros(self.shape, dtype=self.dtype).reshape(-1), type=self.arrow_type())


def _numpy(values: pa.Array) -> np.ndarray:
    return values.to_numpy(zero_copy_only=values.null_count == 0 and values.type != pa.bool_())
