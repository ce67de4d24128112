"""`Array`: a numpy array of fixed shape and dtype (the first dimension may vary)."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from beam_shards.display import short_repr
from beam_shards.errors import FeatureError
from beam_shards.features.base import (NUMERIC_DTYPES, Feature, Invalid, arrow_family, check_nullable, kind,
                                       list_lengths, list_offsets, null_mask, restore_nulls, row_of)
from beam_shards.features.casting import CastError, cast_numbers, cast_safely
from beam_shards.features.columns import numpy_values, with_nulls

# Every int of at most this magnitude is exact as a float64.
_EXACT_INT_IN_FLOAT64 = 2**53
# An Arrow fixed-size list's length is an int32.
_MAX_ROW_VALUES = (1 << 31) - 1
# Hugging Face's ArrayND types go up to Array5D.
_MAX_HF_DIMENSIONS = 5
_SHAPE, _DTYPE = operator.attrgetter("shape"), operator.attrgetter("dtype")


@kind
class Array(Feature):
    """A numpy array of fixed shape and dtype; the first dimension may be None (variable).

    Stored as a fixed-size list of the flattened values (or a list of them when the
    first dimension varies), so a reader gets back an array of the declared shape
    without a copy. Values are cast only when no value changes: int64 values that
    do not fit int8 are an error, not a wrap, floats never become ints and ints
    become floats only when exact. Floats may round to a narrower float, never to inf.
    An Arrow column (`Features.encode_batch`) holds per row lists nested as deep as the
    shape, or the stored form (a fixed-size list of the flattened values); no None
    inside an array, whichever way it comes.

    Args:
      shape: a tuple of positive ints; the first may be None.
      dtype: a numeric numpy dtype name, such as "float32" or "uint8".
    """

    def __init__(self, shape: tuple[int | None, ...], dtype: str = "float32", *, nullable: bool = False):
        shape = tuple(shape)
        if not shape:
            raise FeatureError("Array needs at least one dimension; use Value for scalars")
        if any(d is None for d in shape[1:]) or any(
                d is not None and (not isinstance(d, int) or isinstance(d, bool) or d < 1) for d in shape):
            raise FeatureError(f"Array shape must be positive ints, the first may be None; got {shape}")
        values = math.prod(d for d in shape if d is not None)
        if values > _MAX_ROW_VALUES:
            raise FeatureError(f"Array shape {shape} holds {values:,} values a row, more than the {_MAX_ROW_VALUES:,} "
                               "an Arrow fixed-size list holds")
        if dtype not in NUMERIC_DTYPES:
            raise FeatureError(f"Array dtype must be one of {', '.join(NUMERIC_DTYPES)}; got {dtype!r}")
        self.shape = shape
        self.dtype = dtype
        self.nullable = check_nullable(nullable)
        self._row_size = math.prod(shape[1:])
        self._np_dtype = np.dtype(dtype)
        self.plain_type = None if self.variable else np.ndarray

    @property
    def variable(self) -> bool:
        return self.shape[0] is None

    def arrow_type(self) -> pa.DataType:
        item = self._item_type()
        if not self.variable:
            return pa.list_(item, math.prod(self.shape))
        inner = pa.list_(item, self._row_size) if len(self.shape) > 1 else item
        return pa.large_list(inner)

    def hf_type(self) -> pa.DataType:
        if len(self.shape) == 1:  # HF's List(Value(dtype)), of a fixed length unless it varies
            return pa.list_(self._item_type(), -1 if self.variable else self.shape[0])
        return self.arrow_type()

    # Hugging Face's ArrayND; a one-dimensional Array is its List of numbers (`Sequence` maps it back).
    hf_keys = {f"Array{n}D": frozenset({"shape", "dtype"}) for n in range(2, _MAX_HF_DIMENSIONS + 1)}

    def to_hf_form(self, where: str) -> dict[str, Any]:
        if len(self.shape) == 1:
            item = {"dtype": self.dtype, "_type": "Value"}
            return {"feature": item, "_type": "List", **({} if self.variable else {"length": self.shape[0]})}
        if len(self.shape) > _MAX_HF_DIMENSIONS:
            raise FeatureError(f"column {where!r}: {self!r} has no equal in Hugging Face datasets "
                               f"(Array{_MAX_HF_DIMENSIONS}D at most)")
        return {"shape": list(self.shape), "dtype": self.dtype, "_type": f"Array{len(self.shape)}D"}

    @classmethod
    def from_hf_form(cls, spec: Mapping[str, Any], item: Feature | None) -> Array:
        shape, dimensions = spec["shape"], int(spec["_type"][len("Array"):-len("D")])
        if not isinstance(shape, (list, tuple)) or len(shape) != dimensions:
            raise FeatureError(f"a Hugging Face {spec['_type']} needs a shape of {dimensions} dimensions; "
                               f"got {short_repr(shape)}")
        return cls(tuple(shape), spec["dtype"], nullable=True)

    def to_dict(self) -> dict[str, Any]:
        return {"_type": "Array", "shape": list(self.shape), "dtype": self.dtype, "nullable": self.nullable}

    @classmethod
    def _from_args(cls, args: dict[str, Any]) -> Array:
        return cls(tuple(args.pop("shape")), args.pop("dtype"), **args)

    def __repr__(self) -> str:
        return f"Array({self.shape}, {self.dtype!r}{self._nullable_repr()})"

    def plain_column_fits(self, values: list[Any]) -> bool:
        # Set by set rather than row by row: a batch's check of its arrays takes microseconds.
        # Their layout does not matter here: joined, any array of this shape stores its values.
        return (set(map(type, values)) <= {np.ndarray} and set(map(_SHAPE, values)) <= {self.shape}
                and all(dtype == self._np_dtype for dtype in set(map(_DTYPE, values))))

    def _stored_as_is(self, value: Any) -> bool:
        return (type(value) is np.ndarray and value.shape == self.shape and value.dtype == self._np_dtype
                and value.flags.c_contiguous)

    def encode(self, value: Any, field: str) -> np.ndarray:
        if self._stored_as_is(value):  # the common case: the exact array stored
            # A copy: writers keep rows until their batch is built, and a caller may refill its array.
            return value.copy()
        try:
            array = value if isinstance(value, np.ndarray) else np.asarray(value)
        except ValueError:
            raise self._fail("ragged nested lists are not an array", field, value) from None
        if array.dtype == object:
            raise self._fail("ragged or non-numeric values are not an array", field, value)
        if array.dtype.kind == "f" and not isinstance(value, np.ndarray):
            try:
                array = _with_exact_ints(value, array)
            except ValueError as error:
                raise self._fail(str(error), field, value) from None
        if array.shape == (0,) and self.variable and not isinstance(value, np.ndarray):
            array = array.reshape((0, *self.shape[1:]))  # [] is no rows, whatever the inner dimensions
        if array.ndim != len(self.shape) or any(d is not None and d != n for d, n in zip(self.shape, array.shape)):
            raise self._fail(f"wrong shape {array.shape}, expected {self.shape}", field, value)
        try:
            array = cast_safely(array, self.dtype)
        except ValueError as error:
            raise self._fail(str(error), field, value) from None
        array = np.ascontiguousarray(array)
        return array.copy() if isinstance(value, np.ndarray) and np.may_share_memory(array, value) else array

    def _batch_sources(self) -> tuple[str, ...]:
        return ("list",)

    def _cast_array(self, array: pa.Array, field: str) -> pa.Array:
        """Lists nested as deep as the shape (or in the stored flat form), each of its
        declared length, holding numbers only, cast as `encode` casts one array."""
        lengths: list[np.ndarray] = []
        values = array
        for size in self._levels(array.type, field):
            counts = list_lengths(values)
            if size is not None:
                wrong = np.flatnonzero((counts != size) & values.is_valid().to_numpy(zero_copy_only=False))
                if len(wrong):
                    raise self._invalid(f"wrong shape: a list of {counts[wrong[0]]} where {size} are declared, "
                                        f"expected {self.shape}", field, array, lengths, int(wrong[0]))
            lengths.append(counts)
            values = values.flatten()
            if values.null_count:
                raise self._invalid("None inside an array", field, array, lengths,
                                    pc.index(values.is_null(), True).as_py())
        if arrow_family(values.type) not in ("bool", "int", "float", "null"):
            raise Invalid(f"a {array.type} column holds {values.type} values, not numbers", field, self, None)
        try:
            flat = cast_numbers(values, self.dtype) if values.type != pa.null() else pa.array([], self._item_type())
        except CastError as error:
            raise self._invalid(str(error), field, array, lengths, error.index) from None
        return self._stored(flat, array)

    def _levels(self, arrow_type: pa.DataType, field: str) -> tuple[int | None, ...]:
        """The length of each level of lists in a column of `arrow_type` (None: any): the
        shape for nested lists, or the flat shape of the stored form."""
        depth, inner, sizes = 0, arrow_type, []
        while arrow_family(inner) == "list":
            sizes.append(inner.list_size if pa.types.is_fixed_size_list(inner) else None)
            depth, inner = depth + 1, inner.value_type
        if depth == len(self.shape):
            return self.shape
        if inner == pa.null() and depth < len(self.shape):  # lists with no numbers, such as [[]]
            return self.shape[:depth]
        stored = (None, self._row_size) if self.variable else (math.prod(self.shape),)
        if depth == len(stored) and all(s is None or s == n for s, n in zip(stored, sizes)):
            return stored
        raise Invalid(f"wrong shape: a {arrow_type} column nests {depth} level(s) of lists, expected "
                       f"{len(self.shape)} (shape {self.shape}) or the stored form {self.arrow_type()}",
                       field, self, None)

    def _invalid(self, reason: str, field: str, array: pa.Array, lengths: list[np.ndarray], position: int) -> Invalid:
        """An `Invalid` for item `position` of the level below `lengths`, naming its row of `array`."""
        for counts in reversed(lengths):
            position = row_of(position, counts)
        return Invalid(reason, field, self, array[position].as_py(), position)

    def _stored(self, flat: pa.Array, array: pa.Array) -> pa.Array:
        """The numbers `flat` of the rows of `array` (none for its null rows) in the stored form."""
        mask = array.is_null() if array.null_count else None
        if not self.variable:
            size = math.prod(self.shape)
            if mask is not None:  # a null row takes `size` slots too
                full = np.zeros((len(array), size), dtype=self.dtype)
                valid = array.is_valid().to_numpy(zero_copy_only=False)
                full[valid] = flat.to_numpy(zero_copy_only=False).reshape(-1, size)
                flat = pa.array(full.reshape(-1))
            return pa.FixedSizeListArray.from_arrays(flat, size, mask=mask)
        child = pa.FixedSizeListArray.from_arrays(flat, self._row_size) if len(self.shape) > 1 else flat
        return pa.LargeListArray.from_arrays(list_offsets(list_lengths(array)), child, mask=mask)

    def _item_type(self) -> pa.DataType:
        return pa.from_numpy_dtype(self._np_dtype)

    def build_array(self, values: list[Any]) -> pa.Array:
        mask = null_mask(values)
        if not self.variable:
            size = math.prod(self.shape)
            zeros = np.zeros(self.shape, dtype=self.dtype)
            rows = [zeros if v is None else v for v in values] or [zeros[:0] if self.shape else zeros.reshape(0)]
            # concatenate joins equal-shape rows 3x faster than stack (a 0-d row has no axis to join on).
            flat = (np.concatenate(rows) if self.shape else np.stack(rows)).reshape(-1)
            return pa.FixedSizeListArray.from_arrays(pa.array(flat), size, mask=mask)
        present = [v for v in values if v is not None]
        lengths = np.array([0 if v is None else len(v) for v in values], dtype=np.int64)
        flat = np.concatenate([v.reshape(-1) for v in present]) if present else np.zeros(0, dtype=self.dtype)
        child = pa.array(flat)
        if len(self.shape) > 1:
            child = pa.FixedSizeListArray.from_arrays(child, self._row_size)
        return pa.LargeListArray.from_arrays(list_offsets(lengths), child, mask=mask)

    def decode(self, array: pa.Array, image_mode: str = "pil") -> list[Any]:
        """One numpy array of the declared shape per row: read-only views of Arrow memory
        (copies for bool)."""
        if len(array) == 0:
            return []
        if not self.variable:
            return restore_nulls(list(self._fixed_rows(array)), array)
        values = array.flatten()
        if len(self.shape) > 1:
            values = values.flatten()
        flat = numpy_values(values).reshape((-1,) + self.shape[1:])
        return restore_nulls(np.split(flat, np.cumsum(list_lengths(array))[:-1]), array)

    def row_reader(self, array: pa.Array, image_mode: str = "pil") -> Callable[[int], Any]:
        if self.variable or len(array) == 0:
            return super().row_reader(array, image_mode)
        rows = self._fixed_rows(array)
        return rows.__getitem__ if array.null_count == 0 else with_nulls(rows.__getitem__, array)

    def _fixed_rows(self, array: pa.Array) -> np.ndarray:
        """The rows of a fixed-shape column as one numpy array of shape (rows, *shape), read
        from its child values in place; a null row holds whatever its slots hold (callers
        put None there)."""
        size = math.prod(self.shape)
        return numpy_values(array.values.slice(array.offset * size, len(array) * size)).reshape(
            (len(array),) + self.shape)

    def _describe(self, value: np.ndarray, limit: int) -> str:
        text = np.array2string(np.asarray(value), threshold=8, edgeitems=3, precision=4, separator=", ")
        return f"{value.dtype}{list(value.shape)} {' '.join(text.split())}"


def _with_exact_ints(value: Any, array: np.ndarray) -> np.ndarray:
    """`array`, which numpy made of the nested lists `value`, unless numpy rounded ints in it.

    numpy reads ints too large for int64 beside other ints or floats as float64, so
    they change. Ints alone are read again as uint64 or int64, whichever holds them
    all; ints beside floats must be exact as floats.

    Raises:
      ValueError: no integer type holds all the ints, or an int changes as a float.
    """
    if not (np.abs(array) > _EXACT_INT_IN_FLOAT64).any():
        return array
    items = np.asarray(value, dtype=object)
    ints = [x for x in items.flat if isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))]
    if len(ints) == items.size:
        try:
            return items.astype(np.int64 if min(ints) < 0 else np.uint64)
        except OverflowError:
            raise ValueError(f"values {min(ints)}..{max(ints)} do not fit one integer type") from None
    changed = next((x for x in ints if float(x) != x), None)
    if changed is not None:
        raise ValueError(f"value {changed} cannot be stored as float64 without changing it")
    return array
