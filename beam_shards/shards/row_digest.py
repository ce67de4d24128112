"""Digests of rows by their encoded values, computed column by column (for exact deduplication).

A row's digest is the first 16 bytes of SHA-256 of its canonical encoding: its values'
cells, one after another in column order. (SHA-256 rather than BLAKE2: CPUs with SHA
instructions hash it about twice as fast, and OpenSSL uses them; the digests live only
inside one write or `deduplicate`, never in a file a later run reads.) Nothing is
pickled: each cell is made from the Arrow buffers, and its width depends on the column's
Arrow type alone, so two rows of one schema encode alike only if every value is the same
(bytes moved between adjacent columns, or a null against an empty value, make other
encodings). A cell is a tag byte (00 for a null, then zeros to the cell's width; 01 for a
value) and then:

    fixed width (ints, floats, bool,      the value's bytes as Arrow stores them (little-endian); a bool: 1 byte
      temporal, decimal, fixed binary)
    string, binary                        SHA-256 of its bytes (UTF-8 for a string)
    list                                  SHA-256 of its items' cells, one after another
    fixed-size list of ints, floats       its items' tag bytes, then their values (zeros for a null)
      or temporal values
    other fixed-size list                 its items' cells, one after another
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
_HASH = hashlib.sha256
_HASH_BYTES = _HASH().digest_size
_NO_HASH = bytes(_HASH_BYTES)


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
    view, width, digest = memoryview(cells).cast("B"), cells.shape[1], _HASH
    return [digest(view[start:start + width]).digest()[:DIGEST_BYTES] for start in range(0, len(view), width)]


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
        items = array.values.slice(array.offset * kind.list_size, count * kind.list_size)
        body = _fixed_items(items, count, kind.list_size)
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


def _fixed_items(items: pa.Array, count: int, size: int) -> np.ndarray:
    """The bodies of `count` fixed-size lists of `size` `items` each: of fixed-width items, their tag
    bytes then their values (a copy of the buffer when none is null); else their cells."""
    kind = items.type
    if not pa.types.is_primitive(kind) or pa.types.is_boolean(kind):
        return _cells(items).reshape(count, -1)
    width = kind.bit_width // 8
    body = np.empty((count, size * (1 + width)), dtype=np.uint8)
    values = np.frombuffer(items.buffers()[1], np.uint8)[items.offset * width:(items.offset + len(items)) * width]
    if items.null_count:
        valid = items.is_valid().to_numpy(zero_copy_only=False)
        values = np.where(np.repeat(valid, width), values, 0).astype(np.uint8)
        body[:, :size] = valid.reshape(count, size)
    else:
        body[:, :size] = 1
    body[:, size:] = values.reshape(count, size * width)
    return body


def _hashed(data: np.ndarray, bounds: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """SHA-256 of each `data[bounds[i]:bounds[i + 1]]` (zeros for a null), as a `(rows, 32)` array."""
    view, digest, edges = memoryview(data), _HASH, bounds.tolist()
    digests = b"".join(digest(view[a:b]).digest() if ok else _NO_HASH
                       for a, b, ok in zip(edges, edges[1:], valid.tolist()))
    return np.frombuffer(digests, dtype=np.uint8).reshape(len(valid), _HASH_BYTES)
