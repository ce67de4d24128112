"""Merging under-sized shards: bins planned from sizes alone, record batches copied, never rows.

Runners cut bundles as they please, and the sink stages shards per bundle, so many
staged shards can be small. Before publishing, the sink (and `beam-shards compact`
for a published cache) groups them into bins near the target size and merges each
bin into one shard by copying its record batches in order:

- `plan_bins` is pure and deterministic, so a retried merge makes the same bins.
  Shards of at least half the target pass through alone; smaller ones are packed
  in order into bins of at most the target, so every bin but the last holds at
  least half of it (`keep_order=False`, the sink). With `keep_order=True`
  (compact) bins are runs of consecutive shards, so the rows keep their order; a
  run under half the target takes the next shard in even past the target (so such a
  bin exceeds its last shard by less than half the target), and still every bin but
  the last reaches half.
- `merge_shards` reads each input through `ShardFile` (memory-mapped locally, ranged
  reads elsewhere), its size and checksum checked first, and writes its batches one at
  a time through a `ShardWriter`, which checksums and syncs the new shard as any
  other. Memory: one record batch. Compressed shards are decompressed and
  compressed again batch by batch (buffers only; rows are never decoded). It may
  leave given rows out (a deduplicating write's duplicates): their batches are
  filtered by Arrow, still without decoding a row.

`versions.compaction` does this for the latest version of a published cache.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa

from beam_shards.features import Features
from beam_shards.shards.options import WriterOptions, WrittenShard
from beam_shards.shards.shard_file import ShardFile
from beam_shards.shards.writer import ShardWriter
from beam_shards.storage import fs


def is_small(num_bytes: int, shard_size_bytes: int) -> bool:
    """Whether a shard is under half the target: the size the contract allows once per write."""
    return 2 * num_bytes < shard_size_bytes


def plan_bins(sizes: Sequence[int], shard_size_bytes: int, *, keep_order: bool = False,
              rows: Sequence[int] | None = None, max_rows: int | None = None, overhead: int = 0) -> list[list[int]]:
    """Groups shards, given by their sizes in their stable order, into bins to merge; returns lists of indices.

    Example:
        >>> plan_bins([10, 60, 30, 30, 50], 100)
        [[1], [4], [0, 2, 3]]
        >>> plan_bins([10, 60, 30, 30, 50], 100, keep_order=True)
        [[0, 1, 2], [3, 4]]

    Args:
      sizes: each shard's size in bytes.
      shard_size_bytes: the target size of a shard.
      keep_order: bins of consecutive shards, listed in order (see the module doc).
      rows, max_rows: each shard's rows, and the cap on rows per shard: no merged
        bin holds more, and a shard of at least half the cap is left alone (such a
        write may then hold more than one small shard: the cap comes first).
      overhead: the bytes every shard file spends whatever its rows (`file_overhead`):
        a merged shard spends them once, so it is this much smaller than its inputs
        for each input but one.

    Returns:
      Bins of shard indices; every index is in exactly one bin, in increasing order
      within a bin. A bin of one index is a shard that is left as it is.
    """
    if shard_size_bytes < 1:
        raise ValueError(f"shard_size_bytes must be positive; got {shard_size_bytes!r}")
    rows = list(rows) if rows is not None else [0] * len(sizes)
    row_cap = max_rows if max_rows is not None else float("inf")

    def whole(i: int) -> bool:  # left alone: not small in bytes, or in rows under a cap
        return not is_small(sizes[i], shard_size_bytes) or 2 * rows[i] >= row_cap

    content = [max(0, size - overhead) for size in sizes]

    def fits(total: int, total_rows: int, i: int) -> bool:
        return overhead + total + content[i] <= shard_size_bytes and total_rows + rows[i] <= row_cap

    bins: list[list[int]] = []
    current: list[int] = []
    total = total_rows = 0
    for i in range(len(sizes)):
        if not keep_order and whole(i):
            bins.append([i])
            continue
        if current and not fits(total, total_rows, i):
            if not keep_order or not is_small(overhead + total, shard_size_bytes) or total_rows + rows[i] > row_cap:
                bins.append(current)  # over target - size: over half the target (or the row cap is reached)
                current, total, total_rows = [], 0, 0
            else:  # keeping order, a run under half takes in this shard (over half), and is over half
                bins.append(current + [i])
                current, total, total_rows = [], 0, 0
                continue
        current.append(i)
        total += content[i]
        total_rows += rows[i]
    if current:
        bins.append(current)
    if not keep_order:  # the shards left whole first, then the merged bins, each in order
        bins.sort(key=lambda b: (len(b) > 1 or not whole(b[0]), b[0]))
    return bins


def file_overhead(features: Features) -> int:
    """The bytes an Arrow IPC file of these features holds besides its record batches' messages and
    footer entries: magic, schema and footer. Measured from files of one and two empty batches, as
    a file of no batches pads its footer otherwise (a few bytes less)."""
    schema = features.arrow_schema()
    empty = pa.RecordBatch.from_arrays([pa.array([], field.type) for field in schema], schema=schema)
    sizes = []
    for batches in (1, 2):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, schema) as writer:
            for _ in range(batches):
                writer.write_batch(empty)
        sizes.append(sink.getvalue().size)
    return 2 * sizes[0] - sizes[1]


def merge_shards(inputs: Sequence[Any], features: Features, open_shard: Callable[[int], tuple[str, BinaryIO]],
                 compression: str | None, column_types: str,
                 batches: Sequence[tuple[int, int] | None] | None = None,
                 drop: Sequence[np.ndarray | None] | None = None) -> WrittenShard:
    """Copies the record batches of `inputs` (each with `path`, `num_rows`, `num_bytes`, `checksum`), in
    order, into one new shard opened by `open_shard(0)`; returns it. The inputs and the new shard
    are compressed with `compression` and store their columns in `column_types`. `batches`
    gives for each input the record batches `(first, end)` to copy (None: all of them); `drop`,
    for each input, the rows to leave out, sorted row numbers of the input (None: none). At
    least one row must remain.

    On failure the new shard's file is removed and the error raised.

    Raises:
      CorruptCacheError: an input is missing, differs from its size or checksum, is
        unreadable, or holds another number of rows.
    """
    total = sum(s.num_bytes for s in inputs)
    # Never rotate: the bin was planned whole (footer and compression changes stay far below this).
    options = WriterOptions(shard_size_bytes=2 * total + (64 << 20), compression=compression, column_types=column_types)
    writer = ShardWriter(features, open_shard, options)
    try:
        for shard, span, rows in zip(inputs, batches or [None] * len(inputs), drop or [None] * len(inputs)):
            # A merged shard gets a checksum of its own: damage in an input must be caught here, not carried on.
            file = ShardFile.staged(shard.path, shard.num_rows, shard.num_bytes, shard.checksum, features, compression,
                                    column_types)
            file.check_checksum()
            first = 0
            for index, batch in enumerate(file.iter_batches(validate=False)):
                if span is None or span[0] <= index < span[1]:
                    kept = batch if rows is None else _without(batch, rows, first)
                    if kept.num_rows:
                        writer.write_batch(kept)
                first += batch.num_rows
        [merged] = writer.close()
    except BaseException:
        fs.delete(writer.abort())
        raise
    return merged


def _without(batch: pa.RecordBatch, rows: np.ndarray, first: int) -> pa.RecordBatch:
    """`batch`, whose rows are `first`, `first + 1`, ... of its shard, without the rows of `rows` (sorted)."""
    start, end = np.searchsorted(rows, [first, first + batch.num_rows])
    if start == end:
        return batch
    keep = np.ones(batch.num_rows, dtype=bool)
    keep[rows[start:end] - first] = False
    return batch.filter(pa.array(keep))
