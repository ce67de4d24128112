"""Numbers cast without changing a value: one example's numpy array (`cast_safely`) and a
whole Arrow column (`cast_numbers`) by the same rules, so a batch is refused exactly where a
dict of the same rows would be."""

from __future__ import annotations

import numpy as np
import pyarrow as pa


class CastError(ValueError):
    """A value `cast_safely` cannot cast unchanged; `index` is its position in the flattened array."""

    def __init__(self, message: str, index: int = 0):
        super().__init__(message)
        self.index = index


def cast_safely(array: np.ndarray, dtype: str) -> np.ndarray:
    """Casts `array` to `dtype` when no value changes (beyond rounding a float to a
    narrower float, never to inf). Raises CastError (a ValueError) naming the first
    value that would change, and its position."""
    target = np.dtype(dtype)
    source = array.dtype
    if source == target:
        return array
    if not array.size:  # such as [] (float64 to numpy): no value to change
        return array.astype(target)
    if target.kind == "b" and source.kind != "b":
        raise CastError(f"cannot cast {source} to bool")
    if target.kind in "iu":
        if source.kind in "iu":
            info = np.iinfo(target)
            outside = (array < info.min) | (array > info.max)
            if outside.any():
                raise CastError(f"values {array.min()}..{array.max()} do not fit {target} ({info.min}..{info.max})",
                                int(np.argmax(outside.reshape(-1))))
        elif source.kind != "b":
            raise CastError(f"cannot cast {source} to {target} without losing values")
    elif target.kind == "f":
        if source.kind not in "biuf":
            raise CastError(f"cannot cast {source} to {target}")
        with np.errstate(over="ignore", invalid="ignore"):
            result = array.astype(target)
            # Rounding a float to a narrower float is expected; overflowing to inf or
            # changing an int is not.
            if source.kind == "f":
                changed = np.isinf(result) & np.isfinite(array)
            else:
                changed = result.astype(source) != array
        if changed.any():
            index = int(np.argmax(changed.reshape(-1)))
            raise CastError(f"value {array.reshape(-1)[index]} cannot be stored as {target} without changing it", index)
        return result
    return array.astype(target)


def cast_numbers(values: pa.Array, dtype: str) -> pa.Array:
    """Arrow bools, ints or floats (nulls kept) cast to the numeric `dtype` by the rules of
    `cast_safely`, so that a column is cast exactly as the values of one example are.

    Raises:
      CastError: naming the first value that would change and its position.
    """
    target = pa.from_numpy_dtype(np.dtype(dtype))
    if values.type == target:
        return values
    mask = values.is_null().to_numpy(zero_copy_only=False) if values.null_count else None
    if mask is not None:
        values = values.fill_null(pa.scalar(0, values.type) if values.type != pa.bool_() else False)
    cast = cast_safely(values.to_numpy(zero_copy_only=False), dtype)
    return pa.array(cast, type=target, mask=mask)
