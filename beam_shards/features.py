"""Features: what each column of a cache holds, its Arrow type, and how values are encoded.

A `Features` object is the schema of a cache. It maps to an Arrow schema, round-trips
through JSON (so a reader needs no user code) and has a fingerprint computed from that
JSON, identical across processes, machines and Python versions.

Example:
    >>> from beam_shards import Features, Value, Image, Array, ClassLabel, encode_example
    >>> features = Features({
    ...     "image": Image(),
    ...     "label": ClassLabel(names=["cat", "dog"]),
    ...     "embedding": Array((4,), "float32"),
    ...     "caption": Value("string"),
    ... })
    >>> row = encode_example(
    ...     {"image": None, "label": "dog", "embedding": [0, 1, 2, 3], "caption": "a dog"},
    ...     features)
    >>> row["label"], row["embedding"].dtype
    (1, dtype('float32'))
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from beam_shards import images
from beam_shards.errors import EncodeError, FeatureError, short_repr

_INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_FLOAT_DTYPES = ("float16", "float32", "float64")
_NUMERIC_DTYPES = ("bool",) + _INT_DTYPES + _FLOAT_DTYPES
VALUE_DTYPES = _NUMERIC_DTYPES + ("string", "binary")
_INT_RANGES = {name: (int(np.iinfo(name).min), int(np.iinfo(name).max)) for name in _INT_DTYPES}
SCHEMA_METADATA_KEY = b"beam_shards.features"


class _Invalid(Exception):
    """A value does not fit a feature; `encode_example` adds the example and field."""

    def __init__(self, reason: str, field: str, feature: Feature, value: Any, row: int | None = None):
        super().__init__(reason)
        self.reason, self.field, self.feature, self.value, self.row = reason, field, feature, value, row


class Feature:
    """Base class of the feature kinds. Subclasses are small immutable value objects."""

    _default_nullable: ClassVar[bool] = False
    nullable: bool

    def arrow_type(self) -> pa.DataType:
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def encode(self, value: Any, field: str) -> Any:
        """Returns `value` in the form `build_array` takes; raises `_Invalid`."""
        raise NotImplementedError

    def build_array(self, values: list[Any]) -> pa.Array:
        """Builds an Arrow array from encoded values (None for null)."""
        return pa.array(values, type=self.arrow_type())

    def _fail(self, reason: str, field: str, value: Any) -> _Invalid:
        return _Invalid(reason, field, self, value)

    def check_array(self, array: pa.Array | pa.ChunkedArray, field: str) -> pa.Array | pa.ChunkedArray:
        """`array` cast safely to this feature's Arrow type and checked; raises `_Invalid` with the row."""
        if _family(array.type) not in self._batch_sources() + ("null",):
            raise _Invalid(f"a {array.type} column cannot hold {self!r} values", field, self, None)
        errors = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)
        try:
            array = array.cast(self.arrow_type(), safe=True)
        except errors as error:
            row = next((i for i in range(len(array)) if not _casts(array.slice(i, 1), self.arrow_type())), None)
            raise _Invalid(f"cannot be stored as {self.arrow_type()}: {error}", field, self,
                           None if row is None else array[row].as_py(), row) from None
        if not self.nullable and array.null_count:
            row = pc.index(array.is_null(), True).as_py()
            raise _Invalid("None where a value is required (declare nullable=True to allow it)", field, self, None, row)
        self._check_values(array, field)
        return array

    def _check_values(self, array: pa.Array | pa.ChunkedArray, field: str) -> None:
        """Checks what the Arrow type does not (class ids in range, complete images)."""

    def _batch_sources(self) -> tuple[str, ...]:
        """The Arrow type families a batch column may have to be cast to this feature."""
        return (_family(self.arrow_type()),)

    def encode_or_null(self, value: Any, field: str) -> Any:
        if value is None:
            if self.nullable:
                return None
            raise self._fail("None where a value is required (declare nullable=True to allow it)", field, value)
        return self.encode(value, field)

    def _nullable_repr(self) -> str:
        return "" if self.nullable == self._default_nullable else f", nullable={self.nullable}"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.to_dict() == self.to_dict()

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_dict(), sort_keys=True))


class Value(Feature):
    """A scalar: bool, int8..int64, uint8..uint64, float16/32/64, string or binary.

    Ints must fit the dtype (no wrap-around), and neither bools nor floats are taken
    as ints. Strings are stored as UTF-8 (`bytes` that are valid UTF-8 are accepted).

    Args:
      dtype: one of `VALUE_DTYPES`.
      nullable: whether None is a valid value.
    """

    def __init__(self, dtype: str, *, nullable: bool = False):
        if dtype not in VALUE_DTYPES:
            raise FeatureError(f"Value dtype must be one of {', '.join(VALUE_DTYPES)}; got {dtype!r}")
        self.dtype = dtype
        self.nullable = nullable

    def arrow_type(self) -> pa.DataType:
        if self.dtype == "string":
            return pa.large_string()
        if self.dtype == "binary":
            return pa.large_binary()
        return pa.from_numpy_dtype(np.dtype(self.dtype))

    def to_dict(self) -> dict[str, Any]:
        return {"_type": "Value", "dtype": self.dtype, "nullable": self.nullable}

    def __repr__(self) -> str:
        return f"Value({self.dtype!r}{self._nullable_repr()})"

    def encode(self, value: Any, field: str) -> Any:
        dtype = self.dtype
        if dtype in _INT_RANGES:
            if type(value) is not int:
                value = self._as_int(value, field)
            low, high = _INT_RANGES[dtype]
            if not low <= value <= high:
                raise self._fail(f"{value} does not fit {dtype} (range {low}..{high})", field, value)
            return value
        if dtype in _FLOAT_DTYPES:
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
                "string": ("string", "binary")}.get(self.dtype, (_family(self.arrow_type()),))

    def _as_int(self, value: Any, field: str) -> int:
        if isinstance(value, (bool, np.bool_)):
            raise self._fail(f"expected an int for {self.dtype}, not a bool", field, value)
        if isinstance(value, (int, np.integer)):
            return int(value)
        if isinstance(value, (float, np.floating)) and not math.isfinite(value):
            raise self._fail(f"{value} is not an int", field, value)
        raise self._fail(f"expected an int for {self.dtype}", field, value)

    def build_array(self, values: list[Any]) -> pa.Array:
        if self.dtype not in _NUMERIC_DTYPES:
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


class ClassLabel(Feature):
    """An integer class id, given as an int or as a class name.

    Args:
      names: the class names; ids are their positions.
      num_classes: the number of classes, when they have no names.

    Raises:
      FeatureError: neither or both of `names` and `num_classes`, or duplicate names.
    """

    def __init__(self, *, names: list[str] | None = None, num_classes: int | None = None,
                 nullable: bool = False):
        if (names is None) == (num_classes is None):
            raise FeatureError("ClassLabel takes exactly one of names= or num_classes=")
        if names is not None:
            names = [str(name) for name in names]
            if len(set(names)) != len(names):
                raise FeatureError(f"ClassLabel names must be unique; got {names}")
            num_classes = len(names)
        if num_classes is None or num_classes < 1:
            raise FeatureError(f"ClassLabel needs at least one class; got {num_classes}")
        self.names = names
        self.num_classes = int(num_classes)
        self.nullable = nullable
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
        if _family(array.type) == "string":
            if self.names is None:
                raise _Invalid("class names are not declared, so a column of names cannot be read", field, self, None)
            ids = pc.index_in(array, value_set=pa.array(self.names))
            unknown = pc.and_(ids.is_null(), array.is_valid())
            if pc.any(unknown).as_py():
                row = pc.index(unknown, True).as_py()
                raise _Invalid("unknown class name", field, self, array[row].as_py(), row)
            array = ids
        return super().check_array(array, field)

    def _check_values(self, array: pa.Array | pa.ChunkedArray, field: str) -> None:
        bad = pc.or_(pc.less(array, 0), pc.greater_equal(array, self.num_classes))
        if pc.any(bad).as_py():
            row = pc.index(bad, True).as_py()
            raise _Invalid(f"class id out of range 0..{self.num_classes - 1}", field, self, array[row].as_py(), row)

    def encode(self, value: Any, field: str) -> int:
        if isinstance(value, str):
            if value in self._ids:
                return self._ids[value]
            raise self._fail("unknown class name" if self.names else "class names are not declared", field, value)
        if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
            if 0 <= value < self.num_classes:
                return int(value)
            raise self._fail(f"class id out of range 0..{self.num_classes - 1}", field, value)
        raise self._fail("expected a class id (int) or a class name (str)", field, value)


class _EncodedFile(Feature):
    """A file's bytes in a `large_binary` column (nullable by default)."""

    _default_nullable = True

    def __init__(self, *, nullable: bool = True):
        self.nullable = nullable

    def arrow_type(self) -> pa.DataType:
        return pa.large_binary()

    def to_dict(self) -> dict[str, Any]:
        return {"_type": type(self).__name__, "nullable": self.nullable}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._nullable_repr().lstrip(', ')})"


class Image(_EncodedFile):
    """An encoded image, stored as its file bytes (`large_binary`).

    Accepts raw bytes (kept unchanged), a path or URI (read as is, so JPEG stays JPEG),
    a PIL image (saved in its own format; PNG when it has none or an alpha/palette
    mode), a uint8 numpy array HxW, HxWx1, HxWx3 or HxWx4 (saved as PNG), a dict
    ``{"bytes": ..., "path": ...}`` as Hugging Face datasets store images, or None.
    Bytes are checked to be a complete image (signature and end marker) without
    decoding the pixels.
    """

    def encode(self, value: Any, field: str) -> bytes:
        try:
            data = self._to_bytes(value)
            images.sniff_format(data)
        except (ValueError, OSError) as error:
            raise self._fail(str(error), field, value) from None
        return data

    def _check_values(self, array: pa.Array | pa.ChunkedArray, field: str) -> None:
        for row, data in enumerate(array.to_pylist()):
            if data is not None:
                try:
                    images.sniff_format(data)
                except ValueError as error:
                    raise _Invalid(str(error), field, self, data, row) from None

    def _to_bytes(self, value: Any) -> bytes:
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)
        if isinstance(value, (str, os.PathLike)):
            return read_file(value)
        if isinstance(value, Mapping) and ("bytes" in value or "path" in value):
            if value.get("bytes") is not None:
                return bytes(value["bytes"])
            if value.get("path") is not None:
                return read_file(value["path"])
            raise ValueError("image dict has neither bytes nor path")
        if isinstance(value, np.ndarray):
            return images.encode_array(value)
        if type(value).__module__.startswith("PIL."):
            return images.encode_pil(value)
        raise ValueError("expected image bytes, a path, a PIL image or a uint8 numpy array")


class Video(_EncodedFile):
    """An encoded video, stored as its file bytes: give the bytes or a path/URI."""

    def encode(self, value: Any, field: str) -> bytes:
        if isinstance(value, (bytes, bytearray, memoryview)):
            data = bytes(value)
        elif isinstance(value, (str, os.PathLike)):
            try:
                data = read_file(value)
            except OSError as error:
                raise self._fail(str(error), field, value) from None
        else:
            raise self._fail("expected video bytes or a path", field, value)
        if not data:
            raise self._fail("empty video", field, value)
        return data


def read_file(path: str | os.PathLike) -> bytes:
    """Reads a whole local file, or a URI through Beam's FileSystems (gs://, s3://...)."""
    path = os.fspath(path)
    if "://" in path:
        from apache_beam.io.filesystems import FileSystems

        with FileSystems.open(path) as handle:
            return handle.read()
    with open(path, "rb") as handle:
        return handle.read()


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
        if dtype not in _NUMERIC_DTYPES:
            raise FeatureError(f"Array dtype must be one of {', '.join(_NUMERIC_DTYPES)}; got {dtype!r}")
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


def cast_safely(array: np.ndarray, dtype: str) -> np.ndarray:
    """Casts `array` to `dtype` when no value changes (beyond rounding a float to a
    narrower float). Raises ValueError otherwise."""
    target = np.dtype(dtype)
    source = array.dtype
    if source == target:
        return array
    if not array.size:  # such as [] (float64 to numpy): no value to change
        return array.astype(target)
    if target.kind == "b" and source.kind != "b":
        raise ValueError(f"cannot cast {source} to bool")
    if target.kind in "iu":
        if source.kind in "iu":
            info = np.iinfo(target)
            if array.size and (array.min() < info.min or array.max() > info.max):
                raise ValueError(f"values {array.min()}..{array.max()} do not fit {target} ({info.min}..{info.max})")
        elif source.kind != "b":
            raise ValueError(f"cannot cast {source} to {target} without losing values")
    elif target.kind == "f":
        if source.kind not in "biuf":
            raise ValueError(f"cannot cast {source} to {target}")
        with np.errstate(over="ignore", invalid="ignore"):
            result = array.astype(target)
            # Rounding a float to a narrower float is expected; overflowing to inf or
            # changing an int is not.
            if source.kind == "f":
                changed = np.isinf(result) & np.isfinite(array)
            else:
                changed = result.astype(source) != array
        if changed.any():
            raise ValueError(f"value {array[changed].flat[0]} cannot be stored as {target} without changing it")
        return result
    return array.astype(target)


class Sequence(Feature):
    """A variable-length list of another feature (images, arrays and sequences included)."""

    def __init__(self, feature: Feature, *, nullable: bool = False):
        if not isinstance(feature, Feature):
            raise FeatureError(f"Sequence takes a feature, like Sequence(Value('int64')); got {feature!r}")
        self.feature = feature
        self.nullable = nullable

    def arrow_type(self) -> pa.DataType:
        return pa.large_list(pa.field("item", self.feature.arrow_type(), nullable=self.feature.nullable))

    def to_dict(self) -> dict[str, Any]:
        return {"_type": "Sequence", "feature": self.feature.to_dict(), "nullable": self.nullable}

    def __repr__(self) -> str:
        return f"Sequence({self.feature!r}{self._nullable_repr()})"

    def encode(self, value: Any, field: str) -> list[Any]:
        if isinstance(value, (str, bytes, bytearray, Mapping)) or not isinstance(value, (list, tuple, np.ndarray)):
            raise self._fail("expected a list", field, value)
        child = self.feature
        return [child.encode_or_null(item, f"{field}[{i}]") for i, item in enumerate(value)]

    def _check_values(self, array: pa.Array | pa.ChunkedArray, field: str) -> None:
        for chunk_start, chunk in _chunks(array):
            try:
                self.feature.check_array(chunk.flatten(), f"{field}[]")
            except _Invalid as invalid:
                if invalid.row is not None:
                    offsets = chunk.offsets.to_numpy() - chunk.offsets[0].as_py()
                    invalid.row = chunk_start + int(np.searchsorted(offsets, invalid.row, side="right")) - 1
                raise

    def build_array(self, values: list[Any]) -> pa.Array:
        mask = _null_mask(values)
        lengths = np.array([0 if v is None else len(v) for v in values], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        flat = [item for v in values if v is not None for item in v]
        child = self.feature.build_array(flat)
        return pa.LargeListArray.from_arrays(pa.array(offsets), child, type=self.arrow_type(), mask=mask)


_FEATURE_KINDS: dict[str, type[Feature]] = {
    cls.__name__: cls for cls in (Value, ClassLabel, Image, Video, Array, Sequence)
}


def feature_from_dict(spec: Mapping[str, Any]) -> Feature:
    """Builds a feature from its `to_dict()` form. Raises FeatureError on a bad spec."""
    if not isinstance(spec, Mapping) or spec.get("_type") not in _FEATURE_KINDS:
        raise FeatureError(f"not a feature spec (needs _type in {sorted(_FEATURE_KINDS)}): {spec!r}")
    args = {k: v for k, v in spec.items() if k != "_type"}
    kind = spec["_type"]
    try:
        if kind == "Value":
            return Value(args.pop("dtype"), **args)
        if kind == "Array":
            return Array(tuple(args.pop("shape")), args.pop("dtype"), **args)
        if kind == "Sequence":
            return Sequence(feature_from_dict(args.pop("feature")), **args)
        return _FEATURE_KINDS[kind](**args)
    except (KeyError, TypeError) as error:
        raise FeatureError(f"bad {kind} spec {dict(spec)!r}: {error}") from None


class Features(Mapping[str, Feature]):
    """The named features of a cache, in column order.

    Example:
        >>> f = Features({"label": ClassLabel(num_classes=10), "text": Value("string")})
        >>> Features.from_dict(f.to_dict()) == f
        True

    Args:
      features: a mapping of column name to feature.

    Raises:
      FeatureError: no feature at all, a name that is not a non-empty string, or a value
        that is not a feature.
    """

    def __init__(self, features: Mapping[str, Feature]):
        if not features:
            # An Arrow batch without columns has no rows: every example would be lost.
            raise FeatureError("Features needs at least one feature; a cache without columns cannot hold rows")
        for name, feature in features.items():
            if not isinstance(name, str) or not name:
                raise FeatureError(f"feature names must be non-empty strings; got {name!r}")
            if not isinstance(feature, Feature):
                raise FeatureError(f"feature {name!r} must be a Feature such as Value('int64'); got {feature!r}")
        self._features = dict(features)
        self._names = frozenset(self._features)
        self._schema: pa.Schema | None = None

    def __getitem__(self, name: str) -> Feature:
        return self._features[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._features)

    def __len__(self) -> int:
        return len(self._features)

    def __eq__(self, other: object) -> bool:
        # Column order is part of the schema (and of the fingerprint `__hash__` uses).
        return isinstance(other, Features) and other.to_json() == self.to_json()

    def __hash__(self) -> int:
        return hash(self.fingerprint())

    def __repr__(self) -> str:
        inner = ", ".join(f"{name!r}: {feature!r}" for name, feature in self._features.items())
        return f"Features({{{inner}}})"

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return {name: feature.to_dict() for name, feature in self._features.items()}

    @classmethod
    def from_dict(cls, spec: Mapping[str, Mapping[str, Any]]) -> Features:
        if not isinstance(spec, Mapping):
            raise FeatureError(f"features must be a JSON object of name -> feature; got {spec!r}")
        return cls({name: feature_from_dict(feature) for name, feature in spec.items()})

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), ensure_ascii=True)

    @classmethod
    def from_json(cls, text: str) -> Features:
        return cls.from_dict(json.loads(text))

    def fingerprint(self) -> str:
        """A sha256 hex digest of the canonical JSON: stable across processes and versions."""
        return hashlib.sha256(self.to_json().encode("ascii")).hexdigest()

    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema; its metadata holds this JSON, so each shard describes itself."""
        if self._schema is None:
            fields = [pa.field(name, f.arrow_type(), nullable=f.nullable) for name, f in self._features.items()]
            self._schema = pa.schema(fields, metadata={SCHEMA_METADATA_KEY: self.to_json().encode("ascii")})
        return self._schema

    def encode_example(self, example: Any, key: Any = None) -> dict[str, Any]:
        """See `encode_example`."""
        if not isinstance(example, Mapping):
            raise EncodeError("an example must be a dict of field -> value", example=key, got=short_repr(example))
        if example.keys() != self._names:
            missing = [name for name in self._features if name not in example]
            extra = [str(name) for name in example if name not in self._names]
            if missing:
                raise EncodeError(
                    f"missing field (the features declare {', '.join(map(repr, self._features))})",
                    example=key, field=missing[0], feature=repr(self._features[missing[0]]))
            raise EncodeError(
                f"unknown field {'s' if len(extra) > 1 else ''}{', '.join(map(repr, extra))} "
                f"(the features declare {', '.join(map(repr, self._features))})", example=key, field=extra[0])
        row = {}
        try:
            for name, feature in self._features.items():
                row[name] = feature.encode_or_null(example[name], name)
        except _Invalid as invalid:
            raise EncodeError(invalid.reason, example=key, field=invalid.field,
                              feature=repr(invalid.feature), got=short_repr(invalid.value)) from None
        return row

    def encode_batch(self, batch: pa.RecordBatch | pa.Table, key: Any = None) -> pa.Table:
        """Checks rows already in Arrow form and returns them in this schema.

        Columns are cast safely to the features' Arrow types (no overflow, no
        truncation) and checked as `encode_example` checks values (class ids in range,
        complete images, nulls only where allowed).

        Raises:
          EncodeError: a missing or extra column, or a value that does not fit; names
            the batch (`key`), the row, the field and the feature.
        """
        if not isinstance(batch, (pa.RecordBatch, pa.Table)):
            raise EncodeError("expected a pyarrow RecordBatch or Table", example=key, got=short_repr(batch))
        names = batch.schema.names
        if set(names) != self._names or len(names) != len(self._names):
            missing = [name for name in self._features if name not in names]
            extra = [name for name in names if name not in self._names or names.count(name) > 1]
            problem = f"missing column {missing[0]!r}" if missing else f"unexpected column {extra[0]!r}"
            raise EncodeError(f"{problem} (the features declare {', '.join(map(repr, self._features))})",
                              example=key, field=(missing or extra)[0])
        columns = []
        for name, feature in self._features.items():
            try:
                columns.append(feature.check_array(batch.column(name), name))
            except _Invalid as invalid:
                raise EncodeError(invalid.reason, example=key, field=invalid.field, feature=repr(invalid.feature),
                                  got=None if invalid.value is None else short_repr(invalid.value),
                                  row=invalid.row) from None
        return pa.Table.from_arrays(columns, schema=self.arrow_schema())

    def build_batch(self, rows: list[dict[str, Any]]) -> pa.RecordBatch:
        """Builds a record batch of this schema from rows returned by `encode_example`."""
        columns = [feature.build_array([row[name] for row in rows]) for name, feature in self._features.items()]
        return pa.RecordBatch.from_arrays(columns, schema=self.arrow_schema())


def encode_example(example: Mapping[str, Any], features: Features, *, key: Any = None) -> dict[str, Any]:
    """Checks `example` against `features` and returns its encoded row.

    Args:
      example: a dict with exactly the declared fields.
      features: the schema.
      key: the example's key or position, named in errors.

    Raises:
      EncodeError: a missing or unknown field, a wrong type, shape or value; the error
        names the example, the field, the feature and what it got.
    """
    return features.encode_example(example, key)


def _family(arrow_type: pa.DataType) -> str:
    """Arrow types grouped by what a value means: casts stay inside a family (ints may become floats)."""
    for family, test in (("bool", pa.types.is_boolean), ("int", pa.types.is_integer),
                         ("float", pa.types.is_floating), ("string", pa.types.is_string),
                         ("string", pa.types.is_large_string), ("binary", pa.types.is_binary),
                         ("binary", pa.types.is_large_binary), ("binary", pa.types.is_fixed_size_binary),
                         ("list", pa.types.is_list), ("list", pa.types.is_large_list),
                         ("list", pa.types.is_fixed_size_list), ("null", pa.types.is_null)):
        if test(arrow_type):
            return family
    return str(arrow_type)


def _casts(array: pa.Array | pa.ChunkedArray, target: pa.DataType) -> bool:
    try:
        array.cast(target, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return False
    return True


def _chunks(array: pa.Array | pa.ChunkedArray) -> Iterator[tuple[int, pa.Array]]:
    """(first row, chunk) of an array or of each chunk of a chunked array."""
    start = 0
    for chunk in array.chunks if isinstance(array, pa.ChunkedArray) else [array]:
        yield start, chunk
        start += len(chunk)


def _null_mask(values: list[Any]) -> pa.Array | None:
    nulls = [v is None for v in values]
    return pa.array(nulls) if any(nulls) else None
