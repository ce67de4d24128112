"""Scalar kinds: `Value` (bool, ints, floats, string, binary) and `ClassLabel` (a class id)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from beam_shards.display import clip, short_repr
from beam_shards.errors import FeatureError
from beam_shards.features.base import (FLOAT_DTYPES, INT_DTYPES, NUMERIC_DTYPES, VALUE_DTYPES, Feature, Invalid,
                                       arrow_family, check_nullable, kind)
from beam_shards.features.casting import CastError, cast_numbers, cast_safely

_INT_RANGES = {name: (int(np.iinfo(name).min), int(np.iinfo(name).max)) for name in INT_DTYPES}
# `Feature.plain_type` per dtype: ints out of range fail to build (numpy refuses them),
# strings that are not UTF-8 too. float16 and float32 have none: a float is rounded to
# them only after `cast_safely` checks it.
_PLAIN_TYPES = {**dict.fromkeys(INT_DTYPES, int), "float64": float, "bool": bool, "string": str, "binary": bytes}
_LARGE = {"large_string": "string", "large_binary": "binary"}
_UNIT = re.compile(r"^(time32|time64|duration)\[(s|ms|us|ns)\]$")
_TIMESTAMP = re.compile(r"^timestamp\[(s|ms|us|ns)(?:, tz=([^\]]+))?\]$")
_DECIMAL = re.compile(r"^(decimal128|decimal256)\((\d+), ?(-?\d+)\)$")
# Said of -1 in a ClassLabel that is not nullable.
_NO_LABEL = " (-1, Hugging Face's \"no label\", is null in a nullable ClassLabel)"
# ClassLabel(num_classes=n) goes to Hugging Face as n names "0".."n-1": past this, too many to list.
_MAX_HF_CLASSES = 1_000_000


def temporal_type(dtype: str) -> pa.DataType | None:
    """The Arrow type of a date, time, timestamp, duration or decimal dtype, spelled as Hugging
    Face datasets spells them (`date32`, `time64[us]`, `timestamp[ns, tz=UTC]`,
    `duration[ms]`, `decimal128(10, 2)`); None for any other."""
    if not isinstance(dtype, str):
        return None
    if dtype in ("date32", "date64"):
        return pa.date32() if dtype == "date32" else pa.date64()
    try:
        if match := _UNIT.match(dtype):
            return {"time32": pa.time32, "time64": pa.time64, "duration": pa.duration}[match[1]](match[2])
        if match := _TIMESTAMP.match(dtype):
            stamp = pa.timestamp(match[1], tz=match[2])
            pa.scalar(0, type=stamp).as_py()  # an unknown time zone fails here, not when a row is read
            return stamp
        if match := _DECIMAL.match(dtype):
            return (pa.decimal128 if match[1] == "decimal128" else pa.decimal256)(int(match[2]), int(match[3]))
    except (ValueError, KeyError, pa.ArrowException):  # time32[us], decimal128(99, 0), an unknown time zone...
        return None
    return None


@kind
class Value(Feature):
    """A scalar: bool, int8..int64, uint8..uint64, float16/32/64, string or binary (and
    large_string, large_binary, stored alike), or a date, time, timestamp, duration or
    decimal as Hugging Face datasets names them (`temporal_type`).

    Ints must fit the dtype (no wrap-around), and neither bools nor floats are taken
    as ints. Strings are stored as UTF-8 (`bytes` that are valid UTF-8 are accepted).
    Dates, times and the rest take Python's own types (`datetime`, `date`, `time`,
    `timedelta`, `Decimal`) or numpy datetimes, never numbers or strings (their unit
    or format would be a guess), and come back as Python's.

    Args:
      dtype: one of `VALUE_DTYPES`, large_string, large_binary, or a `temporal_type`.
      nullable: whether None is a valid value.
    """

    def __init__(self, dtype: str, *, nullable: bool = False):
        if not isinstance(dtype, str) or (dtype not in VALUE_DTYPES and dtype not in _LARGE
                                          and temporal_type(dtype) is None):
            raise FeatureError(f"Value dtype must be one of {', '.join(VALUE_DTYPES)}, large_string, large_binary, "
                               f"date32, date64, time32[s|ms], time64[us|ns], timestamp[UNIT] or "
                               f"timestamp[UNIT, tz=ZONE], duration[UNIT] or decimal128(P, S); got {dtype!r}")
        self.dtype = dtype
        self.nullable = check_nullable(nullable)
        self._stored = _LARGE.get(dtype, dtype)  # large_string is encoded and stored as string is
        self._temporal = temporal_type(dtype)
        self.plain_type = _PLAIN_TYPES.get(self._stored)

    def arrow_type(self) -> pa.DataType:
        if self._stored == "string":
            return pa.large_string()
        if self._stored == "binary":
            return pa.large_binary()
        if self._temporal is not None:
            return self._temporal
        return pa.from_numpy_dtype(np.dtype(self.dtype))

    def hf_type(self) -> pa.DataType:
        # Binary values keep 64-bit offsets, as file columns do: one value may pass 2 GiB.
        return pa.string() if self.dtype == "string" else self.arrow_type()

    hf_keys = {"Value": frozenset({"dtype"})}

    def to_hf_form(self, where: str) -> dict[str, Any]:
        return {"dtype": self.dtype, "_type": "Value"}

    @classmethod
    def from_hf_form(cls, spec: Mapping[str, Any], item: Feature | None) -> Value:
        try:
            return cls(spec["dtype"], nullable=True)
        except FeatureError:
            raise FeatureError(f"Hugging Face Value({clip(repr(spec['dtype']))}) has no equal here") from None

    def to_dict(self) -> dict[str, Any]:
        return {"_type": "Value", "dtype": self.dtype, "nullable": self.nullable}

    @classmethod
    def _from_args(cls, args: dict[str, Any]) -> Value:
        return cls(args.pop("dtype"), **args)

    def __repr__(self) -> str:
        return f"Value({self.dtype!r}{self._nullable_repr()})"

    def encode(self, value: Any, field: str) -> Any:
        dtype = self._stored
        if self._temporal is not None:
            if isinstance(value, (bool, int, float, str, np.bool_, np.integer, np.floating)):
                # A number's unit, or a string's format, would be a guess (an Arrow column of them is refused too).
                raise self._fail(f"expected a date, time, datetime, timedelta or Decimal for {dtype}", field, value)
            try:
                pa.scalar(value, type=self._temporal)
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as error:
                raise self._fail(f"cannot be stored as {dtype}: {error}", field, value) from None
            return value
        if dtype in _INT_RANGES:
            if type(value) is not int:
                value = self._as_int(value, field)
            low, high = _INT_RANGES[dtype]
            if not low <= value <= high:
                raise self._fail(f"{value} does not fit {dtype} (range {low}..{high})", field, value)
            return value
        if dtype in FLOAT_DTYPES:
            if type(value) is float and dtype == "float64":
                return value
            if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_)):
                try:
                    return float(cast_safely(np.asarray(value), dtype))
                except ValueError as error:
                    raise self._fail(str(error), field, value) from None
            raise self._fail(f"expected a number for {dtype}", field, value)
        if dtype == "bool":
            if isinstance(value, (bool, np.bool_)):
                return bool(value)
            raise self._fail("expected a bool", field, value)
        if dtype == "string":
            return _as_text(self, value, field)
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)
        raise self._fail("expected bytes", field, value)

    def _batch_sources(self) -> tuple[str, ...]:
        return {"float16": ("int", "float"), "float32": ("int", "float"), "float64": ("int", "float"),
                "string": ("string", "binary")}.get(self._stored, (arrow_family(self.arrow_type()),))

    def _cast_array(self, array: pa.Array, field: str) -> pa.Array:
        if self.dtype not in NUMERIC_DTYPES:
            return super()._cast_array(array, field)
        try:
            return cast_numbers(array, self.dtype)
        except CastError as error:
            raise Invalid(str(error), field, self, array[error.index].as_py(), error.index) from None

    def _as_int(self, value: Any, field: str) -> int:
        if isinstance(value, (bool, np.bool_)):
            raise self._fail(f"expected an int for {self.dtype}, not a bool", field, value)
        if isinstance(value, (int, np.integer)):
            return int(value)
        if isinstance(value, (float, np.floating)) and not math.isfinite(value):
            raise self._fail(f"{value} is not an int", field, value)
        raise self._fail(f"expected an int for {self.dtype}", field, value)

    def build_array(self, values: list[Any]) -> pa.Array:
        if self.dtype not in NUMERIC_DTYPES:
            return pa.array(values, type=self.arrow_type())
        if None not in values:
            return pa.array(np.array(values, dtype=self.dtype))
        mask = np.array([v is None for v in values])
        filled = np.array([0 if v is None else v for v in values], dtype=self.dtype)
        return pa.array(filled, mask=mask)


def _as_text(feature: Feature, value: Any, field: str) -> str:
    if isinstance(value, str):
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as error:
                raise feature._fail(f"string cannot be stored as UTF-8 ({error.reason} at {error.start})", field, value) from None
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError as error:
            raise feature._fail(f"bytes are not valid UTF-8 (at byte {error.start})", field, value) from None
    raise feature._fail("expected a str", field, value)


@kind
class ClassLabel(Feature):
    """An integer class id, given as an int or as a class name.

    -1, Hugging Face's "no label", is null in a nullable ClassLabel (as Hugging Face data
    marks an unlabelled row), and out of range in any other.

    Args:
      names: the class names; ids are their positions.
      num_classes: the number of classes, when they have no names.

    Raises:
      FeatureError: neither or both of `names` and `num_classes`, duplicate names, names
        that are not a list, or a `num_classes` that is not a positive int.
    """

    plain_type = int

    def __init__(self, *, names: list[str] | None = None, num_classes: int | None = None,
                 nullable: bool = False):
        if (names is None) == (num_classes is None):
            raise FeatureError("ClassLabel takes exactly one of names= or num_classes=")
        if names is not None:
            if isinstance(names, (str, bytes, Mapping)):
                raise FeatureError(f"ClassLabel names must be a list of class names; got {names!r}")
            names = [str(name) for name in names]
            if len(set(names)) != len(names):
                raise FeatureError(f"ClassLabel names must be unique; got {names}")
            num_classes = len(names)
        if isinstance(num_classes, (bool, np.bool_)) or not isinstance(num_classes, (int, np.integer)):
            raise FeatureError(f"ClassLabel num_classes must be an int; got {num_classes!r}")
        if num_classes < 1:
            raise FeatureError(f"ClassLabel needs at least one class; got {num_classes}")
        self.names = names
        self.num_classes = int(num_classes)
        self.nullable = check_nullable(nullable)
        self._ids = {name: i for i, name in enumerate(names or ())}

    def str2int(self, name: str) -> int:
        """The id of class `name`. Raises ValueError for an unknown name."""
        try:
            return self._ids[name]
        except KeyError:
            known = ", ".join(map(repr, (self.names or [])[:20]))
            raise ValueError(f"unknown class name {name!r}; known names: {known}") from None

    def int2str(self, index: int) -> str:
        """The name of class `index` (its decimal string when there are no names)."""
        if not 0 <= index < self.num_classes:
            raise ValueError(f"class id {index} out of range 0..{self.num_classes - 1}")
        return self.names[index] if self.names else str(index)

    def arrow_type(self) -> pa.DataType:
        return pa.int64()

    hf_keys = {"ClassLabel": frozenset({"names", "num_classes"})}

    def to_hf_form(self, where: str) -> dict[str, Any]:
        if self.names is None and self.num_classes > _MAX_HF_CLASSES:
            raise FeatureError(f"column {where!r}: Hugging Face's ClassLabel keeps a name per class; "
                               f"{self.num_classes:,} classes have no equal there")
        return {"names": list(self.names or map(str, range(self.num_classes))), "_type": "ClassLabel"}

    @classmethod
    def from_hf_form(cls, spec: Mapping[str, Any], item: Feature | None) -> ClassLabel:
        names, count = spec.get("names"), spec.get("num_classes")
        if names is None:
            if count is None:
                raise FeatureError("a Hugging Face ClassLabel with neither names nor num_classes")
            return cls(num_classes=count, nullable=True)
        if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
            raise FeatureError(f"Hugging Face ClassLabel names must be a list of strings; got {short_repr(names)}")
        return cls(names=names, nullable=True)

    def _describe(self, value: int, limit: int) -> str:
        return f"{value} ({self.int2str(value)})" if 0 <= value < self.num_classes else f"{value} (out of range)"

    def to_dict(self) -> dict[str, Any]:
        if self.names is not None:
            return {"_type": "ClassLabel", "names": list(self.names), "nullable": self.nullable}
        return {"_type": "ClassLabel", "num_classes": self.num_classes, "nullable": self.nullable}

    def __repr__(self) -> str:
        if self.names is not None:
            shown = self.names if len(self.names) <= 5 else self.names[:5] + ["..."]
            return f"ClassLabel(names={shown}{self._nullable_repr()})"
        return f"ClassLabel(num_classes={self.num_classes}{self._nullable_repr()})"

    def check_array(self, array: pa.Array | pa.ChunkedArray, field: str) -> pa.Array | pa.ChunkedArray:
        if arrow_family(array.type) == "string":
            if self.names is None:
                raise Invalid("class names are not declared, so a column of names cannot be read", field, self, None)
            ids = pc.index_in(array, value_set=pa.array(self.names))
            unknown = pc.and_(ids.is_null(), array.is_valid())
            if pc.any(unknown).as_py():
                row = pc.index(unknown, True).as_py()
                raise Invalid("unknown class name", field, self, array[row].as_py(), row)
            array = ids
        elif self.nullable and arrow_family(array.type) == "int" and pc.any(pc.equal(array, -1)).as_py():
            array = pc.if_else(pc.equal(array, -1), pa.scalar(None, array.type), array)
        return super().check_array(array, field)

    def _check_values(self, array: pa.Array, field: str) -> None:
        bad = pc.or_(pc.less(array, 0), pc.greater_equal(array, self.num_classes))
        if pc.any(bad).as_py():
            row = pc.index(bad, True).as_py()
            value = array[row].as_py()
            raise Invalid(f"class id out of range 0..{self.num_classes - 1}{_NO_LABEL if value == -1 else ''}",
                          field, self, value, row)

    def encode(self, value: Any, field: str) -> int:
        if isinstance(value, str):
            if value in self._ids:
                return self._ids[value]
            raise self._fail("unknown class name" if self.names else "class names are not declared", field, value)
        if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
            if 0 <= value < self.num_classes:
                return int(value)
            if value == -1 and self.nullable:
                return None
            raise self._fail(f"class id out of range 0..{self.num_classes - 1}{_NO_LABEL if value == -1 else ''}",
                             field, value)
        raise self._fail("expected a class id (int) or a class name (str)", field, value)
