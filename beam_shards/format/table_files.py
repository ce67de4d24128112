"""What a shard table file holds (pure logic): its columns in each format, a shard's entry and its
batches' spans, and how tables are built, joined, named and merged as a version grows.

A table file is one Arrow record batch with a row per shard: file name, rows, bytes, checksum,
its first row within the table and the rows of each of its record batches. Since format 5 it
also gives each record batch's byte offset and length in the shard file and a CRC-32 of those
bytes (`BatchSpan`); tables written for older formats, and the shards they list, have none.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from beam_shards.format.layout import table_name

# The table of formats 3 and 4: their readers refuse any other schema.
LEGACY_TABLE_SCHEMA = pa.schema([
    pa.field("file", pa.string(), nullable=False),
    pa.field("num_rows", pa.int64(), nullable=False),
    pa.field("num_bytes", pa.int64(), nullable=False),
    pa.field("checksum", pa.string(), nullable=False),
    pa.field("row_start", pa.int64(), nullable=False),
    pa.field("batch_rows", pa.list_(pa.int64())),
])
# Format 5's: each record batch's offset and length in the shard file and the CRC-32 of those bytes.
TABLE_SCHEMA = pa.schema(list(LEGACY_TABLE_SCHEMA) + [
    pa.field(name, pa.list_(pa.int64())) for name in ("batch_offsets", "batch_lengths", "batch_crc32s")])
SPAN_COLUMNS = tuple(range(len(LEGACY_TABLE_SCHEMA), len(TABLE_SCHEMA)))


@dataclasses.dataclass(frozen=True)
class ShardInfo:
    """One shard of a version: its file name in the cache folder, rows, bytes on disk and checksum."""

    file: str
    num_rows: int
    num_bytes: int
    checksum: str


class BatchSpan(NamedTuple):
    """Where a record batch lies in its shard file (its IPC message, from its first byte) and the
    CRC-32 (`zlib.crc32`) of those bytes, and its rows."""

    offset: int
    length: int
    crc32: int
    rows: int


# A shard's batches as its writer recorded them, (offset, length, crc32) each; None: not recorded.
Spans = Sequence[tuple[int, int, int]] | None


def build_table(shards: Sequence[ShardInfo], batch_rows: Sequence[Sequence[int] | None],
                spans: Sequence[Spans] | None = None) -> pa.Table:
    """The table of `shards`, in order, with the rows of each one's record batches (None: not known)
    and, with `spans` (format 5), where each of its batches lies (None: not known); without
    `spans`, a table in the schema of formats 3 and 4."""
    rows = np.fromiter((s.num_rows for s in shards), dtype=np.int64, count=len(shards))
    columns = [pa.array([s.file for s in shards], pa.string()), pa.array(rows),
               pa.array([s.num_bytes for s in shards], pa.int64()),
               pa.array([s.checksum for s in shards], pa.string()), _row_starts(rows),
               pa.array(list(batch_rows), pa.list_(pa.int64()))]
    if spans is None:
        return pa.table(columns, schema=LEGACY_TABLE_SCHEMA)
    for part in range(3):
        columns.append(pa.array([None if shard is None else [span[part] for span in shard] for shard in spans],
                                pa.list_(pa.int64())))
    return pa.table(columns, schema=TABLE_SCHEMA)


def has_spans(table: pa.Table) -> bool:
    """Whether `table` (a shard table) is in format 5's schema, which gives batch spans."""
    return table.schema.names == TABLE_SCHEMA.names


def concat_tables(tables: Sequence[pa.Table]) -> pa.Table:
    """The tables one after the other, row starts renumbered, as one table of one batch: in format 5's
    schema when one of them is (the others' shards then have no spans), else in the older one."""
    if not tables:
        return build_table([], [])
    schema = TABLE_SCHEMA if any(has_spans(t) for t in tables) else LEGACY_TABLE_SCHEMA
    joined = pa.concat_tables([_widened(t, schema) for t in tables]).combine_chunks()
    return joined.set_column(4, TABLE_SCHEMA.field("row_start"), _row_starts(joined.column("num_rows").to_numpy()))


def _row_starts(rows: np.ndarray) -> pa.Array:
    """Each shard's first row within its table, from the shards' rows."""
    return pa.array(np.concatenate([[0], np.cumsum(rows)[:-1]]) if len(rows) else rows, pa.int64())


def _widened(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` in `schema`: span columns it lacks are null."""
    for field in schema:
        if field.name not in table.schema.names:
            table = table.append_column(field, pa.nulls(table.num_rows, field.type))
    return table.select(schema.names).cast(schema)


def table_file(table: pa.Table, write_id: str) -> tuple[str, bytes]:
    """The name and bytes of the file holding `table` (one record batch, in its schema): the name is
    the writing write's id and a hash of the bytes, so a name never stands for two contents."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=max(1, table.num_rows))
    data = sink.getvalue().to_pybytes()
    return table_name(write_id, hashlib.blake2b(data, digest_size=8).hexdigest()), data


def plan_tables(sizes: Sequence[int]) -> int:
    """How many tables at the end of a version's list (of `sizes` shards each, oldest first, the
    newest last) to merge into one: the last two merge while the older holds fewer than twice as
    many shards, as a binary counter carries."""
    merged, tail = 1, sizes[-1] if sizes else 0
    while merged < len(sizes) and sizes[-merged - 1] < 2 * tail:
        tail += sizes[-merged - 1]
        merged += 1
    return merged


def spans_fit(spans: list[list[int | None] | None], batch_rows: list[int | None] | None, size: int) -> bool:
    """Whether span columns' values (offsets, lengths, CRCs) give one span per batch, in order, without
    overlap, inside a file of `size` bytes."""
    offsets, lengths, crcs = spans
    if batch_rows is None or any(part is None or len(part) != len(batch_rows) or None in part for part in spans):
        return False
    end = 0
    for offset, length, crc in zip(offsets, lengths, crcs):
        if offset < end or length <= 0 or offset + length > size or not 0 <= crc < 1 << 32:
            return False
        end = offset + length
    return True
