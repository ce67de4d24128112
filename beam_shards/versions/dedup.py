"""`deduplicate`: the latest version of a cache without its exact duplicate rows, as a new version.

Rows are compared by digest (`shards.row_digest`) over every column or the named ones;
the first in row order is kept. Memory does not grow with the number of distinct rows:

- digest: the shards are read a record batch at a time (only the compared columns), and
  each row makes a `(digest, position)` record;
- find: the records are sorted by (digest, position), in pieces of bounded memory
  (`shards.duplicates`), and every row after the first of its digest is marked in a
  bitmap of the rows (one bit a row);
- copy: the shards are read again a record batch at a time, the marked rows filtered
  out, and the rest written by a `ShardWriter` in the version's compression and column
  types, then published through `commit.publish` (mode overwrite, parent the version
  read: if another write published meanwhile, nothing is), features and metadata kept,
  with `"dedup": {"columns": "rows" | [...], "dropped": N}` added to the metadata.

A version without duplicates gets no new version (as `compact` publishes nothing when
nothing merges).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa

from beam_shards.errors import FeatureError
from beam_shards.format.catalog import read_metadata
from beam_shards.format.layout import CacheLayout, new_write_id
from beam_shards.format.manifest import Manifest
from beam_shards.shards import DIGEST_NUMBERS, ShardFile, ShardWriter, later_records, row_digests
from beam_shards.shards.options import DEFAULT_SHARD_SIZE_BYTES, WriterOptions
from beam_shards.versions.commit import abandon, publish
from beam_shards.versions.lock import refuse_links
from beam_shards.versions.staging import staged_shards

_RECORD = np.dtype([("high", ">u8"), ("low", ">u8"), ("position", "<i8")])


def deduplicate(path: str, columns: Sequence[str] | None = None,
                shard_size_bytes: int = DEFAULT_SHARD_SIZE_BYTES) -> tuple[Manifest, Manifest | None, int]:
    """Publishes the latest version at `path` without its exact duplicate rows (of every column,
    or of `columns`), the first of each kept in row order.

    Returns:
      The version read, the new version (None when no row is a duplicate: nothing is
      published then) and the count of rows dropped.

    Raises:
      FeatureError: a column the cache does not have (naming it and the cache's columns).
      CacheNotFoundError: no cache at `path`.
      CorruptCacheError: a shard is missing or does not match its manifest entry; nothing
        is published.
      PublishError: another write published a version meanwhile; nothing is published.
    """
    latest = read_metadata(path)
    names = list(latest.features) if columns is None else list(dict.fromkeys(columns))
    for name in names:
        if name not in latest.features:
            raise FeatureError(f"the cache at {path} has no column {name!r} to compare rows by; its columns: "
                               f"{', '.join(latest.features)}")
    dropped, count = _duplicates(latest, names)
    if not count:
        return latest, None, 0
    layout = CacheLayout(path)
    refuse_links(layout)
    write_id = new_write_id()
    options = WriterOptions(shard_size_bytes, compression=latest.compression, column_types=latest.column_types)
    writer = ShardWriter(latest.features, staged_shards(layout.new_attempt(write_id)), options)
    try:
        position = 0
        for batch in _batches(latest):
            keep = ~_bits(dropped, position, batch.num_rows)
            position += batch.num_rows
            if not keep.all():
                batch = batch.filter(pa.array(keep))
            if batch.num_rows:
                writer.write_batch(batch)
        metadata = {**latest.metadata, "dedup": {"columns": "rows" if columns is None else names, "dropped": count}}
        manifest = publish(path, write_id=write_id, features=latest.features, staged=writer.close(), options=options,
                           metadata=metadata, mode="overwrite", parent=latest.version, ordered=True)
    except BaseException:
        writer.abort()
        abandon(path, write_id)
        raise
    return latest, manifest, count


def _batches(manifest: Manifest, columns: list[str] | None = None) -> Iterator[pa.RecordBatch]:
    """The version's record batches in row order, one at a time."""
    for shard_id in range(manifest.num_shards):
        yield from ShardFile.of(manifest, shard_id).iter_batches(columns=columns)


def _duplicates(manifest: Manifest, columns: list[str]) -> tuple[np.ndarray, int]:
    """A bitmap of the rows after the first of their digest (bit i of byte i // 8, little-endian), and their count."""
    dropped = np.zeros((manifest.num_rows + 7) // 8, dtype=np.uint8)
    count = 0
    for later in later_records(lambda: _records(manifest, columns), manifest.num_rows, _RECORD):
        positions = later["position"]
        np.bitwise_or.at(dropped, positions >> 3, (1 << (positions & 7)).astype(np.uint8))
        count += len(positions)
    return dropped, count


def _records(manifest: Manifest, columns: list[str]) -> Iterator[np.ndarray]:
    """The `(digest, position)` record of each row, a record batch at a time."""
    position = 0
    for batch in _batches(manifest, columns):
        digests = np.frombuffer(b"".join(row_digests(batch, columns)), dtype=DIGEST_NUMBERS)
        rows = np.empty(len(digests), _RECORD)
        rows["high"], rows["low"] = digests["high"], digests["low"]
        rows["position"] = np.arange(position, position + len(digests))
        position += len(digests)
        yield rows


def _bits(bitmap: np.ndarray, start: int, count: int) -> np.ndarray:
    """Bits `start` to `start + count` of `bitmap`, as bools."""
    first = start // 8
    bits = np.unpackbits(bitmap[first:(start + count + 7) // 8 + 1], bitorder="little")
    return bits[start - first * 8:start - first * 8 + count].astype(bool)
