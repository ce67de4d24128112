"""`Features`: the schema of a cache, its JSON form and fingerprint, and example encoding.

A `Features` object maps column names to feature kinds. It maps to an Arrow schema,
round-trips through JSON (so a reader needs no user code) and has a fingerprint
computed from that JSON, identical across processes, machines and Python versions.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import json
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from beam_shards.display import clip, few, short_repr
from beam_shards.errors import CorruptCacheError, EncodeError, FeatureError
from beam_shards.features.base import Feature, Invalid, check_named
from beam_shards.features.kinds import feature_from_dict
from beam_shards.features.json_value import holds_json

SCHEMA_METADATA_KEY = b"beam_shards.features"
# Where Hugging Face datasets keeps its features in an Arrow schema's metadata, as JSON
# {"info": {"features": <their dict form>}}; its arrow loader reads them from there.
HF_METADATA_KEY = b"huggingface"
# Columns a writer adds for itself (a deterministic write's keys) begin with this; errors do not list them.
RESERVED_PREFIX = "__beam_shards_"
# How shards store columns: "large" (formats 1 to 3: 64-bit offsets, fields non-null where
# their feature is) or "hf" (format 4 on: the types Hugging Face datasets stores the equal
# features in, `Feature.hf_type`, so HF's arrow loader, Polars and DuckDB read the
# features' own types). The features check and build columns in `arrow_schema()`;
# a writer casts each batch to `storage_schema(column_types)`.
COLUMN_TYPES = ("large", "hf")


class Features(Mapping[str, Feature]):
    """The named features of a cache, in column order.

    Example:
        >>> f = Features({"label": ClassLabel(num_classes=10), "text": Value("string")})
        >>> Features.from_dict(f.to_dict()) == f
        True

    Args:
      features: a mapping of column name to feature.

    Raises:
      FeatureError: no feature at all, a name that is not a non-empty string or holds a
        control character (NUL, a line break, an escape...), or a value that is not a feature.
    """

    def __init__(self, features: Mapping[str, Feature]):
        if not features:
            # An Arrow batch without columns has no rows: every example would be lost.
            raise FeatureError("Features needs at least one feature; a cache without columns cannot hold rows")
        check_named(features, "column")
        self._features = dict(features)
        self._items = tuple(self._features.items())
        self._encoders = tuple((name, feature.encode_or_null) for name, feature in self._items)
        self._plain_types = tuple(feature.plain_type for feature in self._features.values())
        # The example's values in column order, as a tuple (itemgetter of one name gives the value alone).
        self._values_of = (operator.itemgetter(*self._features) if len(self._features) > 1
                           else functools.partial(_one_value, next(iter(self._features))))
        self._plain_arrays = tuple(i for i, kind in enumerate(self._plain_types) if kind is np.ndarray)
        self._names = frozenset(self._features)
        # The columns whose stored text a read parses (and so may find corrupt), which readers name.
        self._parsed = frozenset(name for name, feature in self._items if holds_json(feature))
        self._width = len(self._features)
        self._schema: pa.Schema | None = None
        self._stored: dict[str, pa.Schema] = {}
        self._json: str | None = None  # an open reads it twice: the fingerprint and the schema's metadata

    def __reduce__(self) -> tuple[type, tuple[dict[str, Feature]]]:
        # Pickled as the features alone, without the encoders and schemas derived from them:
        # Beam pickles the features into each step of a pipeline, and unpickles them for each bundle.
        return Features, (self._features,)

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

    def row_reader(self, name: str, array: pa.Array, image_mode: str = "pil") -> Callable[[int], Any]:
        """Column `name`'s `Feature.row_reader` for `array`; a CorruptCacheError it raises names the column."""
        read = self._features[name].row_reader(array, image_mode)
        if name not in self._parsed:
            return read

        def read_named(k: int) -> Any:
            try:
                return read(k)
            except CorruptCacheError as error:
                raise CorruptCacheError(f"column {name!r}: {error}") from None
        return read_named

    def decode_column(self, name: str, array: pa.Array, image_mode: str = "pil") -> list[Any]:
        """Column `name`'s `Feature.decode` of `array`; a CorruptCacheError it raises names the column."""
        try:
            return self._features[name].decode(array, image_mode)
        except CorruptCacheError as error:
            raise CorruptCacheError(f"column {name!r}: {error}") from None

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return {name: feature.to_dict() for name, feature in self._features.items()}

    @classmethod
    def from_dict(cls, spec: Mapping[str, Mapping[str, Any]]) -> Features:
        if not isinstance(spec, Mapping):
            raise FeatureError(f"features must be a JSON object of name -> feature; got {spec!r}")
        return cls({name: feature_from_dict(feature) for name, feature in spec.items()})

    def to_json(self) -> str:
        if self._json is None:
            self._json = json.dumps(self.to_dict(), separators=(",", ":"), ensure_ascii=True)
        return self._json

    @classmethod
    def from_json(cls, text: str) -> Features:
        """Features from their JSON text (a `--features` file, a manifest's features).

        Raises:
          FeatureError: the text is not JSON, nests too deeply for Python's parser, or is
            not a mapping of name -> feature.
        """
        try:
            spec = json.loads(text)
        except RecursionError:
            raise FeatureError("features JSON nests too deeply to read (a feature nests at most 64 levels)") from None
        except ValueError as error:
            raise FeatureError(f"features are not valid JSON: {error}") from None
        return cls.from_dict(spec)

    def fingerprint(self) -> str:
        """A sha256 hex digest of the canonical JSON: stable across processes and versions."""
        return hashlib.sha256(self.to_json().encode("ascii")).hexdigest()

    def to_hf_dict(self) -> dict[str, Any]:
        """The equal Hugging Face features in their dict form (`datasets.Features.from_dict` takes
        it), each kind giving its own (`Feature.to_hf_form`).

        Raises:
          FeatureError: a feature with no equal in Hugging Face datasets, naming its column.
        """
        return {name: feature.to_hf_form(name) for name, feature in self._items}

    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema; its metadata holds this JSON, so each shard describes itself, and
        the equal Hugging Face features (when every feature has one), which HF's own arrow
        loader takes for every column stored as HF stores it."""
        if self._schema is None:
            fields = [pa.field(name, f.arrow_type(), nullable=f.nullable) for name, f in self._features.items()]
            metadata = {SCHEMA_METADATA_KEY: self.to_json().encode("ascii")}
            try:
                hf = {"info": {"features": self.to_hf_dict()}}
                metadata[HF_METADATA_KEY] = json.dumps(hf, separators=(",", ":")).encode("utf-8")
            except FeatureError:
                pass
            self._schema = pa.schema(fields, metadata=metadata)
        return self._schema

    def storage_schema(self, column_types: str) -> pa.Schema:
        """The schema of shards that store their columns in `column_types` (`COLUMN_TYPES`),
        with `arrow_schema()`'s metadata: "large" is `arrow_schema()` itself; in "hf" every
        field is nullable (nulls are checked against the features when written) and of its
        feature's `hf_type()`.

        Raises:
          ValueError: `column_types` is not one of `COLUMN_TYPES`.
        """
        if column_types not in COLUMN_TYPES:
            raise ValueError(f"column_types must be one of {COLUMN_TYPES}; got {column_types!r}")
        if column_types not in self._stored:
            schema = self.arrow_schema()
            if column_types == "hf":
                schema = pa.schema([pa.field(name, f.hf_type()) for name, f in self._items], metadata=schema.metadata)
            self._stored[column_types] = schema
        return self._stored[column_types]

    def encode_example(self, example: Any, key: Any = None) -> dict[str, Any]:
        """See `encode_example`."""
        return dict(zip(self._features, self.encode_values(example, key)))

    def _declared(self) -> list[str]:
        """The feature names an error lists: a writer's own columns (`RESERVED_PREFIX`) left out."""
        return [name for name in self._features if not name.startswith(RESERVED_PREFIX)]

    def encode_values(self, example: Any, key: Any = None) -> tuple[Any, ...]:
        """The values `encode_example` returns, in column order, without their names (the
        writers keep rows this way and build columns with `build_columns`).

        Raises:
          EncodeError: as `encode_example`.
        """
        if type(example) is not dict and not isinstance(example, Mapping):
            raise EncodeError("an example must be a dict of field -> value", example=key, got=short_repr(example))
        if example.keys() != self._names:
            missing = [name for name in self._features if name not in example]
            extra = [str(name) for name in example if name not in self._names]
            if missing:
                raise EncodeError(f"missing field (the features declare {few(self._declared())})",
                                  example=key, field=missing[0], feature=_shown(self._features[missing[0]]))
            raise EncodeError(f"unknown field{'s' if len(extra) > 1 else ''} {few(extra)} (the features declare "
                              f"{few(self._declared())})", example=key, field=clip(extra[0]))
        try:
            return tuple([encode(example[name], name) for name, encode in self._encoders])
        except Invalid as invalid:
            raise EncodeError(invalid.reason, example=key, field=invalid.field,
                              feature=_shown(invalid.feature), got=short_repr(invalid.value)) from None

    def plain_values(self, example: Any) -> tuple[Any, ...] | None:
        """The values of `example` in column order when each is of its feature's
        `plain_type` (bytes for an Image, an int for an int Value, an array for an Array of
        fixed shape, ...), and so may already be in its encoded form; None for any other
        example, which `encode_values` takes. Plain rows are checked together, column by
        column, when their batch is built (`build_plain`, `check_plain`).
        """
        if type(example) is not dict or len(example) != self._width:
            return None
        try:  # a dict of as many keys holding every name holds no other
            values = self._values_of(example)
        except KeyError:
            return None
        if tuple(map(type, values)) != self._plain_types:
            return None
        if not self._plain_arrays:
            return values
        # Copied, as encode_values copies them: a caller may refill its arrays (an array
        # over the memory of a bytes object cannot change, and is kept as it is). Rows stay
        # tuples, which the garbage collector stops tracking; buffered lists would survive
        # into its oldest generation and bring on full collections.
        copied = list(values)
        for i in self._plain_arrays:
            if copied[i].flags.writeable or type(copied[i].base) is not bytes:
                copied[i] = copied[i].copy()
        return tuple(copied)

    @property
    def plain_types(self) -> tuple[type | None, ...]:
        """Each feature's `plain_type`, in column order: the types of what `plain_values` returns."""
        return self._plain_types

    def build_plain(self, columns: list[Sequence[Any]]) -> pa.RecordBatch | None:
        """`build_columns` for columns that hold plain values (`plain_values`), checked by the
        rules `encode_values` applies to each that the building does not leave to
        `check_plain` (`plain_column_fits`; building refuses ints out of range and strings
        that are not UTF-8). None when a value does not fit: `encode_values` on each row
        then names it."""
        if not all(feature.plain_column_fits(values) for (_, feature), values in zip(self._items, columns)):
            return None
        try:
            return self.build_columns(columns)
        except (pa.ArrowException, ValueError, TypeError, OverflowError):
            return None

    def check_plain(self, batch: pa.RecordBatch) -> bool:
        """Whether the values of a batch `build_plain` built pass the checks its Arrow types
        do not make (class ids in range, complete images): `_check_values` of each feature.
        Arrow and numpy work, most of it without the GIL: a writer runs it on a thread."""
        try:
            for (name, feature), column in zip(self._items, batch.columns):
                feature._check_values(column, name)
        except (Invalid, pa.ArrowException, ValueError, TypeError, OverflowError):
            return False
        return True

    def encode_batch_or_rows(self, batch: pa.RecordBatch | pa.Table, key: Any,
                             rows: Callable[[], Iterable[tuple[Any, Any]]] | None,
                             ) -> tuple[pa.Table | None, Iterable[tuple[Any, Any]]]:
        """`(table, ())` for a batch whose rows all fit (as `encode_batch` checks them);
        `(None, rows())` when one does not, so the caller encodes its `(key, row)` pairs
        one at a time and names, or skips, the bad row alone.

        Raises:
          EncodeError: a row does not fit and `rows` is None.
        """
        try:
            return self.encode_batch(batch, key), ()
        except EncodeError:
            if rows is None:
                raise
            return None, rows()

    def encode_batch(self, batch: pa.RecordBatch | pa.Table, key: Any = None) -> pa.Table:
        """Checks rows already in Arrow form and returns them in this schema.

        Columns are validated (offsets, lengths, UTF-8), then cast and checked by the
        rules `encode_example` applies to one value: no value changes (no overflow, no
        float that becomes inf, no int that a float cannot hold exactly), class ids in
        range, complete images, nulls only where allowed, arrays of the declared shape.

        Raises:
          EncodeError: a missing or extra column, or a value that does not fit; names
            the batch (`key`), the row, the field and the feature.
        """
        if not isinstance(batch, (pa.RecordBatch, pa.Table)):
            raise EncodeError("expected a pyarrow RecordBatch or Table", example=key, got=short_repr(batch))
        names = batch.schema.names
        if set(names) != self._names or len(names) != len(self._names):
            counts = collections.Counter(names)
            missing = [name for name in self._features if name not in counts]
            extra = [name for name in names if name not in self._names or counts[name] > 1]
            problem = f"missing column {missing[0]!r}" if missing else f"unexpected column {clip(repr(extra[0]))}"
            raise EncodeError(f"{problem} (the features declare {few(self._declared())})",
                              example=key, field=missing[0] if missing else clip(extra[0]))
        columns = []
        for name, feature in self._features.items():
            column = batch.column(name)
            try:
                # pyarrow trusts offsets and lengths: an invalid array must not reach its kernels.
                column.validate(full=True)
            except pa.ArrowInvalid as error:
                raise EncodeError(f"not a valid Arrow array: {error}", example=key, field=name,
                                  feature=_shown(feature)) from None
            try:
                columns.append(feature.check_array(column, name))
            except Invalid as invalid:
                raise EncodeError(invalid.reason, example=key, field=invalid.field, feature=_shown(invalid.feature),
                                  got=None if invalid.value is None else short_repr(invalid.value),
                                  row=invalid.row) from None
        return pa.Table.from_arrays(columns, schema=self.arrow_schema())

    def build_batch(self, rows: list[dict[str, Any]]) -> pa.RecordBatch:
        """Builds a record batch of this schema from rows returned by `encode_example`."""
        return self.build_columns([[row[name] for row in rows] for name in self._features])

    def build_columns(self, columns: list[Sequence[Any]]) -> pa.RecordBatch:
        """Builds a record batch of this schema from its columns of encoded values, in column order."""
        arrays = [feature.build_array(list(values)) for (_, feature), values in zip(self._items, columns)]
        return pa.RecordBatch.from_arrays(arrays, schema=self.arrow_schema())


def _shown(feature: Feature) -> str:
    """A feature as an error names it: its repr, cut short (a Struct may have 100,000 fields)."""
    return clip(repr(feature), 200)


def _one_value(name: str, example: Mapping[str, Any]) -> tuple[Any]:
    return (example[name],)


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
