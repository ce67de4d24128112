"""How many bytes a row takes in Arrow, about: what the writer bounds its batches by.

`row_nbytes` sizes an encoded row, `plain_sizer` rows of plain values (whose types are
known, so only lengths are read) and `arrow_row_nbytes` every row of a table from its
offsets, per column with numpy, not per row; `arrow_nbytes` their sum from offsets alone, so
`batch_rows` cuts a table that fits one batch without sizing its rows.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def row_nbytes(row: dict[str, Any]) -> int:
    """About how many bytes an encoded row (from `Features.encode_example`) takes in Arrow,
    for the batch byte bound; `arrow_row_nbytes` is the same estimate for rows in Arrow form."""
    return values_nbytes(row.values())


def values_nbytes(values: Any) -> int:
    """`row_nbytes` of a row's values alone (in column order)."""
    return sum(map(_value_nbytes, values))


def _value_nbytes(value: Any) -> int:
    if isinstance(value, (bytes, str)):
        return len(value) + 8
    if isinstance(value, np.ndarray):
        return value.nbytes + 8
    if isinstance(value, list):
        return sum(_value_nbytes(item) for item in value) + 8
    if isinstance(value, dict):  # a Struct's record
        return sum(_value_nbytes(item) for item in value.values()) + 8
    return 8


def plain_sizer(plain_types: Sequence[type | None]) -> Callable[[Sequence[Any]], int]:
    """`row_nbytes` for rows of plain values (`Features.plain_values`) of these types: only the
    lengths of bytes and strs and the sizes of arrays are read, as their types are known (in C
    loops: the writer sizes every row it buffers)."""
    texts = _picker([i for i, kind in enumerate(plain_types) if kind in (bytes, str)])
    arrays = _picker([i for i, kind in enumerate(plain_types) if kind is np.ndarray])
    fixed = 8 * len(plain_types)

    def nbytes(values: Sequence[Any]) -> int:
        return fixed + sum(map(len, texts(values))) + sum(map(_NBYTES, arrays(values)))
    return nbytes


_NBYTES = operator.attrgetter("nbytes")


def _picker(positions: list[int]) -> Callable[[Sequence[Any]], Sequence[Any]]:
    """A function giving the items of a sequence at `positions`, always as a tuple (an
    itemgetter of one position gives the item alone)."""
    if len(positions) == 1:
        return operator.itemgetter(slice(positions[0], positions[0] + 1))
    return operator.itemgetter(*positions) if positions else operator.itemgetter(slice(0, 0))


def arrow_row_nbytes(table: pa.Table) -> np.ndarray:
    """About how many bytes each row of `table` takes, from its offsets and fixed widths."""
    sizes = np.full(table.num_rows, 8, dtype=np.int64)
    for column in table.columns:
        sizes += _column_nbytes(column)
    return sizes


def _column_nbytes(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    kind = column.type
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_string(kind) \
            or pa.types.is_large_string(kind):
        return _int64(pc.binary_length(column).fill_null(0)) + 8
    if pa.types.is_fixed_size_list(kind):
        width = kind.value_type.bit_width // 8 if pa.types.is_primitive(kind.value_type) else 8
        return np.full(len(column), kind.list_size * max(1, width), dtype=np.int64)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        lengths = _int64(pc.list_value_length(column).fill_null(0))
        if pa.types.is_primitive(kind.value_type):  # items of one width: no array of item sizes
            return lengths * max(1, kind.value_type.bit_width // 8) + 8
        running = np.concatenate([[0], np.cumsum(_column_nbytes(pc.list_flatten(column)))])
        ends = np.cumsum(lengths)
        return running[ends] - running[ends - lengths] + 8
    if pa.types.is_struct(kind):
        chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
        sizes = [sum((_column_nbytes(field) for field in chunk.flatten()), np.full(len(chunk), 8, dtype=np.int64))
                 for chunk in chunks]
        return np.concatenate(sizes) if sizes else np.zeros(0, dtype=np.int64)
    try:
        width = max(1, kind.bit_width // 8)
    except ValueError:  # not of fixed width, and no kind of ours: a rough 8 bytes
        width = 8
    return np.full(len(column), width, dtype=np.int64)


def batch_rows(table: pa.Table, batch_size: int, batch_bytes: int) -> Callable[[int], int]:
    """How `table` is cut into record batches: a function giving the rows of the batch that starts at
    a row offset, at most `batch_size` rows and `batch_bytes` bytes (`arrow_row_nbytes`; a row larger
    than that is a batch of its own). A table whose size (`arrow_nbytes`) fits one batch is not sized
    row by row."""
    total = table.num_rows
    if total <= batch_size and arrow_nbytes(table) <= batch_bytes:
        return lambda offset: total - offset
    ends = np.concatenate([[0], np.cumsum(arrow_row_nbytes(table))])

    def rows_from(offset: int) -> int:
        fit = int(np.searchsorted(ends, ends[offset] + batch_bytes, side="right")) - 1 - offset
        return min(batch_size, max(1, fit), total - offset)
    return rows_from


def arrow_nbytes(table: pa.Table) -> int:
    """At least the sum of `arrow_row_nbytes(table)` (its very sum for arrays pyarrow builds), from
    offsets and lengths alone, without an array a row."""
    return 8 * table.num_rows + sum(_chunk_nbytes(chunk) for column in table.columns for chunk in column.chunks)


def _chunk_nbytes(chunk: pa.Array) -> int:
    """`_column_nbytes` of one array, summed, or more: a value's or a list's length is taken as its offsets'
    step, which a null may hold bytes under."""
    kind, rows = chunk.type, len(chunk)
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_string(kind) \
            or pa.types.is_large_string(kind):
        return _offsets_span(chunk) + 8 * rows
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        if pa.types.is_primitive(kind.value_type):
            return _offsets_span(chunk) * max(1, kind.value_type.bit_width // 8) + 8 * rows
        return _chunk_nbytes(chunk.flatten()) + 8 * rows  # the items of the rows, nulls' left out
    if pa.types.is_struct(kind):
        return sum(_chunk_nbytes(field) for field in chunk.flatten()) + 8 * rows
    return int(_column_nbytes(chunk[:1])[0]) * rows if rows else 0  # one size a row: fixed widths


def _offsets_span(chunk: pa.Array) -> int:
    """How far the offsets of a binary, string or list array step over its rows."""
    if not len(chunk):
        return 0
    dtype = np.int64 if pa.types.is_large_binary(chunk.type) or pa.types.is_large_string(chunk.type) \
        or pa.types.is_large_list(chunk.type) else np.int32
    offsets = np.frombuffer(chunk.buffers()[1], dtype=dtype)
    return int(offsets[chunk.offset + len(chunk)] - offsets[chunk.offset])


def _int64(array: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return np.asarray(array.to_numpy(), dtype=np.int64)


def holds_strings(schema: pa.Schema) -> bool:
    """Whether any column of `schema`, at any depth, holds strings with 32-bit offsets."""
    types = [field.type for field in schema]
    while types:
        arrow_type = types.pop()
        if pa.types.is_string(arrow_type):
            return True
        types.extend(arrow_type.field(i).type for i in range(arrow_type.num_fields))
    return False
