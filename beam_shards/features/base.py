"""What every feature kind shares: the `Feature` base class, dtype names, safe casts.

A kind (in its own module) says how a value is checked and encoded, which Arrow type
holds it, how its column decodes back (`decode`), how a value reads for people
(`describe`), which file paths a value names (`map_paths`), its JSON form, and its
Hugging Face form (`hf_type`, `to_hf_form`, `from_hf_form`, which `beam_shards.hf` maps). This
module holds what the kinds have in common: the registry `feature_from_dict` builds
kinds from (`@kind`), and the internal `Invalid` error that `Features` turns into an
`EncodeError`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from beam_shards.display import clip, printable
from beam_shards.errors import FeatureError
from beam_shards.features.columns import numpy_values, row_getter

INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
FLOAT_DTYPES = ("float16", "float32", "float64")
NUMERIC_DTYPES = ("bool",) + INT_DTYPES + FLOAT_DTYPES
VALUE_DTYPES = NUMERIC_DTYPES + ("string", "binary")
_NONE_REQUIRED = "None where a value is required (declare nullable=True to allow it)"
_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)
# Control characters (C0, DEL, C1): a name holding one is refused. A NUL in a column name is
# lost by the Arrow readers that Hugging Face's loaders use; the others break messages and CSV headers.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
# The feature kinds by the `_type` of their JSON form (filled by `kind`).
_KINDS: dict[str, type[Feature]] = {}


class Invalid(Exception):
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

    def hf_type(self) -> pa.DataType:
        """The type of this feature's column in shards stored in Hugging Face's column types
        (`Features.storage_schema("hf")`): the type HF datasets stores the equal feature in
        (32-bit offsets, every field nullable), so that HF's arrow loader takes the features
        a shard's schema names. Kinds HF keeps in structs or extension types of its own
        (images, audio, arrays of two dimensions or more) keep `arrow_type()`, and so do
        binary values, whose 64-bit offsets let one value pass 2 GiB."""
        return self.arrow_type()

    # The Hugging Face feature types this kind is the equal of (the `_type` of their dict form,
    # as `datasets.Features.to_dict()` gives it), each with the keys of that form it reads
    # besides `_type` and `id`; `beam_shards.hf` refuses a form with any other key set.
    hf_keys: ClassVar[Mapping[str, frozenset[str]]] = {}
    # The key of those forms that holds an inner feature, which `beam_shards.hf` maps first.
    hf_item: ClassVar[str | None] = None

    def to_hf_form(self, where: str) -> Any:
        """The equal Hugging Face feature in its dict form; `where` names this feature in errors.

        Raises:
          FeatureError: it has no equal in Hugging Face datasets.
        """
        raise NotImplementedError

    @classmethod
    def from_hf_form(cls, spec: Mapping[str, Any], item: Feature | None) -> Feature:
        """The feature equal to the Hugging Face feature `spec` (a dict form of a type `hf_keys`
        names, its keys checked), nullable as every Hugging Face column is; `item` is the inner
        feature `spec[hf_item]` maps to.

        Raises:
          FeatureError: it has no equal here. KeyError, TypeError, ValueError: `spec` is malformed
            (`beam_shards.hf` names its column).
        """
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def _from_args(cls, args: dict[str, Any]) -> Feature:
        """The feature whose `to_dict()` is `args` plus its `_type`; KeyError or TypeError when it is not one."""
        return cls(**args)

    def encode(self, value: Any, field: str) -> Any:
        """Returns `value` in the form `build_array` takes; raises `Invalid`."""
        raise NotImplementedError

    # The exact Python type of a value that may already be what `encode` returns, stored
    # by `build_array` unchanged: a column of such values needs only `plain_column_fits`
    # and `_check_values` (see `Features.plain_values`). None: every value is encoded.
    plain_type: type | None = None

    def plain_column_fits(self, values: list[Any]) -> bool:
        """Whether values of `plain_type` are each what `encode` returns for it, where the
        type alone does not say (an array's shape and dtype)."""
        return True

    def build_array(self, values: list[Any]) -> pa.Array:
        """Builds an Arrow array from encoded values (None for null)."""
        return pa.array(values, type=self.arrow_type())

    def decode(self, array: pa.Array, image_mode: str = "pil") -> list[Any]:
        """The values of `array` (of this feature's Arrow type) back as Python values.

        Nulls become None. Scalars and class ids become Python values, Arrays numpy
        arrays of the declared shape, Sequences lists, Images what `image_mode` says.

        Args:
          array: a column of this feature, as written.
          image_mode: how Images come back: "pil", "numpy" (see `image_codec.decode`) or
            "bytes" (as stored).
        """
        return array.to_pylist()

    def row_reader(self, array: pa.Array, image_mode: str = "pil") -> Callable[[int], Any]:
        """A function giving `self.decode(array, image_mode)[k]` for one position `k`, decoding only that row.

        Made once per record batch by readers that serve single rows; the position is
        not checked (the caller routes rows).
        """
        if type(self).decode is Feature.decode:
            return row_getter(array)

        def read(k: int) -> Any:
            return self.decode(array.slice(k, 1), image_mode)[0]
        return read

    def map_paths(self, value: Any, change: Callable[[str], str]) -> Any:
        """`value` (as given to `encode`) with each file path in it replaced by `change(path)`,
        such as to resolve paths relative to a manifest file. Kinds that read no files
        return `value` as it is."""
        return value

    def describe(self, value: Any, limit: int = 80) -> str:
        """A short readable form of one value as read back (images and videos as their
        bytes), for people: about `limit` characters at most."""
        return "None" if value is None else self._describe(value, limit)

    def _describe(self, value: Any, limit: int) -> str:
        if isinstance(value, bytes):
            return f"{len(value):,} bytes"
        return clip(repr(value), limit)

    def _fail(self, reason: str, field: str, value: Any) -> Invalid:
        return Invalid(reason, field, self, value)

    def check_array(self, array: pa.Array | pa.ChunkedArray, field: str) -> pa.Array | pa.ChunkedArray:
        """`array` cast to this feature's Arrow type and checked by the rules `encode` applies
        to one value; raises `Invalid` with the row."""
        if isinstance(array, pa.ChunkedArray):
            return _by_chunk(array, lambda chunk: self.check_array(chunk, field), self.arrow_type())
        family = arrow_family(array.type)
        if family not in self._batch_sources() + ("null",):
            raise Invalid(f"a {array.type} column cannot hold {self!r} values", field, self, None)
        if not self.nullable and array.null_count:
            raise Invalid(_NONE_REQUIRED, field, self, None, pc.index(array.is_null(), True).as_py())
        if family == "null":
            return array.cast(self.arrow_type())
        array = self._cast_array(array, field)
        self._check_values(array, field)
        return array

    def _cast_array(self, array: pa.Array, field: str) -> pa.Array:
        """`array` (of a family `_batch_sources` names) in this feature's Arrow type, no value
        changed; raises `Invalid` with the row. Kinds whose values hold numbers or items
        cast them by the rules of their `encode`."""
        try:
            return array.cast(self.arrow_type(), safe=True)
        except _ARROW_ERRORS as error:
            row = next((i for i in range(len(array)) if not casts(array.slice(i, 1), self.arrow_type())), None)
            raise Invalid(f"cannot be stored as {self.arrow_type()}: {error}", field, self,
                           None if row is None else array[row].as_py(), row) from None

    def _check_values(self, array: pa.Array, field: str) -> None:
        """Checks what the Arrow type does not (class ids in range, complete images)."""

    def _batch_sources(self) -> tuple[str, ...]:
        """The Arrow type families a batch column may have to be cast to this feature."""
        return (arrow_family(self.arrow_type()),)

    def encode_or_null(self, value: Any, field: str) -> Any:
        if value is None:
            if self.nullable:
                return None
            raise self._fail(_NONE_REQUIRED, field, value)
        return self.encode(value, field)

    def _nullable_repr(self) -> str:
        return "" if self.nullable == self._default_nullable else f", nullable={self.nullable}"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.to_dict() == self.to_dict()

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_dict(), sort_keys=True))


def check_nullable(nullable: Any) -> bool:
    """`nullable` as a bool; raises FeatureError for anything else (such as "no" in a JSON file)."""
    if not isinstance(nullable, (bool, np.bool_)):
        raise FeatureError(f"nullable must be True or False; got {nullable!r}")
    return bool(nullable)


def check_named(features: Mapping[Any, Any], what: str) -> None:
    """Raises FeatureError unless every name of `features` is a non-empty string without control
    characters and every value a feature."""
    for name, feature in features.items():
        if not isinstance(name, str) or not name:
            raise FeatureError(f"{what} names must be non-empty strings; got {name!r}")
        if _CONTROL.search(name):
            raise FeatureError(f"{what} name {clip(repr(name))} holds a control character; names must not hold "
                               "NUL, line breaks, escapes or other control characters")
        if not isinstance(feature, Feature):
            raise FeatureError(f"{what} {name!r} must be a Feature such as Value('int64'); got {feature!r}")


def kind(cls: type[Feature]) -> type[Feature]:
    """Class decorator: makes `cls` a feature kind that `feature_from_dict` builds from its JSON form."""
    _KINDS[cls.__name__] = cls
    return cls


def feature_kinds() -> tuple[type[Feature], ...]:
    """Every feature kind (`@kind`)."""
    return tuple(_KINDS.values())


def feature_from_dict(spec: Mapping[str, Any]) -> Feature:
    """Builds a feature from its `to_dict()` form. Raises FeatureError on a bad spec."""
    if not isinstance(spec, Mapping) or not isinstance(spec.get("_type"), str) or spec["_type"] not in _KINDS:
        raise FeatureError(f"not a feature spec (needs _type in {sorted(_KINDS)}): {spec!r}")
    args = {k: v for k, v in spec.items() if k != "_type"}
    try:
        return _KINDS[spec["_type"]]._from_args(args)
    except (KeyError, TypeError) as error:
        # Python's message may quote a key of the spec as it is, line breaks included.
        raise FeatureError(f"bad {spec['_type']} spec {dict(spec)!r}: {printable(str(error))}") from None


def _by_chunk(array: pa.ChunkedArray, check: Callable[[pa.Array], pa.Array], arrow_type: pa.DataType) -> pa.ChunkedArray:
    """`check` applied to each chunk of `array`; an `Invalid` it raises names the row in the whole array."""
    checked, start = [], 0
    for chunk in array.chunks:
        try:
            checked.append(check(chunk))
        except Invalid as invalid:
            if invalid.row is not None:
                invalid.row += start
            raise
        start += len(chunk)
    return pa.chunked_array(checked, type=arrow_type)


def row_of(position: int, lengths: np.ndarray) -> int:
    """The list holding item `position` of the flattened items of lists of `lengths`."""
    return int(np.searchsorted(np.cumsum(lengths), position, side="right"))


def arrow_family(arrow_type: pa.DataType) -> str:
    """Arrow types grouped by what a value means: casts stay inside a family (ints may become floats)."""
    for family, test in (("bool", pa.types.is_boolean), ("int", pa.types.is_integer),
                         ("float", pa.types.is_floating), ("string", pa.types.is_string),
                         ("string", pa.types.is_large_string), ("binary", pa.types.is_binary),
                         ("binary", pa.types.is_large_binary), ("binary", pa.types.is_fixed_size_binary),
                         ("list", pa.types.is_list), ("list", pa.types.is_large_list),
                         ("list", pa.types.is_fixed_size_list), ("struct", pa.types.is_struct),
                         ("date", pa.types.is_date), ("time", pa.types.is_time),
                         ("timestamp", pa.types.is_timestamp), ("duration", pa.types.is_duration),
                         ("decimal", pa.types.is_decimal),
                         ("null", pa.types.is_null)):
        if test(arrow_type):
            return family
    return str(arrow_type)


def casts(array: pa.Array, target: pa.DataType) -> bool:
    """Whether `array` casts to `target` safely (no value changed)."""
    try:
        array.cast(target, safe=True)
    except _ARROW_ERRORS:
        return False
    return True


def null_mask(values: list[Any]) -> pa.Array | None:
    nulls = [v is None for v in values]
    return pa.array(nulls) if any(nulls) else None


def list_lengths(array: pa.Array) -> np.ndarray:
    """The length of each list in a list array (0 for null, as `flatten` skips what a null holds).

    Read from the offsets: pyarrow's `fill_null` and `to_numpy` import pandas when it is
    installed, a third of a second in a fresh DataLoader worker.
    """
    if len(array) == 0:
        return np.zeros(0, dtype=np.int64)
    if pa.types.is_fixed_size_list(array.type):
        lengths = np.full(len(array), array.type.list_size, dtype=np.int64)
    else:
        offset_type = np.int64 if pa.types.is_large_list(array.type) else np.int32
        offsets = np.frombuffer(array.buffers()[1], dtype=offset_type)[array.offset:array.offset + len(array) + 1]
        lengths = np.diff(offsets).astype(np.int64)
    if array.null_count:
        lengths[numpy_values(array.is_null())] = 0
    return lengths


def list_offsets(lengths: np.ndarray) -> pa.Array:
    """The offsets of a list array whose lists have `lengths`."""
    return pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))


def restore_nulls(rows: list[Any], array: pa.Array) -> list[Any]:
    """`rows` decoded from `array`, with None where `array` is null."""
    if array.null_count == 0:
        return rows
    valid = array.is_valid().to_pylist()
    return [row if ok else None for row, ok in zip(rows, valid)]
