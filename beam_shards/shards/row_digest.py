"""Digests of rows by their encoded values, computed column by column (for exact deduplication).

A row's digest is blake2b (16 bytes) of its canonical encoding: its values' encodings, one
after another in column order. Nothing is pickled: each value is encoded from its Arrow
buffers, and each encoding is self-delimiting given the column's Arrow type, so two rows of
one schema encode alike only if every value is the same (bytes moved between adjacent
columns, or a null against an empty value, make other encodings):

    null                                  00
    fixed width (ints, floats, bool,      01 <the value's bytes as Arrow stores them (little-endian); a bool: 1 byte>
      temporal, decimal, fixed binary)
    string, binary                        01 <length: 8 bytes, little-endian> <the bytes (UTF-8 for a string)>
    list                                  01 <item count: 8 bytes, little-endian> <each item's encoding>
    fixed-size list                       01 <each item's encoding>
    struct                                01 <each field's encoding, in field order>

Floats are compared by bit pattern: 0.0 and -0.0 are different values (they are stored
differently), and NaNs are equal when their bits are. So rows of equal digests hold the
same bytes, and it does not matter which of them a deduplication keeps. A dictionary
column counts as its decoded values.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

DIGEST_BYTES = 16
# Rows are encoded this many bytes at a time at most (the encoding takes about ten times that).
_PIECE_BYTES = 8 << 20
_Part = tuple[np.ndarray, np.ndarray, np.ndarray]  # bytes, each row's first byte in them, each row's length


def row_digests(rows: pa.Table | pa.RecordBatch, columns: Sequence[str] | None = None) -> list[bytes]:
    """The digest of each row of `rows`, over `columns` (all of them, in schema order, by default).

    Raises:
      KeyError: a column `rows` does not have.
      TypeError: a column of an Arrow type without an encoding here (a union, say).
    """
    names = list(rows.schema.names if columns is None else columns)
    for name in names:
        if name not in rows.schema.names:
            raise KeyError(f"no column {name!r} to deduplicate by; the rows have {rows.schema.names}")
    table = (pa.Table.from_batches([rows]) if isinstance(rows, pa.RecordBatch) else rows).select(names)
    step = max(1, int(table.num_rows * _PIECE_BYTES / max(table.nbytes, 1)))
    digests: list[bytes] = []
    for start in range(0, table.num_rows, step):
        for batch in table.slice(start, step).to_batches():
            digests.extend(_digests(batch))
    return digests


def _digests(batch: pa.RecordBatch) -> list[bytes]:
    data, offsets = _concat(len(batch), [_whole(_encode(column)) for column in batch.columns])
    view, bounds = memoryview(data), offsets.tolist()
    blake2b = hashlib.blake2b
    return [blake2b(view[a:b], digest_size=DIGEST_BYTES).digest() for a, b in zip(bounds, bounds[1:])]


def _whole(encoded: tuple[np.ndarray, np.ndarray]) -> _Part:
    data, offsets = encoded
    return data, offsets[:-1], np.diff(offsets)


def _encode(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The encodings of the values of `array`: `(bytes, offsets)`, value i in `bytes[offsets[i]:offsets[i + 1]]`."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if isinstance(array, pa.ExtensionArray):
        array = array.storage
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    count, kind = len(array), array.type
    valid = (np.ones(count, dtype=bool) if array.null_count == 0
             else array.is_valid().to_numpy(zero_copy_only=False))
    tags = valid.astype(np.uint8)
    rows = np.arange(count, dtype=np.int64)
    tag: _Part = (tags, rows, np.ones(count, dtype=np.int64))
    if pa.types.is_null(kind):
        return _concat(count, [tag])
    if pa.types.is_boolean(kind):
        values = array.fill_null(False).to_numpy(zero_copy_only=False).astype(np.uint8)
        return _concat(count, [tag, (values, rows, valid.astype(np.int64))])
    if pa.types.is_struct(kind):
        fields = [_encode(field) for field in array.flatten()]
        return _concat(count, [tag] + [(data, offsets[:-1], np.where(valid, np.diff(offsets), 0))
                                        for data, offsets in fields])
    if pa.types.is_fixed_size_list(kind):
        size = kind.list_size
        data, offsets = _encode(array.values)
        bounds = offsets[(array.offset + np.arange(count + 1, dtype=np.int64)) * size]
        return _concat(count, [tag, (data, bounds[:-1], np.where(valid, np.diff(bounds), 0))])
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_map(kind):
        items = array.offsets.to_numpy().astype(np.int64)
        data, offsets = _encode(array.values)
        bounds = offsets[items]
        return _concat(count, [_header(valid, np.diff(items)),
                               (data, bounds[:-1], np.where(valid, np.diff(bounds), 0))])
    if kind in (pa.string(), pa.binary(), pa.large_string(), pa.large_binary()):
        wide = kind in (pa.large_string(), pa.large_binary())
        buffers = array.buffers()
        offsets = np.frombuffer(buffers[1], np.int64 if wide else np.int32)[array.offset:array.offset + count + 1]
        offsets = offsets.astype(np.int64)
        data = np.frombuffer(buffers[2], np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
        lengths = np.diff(offsets)
        return _concat(count, [_header(valid, lengths), (data, offsets[:-1], np.where(valid, lengths, 0))])
    try:
        width = kind.bit_width // 8
    except ValueError:
        raise TypeError(f"rows with a column of Arrow type {kind} cannot be deduplicated: no encoding for it") from None
    data = np.frombuffer(array.buffers()[1], np.uint8)[array.offset * width:(array.offset + count) * width]
    return _concat(count, [tag, (data, rows * width, valid * np.int64(width))])


def _header(valid: np.ndarray, lengths: np.ndarray) -> _Part:
    """The tag and 8-byte length of each value (the tag alone for a null)."""
    count = len(valid)
    header = np.empty((count, 9), dtype=np.uint8)
    header[:, 0] = valid
    header[:, 1:] = lengths.astype("<u8").view(np.uint8).reshape(count, 8)
    return header.reshape(-1), np.arange(count, dtype=np.int64) * 9, np.where(valid, 9, 1).astype(np.int64)


def _concat(count: int, parts: list[_Part]) -> tuple[np.ndarray, np.ndarray]:
    """Each row's bytes of every part, one part after another: `(bytes, offsets)`."""
    lengths = sum(part[2] for part in parts) if parts else np.zeros(count, dtype=np.int64)
    offsets = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    out = np.empty(int(offsets[-1]), dtype=np.uint8)
    position = offsets[:-1].copy()
    for data, starts, part_lengths in parts:
        total = int(part_lengths.sum())
        if total:
            first = np.zeros(count, dtype=np.int64)
            np.cumsum(part_lengths[:-1], out=first[1:])
            source = np.arange(total, dtype=np.int64) + np.repeat(starts - first, part_lengths)
            out[source + np.repeat(position - starts, part_lengths)] = data[source]
        position += part_lengths
    return out, offsets
