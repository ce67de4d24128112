"""Raw batches cast to the features: a table column by column, or the rows one by one where it must be.

`examples(batch, ...)` turns a raw batch into `(where, example)` pairs for the write: a
`Rows` of its table cast column by column (text to numbers, bools, dates and times, null
tokens to nulls; JSON numbers to text, strings to dates, missing keys and columns to
nulls), whose rows, read again by the Python reader, stand in when a value does not fit;
or, for a batch the Python reader read or with image paths to read, one example per row,
each conformed to the features the same way.
"""

from __future__ import annotations

import functools
import os
import posixpath
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from beam_shards import Audio, ClassLabel, Feature, Features, Image, Sequence as SequenceFeature, Struct, Value, Video
from beam_shards.features import Json, temporal_type
from beam_shards.inference import NullTokens
from beam_shards.storage import fs
from pipelines.bad_inputs import Malformed
from pipelines.raw_batches import RawBatch, ReadRows, rows_again
from pipelines.where import Where
from pipelines.rows import Rows

# A format's raw row and the features, null tokens to the example dict; raises ValueError naming the column.
ToExample = Callable[[Any, Features, NullTokens], dict[str, Any]]
_TRUE = ("true", "yes", "1")
_FALSE = ("false", "no", "0")


class NeedsRows(Exception):
    """A column that only a row-by-row read turns into its feature (JSON text cells, image paths)."""


def examples(batch: RawBatch, features: Features, read_rows: ReadRows, to_example: ToExample,
             null_tokens: NullTokens, text: bool) -> Iterator[tuple[Where, Any]]:
    """The `(where, example)` pairs of a raw batch, for the write (`text`: CSV's text columns)."""
    alone = RawBatch(batch.path, batch.first_line, batch.last_line, rows=batch.rows, chunk=batch.chunk,
                     header=batch.header)
    one_by_one = functools.partial(rows_of, alone, features, read_rows, to_example, null_tokens)
    if batch.table is None or any(name not in features for name in batch.table.column_names):
        yield from one_by_one()  # a column the features lack is named row by row
        return
    try:
        table = cast_table(batch.table, features, null_tokens, text)
    except (NeedsRows, pa.ArrowException, ValueError):
        yield from one_by_one()
        return
    name = f"{batch.path}, lines {batch.first_line} to {batch.last_line}"
    yield Where(batch.path, batch.first_line, name), Rows(table, one_by_one)


def rows_of(batch: RawBatch, features: Features, read_rows: ReadRows, to_example: ToExample,
            null_tokens: NullTokens) -> Iterator[tuple[Where, Any]]:
    """The batch's rows one by one as `(where, example or Malformed)` pairs, image paths
    resolved against the file's folder."""
    base = parent(batch.path)
    for line, raw in rows_again(batch, read_rows):
        where = Where.at(batch.path, line, "line")
        if isinstance(raw, Malformed):
            yield where, raw
            continue
        try:
            example = to_example(raw, features, null_tokens)
        except ValueError as error:
            yield where, Malformed(str(error))
            continue
        yield where, {name: resolve_paths(value, features[name], base) if name in features else value
                      for name, value in example.items()}


def resolve_paths(value: Any, feature: Feature, base: str) -> Any:
    """Image and video paths in `value` made relative to the folder `base` (URIs and
    absolute paths kept); other values unchanged."""
    return feature.map_paths(value, lambda path: _resolve(path, base))


def _resolve(path: str, base: str) -> str:
    if "://" in path or os.path.isabs(path) or not path:
        return path
    return fs.join(base, path)


def parent(path: str) -> str:
    """The folder of a file path or URI."""
    return os.path.dirname(path) if fs.is_local(path) else posixpath.dirname(path)


def conform(value: Any, feature: Feature, present: bool = True) -> Any:
    """A JSON value in the form its feature encodes, as the Arrow cast makes it: a missing key
    or field null where nullable; ISO text a date or datetime; a number or bool as text
    where the feature is text."""
    if value is None or not present:
        return None
    if isinstance(feature, Value):
        if isinstance(value, str) and temporal_type(feature.dtype) is not None:
            return _parsed(value, feature)
        if feature.dtype in ("string", "large_string") and isinstance(value, (bool, int, float)):
            if isinstance(value, int) and not isinstance(value, bool):
                return str(value)  # as Arrow spells an int64, and past 64 bits too
            return pa.array([value]).cast(pa.string())[0].as_py()
        return value
    if isinstance(feature, Struct) and isinstance(value, dict):
        return {**value, **{name: conform(value.get(name), field, name in value)
                            for name, field in feature.fields.items() if field.nullable or name in value}}
    if isinstance(feature, SequenceFeature) and isinstance(value, list):
        return [conform(item, feature.feature) for item in value]
    return value


def conform_row(row: dict[str, Any], features: Features) -> dict[str, Any]:
    """A JSON row conformed to the features; columns it lacks are null where nullable (and
    left out elsewhere, for the sink to name)."""
    return {**row, **{name: conform(row.get(name), feature, name in row)
                      for name, feature in features.items() if feature.nullable or name in row}}


def _parsed(text: str, feature: Value) -> Any:
    try:
        return pc.cast(pa.array([text]), feature.arrow_type())[0].as_py()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise ValueError(f"cannot read {text!r} as {feature.dtype}") from None


def cast_table(table: pa.Table, features: Features, null_tokens: NullTokens, text: bool) -> pa.Table:
    """`table` (text columns when `text`, every one named by the features) cast to the features
    column by column.

    Raises:
      NeedsRows: a column only a row-by-row read converts. ArrowException, ValueError: a
        value that does not convert.
    """
    arrays, names = [], []
    index = {name: i for i, name in enumerate(table.column_names)}  # not a lookup per column: inputs may be wide
    for name, feature in features.items():
        if name in index:
            column = table.column(index[name]).combine_chunks()
            if text and feature.nullable:
                column = null_tokens.apply(name, column)
            arrays.append(_cast_text(column, feature) if text else _cast_json(column, feature))
        else:
            arrays.append(pa.nulls(table.num_rows))
        names.append(name)
    return pa.Table.from_arrays(arrays, names=names)


def _cast_text(column: pa.Array, feature: Feature) -> pa.Array:
    """CSV cells (null tokens already null) as the feature's values, or raises."""
    if isinstance(feature, ClassLabel):
        if feature.names:
            return column
        return pc.cast(column, pa.int64())
    if not isinstance(feature, Value):
        raise NeedsRows(feature)
    dtype = feature.dtype
    if dtype in ("string", "large_string"):
        return column
    if dtype in ("binary", "large_binary"):
        return column.cast(pa.binary())
    if dtype == "bool":
        lower = pc.utf8_lower(column)
        true, false = pc.is_in(lower, value_set=pa.array(_TRUE)), pc.is_in(lower, value_set=pa.array(_FALSE))
        if pc.any(pc.and_(column.is_valid(), pc.invert(pc.or_(true, false)))).as_py():
            raise ValueError("a cell that is not a bool")
        return pc.if_else(column.is_valid(), true, pa.scalar(None, pa.bool_()))
    if dtype.startswith(("int", "uint", "float")):
        number = pa.int64() if dtype.startswith("int") else pa.uint64() if dtype.startswith("uint") else pa.float64()
        try:
            numbers = pc.cast(column, number)
        except pa.ArrowInvalid:
            numbers = pc.cast(_unsigned(column), number)
        if number == pa.float64() and pc.any(pc.is_inf(numbers)).as_py():
            raise ValueError("a number past float64")  # or an inf: the rows say which
        return numbers
    return pc.cast(column, feature.arrow_type())


def _unsigned(column: pa.Array) -> pa.Array:
    """Numbers as text without the spaces around them and a leading `+`, which pandas reads and Arrow does not."""
    return pc.replace_substring_regex(pc.utf8_trim(column, " \t"), r"^\+", "")


def _cast_json(column: pa.Array, feature: Feature) -> pa.Array:
    kind = column.type
    if pa.types.is_null(kind) or isinstance(feature, ClassLabel):
        return column
    if isinstance(feature, Value):
        if feature.dtype in ("string", "large_string") and not pa.types.is_string(kind):
            if pa.types.is_nested(kind):
                raise NeedsRows(feature)
            return pc.cast(column, pa.string())
        if pa.types.is_string(kind) and temporal_type(feature.dtype) is not None:
            return pc.cast(column, feature.arrow_type())
        return column
    if isinstance(feature, Struct) and pa.types.is_struct(kind):
        given = {kind.field(i).name: column.field(i) for i in range(kind.num_fields)}
        if any(name not in feature.fields for name in given):
            raise NeedsRows(feature)
        children = [_cast_json(given[name], field) if name in given else pa.nulls(len(column))
                    for name, field in feature.fields.items()]
        return pa.StructArray.from_arrays(children, names=list(feature.fields), mask=column.is_null())
    if isinstance(feature, SequenceFeature) and (pa.types.is_list(kind) or pa.types.is_large_list(kind)):
        items = _cast_json(column.values, feature.feature)
        return type(column).from_arrays(column.offsets, items, mask=column.is_null())
    if isinstance(feature, (Image, Video, Audio, Json)):
        raise NeedsRows(feature)
    return column
