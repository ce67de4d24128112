"""Digests of rows by their encoded values, computed column by column (for exact deduplication).

A row's digest is blake2b (16 bytes) of its canonical encoding: its values' cells, one
after another in column order. Nothing is pickled: each cell is made from the Arrow
buffers, and its width depends on the column's Arrow type alone, so two rows of one
schema encode alike only if every value is the same (bytes moved between adjacent
columns, or a null against an empty value, make other encodings). A cell is a tag byte
(00 for a null, then zeros to the cell's width; 01 for a value) and then:

    fixed width (ints, floats, bool,      the value's bytes as Arrow stores them (little-endian); a bool: 1 byte
      temporal, decimal, fixed binary)
    string, binary                        blake2b-16 of its bytes (UTF-8 for a string)
    list                                  blake2b-16 of its items' cells, one after another
    fixed-size list                       its items' cells, one after another
    struct                                its fields' cells, in field order

Strings and lists of any kind of offsets (32 or 64 bit) make the same cells. Floats are
compared by bit pattern: 0.0 and -0.0 are different values (they are stored
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
# A digest as two numbers that sort as its bytes do.
DIGEST_NUMBERS = np.dtype([("high", ">u8"), ("low", ">u8")])
# Rows are encoded this many bytes at a time at most (their cells take about as much again).
_PIECE_BYTES = 8 << 20
_NO_DIGEST = bytes(DIGEST_BYTES)


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
    cells = np.ascontiguousarray(np.hstack([_cells(column) for column in batch.columns]))
    view, width, blake2b = memoryview(cells).cast("B"), cells.shape[1], hashlib.blake2b
    return [blake2b(view[start:start + width], digest_size=DIGEST_BYTES).digest()
            for start in range(0, len(view), width)]


def _cells(array: pa.Array) -> np.ndarray:
    """The cell of each value of `array`: a `(len(array), width)` array of bytes."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if isinstance(array, pa.ExtensionArray):
        array = array.storage
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    count, kind = len(array), array.type
    valid = (np.ones(count, dtype=bool) if array.null_count == 0
             else array.is_valid().to_numpy(zero_copy_only=False))
    if pa.types.is_null(kind):
        return np.zeros((count, 1), dtype=np.uint8)
    if pa.types.is_boolean(kind):
        body = array.fill_null(False).to_numpy(zero_copy_only=False).astype(np.uint8).reshape(count, 1)
    elif pa.types.is_struct(kind):
        body = np.hstack([np.zeros((count, 0), dtype=np.uint8)] + [_cells(field) for field in array.flatten()])
    elif pa.types.is_fixed_size_list(kind):
        items = _cells(array.values.slice(array.offset * kind.list_size, count * kind.list_size))
        body = items.reshape(count, kind.list_size * items.shape[1])
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_map(kind):
        bounds = array.offsets.to_numpy().astype(np.int64)
        items = _cells(array.values.slice(bounds[0], bounds[-1] - bounds[0]))
        body = _hashed(np.ascontiguousarray(items).reshape(-1), (bounds - bounds[0]) * items.shape[1], valid)
    elif kind in (pa.string(), pa.binary(), pa.large_string(), pa.large_binary()):
        buffers = array.buffers()
        wide = kind in (pa.large_string(), pa.large_binary())
        bounds = np.frombuffer(buffers[1], np.int64 if wide else np.int32)[array.offset:array.offset + count + 1]
        data = np.frombuffer(buffers[2], np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
        body = _hashed(data, bounds.astype(np.int64), valid)
    else:
        try:
            width = kind.bit_width // 8
        except ValueError:
            raise TypeError(f"rows with a column of Arrow type {kind} cannot be deduplicated: no encoding for "
                            "it") from None
        data = np.frombuffer(array.buffers()[1], np.uint8)[array.offset * width:(array.offset + count) * width]
        body = data.reshape(count, width)
    cells = np.empty((count, 1 + body.shape[1]), dtype=np.uint8)
    cells[:, 0] = valid
    cells[:, 1:] = body
    if not valid.all():
        cells[~valid, 1:] = 0
    return cells


def _hashed(data: np.ndarray, bounds: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """blake2b-16 of each `data[bounds[i]:bounds[i + 1]]` (zeros for a null), as a `(rows, 16)` array."""
    view, blake2b, edges = memoryview(data), hashlib.blake2b, bounds.tolist()
    digests = b"".join(blake2b(view[a:b], digest_size=DIGEST_BYTES).digest() if ok else _NO_DIGEST
                       for a, b, ok in zip(edges, edges[1:], valid.tolist()))
    return np.frombuffer(digests, dtype=np.uint8).reshape(len(valid), DIGEST_BYTES)
